"""Meshes, logical rules, param/batch placement and their error messages."""

import jax
import numpy as np
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P

from jgem.sharding import mesh as mesh_lib
from jgem.sharding.config import MeshConfig
from jgem.sharding.mesh import make_mesh
from jgem.sharding.rules import DEFAULT_RULES, batch_sharding, logical_to_spec, shard_batch, shard_tree
from tests.algos.helpers import MODEL_CFG, make_batch, tiny_model


def test_mesh_config_resolution_and_errors():
    assert MeshConfig(data=-1, tensor=2).resolve(8) == (4, 1, 2)
    assert MeshConfig(fsdp=-1).resolve(8) == (1, 8, 1)
    m = make_mesh(MeshConfig(data=2, fsdp=2, tensor=2))
    assert dict(m.shape) == {"data": 2, "fsdp": 2, "tensor": 2}
    with pytest.raises(ValueError, match="needs 6 devices but 8 are available; make data\\*fsdp\\*tensor = 8"):
        MeshConfig(data=3, tensor=2).resolve(8)
    with pytest.raises(ValueError, match="not divisible by the fixed axes' product 3"):
        MeshConfig(data=-1, tensor=3).resolve(8)
    with pytest.raises(ValueError, match="only one mesh axis may be -1"):
        MeshConfig(data=-1, fsdp=-1).resolve(8)
    with pytest.raises(ValueError, match="mesh axis tensor has size 0"):
        MeshConfig(tensor=0).resolve(8)


def test_logical_rules():
    assert logical_to_spec(("embed", "mlp")) == P("fsdp", "tensor")
    assert logical_to_spec(("vocab", "embed")) == P("tensor", "fsdp")
    assert logical_to_spec(("embed", "heads", "head_dim")) == P("fsdp", "tensor", None)
    assert logical_to_spec(("batch", None)) == P(("data", "fsdp"), None)
    # an axis is never used twice in one spec
    assert logical_to_spec(("mlp", "heads"), DEFAULT_RULES) == P("tensor", None)
    with pytest.raises(ValueError, match="logical axis 'experts' has no sharding rule"):
        logical_to_spec(("experts",))


def _bytes_on(tree, device):
    return sum(s.data.nbytes for x in jax.tree.leaves(tree) for s in x.addressable_shards if s.device == device)


def test_fsdp8_stores_an_eighth_of_the_params_per_device():
    params = nnx.state(tiny_model(), nnx.Param)
    total = sum(x.nbytes for x in jax.tree.leaves(params))
    sharded = shard_tree(params, make_mesh(MeshConfig(fsdp=8)))
    per_device = [_bytes_on(sharded, d) for d in jax.devices()]
    assert max(per_device) == min(per_device)
    # everything with an embed axis is split 8 ways; only the tiny q/k norm scales (head_dim) are replicated
    assert total / 8 <= per_device[0] < 1.02 * total / 8, (per_device[0], total)
    kernel = sharded["layers"][0]["mlp"]["gate"]
    assert kernel.get_value().sharding.spec == P("fsdp")  # canonical: tensor (size 1) splits nothing
    shard_shape = kernel.get_value().addressable_shards[0].data.shape
    assert shard_shape == (MODEL_CFG.hidden_size // 8, MODEL_CFG.intermediate_size)


def test_undividable_shapes_name_the_axis_and_a_valid_size():
    params = nnx.state(tiny_model(), nnx.Param)  # 2 kv heads
    with pytest.raises(
        ValueError,
        match=r"\('embed', 'kv_heads', 'head_dim'\): dim 1 of size 2 is not divisible "
        r"by mesh axis tensor of size 4; use a mesh where tensor has size 2",
    ):
        shard_tree(params, make_mesh(MeshConfig(data=2, tensor=4)))
    batch = make_batch()
    with pytest.raises(
        ValueError,
        match="batch_size 12 is not divisible by 8 devices on mesh axes \\(data, fsdp\\) "
        "= \\(4, 2\\); use a multiple of 8",
    ):
        shard_batch(jax.tree.map(lambda x: x[:12], batch), make_mesh(MeshConfig(data=4, fsdp=2)))


def test_batch_is_sharded_over_data_and_fsdp():
    mesh = make_mesh(MeshConfig(data=2, fsdp=2, tensor=2))
    b = shard_batch(make_batch(), mesh)
    assert b.tokens.sharding == batch_sharding(mesh)
    shapes = {s.data.shape for s in b.tokens.addressable_shards}
    assert shapes == {(4, b.tokens.shape[1])}  # 16 rows / 4 batch shards, replicated over tensor


def test_initialize_is_a_noop_without_settings_and_checks_arguments(monkeypatch):
    for k in (
        "JGEM_COORDINATOR",
        "JGEM_NUM_PROCESSES",
        "JGEM_PROCESS_ID",
        "TPU_WORKER_HOSTNAMES",
        "TPU_ACCELERATOR_TYPE",
        "CLOUD_TPU_TASK_ID",
    ):
        monkeypatch.delenv(k, raising=False)
    assert mesh_lib.initialize() is False
    monkeypatch.setenv("JGEM_COORDINATOR", "localhost:1234")
    with pytest.raises(ValueError, match="needs coordinator_address, num_processes and process_id together"):
        mesh_lib.initialize()
    with pytest.raises(ValueError, match="process_id 2 is outside \\[0, 2\\)"):
        mesh_lib.initialize(num_processes=2, process_id=2)
    assert np.prod(list(make_mesh().shape.values())) == len(jax.devices())
