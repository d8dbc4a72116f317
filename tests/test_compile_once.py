"""A train state keeps its layout across steps, so the second step on the same shapes compiles nothing.

The state used to be placed with the rules' specs as written (P('tensor', 'fsdp') on a mesh whose tensor axis is 1)
and came back from the first step in the form jax gives outputs (P(None, 'fsdp'); P() on one device): equal
layouts, different shardings to jit's cache, so the second step compiled the whole update again, and the rollout
engine its programs for the new params (on a pod: the model's largest program compiled twice per run).
"""

from __future__ import annotations

import jax
import pytest
from flax import nnx

from jgem.algos.step import train_step
from jgem.models.config import preset
from jgem.models.hf import load_pretrained, save_pretrained
from jgem.models.transformer import init_model
from jgem.sharding.config import MeshConfig
from jgem.sharding.mesh import make_mesh
from jgem.sharding.rules import canonical_spec, logical_to_spec, shard_tree
from jgem.train.loop import Trainer
from tests.train_utils import small_config


def test_canonical_specs_drop_the_mesh_axes_that_split_nothing():
    mesh = make_mesh(MeshConfig(data=1, fsdp=4, tensor=1), devices=jax.devices()[:4])
    assert logical_to_spec(("vocab", "embed")) == jax.sharding.PartitionSpec("tensor", "fsdp")
    P = jax.sharding.PartitionSpec
    assert canonical_spec(P("tensor", "fsdp"), mesh) == P(None, "fsdp")
    assert canonical_spec(P("fsdp", "tensor", None), mesh) == P("fsdp")
    assert canonical_spec(P(("data", "fsdp"), None), mesh) == P("fsdp")
    assert canonical_spec(P("tensor"), mesh) == P()


MESHES = [dict(data=8, fsdp=1, tensor=1), dict(data=2, fsdp=4, tensor=1)]


@pytest.mark.parametrize("mesh", MESHES, ids=["data8", "fsdp4"])
def test_the_second_step_on_the_same_shapes_compiles_nothing(tmp_path, mesh):
    tr = Trainer(small_config(str(tmp_path), steps=1, mesh=mesh))
    try:
        placed = [x.sharding for x in jax.tree.leaves(tr.state)]
        episodes = tr.collect(0)
        tr.learn(episodes)
        # the step's output state has the shardings the state was placed with (the engine samples from its params)
        assert [x.sharding for x in jax.tree.leaves(tr.state)] == placed
        compiled = train_step._cache_size()
        tr.learn(episodes)  # the same batch shapes
        assert train_step._cache_size() == compiled, "the second step compiled the update again"
    finally:
        tr.close()


def test_a_checkpoint_loads_with_the_shardings_the_trainer_places_its_state_with(tmp_path):
    """A run from a HF checkpoint starts from `load_pretrained`'s arrays: placed as `shard_tree` places the state
    (its own placement kept the trailing unsharded dims, P('fsdp', None, None) against P('fsdp'))."""
    cfg = preset("tiny", num_layers=1, hidden_size=64, intermediate_size=128, num_heads=2, num_kv_heads=1)
    model = init_model(cfg, seed=0)
    save_pretrained(model, cfg, tmp_path)
    mesh = make_mesh(MeshConfig(data=2, fsdp=4, tensor=1))
    loaded, _ = load_pretrained(tmp_path, mesh=mesh)
    got = jax.tree.leaves(nnx.state(loaded, nnx.Param))
    want = jax.tree.leaves(shard_tree(nnx.state(model, nnx.Param), mesh))
    assert len(got) == len(want) and [x.sharding for x in got] == [x.sharding for x in want]
