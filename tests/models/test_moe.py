"""Qwen3-MoE (jgem.models.moe): logits, routing and the load-balancing loss against transformers'
Qwen3MoeForCausalLM on the same random weights (float32), HF checkpoints in and out, routing replay, the KV cache,
and the scanned forward."""

import functools
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jgem.models.config import ModelConfig
from jgem.models.hf import (
    _jgem_to_hf_key,
    _match,
    load_pretrained,
    read_safetensors,
    save_pretrained,
    write_safetensors,
)
from jgem.models.kvcache import init_slots
from jgem.models.transformer import Transformer
from tests.models.helpers import VOCAB, save_hf, tiny_cfg, torch_model

pytestmark = pytest.mark.parity

MOE = dict(moe_intermediate_size=16)
# Sparse and dense layers both ways, and both gate normalisations: layer 0 dense, 1 sparse (every 2nd layer), k 3
# of 4 experts, the top-k probabilities as gates; layers 0 and 2 sparse, 1 dense (mlp_only_layers), k 2 of 6,
# renormalised gates.
CONFIGS = {
    "step2-raw": dict(num_hidden_layers=2, decoder_sparse_step=2, num_experts=4, num_experts_per_tok=3),
    "mlp_only-norm": dict(num_hidden_layers=3, mlp_only_layers=[1], num_experts=6, num_experts_per_tok=2),
}
CONFIGS["mlp_only-norm"]["norm_topk_prob"] = True
T = 40
TOKS = np.random.RandomState(0).randint(0, VOCAB, (2, T)).astype(np.int32)
POS = np.broadcast_to(np.arange(T, dtype=np.int32), (2, T))
MASK = np.ones((2, T), np.int32)
MASK[1, 29:] = 0  # row 1 right-padded: HF's attention_mask, jgem's segment_ids


@nnx.jit
def routed(model, tokens, positions, segment_ids=None, cache=None):
    return model.routed(tokens, positions, segment_ids=segment_ids, cache=cache)


@nnx.jit
def replayed(model, tokens, positions, expert_ids):
    return model.routed(tokens, positions, expert_ids=expert_ids)


def _params(model) -> dict[str, np.ndarray]:
    return {".".join(map(str, p)): np.asarray(v[...]) for p, v in nnx.to_flat_state(nnx.state(model, nnx.Param))}


# ---------------------------------------------------------------------- against transformers


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def pair(request, tmp_path_factory):
    pytest.importorskip("torch")
    kw = {**MOE, **CONFIGS[request.param]}
    tm = torch_model("qwen3_moe", seed=len(request.param), **kw)
    path = save_hf(tm, str(tmp_path_factory.mktemp(request.param)))
    model, cfg = load_pretrained(path)
    return request.param, tm, path, model, cfg


def _hf_forward(tm, mask=MASK):
    import torch

    with torch.no_grad():
        return tm(
            torch.tensor(TOKS, dtype=torch.long),
            attention_mask=torch.tensor(mask, dtype=torch.long),
            output_router_logits=True,
        )


@pytest.mark.parity
def test_logits_routing_and_aux_loss_match_transformers(pair):
    import torch

    name, tm, _, model, cfg = pair
    assert cfg.family == "qwen3_moe" and cfg.sparse_layers == {"step2-raw": (1,), "mlp_only-norm": (0, 2)}[name]
    ref = _hf_forward(tm)
    logits, _, routing = routed(model, TOKS, POS, MASK)
    valid = MASK.astype(bool)
    # float32 on both sides: the same ops in a different order (XLA's and torch's matmul blocking, the k experts'
    # outputs summed in rank order here and in expert order by HF's index_add) differ by a few ulps per op, ~1e-6
    # relative on logits of std ~1 after a few layers; 1e-4 (the dense parity tests' bound) leaves room for that
    # and none for a wrong expert: a flipped route or a misplaced expert weight moves logits by O(0.1-1)
    err = float(np.max(np.abs(np.asarray(logits)[valid] - ref.logits.numpy()[valid])))
    assert err < 1e-4, f"{name}: max abs diff {err}"
    assert float(np.std(ref.logits.numpy())) > 0.5  # the weights are not near-zero: a wrong mapping would show
    # each sparse layer ran the experts HF's router picked, in its order
    assert routing.expert_ids.shape == (len(cfg.sparse_layers), 2, T, cfg.num_experts_per_tok)
    for ids, hf_logits in zip(np.asarray(routing.expert_ids), ref.router_logits, strict=True):
        hf_ids = torch.topk(torch.softmax(hf_logits, -1), cfg.num_experts_per_tok, dim=-1).indices.numpy()
        np.testing.assert_array_equal(
            ids.reshape(-1, cfg.num_experts_per_tok)[valid.reshape(-1)], hf_ids[valid.ravel()]
        )
    # the load-balancing loss over the sparse layers, padding left out as HF's attention mask leaves it out (float32
    # sums of a few hundred terms in another order: 1e-5 relative); the padding does move it
    aux = float(routing.aux_loss())
    assert aux == pytest.approx(float(ref.aux_loss), rel=1e-5), name
    assert float(_hf_forward(tm, np.ones_like(MASK)).aux_loss) != pytest.approx(aux, rel=1e-3)
    assert 1.0 <= aux < cfg.num_experts  # 1 when perfectly balanced, E when every token picks the same k


@pytest.mark.parity
def test_save_round_trip_is_exact(pair, tmp_path):
    """load -> save -> load gives the same params bit for bit; the save holds exactly the tensors transformers saved
    (per-expert names, no missing or unexpected key), which transformers loads back to the same logits; the fused
    in-memory layout (`experts.gate_up_proj`) loads too."""
    import torch
    from transformers import AutoModelForCausalLM

    name, tm, path, model, cfg = pair
    save_pretrained(model, cfg, tmp_path / "ours")
    again, cfg2 = load_pretrained(tmp_path / "ours")
    assert cfg2 == cfg
    a, b = _params(model), _params(again)
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    theirs, ours = (read_safetensors(os.path.join(p, "model.safetensors")) for p in (path, tmp_path / "ours"))
    assert sorted(theirs) == sorted(ours) and all(np.array_equal(theirs[k], ours[k]) for k in theirs)
    back, info = AutoModelForCausalLM.from_pretrained(tmp_path / "ours", output_loading_info=True)
    assert not any(info.values()), info  # no missing, unexpected or mis-shaped key
    assert type(back).__name__ == "Qwen3MoeForCausalLM" and back.config.num_experts == cfg.num_experts
    with torch.no_grad():
        t = torch.tensor(TOKS, dtype=torch.long)
        np.testing.assert_array_equal(back.eval()(t).logits.numpy(), tm(t).logits.numpy())
    # transformers' in-memory state dict: experts fused [E, 2F, D] and [E, D, F]
    fused = tmp_path / "fused"
    fused.mkdir()
    state = {k: v.numpy() for k, v in tm.state_dict().items()}
    assert any(k.endswith("mlp.experts.gate_up_proj") for k in state)
    write_safetensors(str(fused / "model.safetensors"), state)
    (fused / "config.json").write_text(json.dumps(cfg.to_hf_dict()))
    c = _params(load_pretrained(fused)[0])
    assert c.keys() == a.keys() and all(np.array_equal(a[k], c[k]) for k in a)


# ---------------------------------------------------------------------- jgem alone (no torch)


def moe_cfg(**kw) -> ModelConfig:
    base = dict(num_layers=3, num_experts=6, num_experts_per_tok=2, mlp_only_layers=(1,), norm_topk_prob=True)
    return tiny_cfg("qwen3_moe", **MOE, **{**base, **kw})


@functools.cache
def _model(**kw) -> Transformer:
    """A random MoE model with weights large enough (std 0.25, as `torch_model`'s) that routes are far from tied
    and a changed route shows in the logits."""
    model = Transformer(moe_cfg(**kw), rngs=nnx.Rngs(0))
    state = nnx.state(model, nnx.Param)
    nnx.update(model, jax.tree.map(lambda x: x if x.ndim == 1 else 12.5 * x, state))  # std 0.02 -> 0.25; norms 1
    return model


def _toks(t=10):
    return jnp.asarray(TOKS[:, :t]), jnp.asarray(POS[:, :t])


def test_replayed_experts_reproduce_the_routers_choice():
    model = _model()
    e, k = model.cfg.num_experts, model.cfg.num_experts_per_tok
    toks, pos = _toks()
    logits, _, routing = routed(model, toks, pos)
    assert routing.expert_ids.shape == (2, 2, 10, k) and routing.expert_ids.dtype == jnp.int32
    same, _, again = replayed(model, toks, pos, routing.expert_ids)
    np.testing.assert_array_equal(same, logits)  # the same experts and gates: bit for bit
    np.testing.assert_array_equal(again.expert_ids, routing.expert_ids)
    # the last sparse layer's experts shifted (still k distinct ones per token): the layers before route as they did
    other = routing.expert_ids.at[-1].set((routing.expert_ids[-1] + 1) % e)
    moved, _, third = replayed(model, toks, pos, other)
    np.testing.assert_array_equal(third.expert_ids, other)
    assert float(jnp.max(jnp.abs(moved - logits))) > 0.1
    # the load-balancing loss counts the router's own top-k from its logits, replayed or not
    assert float(third.aux_loss()) == float(routing.aux_loss()) > 0
    with pytest.raises(ValueError, match=r"expert_ids has shape \(1, 2, 10, 2\)"):
        model.routed(toks, pos, expert_ids=other[:1])


def test_kv_cache_decoding_equals_full_forward():
    """Chunked prefill and one-token steps over a slot cache give the teacher-forced logits and route every token
    to the same experts (what the engine would record for replay)."""
    model = _model()
    toks, pos = _toks()
    full, _, routing = routed(model, toks, pos)
    cache = init_slots(model.cfg, 2, 16)
    outs, ids = [], []
    for a, b in [(0, 4), (4, 5), (5, 6), (6, 10)]:
        out, cache, r = routed(model, toks[:, a:b], pos[:, a:b], cache=cache)
        outs.append(out)
        ids.append(r.expert_ids)
    np.testing.assert_allclose(jnp.concatenate(outs, 1), full, atol=2e-5)
    np.testing.assert_array_equal(jnp.concatenate(ids, 2), routing.expert_ids)


def test_scanned_sparse_layers_equal_the_loop_and_replay():
    """Every layer sparse (as Qwen3-30B-A3B): the scanned forward (the default on GPU and TPU), replaying the loop's
    routes, gives the loop's logits, routes and load-balancing loss (the router's own statistics, stacked over the
    scan)."""
    kw = dict(mlp_only_layers=(), num_layers=2)
    loop, scan = _model(**kw), _model(scan_layers=True, **kw)
    toks, pos = _toks()
    ref, _, r_loop = routed(loop, toks, pos)
    out, _, r_scan = replayed(scan, toks, pos, r_loop.expert_ids)
    np.testing.assert_allclose(out, ref, atol=2e-5)
    np.testing.assert_array_equal(r_scan.expert_ids, r_loop.expert_ids)
    np.testing.assert_allclose(r_scan.counts, r_loop.counts)
    assert float(r_scan.aux_loss()) == pytest.approx(float(r_loop.aux_loss()), rel=1e-6)


def test_config_validation_and_param_count():
    cfg = moe_cfg()
    assert cfg.sparse_layers == (0, 2) and not cfg.is_sparse(1)
    assert moe_cfg(decoder_sparse_step=2, mlp_only_layers=()).sparse_layers == (1,)
    model = nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0)))
    assert sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param))) == cfg.num_params
    assert cfg.num_active_params == cfg.num_params - 2 * (6 - 2) * 3 * 32 * 16
    names = {p: v.get_metadata()["out_sharding"] for p, v in nnx.to_flat_state(nnx.state(model, nnx.Param))}
    assert names[("layers", 0, "mlp", "experts", "down")] == ("expert", "mlp", "embed")
    assert ModelConfig.from_hf(cfg.to_hf_dict()) == cfg
    for name in (".".join(map(str, p)) for p in names):  # the HF name tables map every param both ways
        key, layout = _jgem_to_hf_key(name)
        assert _match(key) == (name, layout)
    hf = cfg.to_hf_dict()
    hf["num_local_experts"] = hf.pop("num_experts")  # as transformers 5 writes it back
    assert ModelConfig.from_hf(hf) == cfg
    for change, field in [
        (dict(num_experts_per_tok=7), "num_experts_per_tok"),
        (dict(num_experts_per_tok=0), "num_experts_per_tok"),
        (dict(moe_intermediate_size=0), "moe_intermediate_size"),
        (dict(decoder_sparse_step=0), "decoder_sparse_step"),
        (dict(mlp_only_layers=(3,)), "mlp_only_layers"),
        (dict(router_aux_loss_coef=-1.0), "router_aux_loss_coef"),
        (dict(num_experts=0), "num_experts"),
        (dict(family="qwen3"), "num_experts"),
    ]:
        with pytest.raises(ValueError, match=field):
            cfg.replace(**change)
