import json
import os

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from flax import nnx
from jax.sharding import Mesh

from jgem.models.hf import (
    _jgem_to_hf_key,
    _match,
    load_pretrained,
    read_safetensors,
    save_pretrained,
    write_safetensors,
)
from jgem.models.transformer import Transformer
from tests.models.helpers import VOCAB, save_hf, tiny_cfg, torch_logits, torch_model

TOKS = np.random.RandomState(0).randint(0, VOCAB, (2, 12)).astype(np.int32)
POS = np.broadcast_to(np.arange(12, dtype=np.int32), (2, 12))


@nnx.jit
def fwd(model, tokens, positions):
    return model(tokens, positions)[0]


def _state_np(model):
    return {".".join(map(str, p)): np.asarray(v[...]) for p, v in nnx.to_flat_state(nnx.state(model, nnx.Param))}


def test_name_tables_are_inverse():
    model = nnx.eval_shape(
        lambda: Transformer(tiny_cfg("qwen2", tie_word_embeddings=False), rngs=nnx.Rngs(0), value_head=True)
    )
    names = [".".join(map(str, p)) for p, _ in nnx.to_flat_state(nnx.state(model, nnx.Param))]
    assert len(names) == 3 + 2 + 2 * 12  # embed, head, final norm, value w/b, 12 per qwen2 layer
    for name in names:
        key, layout = _jgem_to_hf_key(name)
        assert _match(key) == (name, layout)


@pytest.mark.parity
@pytest.mark.parametrize("family, tie, shard", [("qwen3", True, None), ("llama", False, 6000)])
def test_save_pretrained_loads_in_transformers(tmp_path, family, tie, shard):
    from transformers import AutoModelForCausalLM

    cfg = tiny_cfg(family, tie_word_embeddings=tie)
    model = Transformer(cfg, rngs=nnx.Rngs(3))
    files = save_pretrained(model, cfg, tmp_path, max_shard_bytes=shard)
    if shard:
        assert "model.safetensors.index.json" in files and len([f for f in files if f.endswith("safetensors")]) > 2
    tm = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert type(tm).__name__.lower().startswith(family)
    np.testing.assert_allclose(torch_logits(tm, TOKS), fwd(model, TOKS, POS), atol=1e-4)
    # and back: identical params
    again, cfg2 = load_pretrained(tmp_path)
    assert cfg2 == cfg
    a, b = _state_np(model), _state_np(again)
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


@pytest.mark.parity
def test_transformers_sharded_checkpoint_loads(tmp_path):
    tm = torch_model("qwen2", seed=4)
    save_hf(tm, str(tmp_path), max_shard_size="20KB")
    shards = [f for f in os.listdir(tmp_path) if f.endswith(".safetensors")]
    assert len(shards) > 1 and (tmp_path / "model.safetensors.index.json").exists()
    model, cfg = load_pretrained(tmp_path)
    assert cfg.family == "qwen2" and cfg.qkv_bias
    np.testing.assert_allclose(fwd(model, TOKS, POS), torch_logits(tm, TOKS), atol=1e-4)


@pytest.mark.parity
def test_bfloat16_checkpoint(tmp_path):
    import torch

    tm = torch_model("qwen3", seed=5).to(torch.bfloat16)
    save_hf(tm, str(tmp_path))
    model, cfg = load_pretrained(tmp_path, param_dtype="bfloat16", dtype="bfloat16")
    w = tm.model.layers[0].mlp.down_proj.weight.detach().float().numpy()
    got = np.asarray(model.layers[0].mlp.down[...])
    assert got.dtype == ml_dtypes.bfloat16 and np.array_equal(got.astype(np.float32), w.T)
    f32, _ = load_pretrained(tmp_path)  # upcast on load by default
    assert f32.embed[...].dtype == jnp.float32


def test_load_errors_list_every_bad_key(tmp_path):
    cfg = tiny_cfg("qwen3")
    save_pretrained(Transformer(cfg, rngs=nnx.Rngs(0)), cfg, tmp_path)
    f = str(tmp_path / "model.safetensors")
    t = {k: np.array(v) for k, v in read_safetensors(f).items()}
    del t["model.layers.1.mlp.up_proj.weight"]
    del t["model.norm.weight"]
    t["model.layers.0.self_attn.q_proj.bias"] = np.zeros(32, np.float32)  # qwen3 has no q bias
    t["model.visual.patch_embed.weight"] = np.zeros(3, np.float32)
    t["model.layers.0.self_attn.k_proj.weight"] = np.zeros((17, 32), np.float32)
    write_safetensors(f, t)
    with pytest.raises(ValueError) as e:
        load_pretrained(tmp_path)
    msg = str(e.value)
    for key in [
        "layers.1.mlp.up",
        "final_norm.scale",
        "model.layers.0.self_attn.q_proj.bias",
        "model.visual.patch_embed.weight",
        "model.layers.0.self_attn.k_proj.weight: checkpoint (17, 32)",
    ]:
        assert key in msg, key
    assert "missing params (2)" in msg and "unexpected checkpoint keys (2)" in msg and "mis-shaped (1)" in msg


def test_unsupported_architecture_is_named(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gemma3", "architectures": ["Gemma3ForCausalLM"]}))
    with pytest.raises(ValueError, match="gemma3"):
        load_pretrained(tmp_path)
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_pretrained(tmp_path / "nope")


def test_load_onto_mesh_places_each_tensor(tmp_path):
    cfg = tiny_cfg("qwen2", tie_word_embeddings=False)
    model = Transformer(cfg, rngs=nnx.Rngs(1))
    save_pretrained(model, cfg, tmp_path)
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(2, 2, 2), ("data", "fsdp", "tensor"))
    sharded, _ = load_pretrained(tmp_path, mesh=mesh, value_head=True)
    q = sharded.layers[0].attn.q[...]  # [D, N, H]: embed -> fsdp, heads -> tensor
    assert q.sharding.spec == jax.sharding.PartitionSpec("fsdp", "tensor")  # canonical: no trailing None
    assert len(q.sharding.device_set) == 8
    assert sharded.lm_head[...].sharding.spec == jax.sharding.PartitionSpec("fsdp", "tensor")
    assert sharded.value_w[...].shape == (32,)
    np.testing.assert_allclose(fwd(sharded, TOKS, POS), fwd(model, TOKS, POS), atol=1e-5)


def test_value_head_round_trip(tmp_path):
    cfg = tiny_cfg("llama")
    model = Transformer(cfg, rngs=nnx.Rngs(2), value_head=True)
    save_pretrained(model, cfg, tmp_path)
    again, _ = load_pretrained(tmp_path, value_head=True)
    np.testing.assert_array_equal(again.value_w[...], model.value_w[...])
    plain, _ = load_pretrained(tmp_path)  # a policy-only load skips the critic head
    assert not plain.has_value_head
    np.testing.assert_array_equal(plain.embed[...], model.embed[...])


def test_load_pretrained_passes_the_model_options_on(tmp_path):
    # what the trainer forwards from --model.* (remat, attention, scan_layers) reaches the loaded model's config
    save_pretrained(Transformer(tiny_cfg(), rngs=nnx.Rngs(0)), tiny_cfg(), str(tmp_path))
    _, cfg = load_pretrained(tmp_path)
    assert (cfg.remat, cfg.attention, cfg.scan_layers) == ("none", "auto", None)
    model, cfg = load_pretrained(tmp_path, remat="full", attention="xla", scan_layers=False)
    assert (cfg.remat, cfg.attention, cfg.scan_layers) == ("full", "xla", False) and model.cfg == cfg
