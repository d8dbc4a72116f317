"""The MCP tool from the training config: `--env.tools mcp --env.mcp-server '<command>'` on the CLI, the shipped
demo server as a real subprocess, and the trainer's own pool, rollout engine and update."""

from __future__ import annotations

import math
import shlex
import sys

import pytest

from jgem.metrics import read_jsonl
from tests.train_utils import MICRO

pytestmark = pytest.mark.slow  # the server imports the mcp SDK, and the run compiles the rollout and update programs
CALL = '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>'
ANSWER = "<tool_response>\n5.0\n</tool_response>"


def _config(run_dir, steps: int):
    import tyro

    from experiments.configs import PRESETS

    server = f"{shlex.quote(sys.executable)} -m jgem.envs.tools.mcp_servers.demo_server"
    argv = ["tiny", "--env.env-id", "math:arithmetic", "--env.tools", "mcp", "--env.mcp-server", server]
    argv += ["--steps", str(steps), "--episodes-per-step", "2", "--env.num-envs", "2", "--warm-start.steps", "0"]
    argv += ["--model.preset", MICRO, "--rollout.max-new-tokens", "4", "--rollout.max-episode-tokens", "2048"]
    argv += ["--learner.epochs", "1", "--learner.minibatches", "1", "--eval-every", "0"]
    argv += ["--no-plot", "--no-console", "--run-dir", str(run_dir)]
    return tyro.extras.overridable_config_cli(PRESETS, args=argv, console_outputs=False)


def _text(obs) -> str:
    return obs if isinstance(obs, str) else "\n".join(m["content"] for m in obs)


class ScriptedFirstAction:
    """Sends `CALL` as each episode's first action in place of the sampled one (a random-init policy never
    writes a tool call), and keeps every (observation, info) the pool answers a tool call with."""

    def __init__(self, pool) -> None:
        self.first: set[int] = set()
        self.answers: list[tuple[str, dict]] = []
        reset, send, recv = pool.reset, pool.send, pool.recv

        def scripted_reset(env_ids, seeds=None):
            self.first |= set(env_ids)
            return reset(env_ids, seeds)

        def scripted_send(env_ids, actions):
            actions = [CALL if i in self.first else a for i, a in zip(env_ids, actions)]
            self.first -= set(env_ids)
            return send(env_ids, actions)

        def recording_recv(*args, **kwargs):
            batch = recv(*args, **kwargs)
            self.answers += [(_text(o), info) for o, info in zip(batch.obs, batch.infos) if info.get("use_tool")]
            return batch

        pool.reset, pool.send, pool.recv = scripted_reset, scripted_send, recording_recv


def test_mcp_tool_from_the_cli_answers_in_training_and_outlives_the_pool(tmp_path):
    from jgem.train import Trainer

    cfg = _config(tmp_path / "run", steps=1)
    assert cfg.env.tools == ("mcp",)
    trainer = Trainer(cfg)
    scripted = ScriptedFirstAction(trainer.pool)
    episodes = []
    batch = trainer.pipeline.batch  # each step's episodes, as the sampler side plays them

    def recording_batch(step):
        episodes.extend(batch(step))
        return episodes[-cfg.episodes_per_step :]

    trainer.pipeline.batch = recording_batch
    trainer.run()

    assert len(scripted.answers) == 2  # one call per episode, answered by the demo server
    for obs, info in scripted.answers:
        assert info["tool"] == "mcp" and info["tool_ok"] and info["tool_use_counter"] == 1, info
        assert ANSWER in obs
    assert len(episodes) == 2
    for ep in episodes:
        context = trainer.chat.tokenizer.decode(ep.stream.tolist())
        assert '"name": "add"' in context  # the server's tool list in the first prompt
        assert ANSWER in context  # the answer in the context of the policy's next turn
        assert len(ep.transitions) == 2  # the call, then an answer to the task (a tool call is not an env turn)
    (row,) = [r for r in read_jsonl(tmp_path / "run" / "metrics.jsonl") if "train/loss" in r]
    assert math.isfinite(row["train/loss"])

    # The run closed its pool; the MCP session, shared by every env of the process, stays up: a resumed run in
    # this process still gets answers (closing a pool, or rebuilding a faulted env, used to end it for all).
    resumed = Trainer(_config(tmp_path / "run", steps=2))
    try:
        resumed.pool.reset([0], [7])
        resumed.pool.recv()
        batch = resumed.pool.step([0], [CALL])
        assert batch.infos[0]["tool_ok"], _text(batch.obs[0])
        assert ANSWER in _text(batch.obs[0])
    finally:
        resumed.pool.close()
