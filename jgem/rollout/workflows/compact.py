"""`compact`: an agent that compacts its context. When the stream would pass `rollout.compact_tokens` (default half
of `rollout.max_episode_tokens`), the observation that would pass it asks the agent for a note of what it needs from
the game so far; the agent writes it (a turn of its own, trained, reward 0), and the episode goes on in a new
segment rendered afresh by the template: the system and task messages with the note after the task, then the last
`KEEP` messages verbatim (the last two exchanges, as a recent-events condenser keeps them). The slot keeps the keys
and values of the task's tokens, which the two segments share; the rest is prefilled once.

Each segment trains as its own sample with its exact ids (`jgem.rollout.batch`); returns run over the episode's
turns across segments, the note's turn included (gamma per turn, as in one stream: AReaL's discount over summarised
segments), so the note is trained by what the agent then achieved with it.
"""

from __future__ import annotations

from jgem.rollout.workflow import Context, Trajectory, Workflow, register_workflow
from jgem.rollout.workflows.turns import Play, begin, end, turn

REQUEST = (
    "\n\nYour context is full: the earlier turns will be removed. Reply with a short note of everything you need "
    "from them (what you tried and what you learned); the game goes on after it."
)
NOTE = "Your note of the earlier turns: "
KEEP = 4  # messages kept verbatim after the task: the last two actions and what the env answered


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
        first_user = next((i for i, m in enumerate(p.obs) if m["role"] != "system"), len(p.obs) - 1)
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
            if asked and not await self.compact(ctx, p, head):
                break
        return traj

    async def compact(self, ctx: Context, p: Play, head: list) -> bool:
        """The agent's note (a trained turn), then a new segment: the task, the note and the latest observation.
        False (the episode cut, as by the token budget) when that segment leaves no room for an action."""
        note = await ctx.generate(p.stream)
        p.traj.record(note, 0.0)
        ctx.stats.turns += 1
        ctx.stats.action_tokens += len(note.ids)
        task = dict(head[-1], content=f"{head[-1]['content']}\n\n{NOTE}{ctx.chat.action_text(note.ids)}")
        recent = list(p.obs[len(head) :][-KEEP:])
        tokens = ctx.chat.start([*head[:-1], task, *recent])
        if len(tokens) + ctx.cfg.max_new_tokens > ctx.cfg.max_episode_tokens:  # a long observation: cut here
            ctx.stats.budget_truncations += 1
            p.traj.next_prompt = tokens
            end(p.traj, {}, truncated=True)
            return False
        ctx.new_segment(p.stream, tokens)
        p.num_messages = len(p.obs)
        return True


register_workflow("compact", Compact())
