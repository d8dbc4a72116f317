from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jgem.checkpoint import (
    CheckpointConfig,
    Checkpointer,
    ConfigMismatchError,
    CorruptCheckpointError,
    config_diff,
    config_fingerprint,
    flatten_config,
)
from tests.multiprocess import TEST_XLA_FLAGS


@dataclasses.dataclass(frozen=True)
class ModelCfg:
    num_layers: int = 2
    dims: tuple[int, ...] = (8, 16)


@dataclasses.dataclass(frozen=True)
class RunCfg:
    lr: float = 1e-3
    model: ModelCfg = ModelCfg()
    log_every: int = 10


def make_state(seed: int) -> dict:
    k = jax.random.key(seed)
    return {
        "params": {"w": jax.random.normal(k, (4, 3)), "b": jnp.full((3,), float(seed), jnp.bfloat16)},
        "opt": (jnp.zeros((4, 3)), jnp.array(seed, jnp.int32)),
        "step": jnp.array(seed, jnp.int32),
        "rng": jax.random.fold_in(k, 1),
    }


def assert_tree_equal(a, b):
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(la, lb, strict=True):
        if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        assert x.dtype == y.dtype
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_round_trip_and_host_state(tmp_path):
    host = {"episodes": 12, "warm_start_done": True, "extra": {"a": 7}}
    with Checkpointer(CheckpointConfig(str(tmp_path)), run_config=RunCfg()) as ck:
        assert ck.restore_latest(make_state(0)) is None  # fresh run
        ck.save(3, make_state(3), host)
        host_sent = json.loads(json.dumps(host))
        host["extra"]["a"] = 8  # mutated while the save may still be running
        ck.wait()
        r = ck.restore_latest(make_state(0))
    assert r.step == 3
    assert_tree_equal(r.state, make_state(3))
    assert r.host == {
        "step": 3,
        **host_sent,
        "config": flatten_config(RunCfg()),
        "config_fingerprint": config_fingerprint(RunCfg()),
    }
    with pytest.raises(TypeError, match="JSON"), Checkpointer(CheckpointConfig(str(tmp_path / "x"))) as ck:
        ck.save(0, make_state(0), {"bad": np.zeros(2)})


def test_the_trainer_saves_its_host_state_and_config(tmp_path):
    from jgem.train import Trainer
    from jgem.train.loop import HOST_KEYS
    from tests.train_utils import small_config

    cfg = small_config(str(tmp_path / "run"), steps=1, episodes_per_step=2)
    trainer = Trainer(cfg)
    trainer.run()
    ck = Checkpointer(CheckpointConfig(str(tmp_path / "run" / "checkpoints")))
    assert ck.all_steps() == [1]
    r = ck.restore(1, trainer.state)
    ck.close()
    assert set(r.host) == {*HOST_KEYS, "config", "config_fingerprint"}
    assert {k: r.host[k] for k in HOST_KEYS} == {"step": 1, "episodes": 2, "warm_start_done": True}
    assert r.host == {**trainer.host, "config": flatten_config(cfg), "config_fingerprint": config_fingerprint(cfg)}
    assert_tree_equal(r.state.params, trainer.state.params)


def test_keep_last_k(tmp_path):
    with Checkpointer(CheckpointConfig(str(tmp_path), keep_last=2, async_save=True)) as ck:
        for s in range(6):
            ck.save(s, make_state(s), {})
        ck.wait()
        assert ck.all_steps() == [4, 5]
        assert ck.latest_step() == 5
        assert_tree_equal(ck.restore(4, make_state(0)).state, make_state(4))


def test_keep_best_by_metric(tmp_path):
    cfg = CheckpointConfig(str(tmp_path), keep_last=1, keep_best=1, best_metric="eval/success")
    scores = {0: 0.1, 1: 0.9, 2: 0.3, 3: None, 4: 0.5, 5: float("nan")}
    with Checkpointer(cfg) as ck:
        for s, v in scores.items():
            ck.save(s, make_state(s), {}, metrics=None if v is None else {"eval/success": v, "eval/len": 3.0})
        ck.wait()
        assert ck.all_steps() == [1, 5]  # the best and the latest (a NaN score does not rank)
        assert ck.best_step() == 1
        assert_tree_equal(ck.restore_best(make_state(0)).state, make_state(1))
    cfg_min = dataclasses.replace(cfg, directory=str(tmp_path / "min"), best_mode="min")
    with Checkpointer(cfg_min) as ck:
        for s, v in scores.items():
            ck.save(s, make_state(s), {}, metrics=None if v is None else {"eval/success": v})
        ck.wait()
        assert ck.best_step() == 0 and ck.all_steps() == [0, 5]


def test_sharded_state_restores_onto_target_shardings(tmp_path):
    devices = np.array(jax.devices()[:8]).reshape(4, 2)
    mesh = Mesh(devices, ("data", "tensor"))
    x = jnp.arange(8 * 6, dtype=jnp.float32).reshape(8, 6)
    saved = {"w": jax.device_put(x, NamedSharding(mesh, P("data", "tensor"))), "n": jnp.array(5)}
    with Checkpointer(CheckpointConfig(str(tmp_path))) as ck:
        ck.save(1, saved, {})
        ck.wait()
        # restore with a different layout: replicated over data, sharded over tensor on columns
        target_sharding = NamedSharding(mesh, P(None, "tensor"))
        target = {"w": jax.ShapeDtypeStruct((8, 6), jnp.float32, sharding=target_sharding), "n": jnp.array(0)}
        r = ck.restore_latest(target)
    assert r.state["w"].sharding == target_sharding
    assert len(r.state["w"].addressable_shards) == 8
    np.testing.assert_array_equal(np.asarray(r.state["w"]), np.asarray(x))
    assert int(r.state["n"]) == 5


def test_resume_with_different_config_is_refused(tmp_path):
    with Checkpointer(CheckpointConfig(str(tmp_path)), run_config=RunCfg()) as ck:
        ck.save(1, make_state(1), {})
    changed = RunCfg(lr=3e-4, model=ModelCfg(num_layers=4), log_every=1)
    with (
        Checkpointer(CheckpointConfig(str(tmp_path)), run_config=changed) as ck,
        pytest.raises(ConfigMismatchError) as e,
    ):
        ck.restore_latest(make_state(0))
    msg = str(e.value)
    assert "lr: checkpoint=0.001 now=0.0003" in msg and "model.num_layers: checkpoint=2 now=4" in msg
    assert "log_every" in msg and "model.dims" not in msg
    with Checkpointer(
        CheckpointConfig(str(tmp_path)), run_config=changed, ignore_fields=("lr", "model", "log_every")
    ) as ck:
        assert ck.restore_latest(make_state(0)).step == 1


def test_a_mismatch_carries_the_fields_and_never_an_old_token(tmp_path):
    """ConfigMismatchError lists (field, checkpoint value, value now) for a CLI to turn into flags; the token older
    runs stored (`env.remote_token`, a field that is gone) is neither compared nor shown."""
    saved = {"lr": 1e-3, "model.num_layers": 2, "model.dims": [8, 16], "log_every": 10, "env.remote_token": "s3cret"}
    now = {**flatten_config(RunCfg()), "env.remote_token_file": "/run/secrets/token"}  # the token's source now
    with Checkpointer(CheckpointConfig(str(tmp_path)), run_config=now) as ck:
        ck.check_config({"config": saved}, step=3)  # the old token alone, or where it comes from: no mismatch
        with pytest.raises(ConfigMismatchError) as e:
            ck.check_config({"config": {**saved, "lr": 2e-3}}, step=3)
    assert e.value.fields == [("lr", 2e-3, 1e-3)] and e.value.step == 3 and e.value.directory == str(tmp_path)
    assert "s3cret" not in str(e.value) and "env.remote_token" not in e.value.saved
    assert "lr: checkpoint=0.002 now=0.001" in str(e.value)


def test_config_helpers():
    flat = flatten_config(RunCfg())
    assert flat == {"lr": 1e-3, "model.num_layers": 2, "model.dims": [8, 16], "log_every": 10}
    assert config_fingerprint(RunCfg()) == config_fingerprint(RunCfg())
    assert config_fingerprint(RunCfg()) != config_fingerprint(RunCfg(lr=2e-3))
    assert config_diff({"a": 1, "b": 2}, {"a": 1, "c": 3}) == ["b: checkpoint=2 now='<missing>'",
                                                              "c: checkpoint='<missing>' now=3"]  # fmt: skip
    with pytest.raises(ValueError, match="keep_last"):
        CheckpointConfig("x", keep_last=0)
    with pytest.raises(ValueError, match="best_mode"):
        CheckpointConfig("x", best_mode="up")  # type: ignore[arg-type]


def test_partial_tmp_dir_is_never_latest(tmp_path):
    """A save killed before orbax's commit leaves `<step>.orbax-checkpoint-tmp`; it is not a step."""
    with Checkpointer(CheckpointConfig(str(tmp_path))) as ck:
        ck.save(1, make_state(1), {"k": 1})
    partial = tmp_path / "2.orbax-checkpoint-tmp"  # the name orbax uses while writing step 2
    shutil.copytree(tmp_path / "1", partial)
    (partial / "commit_success.txt").unlink(missing_ok=True)
    with Checkpointer(CheckpointConfig(str(tmp_path))) as ck:
        assert ck.latest_step() == 1 and ck.all_steps() == [1]
        r = ck.restore_latest(make_state(0))
    assert r.step == 1 and r.host["k"] == 1
    assert not partial.exists()  # cleaned up on start


_KILLED_SAVER = textwrap.dedent(
    """
    import os, sys
    os.environ["JAX_PLATFORMS"] = "cpu"
    import jax.numpy as jnp
    from jgem.checkpoint import CheckpointConfig, Checkpointer
    ck = Checkpointer(CheckpointConfig(sys.argv[1]))
    ck.save(1, {"w": jnp.full((1024, 1024), 1.0)}, {"step_note": 1})
    ck.wait()
    ck.save(2, {"w": jnp.full((8, 1024, 1024), 2.0)}, {"step_note": 2})  # 32 MiB, written in the background
    print("saving", flush=True)
    sys.stdin.read()  # the parent kills us mid-write
    """
)


@pytest.mark.slow
def test_process_killed_mid_save_leaves_last_complete_step(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED_SAVER, str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=Path(__file__).resolve().parents[1],
        env={**os.environ, "JAX_NUM_CPU_DEVICES": "1", "XLA_FLAGS": TEST_XLA_FLAGS},
    )
    try:
        assert proc.stdout.readline().strip() == b"saving"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    with Checkpointer(CheckpointConfig(str(tmp_path))) as ck:
        latest = ck.latest_step()
        target = {"w": jnp.zeros((1024, 1024))} if latest == 1 else {"w": jnp.zeros((8, 1024, 1024))}
        r = ck.restore_latest(target)
    # Almost always the kill lands mid-write and step 1 is the latest; if the write won the race, step 2 is
    # complete. Either way the latest step restores intact.
    assert latest in (1, 2) and r.host["step_note"] == latest
    np.testing.assert_array_equal(np.asarray(r.state["w"]), float(latest))


def _corrupt_host(ckpt_dir, step: int) -> None:
    for f in (ckpt_dir / str(step) / "host").rglob("*"):
        if f.is_file():
            f.write_text("{not json")


def test_corrupt_latest_step_falls_back_to_the_newest_good_one(tmp_path):
    d = tmp_path / "ck"
    with Checkpointer(CheckpointConfig(str(d), keep_last=5)) as ck:
        for s in (1, 2, 3):
            ck.save(s, make_state(s), {"n": s})
        ck.wait()
    _corrupt_host(d, 3)
    shutil.rmtree(d / "2" / "state")  # step 2 lost its arrays: also bad
    with Checkpointer(CheckpointConfig(str(d), keep_last=5)) as ck:
        with pytest.warns(RuntimeWarning) as caught:
            r = ck.restore_latest(make_state(0))
        assert r.step == 1 and r.host["n"] == 1
        assert_tree_equal(r.state, make_state(1))
        messages = [str(w.message) for w in caught if "could not be restored" in str(w.message)]
        assert len(messages) == 2 and "step 3" in messages[0] and "step 2" in messages[1]
        assert (tmp_path / "ck.corrupt" / "3" / "host").is_dir()  # kept for inspection
        assert ck.all_steps() == [1]
        ck.save(2, make_state(2), {"n": 2})  # the run goes on and saves over the old step numbers
        ck.save(3, make_state(3), {"n": 3})
        ck.wait()
        assert ck.restore_latest(make_state(0)).step == 3


def test_no_good_checkpoint_is_one_clear_error(tmp_path):
    d = tmp_path / "ck"
    with Checkpointer(CheckpointConfig(str(d))) as ck:
        ck.save(4, make_state(4), {})
        ck.wait()
    _corrupt_host(d, 4)
    with (
        Checkpointer(CheckpointConfig(str(d))) as ck,
        pytest.warns(RuntimeWarning),
        pytest.raises(CorruptCheckpointError, match=r"no checkpoint in .* could be restored: step 4"),
    ):
        ck.restore_latest(make_state(0))
