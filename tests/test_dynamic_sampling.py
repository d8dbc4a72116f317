"""Dynamic sampling (DAPO, `jgem.train.dynamic`): the group filter on its own, then the trainer on a tiny task whose
groups of some seeds carry no signal: it trains only on groups whose returns differ, counts what it dropped and the
rounds it played, is deterministic, and with dynamic sampling off (or nothing to drop) runs as it did before."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

from jgem.config import ConfigError, validate
from jgem.core import Env
from jgem.registry import register
from jgem.rollout.episode import Episode, Transition
from jgem.train import Trainer
from jgem.train.dynamic import GroupFilter, dynamic_sample, episode_return, has_signal
from jgem.train.roles import Roles
from jgem.train.run import Run
from tests.train_utils import small_config


def _episode(eid: int, group: int, rewards: list[float], fault: str | None = None) -> Episode:
    ts = [
        Transition(eid, k, 3, np.zeros(2, np.int32), np.zeros(2, np.float32), r, prompt_ids=np.zeros(3, np.int32))
        for k, r in enumerate(rewards)
    ]
    return Episode(eid, group, "test", group, ts, fault=fault)


def test_a_group_has_signal_when_its_discounted_returns_differ():
    a = [_episode(0, 0, [1.0]), _episode(1, 0, [1.0])]
    assert not has_signal(a, 1.0)
    assert has_signal([_episode(0, 0, [1.0]), _episode(1, 0, [0.0])], 1.0)
    # the same undiscounted return, reached at different turns: GRPO's R = G_0 differs when gamma < 1
    late = [_episode(0, 0, [0.0, 1.0]), _episode(1, 0, [1.0])]
    assert not has_signal(late, 1.0) and has_signal(late, 0.9)
    assert episode_return(late[0], 0.9) == np.float32(0.9)
    # a faulted episode is not trained on (the learner drops it), so it gives no signal; nor does a lone episode
    assert not has_signal([_episode(0, 0, [1.0]), _episode(1, 0, [0.0], fault="boom")], 1.0)
    assert not has_signal([_episode(0, 0, [1.0])], 1.0)
    # several policies: each policy's estimator groups its own episodes, so returns must differ within a policy's
    a, b = _episode(0, 0, [1.0]), _episode(1, 0, [0.0])
    b.policy = 1
    assert not has_signal([a, b], 1.0)
    c = _episode(2, 0, [0.5])
    c.policy = 1
    assert has_signal([a, b, c], 1.0)


def test_the_filter_keeps_whole_groups_in_order_up_to_its_target():
    f = GroupFilter(target=2, gamma=1.0)
    f.add([_episode(0, 7, [1.0]), _episode(2, 8, [0.0]), _episode(1, 7, [0.0]), _episode(3, 8, [0.0])])
    assert [[e.episode_id for e in g] for g in f.kept] == [[0, 1]] and f.dropped == 1 and f.missing == 1
    f.add([_episode(4, 9, [2.0]), _episode(5, 9, [1.0]), _episode(6, 10, [0.0]), _episode(7, 10, [1.0])])
    assert f.missing == 0 and f.dropped == 1
    assert [e.episode_id for e in f.episodes()] == [0, 1, 4, 5]  # the target's worth, first found first


class _FakeRun:
    """What `dynamic_sample` uses of the sampler side: its config and mesh (None: one process); `collect(step,
    round=r)` plays a round, episodes getting rewards from a table of seeds (seed -> per-episode rewards of its
    group)."""

    rollout_mesh = None

    def __init__(self, cfg, table):
        self.cfg, self.table, self.rounds = cfg, table, []
        mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("x",))
        self.roles = Roles(mesh, mesh)  # one process on both sides: `specs` numbers as a plain run

    specs = Run.specs

    def collect(self, step, *, round=0):
        self.rounds.append(round)
        specs = self.specs(step, round=round)
        g = self.cfg.group_size
        rewards = [self.table.get(s.seed, [1.0] * g)[i % g] for i, s in enumerate(specs)]
        return [_episode(s.episode_id, s.group_id, [r]) for s, r in zip(specs, rewards, strict=True)]


def test_extra_rounds_fill_the_step_from_the_runs_seed_stream():
    cfg = small_config("unused", algorithm="grpo", episodes_per_step=4, rollout={"max_resample_rounds": 3})
    run = _FakeRun(cfg, {})
    played = run.collect(0)
    # no group has signal anywhere: every round is played, then the step trains on its own episodes
    episodes, m = dynamic_sample(run, 0, played, lambda r: run.collect(0, round=r))
    assert run.rounds == [0, 1, 2, 3] and episodes == played
    assert m == {"rollout/groups_dropped": 8.0, "rollout/groups_kept": 0.0, "rollout/resample_rounds": 3.0}
    # the rounds' episodes have ids, groups and seeds of their own, none a training step's or another round's
    specs = [s for r in range(4) for s in run.specs(0, round=r)]
    assert len({s.episode_id for s in specs}) == 16 and len({s.group_id for s in specs}) == 8
    seeds = {s.seed for r in range(1, 4) for s in run.specs(0, round=r)}
    steps = {s.seed for step in range(100) for s in run.specs(step)}
    assert len(seeds) == 6 and not seeds & steps and seeds.isdisjoint(s.seed for s in run.specs(1, round=1))

    # one group of the second round has signal, one of the first: the step stops at the second round
    s1, s2 = (run.specs(0, round=r) for r in (1, 2))
    run = _FakeRun(cfg, {s1[2].seed: [0.0, 1.0], s2[0].seed: [1.0, 0.0]})
    episodes, m = dynamic_sample(run, 0, run.collect(0), lambda r: run.collect(0, round=r))
    assert run.rounds == [0, 1, 2] and m["rollout/resample_rounds"] == 2 and m["rollout/groups_dropped"] == 4
    assert [e.episode_id for e in episodes] == [s1[2].episode_id, s1[3].episode_id, s2[0].episode_id, s2[1].episode_id]
    # max_resample_rounds 0: drop only, never play more
    cfg0 = dataclasses.replace(cfg, rollout=dataclasses.replace(cfg.rollout, max_resample_rounds=0))
    run = _FakeRun(cfg0, {run.specs(0)[0].seed: [0.0, 1.0]})
    episodes, m = dynamic_sample(run, 0, run.collect(0), lambda r: run.collect(0, round=r))
    assert run.rounds == [0] and len(episodes) == 2 and m["rollout/groups_kept"] == 1


# ----------------------------------------------------------------------------- the trainer


class SplitSignalEnv(Env):
    """One turn; the reward is 0 for seeds divisible by `no_signal_every` (their groups carry no signal), otherwise
    the parity of the step calls over all instances (the actions of one group reach the env together, so its
    episodes differ). `calls` is reset before each run."""

    calls = 0

    def __init__(self, max_turns: int = 1, no_signal_every: int = 3, seed: int | None = None) -> None:
        super().__init__(seed=seed)
        self.every, self.seed = no_signal_every, 0

    def reset(self, seed: int | None = None):
        super().reset(seed)
        self.seed = seed or 0
        return f"Say anything. Seed {seed}.", {}

    def step(self, action: str):
        SplitSignalEnv.calls += 1
        reward = 0.0 if self.every and self.seed % self.every == 0 else float(SplitSignalEnv.calls % 2)
        return "Done.", reward, True, False, {"success": reward > 0}


register("test:split-signal", SplitSignalEnv, overwrite=True)


def _run(tmp_path, name, *, dynamic=True, every=3, steps=2):
    """A tiny GRPO run on the split-signal task (2 groups of 2 a step); what it played, trained on and logged."""
    cfg = small_config(
        str(tmp_path / name),
        algorithm="grpo",
        steps=steps,
        gamma=1.0,
        env={"env_id": "test:split-signal", "env_kwargs": {"no_signal_every": every}},
        rollout={"dynamic_sampling": dynamic, "max_resample_rounds": 2},
        checkpoint_every=100,
    )
    SplitSignalEnv.calls = 0
    trainer = Trainer(cfg)
    played, trained, logged = [], [], []
    pipe = trainer.pipeline  # what the sampler side plays: each step's episodes and its extra rounds
    batch, extra, learn, train_step = pipe.batch, pipe.extra, trainer.learn, trainer.train_step
    pipe.batch = lambda step: played.append((step, 0, out := batch(step))) or out
    pipe.extra = lambda step, r: played.append((step, r, out := extra(step, r))) or out
    trainer.learn = lambda episodes, **kw: trained.append(episodes) or learn(episodes, **kw)
    trainer.train_step = lambda step: logged.append(m := train_step(step)) or m
    summary = trainer.run()
    return summary, played, trained, logged


def _groups(episodes):
    out = {}
    for e in episodes:
        out.setdefault(e.group_id, []).append(e.episode_return)
    return out


def test_the_trainer_trains_only_on_groups_with_signal_counts_the_drops_and_is_deterministic(tmp_path):
    summary, played, trained, logged = _run(tmp_path, "a")
    for step, (episodes, metrics) in enumerate(zip(trained, logged, strict=True)):
        rounds = [(r, eps) for s, r, eps in played if s == step]
        groups = {g: v for _, eps in rounds for g, v in _groups(eps).items()}
        flat = [g for g, v in groups.items() if np.var(v) == 0]
        # every trained group has returns that differ; every played group without that is counted as dropped
        assert all(np.var(v) > 0 for v in _groups(episodes).values())
        assert len(episodes) == 4 and len(_groups(episodes)) == 2
        assert metrics["rollout/groups_dropped"] == len(flat)
        assert metrics["rollout/resample_rounds"] == len(rounds) - 1 == max(r for r, _ in rounds)
        assert metrics["rollout/groups_kept"] == 2
        # the episode metrics are the step's own (its first round's): comparable with a run without it
        assert metrics["rollout/return"] == np.mean([e.episode_return for e in rounds[0][1]])
    # the task has flat groups (seeds divisible by 3: seed 0 at step 0), so the filter had work to do
    assert sum(m["rollout/groups_dropped"] for m in logged) > 0
    assert sum(m["rollout/resample_rounds"] for m in logged) > 0
    again, played2, trained2, logged2 = _run(tmp_path, "b")
    assert again["params_sha256"] == summary["params_sha256"]
    assert [[e.seed for e in eps] for eps in trained2] == [[e.seed for e in eps] for eps in trained]
    assert [m["train/loss"] for m in logged2] == [m["train/loss"] for m in logged]


def test_off_or_with_nothing_to_drop_the_run_is_the_plain_one(tmp_path):
    """Off: one collection a step, every played group trained (flat ones too), no dynamic metrics. On a task where
    every group has signal, dynamic sampling changes nothing: the same params, bit for bit."""
    off, played, trained, logged = _run(tmp_path, "off", dynamic=False)
    assert [(s, r) for s, r, _ in played] == [(0, 0), (1, 0)]
    assert [eps for _, _, eps in played] == trained
    assert any(np.var(v) == 0 for eps in trained for v in _groups(eps).values())
    assert not any("groups_dropped" in k for m in logged for k in m)

    plain, _, _, _ = _run(tmp_path, "plain", dynamic=False, every=0, steps=1)
    on, played, _, logged = _run(tmp_path, "on", dynamic=True, every=0, steps=1)
    assert [(s, r) for s, r, _ in played] == [(0, 0)] and logged[0]["rollout/groups_dropped"] == 0
    assert on["params_sha256"] == plain["params_sha256"]


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            {"algorithm": "rebn", "rollout": {"dynamic_sampling": True}},
            "--rollout.dynamic-sampling drops the groups whose returns are all equal",
        ),
        (
            {"algorithm": "grpo", "rollout": {"max_resample_rounds": -1}},
            "--rollout.max-resample-rounds is -1; it must be",
        ),
        ({"algorithm": "grpo", "rollout": {"max_resample_rounds": 65}}, "an integer in [0, 64]"),
    ],
)
def test_bad_dynamic_sampling_configs_name_the_flag(overrides, message):
    with pytest.raises(ConfigError) as e:
        validate(small_config("unused", **overrides), 1)
    flags = e.value.render()
    assert message in flags and "--rollout." in flags
