"""The trainer end to end: every algorithm, fail-fast configs, faults, exact resume after SIGKILL, multi-process."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jgem.algos.algorithms import ALGORITHMS
from jgem.algos.learner import _opt_count
from jgem.checkpoint import committed_steps
from jgem.config import EnvConfig, WarmStartConfig
from jgem.metrics import read_jsonl
from jgem.registry import register
from jgem.sharding.config import MeshConfig
from jgem.train import Trainer, train
from tests.multiprocess import free_port, xla_flags
from tests.rollout.envs import FlakyGuessEnv
from tests.train_utils import small_config

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("algorithm", ALGORITHMS.names())
def test_every_algorithm_trains_with_finite_metrics(tmp_path, algorithm):
    # one checkpoint, the last step's (the runs below checkpoint every step and resume from them)
    summary = train(small_config(str(tmp_path), algorithm=algorithm, checkpoint_every=2))
    rows = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if "train/loss" in r]
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        for k in ("train/loss", "train/grad_norm", "train/entropy", "rollout/return", "batch/padding_frac"):
            assert math.isfinite(r[k]), (k, r[k])
        assert r["train/skipped"] == 0
        if algorithm == "ppo":
            assert math.isfinite(r["train/value_loss"])
    assert len(summary["params_sha256"]) == 64
    assert (tmp_path / "checkpoints" / "2").is_dir()


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"env": {"env_id": "game:GuessTheNumbr-v0-easy"}}, "did you mean 'game:GuessTheNumber-v0-easy'"),
        ({"model": {"path": "/nonexistent/qwen3"}}, "not a local HF checkpoint directory"),
        ({"mesh": MeshConfig(data=3)}, "devices"),
        ({"algorithm": "grpo", "group_size": 1}, "group_size >= 2"),
        ({"episodes_per_step": 5, "group_size": 2, "algorithm": "grpo"}, "not divisible by group_size"),
        ({"learner": {"micro_batch_size": 3}}, "micro_batch_size 3 is not divisible by 8 devices"),
        ({"algorithm": "ppo2"}, "algorithm 'ppo2' is unknown"),
        ({"rollout": {"temperature": 0.7}}, "learner.temperature 1.0 differs from rollout.temperature 0.7"),
        (
            {"env": {"env_id": "math:arithmetic"}, "warm_start": {"steps": 5}},
            "'math:arithmetic' has none; set --warm-start.steps 0",
        ),
    ],
)
def test_bad_configs_fail_fast_with_a_clear_message(tmp_path, overrides, message):
    if isinstance(overrides.get("mesh"), MeshConfig):
        cfg = small_config(str(tmp_path))
        import dataclasses

        cfg = dataclasses.replace(cfg, mesh=overrides["mesh"])
    else:
        cfg = small_config(str(tmp_path), **overrides)
    t = time.perf_counter()
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Trainer(cfg)
    assert time.perf_counter() - t < 2.0, "validation must happen before any model is built or compiled"


def test_faulting_env_does_not_stop_training_and_is_counted(tmp_path):
    register("test:flaky-guess", FlakyGuessEnv, overwrite=True)
    # 4 episodes a step on the 4 envs (small_config's shapes: its compiled programs), each env reused after a fault
    cfg = small_config(str(tmp_path), steps=2, env={"env_id": "test:flaky-guess", "backend": "thread"})
    assert isinstance(cfg.env, EnvConfig)
    train(cfg)
    rows = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if "train/loss" in r]
    assert len(rows) == 2
    assert rows[-1]["pool/faults_total"] > 0
    assert sum(r["rollout/faults"] for r in rows) > 0


def test_non_finite_loss_stops_the_run_with_a_clear_error(tmp_path, monkeypatch):
    import jgem.train.learn as train_module

    real = train_module.train_step

    def nan_from_step_two(state, batch, spec):
        state, m = real(state, batch, spec)
        return state, {**m, "loss": m["loss"] * jnp.where(state.step >= 2, jnp.nan, 1.0)}

    nan_from_step_two._cache_size = real._cache_size  # the trainer logs the compile count
    monkeypatch.setattr(train_module, "train_step", nan_from_step_two)
    with pytest.raises(FloatingPointError, match=r"train/loss is nan at step 2 .*learner.lr"):
        train(small_config(str(tmp_path), steps=3))
    steps = [r["step"] for r in read_jsonl(tmp_path / "metrics.jsonl") if "train/loss" in r]
    assert steps == [1]  # the NaN step is neither logged nor checkpointed
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir() if p.name.isdigit()) == ["1"]


def _run(args: dict, env: dict | None = None, **popen) -> subprocess.Popen:
    e = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": xla_flags(1),
        "PYTHONPATH": str(ROOT),
        **(env or {}),
    }
    e.pop("JAX_NUM_CPU_DEVICES", None)
    return subprocess.Popen(
        [sys.executable, "-m", "tests.train_utils", json.dumps(args)],
        cwd=ROOT,
        env=e,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **popen,
    )


def _summary(p: subprocess.Popen, timeout: float = 600) -> dict:
    out, _ = p.communicate(timeout=timeout)
    assert p.returncode == 0, out[-3000:]
    line = [ln for ln in out.splitlines() if ln.startswith("SUMMARY ")][-1]
    return json.loads(line[len("SUMMARY ") :])


@pytest.mark.slow
def test_resume_after_sigkill_is_bit_exact_and_keeps_the_curriculum(tmp_path):
    args = {"steps": 6, "curriculum": {"horizons": [2, 4], "stage_steps": 2}, "checkpoint_every": 1}
    # the straight run saves only its last step: checkpoints must not change what a run computes
    straight = _summary(_run({**args, "checkpoint_every": args["steps"], "run_dir": str(tmp_path / "a")}))

    run_b = tmp_path / "b"
    p = _run({**args, "run_dir": str(run_b)})
    ckpts = run_b / "checkpoints"
    # a random moment: just after a random checkpoint of the first half, so at least 3 steps are still to run
    # (a delay after the first checkpoint let a fast run finish before the kill)
    target = random.randint(1, args["steps"] // 2)
    deadline = time.time() + 600
    while not (ckpts.is_dir() and any(c.name.isdigit() and int(c.name) >= target for c in ckpts.iterdir())):
        assert p.poll() is None and time.time() < deadline, f"the run ended before checkpoint {target}"
        time.sleep(0.02)
    time.sleep(random.uniform(0.0, 0.05))
    p.send_signal(signal.SIGKILL)
    p.wait()
    killed_at = max(int(c.name) for c in ckpts.iterdir() if c.name.isdigit())
    # the kill must land before the run finished, or "resume" would only reload the last step
    assert p.returncode == -signal.SIGKILL and not (run_b / "summary.json").exists(), "the run ended before the kill"
    assert killed_at < args["steps"], f"killed after the last checkpoint ({killed_at})"
    resumed = _summary(_run({**args, "run_dir": str(run_b)}))
    assert resumed["params_sha256"] == straight["params_sha256"], f"killed after checkpoint {killed_at}"

    rows = [r for r in read_jsonl(run_b / "metrics.jsonl") if "curriculum/stage" in r]
    # one line per step: the resume cut the log back to the checkpoint's step (no duplicate step lines)
    assert [r["step"] for r in rows] == list(range(1, args["steps"] + 1))
    assert rows and all(r["curriculum/stage"] == min((r["step"] - 1) // 2, 1) for r in rows)
    assert all(r["rollout/max_turns"] == (2 if r["step"] <= 2 else 4) for r in rows)
    # sync plays nothing ahead: no pipeline file beside the checkpoints, no pipeline metric but the (zero) staleness
    assert not (run_b / "pipeline").exists()
    assert {k for r in rows for k in r if k.startswith("pipeline/")} == {
        "pipeline/staleness_mean",
        "pipeline/staleness_max",
    }


# The two warm-start tests share one run (a module fixture; the xdist group keeps both tests, and so the fixture, on
# one worker): a 3-step warm start on 4 teacher games a step, then 1 RL step, with a KL penalty (the state carries a
# reference policy), an evaluation at the start, after the warm start and after the RL step, and curves plotted.


@pytest.fixture(scope="module")
def warm_started_run(tmp_path_factory):
    """(its config, the Trainer after `run()`, the initial params and reference params before it, the key lists
    passed to plot_curves)."""
    import jgem.train.loop

    cfg = small_config(
        str(tmp_path_factory.mktemp("warm-start") / "run"),
        steps=1,
        eval_every=1,
        eval_episodes=4,
        plot=True,
        learner={"kl_coef": 0.1},
        warm_start=WarmStartConfig(steps=3, episodes_per_step=4),
    )
    plotted = []
    real_plot = jgem.train.loop.plot_curves
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(
            jgem.train.loop, "plot_curves", lambda p, o, keys, **k: plotted.append(keys) or real_plot(p, o, keys, **k)
        )
        tr = Trainer(cfg)
        init, init_ref = jax.device_get(tr.state.params), jax.device_get(tr.state.ref_params)
        tr.run()
    return cfg, tr, init, init_ref, plotted


@pytest.mark.xdist_group("warm-started-run")
def test_after_warm_start_rl_gets_the_warm_policy_as_kl_reference_and_a_fresh_optimizer(tmp_path, warm_started_run):
    cfg, tr, init, init_ref, _ = warm_started_run
    assert _tree_equal(init_ref, init)  # before any training: the initial policy
    # RL's optimizer started afresh after the warm start: its count is the one RL update's 1 step
    assert int(_opt_count(tr.state.opt_state)) == 1
    ref = jax.device_get(tr.state.ref_params)
    assert not _tree_equal(ref, init), "the reference must move to the warm-started policy"
    # the RL step's batch carried reference log-probs: the KL metric is reported and finite
    kl = [r["train/kl"] for r in read_jsonl(Path(cfg.run_dir) / "metrics.jsonl") if "train/kl" in r]
    assert kl and all(np.isfinite(kl))
    # a resumed trainer restores the reference from the checkpoint, not from its fresh initial policy (resumed
    # from a copy of the run, which the other test reads; without evaluations or plots, which may change)
    shutil.copytree(cfg.run_dir, tmp_path / "run")
    resumed = Trainer(dataclasses.replace(cfg, run_dir=str(tmp_path / "run"), steps=2, eval_every=0, plot=False))
    resumed.run()
    assert _tree_equal(jax.device_get(resumed.state.ref_params), ref)


def test_ppo_trains_after_a_warm_start_and_the_critic_sits_it_out(tmp_path):
    """`tiny --algorithm ppo` (a warm start by default) raised 'this TrainState has a critic; TrainBatch needs
    returns, values and value_mask' from the first supervised update."""
    cfg = small_config(
        str(tmp_path), algorithm="ppo", steps=1, warm_start=WarmStartConfig(steps=1, episodes_per_step=4)
    )
    tr = Trainer(cfg)
    critic0 = jax.device_get(tr.state.critic_params)
    policy0 = jax.device_get(tr.state.params)
    tr.warm_start(lambda s, m: None)
    assert tr.state.critic_params is not None and tr.state.critic_opt_state is not None
    assert _tree_equal(jax.device_get(tr.state.critic_params), critic0), "the supervised phase trains the policy only"
    assert not _tree_equal(jax.device_get(tr.state.params), policy0)
    summary = tr.run()
    rows = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if "train/value_loss" in r]
    assert summary["steps"] == 1 and len(rows) == 1 and math.isfinite(rows[0]["train/value_loss"])


@pytest.mark.parametrize("correction", ["decoupled", "tis"])
def test_an_off_policy_correction_leaves_the_warm_start_supervised(tmp_path, correction):
    """`--learner.correction decoupled` (the quickstart's async and stream commands) weighed each teacher token's loss
    by its probability under the model (the teacher's tokens carry no behaviour log-probs): a random model's warm
    start loss began near 0.006 instead of ~7 and the warm start learned a fraction of the format. The warm start's
    steps are the same with and without a correction."""
    losses = {}
    for c in ("none", correction):
        cfg = small_config(str(tmp_path / c), steps=0, warm_start=WarmStartConfig(steps=2, episodes_per_step=4))
        cfg = dataclasses.replace(cfg, learner=dataclasses.replace(cfg.learner, correction=c))
        tr = Trainer(cfg)
        logged = losses[c] = []
        tr.warm_start(lambda s, m, out=logged: out.append(m["warm/loss"]))
        tr.close()
    assert losses[correction] == losses["none"] and losses["none"][0] > 1.0


def _tree_equal(a, b) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True))


def test_resume_refuses_a_different_config(tmp_path):
    train(small_config(str(tmp_path), steps=1))
    with pytest.raises(ValueError, match="gamma"):
        train(small_config(str(tmp_path), steps=2, gamma=0.5))
    # a memory-vs-speed setting may change between resumes (and runs from before it existed resume); 256 MB still
    # keeps these tiny logits, so the update compiles to the program it had
    train(small_config(str(tmp_path), steps=2, learner={"keep_logits_mb": 256.0}))


def test_a_moved_run_dir_resumes(tmp_path):
    """Resume compared the literal run_dir string: a run moved (or named relatively, then absolutely) was refused."""
    train(small_config(str(tmp_path / "a"), steps=1))
    (tmp_path / "a").rename(tmp_path / "b")
    summary = train(small_config(str(tmp_path / "b"), steps=2))
    assert summary["steps"] == 2
    rows = [r for r in read_jsonl(tmp_path / "b" / "metrics.jsonl") if "train/loss" in r]
    assert [r["step"] for r in rows] == [1, 2]


def _two_processes(
    args: dict, devices: int = 1, heartbeat: int | None = None, processes: int = 2
) -> list[subprocess.Popen]:
    """The run `args` as 2 (or `processes`) JAX processes of `devices` CPU devices each on localhost (what
    experiments/tpu_pod/local_multiprocess.sh starts, with its default of one device a process); they share the
    suite's persistent compilation cache (tests/conftest.py: the same programs, compiled once)."""
    port = free_port()
    env = {"JGEM_COORDINATOR": f"127.0.0.1:{port}", "JGEM_NUM_PROCESSES": str(processes)}
    env["XLA_FLAGS"] = xla_flags(devices)
    if heartbeat is not None:
        env["JGEM_HEARTBEAT_TIMEOUT"] = str(heartbeat)
    return [_run(args, env={**env, "JGEM_PROCESS_ID": str(i)}) for i in range(processes)]


def _summaries(procs: list[subprocess.Popen], timeout: float = 900) -> list[dict]:
    try:
        return [_summary(p, timeout=timeout) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


# The two 2-process tests below share one straight run (a module fixture; the xdist group keeps both tests, and
# so the fixture, on one worker): 2 processes x 2 devices, each with 4 envs and 2 of the warm start's teacher games,
# the off_policy pipeline with lag 1 (step 2's episodes play by version 1 while step 1's still play by version 0:
# two versions' chunks a round, in lockstep), a checkpoint after the warm start (step 0) and after every RL step.
TWO_PROCESSES = {
    "steps": 3,
    "checkpoint_every": 1,
    "keep_checkpoints": 9,
    "warm_start": {"steps": 1, "episodes_per_step": 2},
    "pipeline": {"mode": "off_policy", "lag": 1},
    "param_probe": 1,
}


def _straight_two_process_run(tmp_path_factory, name: str, args: dict) -> tuple[Path, list[dict]]:
    """A module fixture's straight run of `args` as 2 processes x 2 devices: its run dir and both summaries."""
    run_dir = tmp_path_factory.mktemp(name) / "run"
    return run_dir, _summaries(_two_processes({**args, "run_dir": str(run_dir)}, devices=2))


def _wait_for_checkpoint(procs: list[subprocess.Popen], ckpts: Path, step: int, timeout: float) -> None:
    """Until checkpoint `step` or a later one is in `ckpts` (every process still running)."""
    deadline = time.time() + timeout
    while not any(s >= step for s in committed_steps(ckpts)):
        assert all(p.poll() is None for p in procs), f"a process ended before checkpoint {step}"
        assert time.time() < deadline, f"no checkpoint {step} in time"
        time.sleep(0.02)


def _trained_alike(rows: list[dict], ref_rows: list[dict], summary: dict, ref: dict) -> None:
    """A 2-process run's step losses and probed params against a 1-process run's, up to the order of float sums."""
    for a, b in zip(rows, ref_rows, strict=True):
        assert a["train/loss"] == pytest.approx(b["train/loss"], rel=1e-4, abs=1e-6)
    for a, b in zip(summary["param_probe"], ref["param_probe"], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


@pytest.fixture(scope="module")
def two_process_run(tmp_path_factory) -> tuple[Path, list[dict]]:
    return _straight_two_process_run(tmp_path_factory, "two-processes", TWO_PROCESSES)


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.xdist_group("two-process-train")
def test_two_processes_train_like_one_on_the_same_global_batch(tmp_path, two_process_run):
    """2 processes x 2 devices against 1 process x 4 devices with 8 envs, 8 episodes a step and 4 teacher games:
    the same episodes (ids and seeds are global, the warm start's teacher games too), the same global batch, the
    same params after a warm-start step and 3 RL steps in the off_policy pipeline (up to the order of float sums)."""
    run_dir, summaries = two_process_run
    assert summaries[0]["params_sha256"] == summaries[1]["params_sha256"]
    rows = [r for r in read_jsonl(run_dir / "metrics.jsonl") if "train/loss" in r]
    assert [r["step"] for r in rows] == [1, 2, 3] and all(math.isfinite(r["train/loss"]) for r in rows)
    assert [r["pipeline/staleness_max"] for r in rows] == [0, 1, 1]
    one = {**TWO_PROCESSES, "run_dir": str(tmp_path / "one"), "episodes_per_step": 8, "env": {"num_envs": 8}}
    one["warm_start"] = {"steps": 1, "episodes_per_step": 4}
    ref = _summary(_run(one, env={"XLA_FLAGS": xla_flags(4)}))
    ref_rows = [r for r in read_jsonl(tmp_path / "one" / "metrics.jsonl") if "train/loss" in r]
    # rollout figures are the global batch's, on process 0's episodes
    _trained_alike(rows, ref_rows, summaries[0], ref)


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.xdist_group("two-process-train")
def test_two_processes_warm_start_checkpoint_and_resume_after_sigkill_exactly(tmp_path, two_process_run):
    """Issue 31: on several processes the first checkpoint after a warm start crashed in orbax ("the input arrays
    must have one shard each"): the warm start's fresh optimizer state was placed with `jax.device_put`, which gives
    arrays orbax cannot save across processes. Here the 2 processes of the shared run are killed just after a
    checkpoint (the warm start's or an RL step's, with the pipeline's episodes of the next step in flight and saved
    per process) and the resumed run ends bit-identical to the straight one."""
    straight_dir, straight = two_process_run
    assert straight[0]["params_sha256"] == straight[1]["params_sha256"]
    assert (straight_dir / "checkpoints" / "0").is_dir(), "the warm start's checkpoint"

    run_b = tmp_path / "b"
    args = {**TWO_PROCESSES, "run_dir": str(run_b)}
    procs = _two_processes(args, devices=2)
    ckpts = run_b / "checkpoints"
    target = random.randint(0, 2)  # the warm start's checkpoint, or an RL step's before the last
    try:
        _wait_for_checkpoint(procs, ckpts, target, timeout=900)
    finally:
        for p in procs:
            p.send_signal(signal.SIGKILL)
        logs = [p.communicate()[0] for p in procs]
    killed_at = max(int(c.name) for c in ckpts.iterdir() if c.name.isdigit())
    assert all(p.returncode == -signal.SIGKILL for p in procs), logs[0][-3000:]
    assert killed_at < args["steps"] and not (run_b / "summary.json").exists(), "the run ended before the kill"
    resumed = _summaries(_two_processes(args, devices=2))
    assert resumed[0]["params_sha256"] == straight[0]["params_sha256"], (
        f"killed after checkpoint {killed_at} ({target=})"
    )
    rows = [r for r in read_jsonl(run_b / "metrics.jsonl") if "train/loss" in r]
    assert [r["step"] for r in rows] == [1, 2, 3]


# The two split-mesh tests share one straight 2-process run (a module fixture in an xdist group, as above)
SPLIT = {
    "steps": 3,
    "checkpoint_every": 1,
    "pipeline": {"mode": "off_policy", "lag": 1},
    "mesh": {"rollout_devices": 2},
    "param_probe": 1,
}


@pytest.fixture(scope="module")
def split_run(tmp_path_factory) -> tuple[Path, list[dict]]:
    return _straight_two_process_run(tmp_path_factory, "split", SPLIT)


@pytest.fixture(scope="module")
def role_reference(tmp_path_factory) -> tuple[Path, dict]:
    """1 process x 4 devices split 2 + 2 with the 2-process runs' global batch: 8 episodes a step on 8 envs (REINFORCE:
    these untrained models' returns are all equal, so ReBN's advantages would be 0 and only REINFORCE moves the
    params), a warm-start step of 8 teacher games."""
    run_dir = tmp_path_factory.mktemp("role-reference") / "run"
    args = {**ROLE_SPLIT, "run_dir": str(run_dir), "episodes_per_step": 8}
    args["env"] = {**ROLE_SPLIT.get("env", {}), "num_envs": 8}
    args["warm_start"] = {**ROLE_SPLIT["warm_start"], "episodes_per_step": 8}
    args["mesh"] = {"rollout_devices": 2}
    return run_dir, _summary(_run(args, env={"XLA_FLAGS": xla_flags(4)}))


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.xdist_group("two-process-split")
def test_two_processes_on_split_meshes_train_like_one(tmp_path, split_run):
    """Split meshes over 2 processes x 2 devices: each process gives one device to the sampler and one to the learner
    (--mesh.rollout-placement per_process), plays its envs' episodes on the sampler's mesh (both processes' sampler
    devices, in lockstep) and trains them on the learner's; each update is published by one program over all 4
    devices. Against 1 process x 4 devices split 2 + 2 with the global batch: the same losses and params."""
    run_dir, two = split_run
    one = {**SPLIT, "run_dir": str(tmp_path / "one"), "episodes_per_step": 8, "env": {"num_envs": 8}}
    ref = _summary(_run(one, env={"XLA_FLAGS": xla_flags(4)}))
    rows = [r for r in read_jsonl(run_dir / "metrics.jsonl") if "train/loss" in r]
    ref_rows = [r for r in read_jsonl(tmp_path / "one" / "metrics.jsonl") if "train/loss" in r]
    assert len(rows) == 3 and all(r["pipeline/publish_bytes"] > 0 for r in rows)
    assert [r["pipeline/publish_bytes"] for r in rows] == [r["pipeline/publish_bytes"] for r in ref_rows]
    _trained_alike(rows, ref_rows, two[0], ref)


# A role split (--mesh.rollout-placement first): 4 processes x 1 device, processes 0 and 1 sample (the envs, the
# engine; 2 episodes each per process of the run: 4 each), processes 2 and 3 train (their share of the 8 episodes,
# and the warm start's teacher games); REINFORCE, off_policy lag 1, a checkpoint after the warm start and every step.
ROLE_SPLIT = {
    "steps": 3,
    "checkpoint_every": 1,
    "keep_checkpoints": 9,
    "algorithm": "reinforce",
    "episodes_per_step": 2,
    "warm_start": {"steps": 1, "episodes_per_step": 2},
    "pipeline": {"mode": "off_policy", "lag": 1},
    "mesh": {"rollout_devices": 2, "rollout_placement": "first"},
    "param_probe": 1,
}
# Issue 53, by hand: JGEM_TEST_ROLE_SPLIT_POLICIES=2 runs the role split's three tests with two trainable policies
# (LoRA adapters on one base; seat a of test:secrets policy 0's, seat b policy 1's, so every publication moves both
# adapters and the frozen base once; REINFORCE, since the untrained seats' returns are equal within a group):
#   JGEM_TEST_ROLE_SPLIT_POLICIES=2 .venv/bin/python -m pytest -n 1 tests/test_train.py -k role_split
# Not in the default suite: its programs' cold compiles in four processes cost ~45 s of the suite's 12 minutes.
TWO_POLICIES = os.environ.get("JGEM_TEST_ROLE_SPLIT_POLICIES") == "2"
if TWO_POLICIES:
    ROLE_SPLIT |= {
        "group_size": 2,
        "warm_start": {"steps": 1, "episodes_per_step": 2, "teacher": "echo"},
        "env": {"env_id": "test:secrets", "num_envs": 2, "imports": ["tests.rollout.envs"]},
        "model": {"lora": {"rank": 4, "alpha": 8.0, "adapters": 2}},
        "rollout": {"workflow": "agents", "policies": ["a", "b"], "eval_opponent": "echo"},
        "learner": {"lr": 1e-2},
    }


@pytest.fixture(scope="module")
def role_run(tmp_path_factory) -> tuple[Path, list[dict]]:
    run_dir = tmp_path_factory.mktemp("role-split") / "run"
    return run_dir, _summaries(_two_processes({**ROLE_SPLIT, "run_dir": str(run_dir)}, processes=4))


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.xdist_group("role-split")
def test_a_role_split_samples_on_some_processes_and_trains_on_others_like_one_process(role_run, role_reference):
    """Issue 33: whole processes a side. The samplers' episodes reach the learners through the coordinator's
    key-value store, the learners' metrics come back the same way, the weights move device to device; the learners
    alone save checkpoints (orbax over their processes). Against 1 process x 4 devices split 2 + 2 with the global
    batch: the same losses, the same params (every process's copy: the samplers' is their last publication)."""
    run_dir, runs = role_run
    ref_dir, ref = role_reference
    assert len({s["params_sha256"] for s in runs}) == 1
    assert len({s["param_copy_sha256"] for s in runs}) == 1, "the samplers' copy (every adapter) is the learners'"
    rows = [r for r in read_jsonl(run_dir / "metrics.jsonl") if "train/loss" in r]
    ref_rows = [r for r in read_jsonl(ref_dir / "metrics.jsonl") if "train/loss" in r]
    if TWO_POLICIES:  # both policies trained in every RL step
        rl = [r for r in rows if r["step"] > 0]
        assert all(r[f"policy{p}/tokens"] > 0 and r[f"policy{p}/grad_norm"] > 0 for r in rl for p in (0, 1))
    assert [r["step"] for r in rows] == [1, 2, 3] and all(r["pipeline/publish_bytes"] > 0 for r in rows)
    assert [r["pipeline/staleness_max"] for r in rows] == [0, 1, 1]
    assert all(abs(r["train/loss"]) > 0 for r in rows), "a test of equal updates needs updates"
    _trained_alike(rows, ref_rows, runs[0], ref)
    assert sorted(int(c.name) for c in (run_dir / "checkpoints").iterdir() if c.name.isdigit()) == [0, 1, 2, 3]
    # every process's end note names the run's last checkpoint (samplers, which save none, hear it from a learner)
    assert [s["last_checkpoint"] for s in runs] == [3] * len(runs) == [3] * 4
    assert sorted(p.name for p in (run_dir / "pipeline").iterdir())[-2:] == [
        "step-3.process-0.pkl",
        "step-3.process-1.pkl",
    ], "each sampler's episodes played ahead, beside the learners' checkpoint"


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.xdist_group("role-split")
def test_a_learner_killed_in_a_role_split_stops_every_process_and_the_run_resumes_exactly(tmp_path, role_run):
    """A learner process SIGKILLed after a checkpoint: the samplers (waiting for its messages or its publication)
    and the other learner stop through the coordinator's heartbeat (5 s here) instead of waiting forever; the four
    processes restarted resume from the last checkpoint and end bit-identical to the straight run."""
    _, straight = role_run
    run_b = tmp_path / "b"
    args = {**ROLE_SPLIT, "run_dir": str(run_b)}
    procs = _two_processes(args, heartbeat=5, processes=4)
    target = random.randint(0, 2)
    try:
        _wait_for_checkpoint(procs, run_b / "checkpoints", target, timeout=600)
        procs[2].send_signal(signal.SIGKILL)
        logs = [p.communicate(timeout=300)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert procs[2].returncode == -signal.SIGKILL
    assert all(p.returncode != 0 for p in procs), "a process went on alone"
    assert not (run_b / "summary.json").exists(), logs[0][-3000:]
    resumed = _summaries(_two_processes(args, processes=4))
    assert {s["params_sha256"] for s in resumed} == {straight[0]["params_sha256"]}
    rows = [r for r in read_jsonl(run_b / "metrics.jsonl") if "train/loss" in r]
    assert [r["step"] for r in rows] == [1, 2, 3]


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.xdist_group("role-split")
def test_an_error_on_one_side_of_a_role_split_stops_every_process_naming_it(tmp_path):
    """A learner process raises in its second update (the first is the warm start's): it posts its error and
    exits at once (`exit_at_once_on_error`, as experiments/train.py runs). The samplers, waiting for that update's
    metrics, raise the error naming the process; the other learner, blocked in the update's collective with it,
    is stopped by the coordinator's heartbeat (5 s here). Without either, every process waited for messages that
    would not come, then minutes in jax's shutdown barrier."""
    args = {**ROLE_SPLIT, "run_dir": str(tmp_path / "run"), "fail_in_learn": [3, 2]}
    procs = _two_processes(args, heartbeat=5, processes=4)
    t = time.time()
    logs = []
    try:
        logs = [p.communicate(timeout=240)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert all(p.returncode != 0 for p in procs) and time.time() - t < 120
    assert "injected failure in learn call 2" in logs[3]
    for i in (0, 1):
        assert "the run stopped because process 3 failed: RuntimeError: injected failure" in logs[i], logs[i][-2000:]


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.xdist_group("two-process-split")
def test_a_process_killed_mid_publication_stops_the_run_and_it_resumes_exactly(tmp_path, split_run):
    """2 processes on split meshes: process 1 dies (SIGKILL) with a publication's permute in flight, after the
    checkpoints of steps 1 and 2. Process 0 stops too: jax's coordinator stops it once the dead process misses its
    heartbeats (5 s here), or earlier jgem's error naming what failed (the publication, or the processes'
    agreement of the engine's next round) where the transport reports the lost peer, and it then ends at once
    (`exit_at_once_on_error`); a resume of both ends bit-identical to the uninterrupted run."""
    args = SPLIT
    _, straight = split_run
    run_b = str(tmp_path / "b")
    # one publication at the start (the params; this model has no frozen rest), then one per update: the 4th is
    # step 3's, after the checkpoints of steps 1 and 2
    killed = _two_processes({**args, "run_dir": run_b, "kill_in_publication": [1, 4]}, devices=2, heartbeat=5)
    logs = []
    for p in killed:
        logs.append(p.communicate(timeout=300)[0])
    assert killed[1].returncode == -signal.SIGKILL and "KILLING process 1 in publication 4" in logs[1]
    assert killed[0].returncode != 0, "the surviving process went on alone"
    # jgem's one line (jgem.sharding.mesh.exit_at_once_on_error), the details in the process's log
    assert "process 1 died; rerun the same command to resume" in logs[0].splitlines()[-1], logs[0][-3000:]
    assert not (tmp_path / "b" / "summary.json").exists()
    resumed = _summaries(_two_processes({**args, "run_dir": run_b}, devices=2))
    assert resumed[0]["params_sha256"] == straight[0]["params_sha256"]
    rows = [r for r in read_jsonl(tmp_path / "b" / "metrics.jsonl") if "train/loss" in r]
    assert [r["step"] for r in rows] == [1, 2, 3]


def test_evaluation_plays_to_the_env_limit_whatever_the_curriculum(tmp_path, monkeypatch):
    """Issue 20 bug 9: eval at the env's own turn limit (or eval_max_turns), training at the curriculum's."""
    from jgem.config import CurriculumConfig

    cfg = small_config(str(tmp_path), curriculum=CurriculumConfig(horizons=(1, 2), stage_steps=1))
    tr = Trainer(cfg)
    try:
        seen = []
        monkeypatch.setattr(tr.engine, "collect", lambda *a, max_turns, **k: seen.append(max_turns) or [])
        tr.collect(0), tr.collect(0, eval=True), tr.collect(5), tr.collect(5, eval=True)
        assert seen == [1, 4, 2, 4]
        assert tr.env_max_turns == 4  # GuessTheNumber-v0-easy
        ev = tr.evaluate(0)
        assert ev["eval/max_turns"] == 4 and ev["eval/train_max_turns"] == 1
        tr.cfg = dataclasses.replace(cfg, eval_max_turns=3)
        tr.collect(0, eval=True)
        assert seen[-1] == 3
    finally:
        tr.pool.close()


@pytest.mark.xdist_group("warm-started-run")
def test_logs_warm_start_at_its_own_steps_and_the_env_turn_limit(warm_started_run):
    """Issue 20 bug 11: each warm-start step has a step of its own (1 - W .. 0, the initial eval at -W), no
    curriculum logs the env's limit as rollout/max_turns (4, not 1000), and curves.png plots the warm start."""
    cfg, _, _, _, plotted = warm_started_run
    run_dir = Path(cfg.run_dir)
    rows = read_jsonl(run_dir / "metrics.jsonl")
    warm = [r for r in rows if "warm/loss" in r]
    assert [r["step"] for r in warm] == [-2, -1, 0] and [r["warm/step"] for r in warm] == [1, 2, 3]
    evals = [r["step"] for r in rows if "eval/success_rate" in r]
    assert evals == [-3, 0, 1]  # random init, after the warm start, after RL step 1
    (rl,) = [r for r in rows if "rollout/max_turns" in r]
    assert rl["rollout/max_turns"] == 4 and rl["eval/max_turns"] == 4
    assert "warm/loss" in plotted[0] and (run_dir / "curves.png").stat().st_size > 0
