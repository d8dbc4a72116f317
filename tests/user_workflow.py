"""A user's workflow module, as `--import tests.user_workflow` loads it (docs/quickstart.md, "Writing a workflow").

Importing it registers the workflow `test_user_glance`: an agent that sees only the task and the latest observation
(every turn a new segment on the same slot: the template of [task, latest observation]), GEM's "no history"
agent written as a workflow. With `JGEM_TEST_USER_WORKFLOW_TRACE` set to a file, each episode appends a line to it,
so a run can show that its episodes were played by this workflow.
"""

from __future__ import annotations

import os

from jgem.registry import register
from jgem.rollout.workflow import Context, Trajectory, Workflow, register_workflow
from jgem.rollout.workflows.turns import begin, end


class Glance(Workflow):
    name = "test_user_glance"

    def check(self, cfg) -> list[str]:
        return [] if cfg.view == "chat" else [f"needs rollout.view 'chat', not {cfg.view!r}"]

    async def run(self, ctx: Context, spec) -> Trajectory:
        traj = ctx.trajectory()
        p = await begin(ctx, traj)
        if p is None:
            return traj
        task = p.obs[-1]
        for _ in range(ctx.max_turns):
            action = await ctx.generate(p.stream)
            obs, reward, terminated, truncated, info = await ctx.step(ctx.text(action))
            traj.record(action, reward)
            if terminated or truncated or "fault" in info:
                break
            latest = dict(obs[-1], role="user")
            ctx.new_segment(p.stream, ctx.chat.start([task, {"role": "user", "content": latest["content"]}]))
        else:
            truncated = True
        trace = os.environ.get("JGEM_TEST_USER_WORKFLOW_TRACE")
        if trace:
            with open(trace, "a") as f:
                f.write(f"{spec.episode_id} {len(traj.turns)}\n")
        return end(traj, info, truncated=truncated)


register_workflow("test_user_glance", Glance(), overwrite=True)
# the test's env: 2-5 turns whatever is said (an untrained model's episodes are multi-turn, so segments form)
register("test:talk", "tests.rollout.envs:TalkEnv", overwrite=True)
