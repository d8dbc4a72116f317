"""Mixture-of-experts feed-forward (Qwen3-MoE): a router picks each token's top-k experts, each expert is a SwiGLU
MLP, and the token's output is the gate-weighted sum of its experts' outputs.

Routing (as transformers' Qwen3MoeTopKRouter): router logits x W_r (W_r[D, E], no bias) accumulated in float32,
probabilities p = softmax(logits) in float32, the k largest p by expert (`lax.top_k`), and, with `norm_topk_prob`,
the gates renormalised to sum to 1 (g_i = p_i / sum_k p), else the gates are the probabilities themselves. With
recorded `expert_ids` (routing replay: the learner runs the experts the sampler chose), those experts run and their
gates are the router's probabilities at those ids, renormalised the same way: the gradient still reaches the router.

The experts run as grouped matmuls (`jax.lax.ragged_dot`): the B*T*k (token, expert) pairs sorted by expert, one
group per expert of as many rows as it got tokens. Nothing is dropped and nothing is padded to a capacity: the
result is exact whatever the load. (Expert parallelism, a later step, splits the groups over devices.)

The load-balancing loss is Switch Transformer's, as transformers' `load_balancing_loss_func` computes it over all the
sparse layers at once: with f_e the fraction of top-k assignments that went to expert e and P_e the mean router
probability of e, both over every (sparse layer, non-padding token), aux = E * sum_e f_e * P_e (1 when balanced:
f_e = k / E and P_e = 1 / E summed k-fold). It counts the router's own top-k (from the logits) even under replay.

Shapes: N = B*T tokens, D hidden, E experts, F an expert's width, k experts per token.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from jgem.models.config import ModelConfig
from jgem.models.params import param

Array = jax.Array
EXPERT_AXIS = "expert"  # the logical name of the experts' leading axis (sharding/rules.py)


class Route(NamedTuple):
    """What one sparse layer's routing was: the experts each token ran and the load-balancing statistics (over
    the tokens whose `valid` is set: padding is left out)."""

    expert_ids: Array  # int32[B, T, k]
    counts: Array  # f32[E]: how many of the router's own top-k picks went to each expert
    probs: Array  # f32[E]: the router's probabilities summed over the tokens
    tokens: Array  # f32[]: how many tokens were counted


class Routing(NamedTuple):
    """The routing of every sparse layer of a forward (`Transformer.routed`): the expert ids to record for replay,
    stacked [M, B, T, k] over the M = len(cfg.sparse_layers) sparse layers in order, and the load-balancing
    statistics summed over them. A dense model's: M = 0 and E = 0 (`aux_loss` 0)."""

    expert_ids: Array  # int32[M, B, T, k]
    counts: Array  # f32[E], summed over the sparse layers
    probs: Array  # f32[E], summed over the sparse layers
    tokens: Array  # f32[], summed over the sparse layers

    @classmethod
    def of(cls, routes: list[Route] | Route, *, stacked: bool = False, batch: tuple[int, int] = (0, 0)) -> Routing:
        """The layers' `Route`s together: a list of them, or (stacked) one whose leaves have a leading layer axis.
        No routes (a dense model): empty ids of shape [0, *batch, 0] and zero statistics."""
        if stacked:
            r = routes
            return cls(r.expert_ids, r.counts.sum(0), r.probs.sum(0), r.tokens.sum(0))
        if not routes:
            zero = jnp.zeros((0,), jnp.float32)
            return cls(jnp.zeros((0, *batch, 0), jnp.int32), zero, zero, jnp.zeros((), jnp.float32))
        return cls(
            jnp.stack([r.expert_ids for r in routes]),
            sum(r.counts for r in routes[1:]) + routes[0].counts,
            sum(r.probs for r in routes[1:]) + routes[0].probs,
            sum(r.tokens for r in routes[1:]) + routes[0].tokens,
        )

    def aux_loss(self) -> Array:
        """The load-balancing loss (f32[]): E * sum_e (counts_e / n) (probs_e / n), n the (layer, token) count;
        the learner adds `cfg.router_aux_loss_coef` times it. 0 for a dense model (and for no counted token)."""
        return load_balancing_loss(self.counts, self.probs, self.tokens)


def load_balancing_loss(counts: Array, probs: Array, tokens: Array) -> Array:
    """transformers' `load_balancing_loss_func` from its sums: E * sum(counts / n * probs / n), n = tokens."""
    n = jnp.maximum(tokens, 1.0)  # no token counted: 0, not NaN
    return counts.shape[-1] * jnp.sum((counts / n) * (probs / n))


class Experts(nnx.Module):
    """E SwiGLU MLPs stacked on a leading expert axis: gate, up [E, D, F] and down [E, F, D]."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        e, d, f, pd = cfg.num_experts, cfg.hidden_size, cfg.moe_intermediate_size, cfg.param_dtype
        self.gate = param(rngs, (e, d, f), (EXPERT_AXIS, "embed", "mlp"), pd)
        self.up = param(rngs, (e, d, f), (EXPERT_AXIS, "embed", "mlp"), pd)
        self.down = param(rngs, (e, f, d), (EXPERT_AXIS, "mlp", "embed"), pd)

    def __call__(self, x: Array, expert_ids: Array, gates: Array) -> Array:
        """x[N, D] through each token's experts expert_ids[N, k] (int32, in [0, E)), weighted by gates[N, k] and
        summed (in float32) -> [N, D] in x's dtype."""
        n, k = expert_ids.shape
        dt = x.dtype
        e = self.gate.shape[0]
        flat = expert_ids.reshape(-1)
        order = jnp.argsort(flat, stable=True)  # the (token, slot) pairs grouped by expert
        sizes = jnp.bincount(flat, length=e).astype(jnp.int32)  # rows per group; they sum to n * k
        xs = x[order // k]  # [N*k, D]
        gate = jax.lax.ragged_dot(xs, self.gate[...].astype(dt), sizes)
        up = jax.lax.ragged_dot(xs, self.up[...].astype(dt), sizes)
        out = jax.lax.ragged_dot(jax.nn.silu(gate) * up, self.down[...].astype(dt), sizes)  # [N*k, D]
        out = out * gates.reshape(-1)[order][:, None].astype(dt)
        back = jnp.zeros_like(order).at[order].set(jnp.arange(n * k, dtype=order.dtype))  # the inverse permutation
        return out[back].reshape(n, k, -1).astype(jnp.float32).sum(axis=1).astype(dt)


class MoE(nnx.Module):
    """A sparse layer's feed-forward: `router` [D, E] and `experts`; HF's Qwen3MoeSparseMoeBlock."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        self.router = param(rngs, (cfg.hidden_size, cfg.num_experts), ("embed", None), cfg.param_dtype)
        self.experts = Experts(cfg, rngs=rngs)
        self.top_k = cfg.num_experts_per_tok
        self.norm_topk_prob = cfg.norm_topk_prob

    def __call__(self, x: Array, valid: Array | None = None, expert_ids: Array | None = None) -> tuple[Array, Route]:
        """x[B,T,D] -> (out[B,T,D], its `Route`). `valid` (bool[B,T]; None: all) marks the tokens the load-balancing
        statistics count. `expert_ids` (int32[B,T,k]; None: the router's top-k) replays a recorded choice: those
        experts run, gated by the router's probabilities at them. Returned in the `Route` either way."""
        b, t, d = x.shape
        k = self.top_k
        xf = x.reshape(b * t, d)
        # the router's weight in the compute dtype as every weight (so a scanned forward, which stacks the layers'
        # weights in that dtype, routes as the unrolled one), the logits accumulated and the softmax in float32
        logits = jnp.dot(xf, self.router[...].astype(x.dtype), preferred_element_type=jnp.float32)  # [N, E]
        probs = jax.nn.softmax(logits, axis=-1)
        top_p, top_ids = jax.lax.top_k(probs, k)
        if expert_ids is None:
            ids, gates = top_ids, top_p
        else:
            if expert_ids.shape != (b, t, k):
                raise ValueError(f"expert_ids has shape {expert_ids.shape}; this layer routes [B,T,k] = {(b, t, k)}")
            ids = expert_ids.reshape(b * t, k).astype(jnp.int32)
            gates = jnp.take_along_axis(probs, ids, axis=-1)
        if self.norm_topk_prob:
            gates = gates / jnp.sum(gates, axis=-1, keepdims=True)
        out = self.experts(xf, ids, gates.astype(x.dtype)).reshape(b, t, d)
        w = jnp.ones((b * t,), jnp.float32) if valid is None else valid.reshape(-1).astype(jnp.float32)
        e = probs.shape[-1]
        counts = jnp.zeros((e,), jnp.float32).at[top_ids.reshape(-1)].add(jnp.repeat(w, k))
        route = Route(ids.reshape(b, t, k), counts, jnp.sum(probs * w[:, None], axis=0), jnp.sum(w))
        return out, route
