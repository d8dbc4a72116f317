"""`tree`: tree rollouts. A group's episodes share one start and one trunk: the first episode plays
`rollout.fork_turn` turns, then the trunk forks into the group, each branch on a copy of the env (`EnvPool`
get_state/set_state) and of the stream's KV-cache row (copied on the device: the trunk's tokens are prefilled and
decoded once for the whole group, not once per episode), and the branches play on to their ends concurrently.

Each branch is an ordinary episode of the group: its stream is the trunk and its own turns, it trains the trunk's
turns too (each branch with its own advantage, as the same episodes played as plain groups would), and a grouped
estimator compares the branches (GRPO from a shared mid-episode state). A game that ends within the trunk gives the
group that one episode, copied to every spec (its advantage in the group is 0). The env must be copyable; the engine
refuses one whose get_state fails, naming the env.
"""

from __future__ import annotations

from collections.abc import Sequence

from jgem.rollout.workflow import Context, Trajectory, Workflow, register_workflow
from jgem.rollout.workflows.turns import Play, begin, turn


class Tree(Workflow):
    name = "tree"
    grouped = True

    def width(self, group_size: int) -> int:
        return group_size  # a slot and an env per branch

    def check(self, cfg) -> list[str]:
        out = []
        if cfg.view != "chat":
            out.append(f"forks one stream, so it needs rollout.view 'chat', not {cfg.view!r}")
        if cfg.fork_turn < 1:
            out.append(f"rollout.fork_turn is {cfg.fork_turn}; the trunk needs at least one turn")
        return out

    async def run(self, ctx: Context, specs: Sequence) -> list[Trajectory]:
        trunk = ctx.trajectory(specs[0])
        p = await begin(ctx, trunk)
        done = p is None
        while not done and len(trunk.turns) < ctx.cfg.fork_turn:
            done = await turn(ctx, p)
        if done:  # the game ended within the trunk: the group is that episode
            return [trunk] + [trunk.copy_for(s) for s in specs[1:]]
        branches = (
            [p]
            + [
                Play(
                    ctx.fork_env(p.env),
                    ctx.fork(p.stream, episode_id=s.episode_id),
                    trunk.copy_for(s),
                    p.num_messages,
                    obs=p.obs,
                    steps=p.steps,  # the turn limit counts the trunk's turns
                )
                for s in specs[1:]
            ]
        )
        await ctx.gather(*(_play_out(ctx, b) for b in branches))
        return [b.traj for b in branches]


async def _play_out(ctx: Context, p: Play) -> None:
    while not await turn(ctx, p):
        pass


register_workflow("tree", Tree())
