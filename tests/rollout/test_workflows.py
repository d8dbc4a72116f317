"""Agent workflows (jgem/rollout/workflow.py, jgem/rollout/workflows/): the default loop unchanged bit for bit,
forks that copy a slot's row and an env, tree rollouts, the compacting agent's segments, a user's workflow."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest
from flax import nnx

from jgem.envs.pool import EnvPool
from jgem.models.tokenizer import ChatFormat, load_tokenizer
from jgem.registry import register
from jgem.rollout.batch import build_batch, extending_runs
from jgem.rollout.config import RolloutConfig
from jgem.rollout.engine import EpisodeSpec, RolloutEngine, wrappers_for_view
from jgem.rollout.workflow import WORKFLOWS, Workflow
from jgem.rollout.workflows import get_workflow
from tests.rollout import mp_engine_worker as worker
from tests.rollout.envs import NoCopyTalkEnv, TalkEnv

pytestmark = pytest.mark.xdist_group("workflows")  # one worker: the engines share their compiled programs
register("test:talk", TalkEnv, overwrite=True)
register("test:talk-nocopy", NoCopyTalkEnv, overwrite=True)


@pytest.fixture(scope="module")
def setup():
    chat = ChatFormat(load_tokenizer())
    cfg, graphdef, state = worker.model()
    return chat, cfg, nnx.merge(graphdef, state)


def _engine(setup, pool, env: str, workflow: str | Workflow = "turns", **rollout):
    chat, cfg, _ = setup
    rcfg = RolloutConfig(view="chat", max_new_tokens=rollout.pop("max_new_tokens", 8), temperature=1.0, **rollout)
    return RolloutEngine(cfg, pool, chat, rcfg, env_name=env, workflow=workflow)


def _play(setup, env, workflow, *, groups=2, group_size=4, num_envs=8, max_turns=4, spy=None, **rollout):
    specs = [EpisodeSpec(i, i // group_size, 100 + i // group_size) for i in range(groups * group_size)]
    with EnvPool(env, num_envs, backend="inline", wrappers=wrappers_for_view("chat")) as pool:
        engine = _engine(setup, pool, env, workflow, **rollout)
        if spy is not None:
            spy(engine)
        eps = engine.collect(setup[2], specs, jax.random.key(1), max_turns=max_turns)
    return eps, engine


# -- the default workflow -------------------------------------------------------------------------------------


def test_the_default_workflow_is_turns_and_workflows_are_named():
    assert RolloutConfig().workflow == "turns"
    assert get_workflow("turns").name == "turns" and {"turns", "compact", "tree", "agents"} <= set(WORKFLOWS.names())
    with pytest.raises(ValueError, match="unknown rollout workflow 'nope'; choose one of .*turns"):
        get_workflow("nope")


# -- forks and tree rollouts -----------------------------------------------------------------------------------


def test_tree_forks_share_the_trunk_exactly_and_prefill_it_once(setup):
    """Tree rollouts (a group forks after turn 1): every branch's stream starts with the trunk's tokens; the forks'
    rows hold the trunk's keys and values bit for bit (copied on the device, never prefilled: no extend of a fork's
    slot starts before its fork point); the branches differ after it; and the run prefills fewer tokens than the
    same groups played as plain episodes."""
    forks, extends = [], []

    def spy(engine):
        fork, extend = engine._fork, engine.slots.extend

        def recording_fork(unit, stream, *, episode_id):
            child = fork(unit, stream, episode_id=episode_id)
            forks.append((stream.slot, child.slot, child.cached))
            return child

        def recording_extend(model, items):
            extends.extend((s, p) for s, _, p in items)
            return extend(model, items)

        engine._fork, engine.slots.extend = recording_fork, recording_extend

    # four groups of four on 16 envs (seeds give 2-5 turns: the last group is cut by the limit of 4, branches too)
    eps, engine = _play(setup, "test:talk", "tree", groups=4, num_envs=16, spy=spy, fork_turn=1)
    assert len(forks) == 4 * 3  # three forks a group
    cache = engine.slots.cache
    for src, dst, cached in forks:
        assert cached > 0
        assert all(p >= cached for s, p in extends if s == dst), "a fork's shared prefix was prefilled again"
        for k, v in zip(cache.k, cache.v):
            np.testing.assert_array_equal(np.asarray(k[dst, :, :, :cached]), np.asarray(k[src, :, :, :cached]))
            np.testing.assert_array_equal(np.asarray(v[dst, :, :cached]), np.asarray(v[src, :, :cached]))
    for g in range(4):
        group = [e for e in eps if e.group_id == g]
        trunk = group[0].stream[: group[0].transitions[1].prompt_len]
        for e in group:
            assert e.stream is not None and np.array_equal(e.stream[: trunk.size], trunk)
            assert np.array_equal(e.transitions[0].action_ids, group[0].transitions[0].action_ids)
        assert len({e.stream[trunk.size :].tobytes() for e in group}) > 1, "the branches drew the same tokens"
    plain, plain_engine = _play(setup, "test:talk", "turns", groups=4, num_envs=16)
    assert [e.num_turns for e in eps] == [e.num_turns for e in plain] == [2] * 4 + [3] * 4 + [4] * 8
    assert engine.stats.prefill_tokens < plain_engine.stats.prefill_tokens
    again, _ = _play(setup, "test:talk", "tree", groups=4, num_envs=16, fork_turn=1)  # the same seed, branches
    assert [e.stream.tobytes() for e in again] == [e.stream.tobytes() for e in eps]


class ForkChain(Workflow):
    """Test workflow: one turn on a stream, then a fork of it and a fork of the fork (both before any program runs),
    then an action on each of the three: the streams of one episode on draw lanes 0, 1, 2."""

    name = "test-fork-chain"

    def width(self, group_size: int) -> int:
        return 3

    async def run(self, ctx, spec):
        from jgem.rollout.workflows.turns import begin, turn

        traj = ctx.trajectory()
        p = await begin(ctx, traj)
        assert not await turn(ctx, p)
        a = ctx.fork(p.stream)
        b = ctx.fork(a)
        outs = await ctx.gather(*(ctx.generate(s) for s in (p.stream, a, b)))
        traj.record(outs[0], 0.0)
        ctx.stats.turns += 0  # the engine's counters of the step, through the context
        return traj


class Policies(Workflow):
    """Test workflow: a group whose four streams open on the same prompt on adapters (policies) 0, 1, 0, 1, and a
    fork of the second; every stream's slot holds its adapter, and each generates one action."""

    name = "test-policies"
    grouped = True

    def width(self, group_size: int) -> int:
        return group_size + 1

    async def run(self, ctx, specs):
        prompt = list(ctx.chat.start([{"role": "user", "content": "pick"}]))
        streams = [ctx.open(prompt, episode_id=s.episode_id, adapter=k % 2) for k, s in enumerate(specs)]
        outs = await ctx.gather(*(ctx.generate(s) for s in streams))
        streams.append(ctx.fork(streams[1]))
        await ctx.generate(streams[-1])
        held = [int(ctx._engine.slots.adapter[s.slot]) for s in streams]
        assert held == [s.adapter for s in streams] == [0, 1, 0, 1, 1], held
        trajs = []
        for s, g in zip(specs, outs):
            t = ctx.trajectory(s)
            t.record(g, 0.0)
            trajs.append(t)
        return trajs


def test_streams_on_different_adapters_share_a_prefill_only_with_their_own_policy(setup):
    """A model with two policies' LoRA adapters: four streams of one group open on the same prompt, two per policy;
    the prompt is prefilled once per policy and copied to the other stream of that policy (a slot's keys and values
    are its policy's), a fork keeps its source's policy, and an adapter the model lacks is refused."""
    from jgem.models.config import LoraConfig
    from jgem.models.transformer import Transformer

    chat, cfg, _ = setup
    cfg = cfg.replace(lora=LoraConfig(rank=4, adapters=2))
    model = Transformer(cfg, rngs=nnx.Rngs(0))
    specs = [EpisodeSpec(i, 0, 100) for i in range(4)]
    rcfg = RolloutConfig(view="chat", max_new_tokens=4)
    prompt = len(chat.start([{"role": "user", "content": "pick"}]))
    with EnvPool("test:talk", 5, backend="inline", wrappers=wrappers_for_view("chat")) as pool:
        engine = RolloutEngine(cfg, pool, chat, rcfg, env_name="test:talk", workflow=Policies())
        eps = engine.collect(model, specs, jax.random.key(1), max_turns=4)
        assert len(eps) == 4 and engine.stats.shared_prefix_tokens == 2 * (prompt - 1)
        with pytest.raises(ValueError, match=r"adapter \(policy\) 1, but the model has 1 \(--model.lora.adapters\)"):
            RolloutEngine(setup[1], pool, chat, rcfg, env_name="test:talk", workflow=Policies()).collect(
                setup[2], specs, jax.random.key(1), max_turns=4
            )


def test_a_fork_of_a_fork_holds_the_source_row_and_each_stream_draws_its_own_tokens(setup):
    """`b = fork(fork(s))` before the copies run gets s's row (the pending copy resolved), and three streams of one
    episode (draw lanes 0, 1, 2) sample different actions from the same state."""
    forks, generations = [], []

    def spy(engine):
        fork, resume = engine._fork, engine._resume

        def recording_fork(unit, stream, *, episode_id):
            child = fork(unit, stream, episode_id=episode_id)
            forks.append((stream.slot, child.slot, child.cached))
            return child

        def recording_resume(task, value):
            if type(value).__name__ == "Generation":
                generations.append(tuple(value.ids))
            return resume(task, value)

        engine._fork, engine._resume = recording_fork, recording_resume

    eps, engine = _play(setup, "test:talk", ForkChain(), groups=1, group_size=1, num_envs=3, spy=spy)
    (s, a, c1), (a2, b, c2) = forks
    assert a2 == a and c1 == c2 > 0
    for k, v in zip(engine.slots.cache.k, engine.slots.cache.v):
        for dst in (a, b):
            np.testing.assert_array_equal(np.asarray(k[dst, :, :, :c1]), np.asarray(k[s, :, :, :c1]))
            np.testing.assert_array_equal(np.asarray(v[dst, :, :c1]), np.asarray(v[s, :, :c1]))
    last3 = generations[-3:]
    assert len(set(last3)) == 3, last3  # lanes 0, 1, 2: three different samples at temperature 1


class Skips(Workflow):
    """Test workflow: odd episodes return at once, without awaiting anything."""

    name = "test-skips"

    async def run(self, ctx, spec):
        from jgem.rollout.workflows.turns import begin, turn

        traj = ctx.trajectory()
        if spec.episode_id % 2:
            return traj
        p = await begin(ctx, traj)
        while p is not None and not await turn(ctx, p):
            pass
        return traj


def test_runs_that_return_at_once_free_their_share_for_the_queued_ones(setup):
    eps, _ = _play(setup, "test:talk", Skips(), groups=6, group_size=1, num_envs=2)
    assert [e.num_turns > 0 for e in eps] == [True, False] * 3


def test_an_env_that_cannot_be_copied_is_refused_naming_it(setup):
    with pytest.raises(TypeError, match=r"env test:talk-nocopy cannot be copied .*NotImplementedError"):
        _play(setup, "test:talk-nocopy", "tree", fork_turn=1)


def test_a_workflow_that_needs_more_slots_than_the_engine_has_is_refused(setup):
    with pytest.raises(ValueError, match=r"'tree' holds 4 slots and envs per run .* 2 envs"):
        _play(setup, "test:talk", "tree", num_envs=2, fork_turn=1)


# -- the compacting agent -------------------------------------------------------------------------------------


def test_the_compacting_agent_continues_in_new_segments_that_train_as_their_own_rows(setup):
    """Past its budget the agent writes a note (a trained turn, reward 0, no env step) and goes on in a new segment:
    the task, the note, the latest observation. The episode has no single stream; every turn's action sits after its
    own prompt; the batch packs one row per segment with its exact ids."""
    chat = setup[0]
    eps, engine = _play(
        setup,
        "test:talk",
        "compact",
        groups=4,
        group_size=1,
        num_envs=4,
        max_turns=6,
        compact_tokens=100,
        max_episode_tokens=320,
    )
    compacted = [e for e in eps if e.stream is None and e.num_turns]
    assert compacted, [e.num_turns for e in eps]
    for e in compacted:
        runs = extending_runs(e)
        assert len(runs) >= 2
        for run in runs[1:]:  # each new segment starts with the task and the agent's note
            first = e.prompt_ids(run[0])
            assert "Your note of the earlier turns: " in chat.tokenizer.decode(first.tolist())
            assert e.transitions[run[0] - 1].reward == 0.0  # the note's turn
        for t in e.transitions:
            assert t.prompt_ids is not None and t.prompt_ids.size == t.prompt_len
    batch = build_batch(compacted, view="chat", buckets=(512, 1024))
    assert batch.metrics["batch/segments"] == sum(len(extending_runs(e)) for e in compacted)
    for seg in batch.segments:
        e = compacted[seg.episode]
        last = e.transitions[seg.turns[-1]]
        assert np.array_equal(seg.tokens, np.concatenate([e.prompt_ids(seg.turns[-1]), last.action_ids]))


# -- the shipped workflows train ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("workflow", "overrides"),
    [
        # 32 envs: 4 slots on each of the 8 test devices' shards (a group's branches share a shard)
        ("tree", dict(algorithm="grpo", group_size=4, rollout={"fork_turn": 1}, env={"num_envs": 32})),
        ("compact", dict(rollout={"compact_tokens": 100})),
    ],
)
def test_a_shipped_workflow_trains_a_step_and_evaluates(tmp_path, workflow, overrides):
    from jgem.train import Trainer
    from tests.train_utils import small_config

    rollout = {"workflow": workflow, **overrides.pop("rollout")}
    env = {"env_id": "test:talk", "num_envs": 8, **overrides.pop("env", {})}
    cfg = small_config(
        str(tmp_path / workflow),
        steps=1,
        episodes_per_step=8,
        env=env,
        rollout=rollout,
        eval_every=1,
        eval_episodes=4,
        checkpoint_every=100,
        **overrides,
    )
    tr = Trainer(cfg)
    assert tr.engine.workflow.name == workflow
    summary = tr.run()
    assert np.isfinite(summary["final_eval"]["eval/return"]), summary
    lines = (tmp_path / workflow / "metrics.jsonl").read_text().splitlines()
    rows = [r for r in map(json.loads, lines) if "train/loss" in r]
    assert len(rows) == 1 and np.isfinite(rows[0]["train/loss"]), rows
    if workflow == "compact":  # some episodes were compacted: more rows than episodes
        assert rows[0]["batch/segments"] > 8, rows[0]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (dict(rollout={"workflow": "tree"}), "rollout.workflow tree plays a group's episodes from one state"),
        (
            dict(rollout={"workflow": "compact", "view": "per_turn"}),
            "rollout.workflow compact: compacts one stream, so it needs rollout.view 'chat'",
        ),
        (
            dict(rollout={"workflow": "compact", "compact_tokens": 400}),
            "rollout.compact_tokens 400 leaves no room below rollout.max_episode_tokens 320",
        ),
        (dict(rollout={"workflow": "tree", "fork_turn": 0}, algorithm="grpo", group_size=2), "fork_turn is 0"),
    ],
)
def test_bad_workflow_settings_are_refused_naming_the_flag(tmp_path, overrides, message):
    from jgem.config import ConfigError, validate
    from tests.train_utils import small_config

    with pytest.raises(ConfigError, match=message):
        validate(small_config(str(tmp_path), **overrides), 8)


def test_the_quickstart_workflow_example_runs_as_written(setup, tmp_path, monkeypatch):
    """docs/quickstart.md's `my_workflows.py`, imported as written, plays episodes that compact into segments."""
    import importlib
    import re
    import sys
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "quickstart.md").read_text()
    (code,) = re.findall(r"```python\n(# my_workflows\.py\n.*?)```", text, re.S)
    (tmp_path / "my_workflows.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("my_workflows")
    try:
        eps, _ = _play(setup, "test:talk", "my_compact", groups=4, group_size=1, num_envs=4, max_new_tokens=32)
    finally:  # the page's module leaves with what it registered (another test imports it afresh)
        WORKFLOWS._entries.pop("my_compact", None)
        sys.modules.pop("my_workflows", None)
    assert any(e.stream is None and len(extending_runs(e)) >= 2 for e in eps), [e.num_turns for e in eps]
