"""Split meshes (`--mesh.rollout-devices`): the sampler and the learner on disjoint devices of one process, the
learner's weights published device to device (`jgem.sharding.publish`) after each update."""

from __future__ import annotations

import dataclasses
import os

os.environ.setdefault("JAX_NUM_CPU_DEVICES", "8")

import jax
import numpy as np
import pytest
from flax import nnx

from jgem.config import ConfigError
from jgem.models.config import LoraConfig, preset
from jgem.models.transformer import init_model
from jgem.sharding.config import MeshConfig
from jgem.sharding.mesh import make_mesh, split_meshes
from jgem.sharding.publish import Publisher, shard_bytes
from jgem.sharding.rules import tree_shardings
from jgem.train.loop import Trainer
from tests.test_pipeline import _allclose, _metrics, config, run
from tests.test_pipeline import test_after_a_publication_the_sampler_samples_the_new_policy as sampler_samples_new

SPLIT = MeshConfig(data=-1, rollout_devices=4)


def _params(mesh):
    cfg = preset("tiny", num_layers=1, hidden_size=64, intermediate_size=128, num_heads=2, num_kv_heads=2)
    return nnx.split(init_model(cfg, seed=3, mesh=mesh), nnx.Param, ...)[1]


def test_publication_moves_every_shard_device_to_device_into_the_samplers_own_layout():
    devices = jax.devices()
    learner, sampler = split_meshes(MeshConfig(fsdp=-1, rollout_devices=4, rollout_data=2, rollout_tensor=2), devices)
    assert set(learner.devices.flat) == set(devices[4:]) and set(sampler.devices.flat) == set(devices[:4])
    params = _params(learner)
    targets = tree_shardings(params, sampler)
    pub = Publisher(learner, sampler)
    assert pub.collective
    first = pub(params, targets)
    old = jax.tree.map(np.asarray, first)
    params2 = jax.tree.map(lambda x: x * 2, params)
    with jax.transfer_guard("disallow"):  # no host round trip, and no device_put either: one program's collective
        second = pub(params2, targets, into=first)
    for out, src in ((first, params), (second, params2)):
        for x, y, t in zip(jax.tree.leaves(out), jax.tree.leaves(src), jax.tree.leaves(targets), strict=True):
            assert x.sharding == t and x.sharding.device_set == set(sampler.devices.flat)
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    # the version the sampler had stays as it was (an off_policy run still plays it)
    for x, y in zip(jax.tree.leaves(first), jax.tree.leaves(old)):
        np.testing.assert_array_equal(np.asarray(x), y)
    # what moved: every sampler device's shards (tensor-split leaves half, replicated ones whole)
    want = sum(s.data.nbytes for x in jax.tree.leaves(second) for s in x.addressable_shards)
    assert pub.bytes == want and 0 < pub.max_device_bytes < want
    # the program is a collective permute, nothing through the host
    leaves = jax.tree.leaves(params)
    hlo = pub.compiled(
        [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in leaves], [t.spec for t in jax.tree.leaves(targets)]
    ).as_text()
    assert "collective-permute" in hlo
    assert not any(op in hlo for op in ("outfeed", "host-transfer", "custom-call(")), "a host transfer in publication"


def test_unequal_split_in_one_process_publishes_by_device_put():
    learner, sampler = split_meshes(MeshConfig(data=-1, rollout_devices=2))
    assert learner.devices.size == 6
    params = _params(learner)
    pub = Publisher(learner, sampler)
    assert not pub.collective
    out = pub(params, tree_shardings(params, sampler))
    _allclose(out, params)


def test_meshes_that_share_devices_and_bad_splits_are_refused():
    mesh = make_mesh(MeshConfig(data=-1))
    with pytest.raises(ValueError, match="share devices"):
        Publisher(mesh, mesh)
    with pytest.raises(ValueError, match=r"rollout_devices 8 must leave devices to the learner"):
        split_meshes(MeshConfig(data=-1, rollout_devices=8))
    with pytest.raises(ValueError, match=r"the sampler's mesh \(--mesh.rollout-\*\)"):
        split_meshes(MeshConfig(data=-1, rollout_devices=3, rollout_tensor=2))


def test_a_bad_split_is_a_config_error_naming_the_flag(tmp_path):
    for mesh, flag in [
        (MeshConfig(data=-1, rollout_devices=9), "rollout_devices 9"),
        (MeshConfig(data=-1, rollout_devices=2, rollout_tensor=4), "--mesh.rollout-"),
        (
            MeshConfig(data=3, rollout_devices=4),
            "learner's mesh \\(the 4 devices (--)?mesh.rollout[-_]devices leaves\\): .* needs 3 devices",
        ),
    ]:
        with pytest.raises(ConfigError, match=flag):
            Trainer(config(tmp_path, "a", mesh=mesh))


@pytest.mark.slow
def test_a_split_sync_run_samples_what_one_mesh_samples_and_trains_alike(tmp_path):
    one, s1 = run(config(tmp_path, "one"))
    split, s2 = run(config(tmp_path, "split", mesh=SPLIT))
    assert split.publisher is not None and split.engine.slots.mesh is split.rollout_mesh
    assert split.trained == one.trained  # the same tokens: a row's sampling does not depend on the mesh
    _allclose(split.state.params, one.state.params)  # the learner's reductions over 4 devices, not 8
    lines = [x for x in _metrics(tmp_path / "split") if "pipeline/publish_bytes" in x]
    assert len(lines) == 4 and all(x["pipeline/publish_bytes"] > 0 and x["pipeline/publish_s"] > 0 for x in lines)


@pytest.mark.slow
def test_a_split_off_policy_run_trains_on_the_episodes_of_one_mesh(tmp_path):
    """off_policy lag 2 on split meshes: the steps ahead play on the sampler's devices while the learner's train,
    and every step trains on exactly the episodes the one-mesh run trains on (version max(0, s - 2))."""
    env = {"env_id": "test:talk", "num_envs": 8}
    one, _ = run(config(tmp_path, "one", "off_policy", 2, env=env))
    split, _ = run(config(tmp_path, "split", "off_policy", 2, env=env, mesh=SPLIT))
    assert split.trained == one.trained
    _allclose(split.state.params, one.state.params)
    during = [x["pipeline/tokens_during_update"] for x in _metrics(tmp_path / "split") if "train/loss" in x]
    assert len(during) == 4 and sum(during) > 0, during  # the steps ahead sampled while the learner's devices updated


@pytest.mark.slow
@pytest.mark.parametrize("lora", [False, True])
def test_after_a_publication_the_split_sampler_samples_the_new_policy(tmp_path, monkeypatch, lora):
    """The pipeline test of the sampler's log-probs (each token's under its version's params), with the sampler
    on its own devices: the publication delivered each version (with LoRA, the adapters: only they move)."""
    real = config

    def split_config(*args, **kw):
        cfg = real(*args, **kw)
        return dataclasses.replace(cfg, mesh=SPLIT)

    monkeypatch.setattr("tests.test_pipeline.config", split_config)
    sampler_samples_new(tmp_path, lora)


def test_with_lora_only_the_adapters_move_after_an_update(tmp_path):
    cfg = config(tmp_path, "a", steps=1, mesh=SPLIT, model={"lora": LoraConfig(rank=4, alpha=8.0)})
    tr = Trainer(cfg)
    try:
        full = shard_bytes(tr.sampler_model_state)[0]  # the frozen base, published once at the start
        base = jax.tree.leaves(tr.sampler_model_state)
        tr.train_step(0)
        adapters = sum(s.data.nbytes for x in jax.tree.leaves(tr.sampler_params) for s in x.addressable_shards)
        assert tr.publisher.bytes == adapters < full / 10
        assert all(a is b for a, b in zip(base, jax.tree.leaves(tr.sampler_model_state)))  # the base stayed put
    finally:
        tr.close()


@pytest.mark.multiprocess
def test_across_two_processes_the_samplers_log_probs_after_a_publication_are_the_learners(tmp_path):
    """Process 0's 2 devices sample, process 1's train: the publication is one program over the 4 devices of both
    processes (plain multi-controller JAX, gloo here), under a guard against any host or device_put transfer; the
    sampler's copy then scores tokens as the learner's params do."""
    from tests.multiprocess import run_workers

    outs = [tmp_path / f"p{i}.json" for i in range(2)]
    sampler, learner = run_workers("tests.publish_worker", outs, devices=2, timeout=300)
    assert sampler["collective"] and sampler["bytes"] == learner["bytes"] > 0
    assert sampler["sampler_devices"] == [0] and "learner" not in sampler and "sampler" not in learner
    np.testing.assert_allclose(sampler["sampler"], learner["learner"], atol=1e-5)
    assert np.abs(np.asarray(learner["learner"])).max() > 0


class _SamplerProbe(Trainer):
    """Records, at the start of every step, whether the sampler's params are the learner's, bit for bit."""

    def __init__(self, cfg) -> None:
        super().__init__(cfg)
        self.in_sync: list[bool] = []

    def train_step(self, step):
        same = all(
            np.array_equal(np.asarray(a), np.asarray(b))
            for a, b in zip(jax.tree.leaves(self.sampler_params), jax.tree.leaves(self.state.params), strict=True)
        )
        self.in_sync.append(same)
        return super().train_step(step)


@pytest.mark.slow
def test_a_resumed_split_run_samples_with_the_restored_params(tmp_path):
    """After a restore the learner's params are the checkpoint's, and the sampler must get them before it samples
    (its copy is no part of a checkpoint): the resumed step samples as the uninterrupted run does."""
    straight = _SamplerProbe(config(tmp_path, "a", steps=3, mesh=SPLIT))
    sa = straight.run()
    Trainer(config(tmp_path, "b", steps=2, mesh=SPLIT)).run()
    resumed = _SamplerProbe(config(tmp_path, "b", steps=3, mesh=SPLIT))
    sb = resumed.run()
    assert straight.in_sync == [True] * 3 and resumed.in_sync == [True]
    assert sb["params_sha256"] == sa["params_sha256"]


class _FakeMesh:
    """A mesh's devices as their process indices: the sides of a pod's split without its processes."""

    def __init__(self, processes):
        self.devices = np.array([type("Device", (), {"process_index": p})() for p in processes], dtype=object)


def test_roles_deal_each_side_its_share_and_refuse_processes_on_both_sides_and_one(monkeypatch):
    """A role split (`jgem.train.roles`): whole processes a side, 4 episodes a step per process of the run. The
    samplers (processes 0-1) play the step's 16, 8 each; the learners (2-3) train 8 each, process 3 the second 8.
    Processes on both sides and on one only (a split that is not whole hosts) are refused with the flag to change."""
    from jgem.train.roles import Roles

    monkeypatch.setattr(jax, "process_index", lambda: 3)
    monkeypatch.setattr(jax, "process_count", lambda: 4)
    roles = Roles(_FakeMesh([2, 2, 3, 3]), _FakeMesh([0, 0, 1, 1]))
    assert roles.split and roles.learns and not roles.samples and roles.lead == 2
    assert roles.share(4, side="learner") == (8, 8)
    monkeypatch.setattr(jax, "process_index", lambda: 0)  # the first sampler plays the first 8
    assert Roles(_FakeMesh([2, 2, 3, 3]), _FakeMesh([0, 0, 1, 1])).share(4, side="sampler") == (0, 8)
    monkeypatch.setattr(jax, "process_index", lambda: 3)
    with pytest.raises(ValueError, match="4 items a step .* do not divide over the 3 learner processes"):
        Roles(_FakeMesh([1, 2, 3]), _FakeMesh([0])).share(1, side="learner")
    both = Roles(_FakeMesh([0, 1, 2, 3]), _FakeMesh([0, 1, 2, 3]))  # per_process: everyone both, nothing sent
    assert not both.split and both.learns and both.samples and both.share(4, side="sampler") == (12, 4)
    with pytest.raises(ValueError, match="rollout-devices as a multiple of the devices per process"):
        Roles(_FakeMesh([1, 2, 3]), _FakeMesh([0, 1]))
    one_learner = Roles(_FakeMesh([3, 3]), _FakeMesh([0, 1, 2]))  # trains (bench/async.py --roles), but
    with pytest.raises(ValueError, match="one learner process .* cannot checkpoint"):  # orbax's limit
        one_learner.check_checkpoints()  # a run that checkpoints (Trainer.run) is refused before it starts
    roles.check_checkpoints()  # two learners: fine
    from jgem.train.loop import Trainer
    from jgem.train.transport import ProcessSplit

    transport = ProcessSplit(one_learner, publish=lambda **_: None)
    run = type("Run", (), {"transport": transport, "cfg": None})()  # fails at the check, before anything else is read
    with pytest.raises(ValueError, match="one learner process .* cannot checkpoint"):
        Trainer._open_outputs(run)  # the first thing Trainer.run does
