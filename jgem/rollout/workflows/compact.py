"""`compact`: an agent that compacts its context. When the stream would pass `rollout.compact_tokens` (default half
of `rollout.max_episode_tokens`), the observation that would pass it asks the agent for a note of what it needs from
the game so far; the agent writes it (a turn of its own, trained, reward 0), and the episode goes on in a new
segment: the system and task messages, the note and the latest observation, rendered afresh by the template. The
slot keeps the keys and values of the task's tokens, which the two segments share; the rest is prefilled once.

Each segment trains as its own sample with its exact ids (`jgem.rollout.batch`); returns run over the episode's
turns across segments, the note's turn included (gamma per turn, as in one stream: AReaL's discount over summarised
segments), so the note is trained by what the agent then achieved with it.
"""

from __future__ import annotations

from jgem.rollout.workflow import Context, Trajectory, Workflow, register_workflow
from jgem.rollout.workflows.turns import Play, begin, turn

REQUEST = (
    "\n\nYour context is full: the earlier turns will be removed. Reply with a short note of everything you need "
    "from them (what you tried and what you learned); the game goes on after it."
)
NOTE = "Your note of the earlier turns: "


class Compact(Workflow):
    name = "compact"

    def check(self, cfg) -> list[str]:
        out = []
        if cfg.view != "chat":
            out.append(f"compacts one stream, so it needs rollout.view 'chat', not {cfg.view!r}")
        budget = cfg.compact_tokens or cfg.max_episode_tokens // 2
        if not 0 < budget <= cfg.max_episode_tokens - 2 * cfg.max_new_tokens:
            out.append(
                f"rollout.compact_tokens {budget} leaves no room below rollout.max_episode_tokens "
                f"{cfg.max_episode_tokens} for a note and an action of rollout.max_new_tokens {cfg.max_new_tokens}"
            )
        return out

    async def run(self, ctx: Context, spec) -> Trajectory:
        traj = ctx.trajectory()
        p = await begin(ctx, traj)
        if p is None:
            return traj
        first_user = next(i for i, m in enumerate(p.obs) if m["role"] != "system")
        head = list(p.obs[: first_user + 1])  # the system message (if any) and the task
        budget = ctx.cfg.compact_tokens or ctx.cfg.max_episode_tokens // 2
        asked = False

        def shown(p: Play, obs: list) -> list:
            nonlocal asked
            new = len(ctx.chat.observation_tokens(obs[p.num_messages + 1 :]))  # what the stream would get
            asked = len(p.stream.tokens) + new + ctx.cfg.max_new_tokens > budget
            if not asked:
                return obs
            return [*obs[:-1], dict(obs[-1], content=obs[-1]["content"] + REQUEST)]

        while not await turn(ctx, p, shown):
            if asked:
                await self.compact(ctx, p, head)
        return traj

    async def compact(self, ctx: Context, p: Play, head: list) -> None:
        """The agent's note (a trained turn), then a new segment: the task, the note and the latest observation."""
        note = await ctx.generate(p.stream)
        p.traj.record(note, 0.0)
        ctx.stats.turns += 1
        ctx.stats.action_tokens += len(note.ids)
        latest = p.obs[-1]
        content = f"{NOTE}{ctx.chat.action_text(note.ids)}\n\n{latest['content']}"
        tokens = ctx.chat.start([*head, dict(latest, role="user", content=content)])
        if len(tokens) + ctx.cfg.max_new_tokens > ctx.cfg.max_episode_tokens:
            raise ValueError(
                f"rollout workflow 'compact': the new segment has {len(tokens)} tokens, no room for an action within "
                f"rollout.max_episode_tokens {ctx.cfg.max_episode_tokens}; lower rollout.compact_tokens or "
                "rollout.max_new_tokens"
            )
        ctx.new_segment(p.stream, tokens)
        p.num_messages = len(p.obs)


register_workflow("compact", Compact())
