"""LoRA adapters in the model: an adapted model starts equal to its base, the merge equals the adapted model,
the config refuses what cannot train, the adapters shard like their weights, and a checkpoint load adds them."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jgem.models.config import LORA_TARGETS, LoraConfig, preset
from jgem.models.hf import load_pretrained, save_pretrained
from jgem.models.kvcache import init_slots
from jgem.models.layers import MultiLoRA
from jgem.models.lora import merged, trainable
from jgem.models.transformer import Transformer
from jgem.sharding.config import MeshConfig
from jgem.sharding.mesh import make_mesh
from jgem.sharding.rules import tree_shardings

CFG = preset("tiny", num_layers=2, hidden_size=64, intermediate_size=96, num_heads=4, num_kv_heads=2, head_dim=16)
LORA = CFG.replace(lora=LoraConfig(rank=4, alpha=8.0))
TOKENS = jnp.asarray(np.random.default_rng(0).integers(3, CFG.vocab_size, (2, 24)), jnp.int32)
POSITIONS = jnp.broadcast_to(jnp.arange(24, dtype=jnp.int32), (2, 24))


@nnx.jit
def _logits(model: Transformer, tokens, positions, cache=None):
    return model(tokens, positions, cache=cache)[0]


def _perturbed(model: Transformer, seed: int = 1) -> Transformer:
    """`model` with every adapter moved off its init (B nonzero), as training moves it."""
    state = nnx.state(model, nnx.LoRAParam)
    keys = iter(jax.random.split(jax.random.key(seed), len(jax.tree.leaves(state))))
    nnx.update(model, jax.tree.map(lambda x: x + 0.05 * jax.random.normal(next(keys), x.shape, x.dtype), state))
    return model


def _flat(model: nnx.Module, what) -> dict:
    return {p: np.asarray(v[...]) for p, v in nnx.to_flat_state(nnx.state(model, what))}


def test_an_adapted_model_starts_equal_to_its_base():
    base, adapted = Transformer(CFG, rngs=nnx.Rngs(3)), Transformer(LORA, rngs=nnx.Rngs(3))
    # the adapters draw from their own stream: the base weights are those of the same seed without adapters
    base_w, adapted_w = _flat(base, nnx.Param), _flat(adapted, nnx.Not(nnx.LoRAParam))
    assert base_w.keys() == adapted_w.keys()
    assert all(np.array_equal(base_w[k], adapted_w[k]) for k in base_w)
    adapters = _flat(adapted, nnx.LoRAParam)
    assert len(adapters) == 2 * len(LORA_TARGETS) * CFG.num_layers
    assert sum(a.size for a in adapters.values()) == LORA.num_lora_params
    assert all((a != 0).any() if p[-1] == "lora_a" else not a.any() for p, a in adapters.items())  # B = 0, A random
    # logits, teacher-forced and through a cache, bit-equal the base model's
    np.testing.assert_array_equal(_logits(adapted, TOKENS, POSITIONS), _logits(base, TOKENS, POSITIONS))
    cache = init_slots(CFG, 2, 32)
    np.testing.assert_array_equal(_logits(adapted, TOKENS, POSITIONS, cache), _logits(base, TOKENS, POSITIONS, cache))


@pytest.mark.parametrize("targets", [LORA_TARGETS, ("v", "down")])
def test_the_merged_model_equals_the_adapted_one(targets):
    cfg = CFG.replace(lora=LoraConfig(rank=4, alpha=8.0, targets=targets))
    adapted = _perturbed(Transformer(cfg, rngs=nnx.Rngs(0)))
    base_logits = _logits(Transformer(CFG, rngs=nnx.Rngs(0)), TOKENS, POSITIONS)
    logits = _logits(adapted, TOKENS, POSITIONS)
    assert float(jnp.abs(logits - base_logits).max()) > 1e-2, "the adapters must change the model"
    plain = merged(adapted)
    assert plain.cfg == CFG and not jax.tree.leaves(nnx.state(plain, nnx.LoRAParam))
    np.testing.assert_allclose(_logits(plain, TOKENS, POSITIONS), logits, atol=2e-5, rtol=2e-5)
    # untargeted projections keep their weights
    untouched = {k for k in ("q", "k", "v", "o") if k not in targets}
    for layer_m, layer_a in zip(plain.layers, adapted.layers):
        for k in untouched:
            np.testing.assert_array_equal(getattr(layer_m.attn, k)[...], getattr(layer_a.attn, k)[...])


def test_only_adapters_and_a_value_head_are_trainable():
    critic = Transformer(LORA, rngs=nnx.Rngs(0), value_head=True)
    names = {".".join(map(str, p)) for p, _ in nnx.to_flat_state(nnx.state(critic, trainable(critic)))}
    assert {"value_w", "value_b"} <= names
    assert names - {"value_w", "value_b"} == {n for n in names if n.endswith(("lora_a", "lora_b"))}
    plain = Transformer(CFG, rngs=nnx.Rngs(0))
    assert trainable(plain) is nnx.Param


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"rank": -1}, "lora.rank is -1; it must be an integer >= 0"),
        ({"rank": 4, "alpha": 0.0}, "lora.alpha is 0.0; it must be a finite number > 0"),
        ({"rank": 4, "alpha": float("nan")}, "lora.alpha is nan"),
        ({"rank": 4, "targets": ("q", "mlp")}, r"lora.targets is \('q', 'mlp'\)"),
        ({"rank": 4, "targets": ()}, "one or more of"),
        ({"rank": 4, "targets": ("q", "q")}, "at most once"),
    ],
)
def test_bad_lora_configs_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LoraConfig(**kwargs)


def test_adapters_shard_like_their_weights():
    """On a (fsdp 4, tensor 2) mesh: A takes its weight's input axis, B its output axis, the rank axis is whole."""
    mesh = make_mesh(MeshConfig(data=1, fsdp=4, tensor=2), devices=jax.devices()[:8])
    state = nnx.state(nnx.eval_shape(lambda: Transformer(LORA, rngs=nnx.Rngs(0))))
    attn, mlp = (tree_shardings(state, mesh)["layers"][0][k] for k in ("attn", "mlp"))
    spec = lambda v: tuple(v.get_value().spec)  # canonical: no trailing unsharded dims (`canonical_spec`)
    assert spec(attn["q_lora"]["lora_a"]) == ("fsdp",) and spec(attn["q_lora"]["lora_b"]) == (None, "tensor")
    assert spec(attn["o_lora"]["lora_a"]) == ("tensor",) and spec(attn["o_lora"]["lora_b"]) == (None, "fsdp")
    assert spec(mlp["down_lora"]["lora_a"]) == ("tensor",) and spec(mlp["down_lora"]["lora_b"]) == (None, "fsdp")
    assert spec(attn["q"]) == ("fsdp", "tensor")  # the base weight as before


def test_a_checkpoint_loads_with_fresh_adapters_onto_the_mesh(tmp_path):
    """load_pretrained(lora=...): the base from the checkpoint, the adapters as Transformer(cfg, seed) draws them,
    each on its logical sharding."""
    save_pretrained(Transformer(CFG, rngs=nnx.Rngs(5)), CFG, tmp_path)
    mesh = make_mesh(MeshConfig(data=1, fsdp=4, tensor=2), devices=jax.devices()[:8])
    model, cfg = load_pretrained(tmp_path, mesh=mesh, lora=LORA.lora, seed=7)
    assert cfg.lora == LORA.lora
    want = _flat(Transformer(LORA, rngs=nnx.Rngs(7)), nnx.LoRAParam)
    got = _flat(model, nnx.LoRAParam)
    assert got.keys() == want.keys() and all(np.array_equal(got[k], want[k]) for k in want)
    source = Transformer(CFG, rngs=nnx.Rngs(5))
    base, want = _flat(model, nnx.Not(nnx.LoRAParam)), _flat(source, nnx.Param)
    assert base.keys() == want.keys() and all(np.array_equal(base[k], want[k]) for k in want)
    assert tuple(model.layers[0].attn.q_lora.lora_a.get_value().sharding.spec) == ("fsdp",)
    # sharded over 8 devices, the sums run in another order: equal up to float rounding
    np.testing.assert_allclose(_logits(model, TOKENS, POSITIONS), _logits(source, TOKENS, POSITIONS), atol=1e-5)


# Several policies on one base (LoraConfig.adapters): a MultiLoRA per projection, each row naming its adapter
MULTI = CFG.replace(lora=LoraConfig(rank=4, alpha=8.0, adapters=3))
ROWS = jnp.asarray(np.random.default_rng(1).integers(3, CFG.vocab_size, (6, 24)), jnp.int32)
ROW_POSITIONS = jnp.broadcast_to(jnp.arange(24, dtype=jnp.int32), (6, 24))
MIXED = jnp.asarray([2, 0, 1, 1, 2, 0], jnp.int32)


@nnx.jit
def _policy_logits(model: Transformer, tokens, positions, ids, cache=None):
    return model(tokens, positions, cache=cache, adapter_ids=ids)[0]


@pytest.mark.parametrize("scan", [False, True])
def test_rows_of_mixed_policies_get_exactly_what_a_batch_of_their_own_policy_gets(scan):
    """6 rows on 3 adapters (policies) in one forward, teacher-forced (layers unrolled or scanned) and through a
    cache: each row's logits equal, bit for bit, those of the same batch with every row on that row's adapter; the
    adapters differ (each policy's rows differ from another's)."""
    model = _perturbed(Transformer(MULTI.replace(scan_layers=scan), rngs=nnx.Rngs(3)))
    assert isinstance(model.layers[0].attn.q_lora, MultiLoRA)
    assert model.layers[0].attn.q_lora.lora_a[...].shape == (3, CFG.hidden_size, 4)
    for cache in (None, init_slots(CFG, 6, 32)):
        run = lambda ids, c=cache: np.asarray(_policy_logits(model, ROWS, ROW_POSITIONS, ids, c))
        mixed = run(MIXED)
        alone = {p: run(jnp.full((6,), p, jnp.int32)) for p in range(3)}
        for row, p in enumerate(np.asarray(MIXED)):
            np.testing.assert_array_equal(mixed[row], alone[p][row])
        assert not np.allclose(alone[0], alone[1], atol=1e-4)
    # per-token ids (rows that pack several policies' sequences) that name each row's adapter: the same logits
    per_token = jnp.broadcast_to(MIXED[:, None], ROWS.shape)
    np.testing.assert_array_equal(
        np.asarray(_policy_logits(model, ROWS, ROW_POSITIONS, per_token)),
        np.asarray(_policy_logits(model, ROWS, ROW_POSITIONS, MIXED)),
    )
    with pytest.raises(ValueError, match="has 3 adapters .policies.: pass each row's adapter_ids"):
        model(ROWS, ROW_POSITIONS)


def test_a_policys_adapters_get_gradient_only_from_its_own_rows():
    """The loss on adapter 0's rows only: adapters 1 and 2 get exactly zero gradient, adapter 0 some; the base
    weights and every adapter get it from a loss over all rows."""
    model = _perturbed(Transformer(MULTI, rngs=nnx.Rngs(3)))
    graphdef, adapters, rest = nnx.split(model, nnx.LoRAParam, ...)
    own = (np.asarray(MIXED) == 0)[:, None, None]

    def loss(adapters, rows):
        logits = nnx.merge(graphdef, adapters, rest)(ROWS, ROW_POSITIONS, adapter_ids=MIXED)[0]
        return jnp.sum(jnp.where(rows, jax.nn.log_softmax(logits), 0.0))

    grads = jax.grad(loss)(adapters, own)
    for path, g in nnx.to_flat_state(grads):
        g = np.asarray(g[...])
        assert not g[1:].any(), path  # policies 1 and 2 had no rows in the loss
        assert g[0].any(), path
    every = jax.grad(loss)(adapters, np.ones_like(own))
    assert all(np.asarray(g[...])[p].any() for _, g in nnx.to_flat_state(every) for p in range(3))
    # rows packing two sequences of different policies (per-token ids, segments 1 and 2): the loss on policy 0's
    # tokens moves policy 0 only
    half = ROWS.shape[1] // 2
    ids = jnp.asarray(np.where(np.arange(ROWS.shape[1]) < half, 0, 1 + np.arange(6)[:, None] % 2), jnp.int32)
    seg = jnp.asarray(np.where(np.arange(ROWS.shape[1]) < half, 1, 2)[None].repeat(6, 0), jnp.int32)
    pos = jnp.asarray(np.tile(np.concatenate([np.arange(half), np.arange(ROWS.shape[1] - half)]), (6, 1)), jnp.int32)

    def packed(adapters):
        logits = nnx.merge(graphdef, adapters, rest)(ROWS, pos, segment_ids=seg, adapter_ids=ids)[0]
        return jnp.sum(jnp.where((ids == 0)[..., None], jax.nn.log_softmax(logits), 0.0))

    for path, g in nnx.to_flat_state(jax.grad(packed)(adapters)):
        assert np.asarray(g[...])[0].any() and not np.asarray(g[...])[1:].any(), path


def test_each_policy_merges_into_plain_weights_with_its_own_logits():
    model = _perturbed(Transformer(MULTI, rngs=nnx.Rngs(3)))
    for p in range(3):
        plain = merged(model, adapter=p)
        assert not plain.cfg.lora.rank
        np.testing.assert_allclose(
            _logits(plain, ROWS, ROW_POSITIONS),
            _policy_logits(model, ROWS, ROW_POSITIONS, jnp.full((6,), p, jnp.int32)),
            atol=2e-5,
        )
    with pytest.raises(ValueError, match="has 3 adapters .policies.; name one, 0..2, not None"):
        merged(model)
    with pytest.raises(ValueError, match="lora.adapters is 0"):
        LoraConfig(rank=4, adapters=0)
