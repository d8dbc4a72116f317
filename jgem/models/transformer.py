"""Flax NNX decoder-only transformer (Qwen3 / Qwen2 / Llama) with a KV cache and logical-axis annotations.

The teacher-forced forward, prefill and one-token decode are the same `__call__`: without a cache, attention is
causal within each segment of `segment_ids` (0 = padding); with a `SlotCache`, each token is written at the slot of
its position and attends the slots up to it.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from flax import nnx

from jgem.models.attention import Mask
from jgem.models.config import ModelConfig
from jgem.models.kvcache import SlotCache
from jgem.models.layers import ACTIVATIONS, Block, RMSNorm, param, rope_inv_freq, rope_tables
from jgem.models.moe import Routing
from jgem.models.platform import platform
from jgem.sharding.rules import DEFAULT_RULES, Rules, constrain, tree_shardings

__all__ = ["Routing", "SlotCache", "Transformer", "init_model", "remat_policy", "scans_layers"]

Array = jax.Array
LORA_STREAM = 0x10A  # folded into the params key for the adapters' stream


def remat_policy(name: str):
    """A `ModelConfig.remat` name -> (whether to rematerialise each block, the jax checkpoint policy)."""
    cp = jax.checkpoint_policies
    policies = {
        "none": None,
        "full": cp.nothing_saveable,
        "nothing_saveable": cp.nothing_saveable,
        "dots_saveable": cp.dots_saveable,
        "dots_with_no_batch_dims_saveable": cp.dots_with_no_batch_dims_saveable,
        "offload_dots": cp.offload_dot_with_no_batch_dims("device", "pinned_host"),
    }
    if name not in policies:
        raise ValueError(f"remat policy {name!r} is not one of {sorted(policies)}")
    return name != "none", policies[name]


class Transformer(nnx.Module):
    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs, value_head: bool = False):
        self.cfg = cfg
        pd = cfg.param_dtype
        self.embed = param(rngs, (cfg.vocab_size, cfg.hidden_size), ("vocab", "embed"), pd)
        # LoRA adapters draw from a stream of their own, derived from (not drawn from) `rngs`: a model with
        # adapters has the same base weights as the model of the same seed without them
        lora_rngs = nnx.Rngs(params=jax.random.fold_in(rngs.params.key[...], LORA_STREAM))
        self.layers = nnx.List(
            [Block(cfg, rngs=rngs, lora_rngs=lora_rngs, sparse=cfg.is_sparse(i)) for i in range(cfg.num_layers)]
        )
        self.final_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, ("embed",), cfg)
        if not cfg.tie_word_embeddings:
            self.lm_head = param(rngs, (cfg.hidden_size, cfg.vocab_size), ("embed", "vocab"), pd)
        self.has_value_head = value_head
        if value_head:
            self.value_w = param(rngs, (cfg.hidden_size,), ("embed",), "float32", std=cfg.hidden_size**-0.5)
            self.value_b = param(None, (), (), "float32", value=0.0)

    def hidden(
        self,
        tokens: Array,
        positions: Array,
        *,
        segment_ids: Array | None = None,
        cache: SlotCache | None = None,
        adapter_ids: Array | None = None,
        expert_ids: Array | None = None,
    ) -> tuple[Array, SlotCache | None]:
        """tokens, positions[B,T] -> (h[B,T,D] after the final norm, updated cache).

        With a `SlotCache`, each token's key and value go to the slot of its position, queries attend the slots up
        to their own position, and tokens whose `segment_ids` is 0 (padding) write nothing. With several LoRA
        adapters (`cfg.lora.adapters`, one per policy), `adapter_ids` names each row's (int32[B]) or each token's
        (int32[B,T]: rows that pack several policies' sequences). `expert_ids`: as in `hidden_routed`."""
        h, cache, _ = self.hidden_routed(
            tokens, positions, segment_ids=segment_ids, cache=cache, adapter_ids=adapter_ids, expert_ids=expert_ids
        )
        return h, cache

    def hidden_routed(
        self,
        tokens: Array,
        positions: Array,
        *,
        segment_ids: Array | None = None,
        cache: SlotCache | None = None,
        adapter_ids: Array | None = None,
        expert_ids: Array | None = None,
    ) -> tuple[Array, SlotCache | None, Routing]:
        """`hidden`, and the `Routing` of the sparse layers of a mixture of experts (jgem.models.moe): the expert
        ids each token ran (int32[M,B,T,k], M = len(cfg.sparse_layers)) and the load-balancing statistics over the
        non-padding tokens (`Routing.aux_loss()`). `expert_ids` (int32[M,B,T,k], e.g. a previous forward's
        `Routing.expert_ids`) replays a recorded choice: those experts run, gated by the router's probabilities
        at them. A dense model's Routing is empty (M = 0, aux_loss 0)."""
        cfg = self.cfg
        select = None
        if cfg.lora.rank and cfg.lora.adapters > 1:
            if adapter_ids is None:
                raise ValueError(f"this model has {cfg.lora.adapters} adapters (policies): pass each row's adapter_ids")
            ids = jnp.asarray(adapter_ids, jnp.int32)
            ids = ids if ids.ndim == 2 else ids[:, None]
            select = jax.nn.one_hot(ids, cfg.lora.adapters, dtype=jnp.dtype(cfg.dtype))  # [B, T or 1, adapters]
        dt = jnp.dtype(cfg.dtype)
        x = constrain(jnp.take(self.embed[...], tokens, axis=0).astype(dt), ACTIVATIONS)
        cos, sin = rope_tables(positions, rope_inv_freq(cfg), dt)
        b, t = tokens.shape
        seg = jnp.ones((b, t), jnp.int32) if segment_ids is None else segment_ids.astype(jnp.int32)
        sparse = cfg.sparse_layers
        valid = (seg != 0) if sparse else None
        if expert_ids is not None:
            want = (len(sparse), b, t, cfg.num_experts_per_tok)
            if tuple(expert_ids.shape) != want:
                raise ValueError(
                    f"expert_ids has shape {tuple(expert_ids.shape)}; this model replays [M,B,T,k] = {want} "
                    f"(M: the sparse layers {sparse})"
                )
            expert_ids = jnp.asarray(expert_ids, jnp.int32)
        if cache is None:
            slots = None
            mask = Mask.causal(seg)
        else:  # query position p sees slots 0..p: no segments
            s = cache.max_len
            slots = jnp.where(seg != 0, positions, s).astype(jnp.int32)  # write slots; s is out of range: dropped
            mask = Mask(positions.astype(jnp.int32), jnp.zeros((b, t), jnp.int32), jnp.zeros((b, s), jnp.int32))
        remat, policy = remat_policy(cfg.remat)
        ks, vs = [], []
        # a scan needs every layer alike: all dense, or all sparse (Qwen3-30B-A3B, 235B-A22B)
        uniform = len(sparse) in (0, cfg.num_layers)
        if cache is None and scans_layers(cfg) and uniform:
            x, routes = _scan_blocks(
                self.layers, x, cos, sin, mask, policy if remat else None, select, valid, expert_ids
            )
            routing = Routing.of(routes, stacked=True) if sparse else Routing.of([], batch=(b, t))
        else:
            # rematerialisation saves activations for a backward pass: forwards over a cache (sampling) have none
            step = functools.partial(_remat_block, policy=policy) if remat and cache is None else _block
            routes = []
            for i, layer in enumerate(self.layers):
                kv = None if cache is None else (cache.k[i], cache.v[i])
                replay = None if expert_ids is None or not layer.sparse else expert_ids[len(routes)]
                x, kv, route = step(layer, x, cos, sin, mask, kv, slots, select, valid, replay)
                if route is not None:
                    routes.append(route)
                if kv is not None:
                    ks.append(kv[0])
                    vs.append(kv[1])
            routing = Routing.of(routes, batch=(b, t))
        h = self.final_norm(x)
        if cache is not None:
            cache = SlotCache(k=tuple(ks), v=tuple(vs))
        return h, cache, routing

    def head_weight(self, dtype) -> tuple[Array, bool]:
        """(the vocab projection in `dtype`, whether it is [V,D] (the tied embedding) rather than [D,V] (`lm_head`))."""
        if self.cfg.tie_word_embeddings:
            return self.embed[...].astype(dtype), True
        return self.lm_head[...].astype(dtype), False

    def logits(self, h: Array) -> Array:
        """h[B,T,D] -> logits f32[B,T,V]."""
        w, vocab_major = self.head_weight(h.dtype)
        return jnp.einsum("BTD,VD->BTV" if vocab_major else "BTD,DV->BTV", h, w, preferred_element_type=jnp.float32)

    def value(self, h: Array) -> Array:
        """The critic's scalar head: h[B,T,D] -> f32[B,T]."""
        if not self.has_value_head:
            raise ValueError("this Transformer has no value head; build it with value_head=True")
        return jnp.einsum("BTD,D->BT", h.astype(jnp.float32), self.value_w[...]) + self.value_b[...]

    def __call__(
        self,
        tokens: Array,
        positions: Array,
        *,
        segment_ids: Array | None = None,
        cache: SlotCache | None = None,
        adapter_ids: Array | None = None,
        expert_ids: Array | None = None,
    ) -> tuple[Array, SlotCache | None]:
        """tokens, positions[B,T] -> (logits f32[B,T,V], updated cache or None); `adapter_ids` as in `hidden`,
        `expert_ids` (a mixture of experts' recorded routing, replayed) as in `hidden_routed`."""
        h, cache = self.hidden(
            tokens, positions, segment_ids=segment_ids, cache=cache, adapter_ids=adapter_ids, expert_ids=expert_ids
        )
        return self.logits(h), cache

    def routed(
        self,
        tokens: Array,
        positions: Array,
        *,
        segment_ids: Array | None = None,
        cache: SlotCache | None = None,
        adapter_ids: Array | None = None,
        expert_ids: Array | None = None,
    ) -> tuple[Array, SlotCache | None, Routing]:
        """`__call__`, and the `Routing` of a mixture of experts' sparse layers (`hidden_routed`): the expert ids to
        record, and `aux_loss()`, the load-balancing loss a learner adds `cfg.router_aux_loss_coef` times."""
        h, cache, routing = self.hidden_routed(
            tokens, positions, segment_ids=segment_ids, cache=cache, adapter_ids=adapter_ids, expert_ids=expert_ids
        )
        return self.logits(h), cache, routing


def init_model(
    cfg: ModelConfig,
    *,
    seed: int = 0,
    value_head: bool = False,
    mesh: jax.sharding.Mesh | None = None,
    rules: Rules = DEFAULT_RULES,
) -> Transformer:
    """`Transformer(cfg, rngs=nnx.Rngs(seed), value_head=value_head)`, the same values, drawn by one compiled
    program: built eagerly, every initialiser runs (and compiles) as its own op, on one device. With `mesh`, each
    param is created straight into its sharding by the rules: no replicated copy on one chip (an 8B model's f32
    weights would not fit one), and on several processes arrays whose shards orbax can save."""
    make = lambda key: Transformer(cfg, rngs=nnx.Rngs(key), value_head=value_head)
    key = jax.random.key(seed)
    graphdef, abstract = nnx.split(nnx.eval_shape(make, key))
    out = None if mesh is None else tree_shardings(abstract, mesh, rules)
    # the key is an argument, not a constant: one program per config whatever the seed (and one cache entry)
    state = jax.jit(lambda k: nnx.state(make(k)), out_shardings=out)(key)
    return nnx.merge(graphdef, state)


def _block(layer: Block, x, cos, sin, mask, kv, slots, select, valid=None, expert_ids=None):
    return layer(x, cos, sin, mask, kv, slots, select, valid, expert_ids)


def scans_layers(cfg: ModelConfig) -> bool:
    """Whether the cache-free forward scans the layers: `cfg.scan_layers`, or where it is None (the default) on
    GPU and TPU but not on CPU, where XLA compiled the scanned update ~1.5x slower at test sizes (tiny: 9.4 vs
    5.7-6.8 s) and the tests compile it hundreds of times. Decided at trace time (`platform()`)."""
    return platform() != "cpu" if cfg.scan_layers is None else cfg.scan_layers


def _scan_blocks(layers, x, cos, sin, mask, policy, select=None, valid=None, expert_ids=None):
    """x through every block as one `lax.scan` over the layers' states stacked [L, ...] (each block rematerialised
    under `policy` unless it is None): the compiler sees one block, so it compiles one, and the backward pass keeps
    one input per layer (unrolled, XLA's schedule kept up to 7 activations of each layer alive on TPU). The stack is
    a copy in x's dtype (the blocks cast their weights to it anyway); its gradient flows back to each layer's
    params. -> (x, the layers' `Route`s stacked [L, ...], or None for dense layers); the layers must be alike (all
    dense or all sparse), `expert_ids` [L, B, T, k] scanned with them."""
    graphdef = nnx.graphdef(layers[0])
    floating = lambda a: a.astype(x.dtype) if jnp.issubdtype(a.dtype, jnp.floating) else a
    stacked = jax.tree.map(lambda *xs: jnp.stack([floating(a) for a in xs]), *(nnx.state(layer) for layer in layers))

    def body(x, xs):
        st, ids = xs
        x, _, route = nnx.merge(graphdef, st)(x, cos, sin, mask, None, None, select, valid, ids)
        return x, route

    if policy is not None:
        body = jax.checkpoint(body, policy=policy, prevent_cse=False)
    return jax.lax.scan(body, x, (stacked, expert_ids))


def _remat_block(layer: Block, *args, policy):
    """`layer(*args)` under `jax.checkpoint(policy=policy)`, as a pure function of the layer's state. Nothing is
    written back to the layer's Variables (`nnx.remat` writes them back), so it runs wherever they come from an
    outer trace: a module closed over by jit or scan, or LoRA's frozen base weights under `jax.grad`."""
    graphdef, state = nnx.split(layer)
    return jax.checkpoint(lambda st, *a: nnx.merge(graphdef, st)(*a), policy=policy)(state, *args)
