"""Mixture-of-experts feed-forward (Qwen3-MoE): a router picks each token's top-k experts, each expert is a SwiGLU
MLP, and the token's output is the gate-weighted sum of its experts' outputs.

Routing (as transformers' Qwen3MoeTopKRouter): router logits x W_r (W_r[D, E], no bias) accumulated in float32,
probabilities p = softmax(logits) in float32, the k largest p by expert (`lax.top_k`), and, with `norm_topk_prob`,
the gates renormalised to sum to 1 (g_i = p_i / sum_k p), else the gates are the probabilities themselves. With
recorded `expert_ids` (routing replay: the learner runs the experts the sampler chose), those experts run and their
gates are the router's probabilities at those ids, renormalised the same way: the gradient still reaches the router.

The experts run as grouped matmuls (`jax.lax.ragged_dot`): the B*T*k (token, expert) pairs sorted by expert, one
group per expert of as many rows as it got tokens. Nothing is dropped and nothing is padded to a capacity: the
result is exact whatever the load.

Expert parallelism (a mesh with an `expert` axis, `MeshConfig.expert` > 1): the experts are split over that axis
(E / ep per device), and so are the rows (the axis is a batch axis too). Each device all-gathers its expert group's
tokens (with their expert ids and gates), runs the (token, expert) pairs that go to its own experts as one grouped
matmul, and the outputs are summed back onto the tokens' devices by a reduce-scatter (`_expert_parallel`, a
`shard_map`; docs/scaling.md says why this over an all-to-all). A device's buffer of pairs has a static size: by
default the worst case (every gathered token's pairs on this device), so nothing is ever dropped and the result is
the one-device result; `ModelConfig.expert_capacity_factor` c > 0 sizes it at c x the balanced share, and the pairs
past it (the highest expert ids of an overloaded device) are dropped: counted in `Route.dropped`, never silently.

The load-balancing loss is Switch Transformer's, as transformers' `load_balancing_loss_func` computes it over all the
sparse layers at once: with f_e the fraction of top-k assignments that went to expert e and P_e the mean router
probability of e, both over every (sparse layer, non-padding token), aux = E * sum_e f_e * P_e (1 when balanced:
f_e = k / E and P_e = 1 / E summed k-fold). It counts the router's own top-k (from the logits) even under replay.

Shapes: N = B*T tokens, D hidden, E experts, F an expert's width, k experts per token.
"""

from __future__ import annotations

import math
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
    top_ids: Array | None = None  # int32[B, T, k]: the router's own top-k (= expert_ids unless replayed)
    dropped: Array | None = None  # f32[]: (token, expert) pairs dropped by expert parallelism's capacity (else 0)


class Routing(NamedTuple):
    """The routing of every sparse layer of a forward (`Transformer.routed`): the expert ids to record for replay,
    stacked [M, B, T, k] over the M = len(cfg.sparse_layers) sparse layers in order, and the load-balancing
    statistics summed over them. A dense model's: M = 0 and E = 0 (`aux_loss` 0)."""

    expert_ids: Array  # int32[M, B, T, k]
    counts: Array  # f32[E], summed over the sparse layers
    probs: Array  # f32[E], summed over the sparse layers
    tokens: Array  # f32[], summed over the sparse layers
    # int32[M, B, T, k]: the router's own top-k (= expert_ids unless replayed: what a learner compares with the
    # recorded choice, `routing_mismatch`)
    top_ids: Array | None = None
    # f32[]: (token, expert) pairs dropped by expert parallelism's capacity (`expert_capacity_factor`), summed over
    # the sparse layers (0 with the default: nothing is dropped); `dropped_frac()` of them
    dropped: Array | None = None

    @classmethod
    def of(cls, routes: list[Route] | Route, *, stacked: bool = False, batch: tuple[int, int] = (0, 0)) -> Routing:
        """The layers' `Route`s together: a list of them, or (stacked) one whose leaves have a leading layer axis.
        No routes (a dense model): empty ids of shape [0, *batch, 0] and zero statistics."""
        if stacked:
            r = routes
            out = cls(r.expert_ids, r.counts.sum(0), r.probs.sum(0), r.tokens.sum(0), r.top_ids)
            return out._replace(dropped=r.dropped.sum(0))
        if not routes:
            zero = jnp.zeros((0,), jnp.float32)
            none = jnp.zeros((0, *batch, 0), jnp.int32)
            return cls(none, zero, zero, jnp.zeros((), jnp.float32), none, jnp.zeros((), jnp.float32))
        return cls(
            jnp.stack([r.expert_ids for r in routes]),
            sum(r.counts for r in routes[1:]) + routes[0].counts,
            sum(r.probs for r in routes[1:]) + routes[0].probs,
            sum(r.tokens for r in routes[1:]) + routes[0].tokens,
            jnp.stack([r.top_ids for r in routes]),
        )._replace(dropped=sum(r.dropped for r in routes[1:]) + routes[0].dropped)

    def dropped_frac(self) -> Array:
        """The fraction of the (sparse layer, token, expert) pairs that expert parallelism's capacity dropped (f32[];
        0 with the default `expert_capacity_factor` 0). Padding tokens count: the dispatch runs them too."""
        return self.dropped / max(self.expert_ids.size, 1)

    def aux_loss(self) -> Array:
        """The load-balancing loss (f32[]): E * sum_e (counts_e / n) (probs_e / n), n the (layer, token) count;
        the learner adds `cfg.router_aux_loss_coef` times it. 0 for a dense model (and for no counted token)."""
        return load_balancing_loss(self.counts, self.probs, self.tokens)


def routing_mismatch(recorded: Array, top_ids: Array) -> tuple[Array, Array]:
    """How far a router's own choice is from a recorded one (routing replay's `train/routing_mismatch_frac`):
    recorded, top_ids int32[..., k] -> (mismatches, choices) f32[]: of the recorded (token, layer, slot) choices
    (tokens whose ids are negative have no record and are not counted), how many are not among the router's own
    top-k for that token and layer (a set comparison: two experts that swap places are no mismatch)."""
    has = jnp.all(recorded >= 0, axis=-1, keepdims=True)  # [..., 1]
    found = jnp.any(recorded[..., :, None] == top_ids[..., None, :], axis=-1)  # [..., k]
    choices = jnp.sum(jnp.broadcast_to(has, recorded.shape).astype(jnp.float32))
    return jnp.sum((has & ~found).astype(jnp.float32)), choices


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
        self.capacity_factor = float(cfg.expert_capacity_factor)

    def __call__(self, x: Array, expert_ids: Array, gates: Array) -> tuple[Array, Array]:
        """x[N, D] through each token's experts expert_ids[N, k] (int32, in [0, E)), weighted by gates[N, k] and
        summed (in float32) -> ([N, D] in x's dtype, f32[] the pairs dropped by a capacity: 0 unless expert
        parallelism runs with `expert_capacity_factor` > 0)."""
        n, k = expert_ids.shape
        dt = x.dtype
        e = self.gate.shape[0]
        mesh = jax.sharding.get_abstract_mesh()
        if not mesh.empty and mesh.shape.get("expert", 1) > 1 and "expert" not in mesh.manual_axes:
            w = tuple(v[...].astype(dt) for v in (self.gate, self.up, self.down))
            return _expert_parallel(x, expert_ids, gates, *w, mesh=mesh, capacity_factor=self.capacity_factor)
        flat = expert_ids.reshape(-1)
        order = jnp.argsort(flat, stable=True)  # the (token, slot) pairs grouped by expert
        sizes = jnp.bincount(flat, length=e).astype(jnp.int32)  # rows per group; they sum to n * k
        xs = x[order // k]  # [N*k, D]
        gate = jax.lax.ragged_dot(xs, self.gate[...].astype(dt), sizes)
        up = jax.lax.ragged_dot(xs, self.up[...].astype(dt), sizes)
        out = jax.lax.ragged_dot(jax.nn.silu(gate) * up, self.down[...].astype(dt), sizes)  # [N*k, D]
        out = out * gates.reshape(-1)[order][:, None].astype(dt)
        back = jnp.zeros_like(order).at[order].set(jnp.arange(n * k, dtype=order.dtype))  # the inverse permutation
        out = out[back].reshape(n, k, -1).astype(jnp.float32).sum(axis=1).astype(dt)
        return out, jnp.zeros((), jnp.float32)


def expert_buffer_rows(tokens: int, k: int, experts: int, ep: int, capacity_factor: float) -> int:
    """The rows of one expert shard's buffer of (token, expert) pairs, for `tokens` gathered tokens: the worst case
    (each token's pairs all on this shard: tokens x min(k, E / ep)) with `capacity_factor` 0, else that many times
    the balanced share (tokens x k / ep), a multiple of 8, at most the worst case."""
    worst = tokens * min(k, experts // ep)
    if capacity_factor <= 0:
        return worst
    return min(worst, 8 * -(-math.ceil(capacity_factor * tokens * k / ep) // 8))


def _expert_parallel(x, ids, gates, w_gate, w_up, w_down, *, mesh, capacity_factor: float) -> tuple[Array, Array]:
    """`Experts.__call__` with the experts split over the mesh's `expert` axis (ep devices, E / ep experts each):
    a `shard_map` over the whole mesh. Per device: all-gather the tokens of its expert group (x, ids, gates; the rows
    are split over the batch axes, `expert` among them), sort the (token, expert) pairs whose expert is local to the
    front (by expert), run them through the local experts as one grouped matmul (weights all-gathered over fsdp,
    their width F split over tensor), scatter-add the gated outputs onto the gathered tokens in float32, and
    reduce-scatter them back over `expert` (summing the tensor shards' partial down-projections). Weights arrive in
    the compute dtype. -> (out[N, D] in x's dtype, the pairs dropped by the capacity, summed over the mesh)."""
    from jax.sharding import PartitionSpec as P

    n, k = ids.shape
    e, d, f = w_gate.shape
    dt = x.dtype
    ep = mesh.shape["expert"]
    if e % ep:
        raise ValueError(f"{e} experts do not divide over the mesh's expert axis of {ep}: use an axis dividing {e}")
    el = e // ep
    size = lambda a: mesh.shape.get(a, 1)
    rows, tok = 1, []
    for a in ("data", "fsdp", "expert"):  # the batch axes that split these rows (a decode step's few may not)
        if a in mesh.shape and n % (rows * mesh.shape[a]) == 0:
            tok.append(a)
            rows *= mesh.shape[a]
    gathered = "expert" in tok
    fsdp = "fsdp" if size("fsdp") > 1 and d % size("fsdp") == 0 else None
    tensor = "tensor" if size("tensor") > 1 and f % size("tensor") == 0 else None
    tok_spec = P(tuple(tok) or None, None)
    counted = ("expert", *(a for a in tok if a != "expert"))  # where the pairs differ: the drops add up over these

    def local(x, ids, gates, wg, wu, wd):
        if fsdp:  # ZeRO-3: the expert shard's weights whole along D for the matmuls
            wg = jax.lax.all_gather(wg, fsdp, axis=1, tiled=True)
            wu = jax.lax.all_gather(wu, fsdp, axis=1, tiled=True)
            wd = jax.lax.all_gather(wd, fsdp, axis=2, tiled=True)
        if gathered:  # the expert group's tokens
            x, ids, gates = (jax.lax.all_gather(a, "expert", axis=0, tiled=True) for a in (x, ids, gates))
        g = x.shape[0]
        cap = expert_buffer_rows(g, k, e, ep, capacity_factor)
        first = jax.lax.axis_index("expert") * el
        mine = ids.reshape(-1) - first  # the local expert of each pair; el for the other shards'
        mine = jnp.where((mine >= 0) & (mine < el), mine, el)
        order = jnp.argsort(mine, stable=True)[:cap]  # the local pairs first, by expert, then by (token, slot)
        sizes = jnp.bincount(mine, length=el + 1)[:el].astype(jnp.int32)
        ends = jnp.minimum(jnp.cumsum(sizes), cap)  # the groups clipped to the buffer: the overflow is dropped
        kept = ends[-1]
        dropped = jnp.sum(sizes) - kept
        sizes = jnp.diff(ends, prepend=0).astype(jnp.int32)
        live = (jnp.arange(cap) < kept)[:, None]
        xs = x[order // k]  # [cap, D]
        gate = jax.lax.ragged_dot(xs, wg, sizes)
        up = jax.lax.ragged_dot(xs, wu, sizes)
        out = jax.lax.ragged_dot(jax.nn.silu(gate) * up, wd, sizes)  # [cap, D]: a partial sum over tensor's F
        out = jnp.where(live, out * gates.reshape(-1)[order][:, None], 0).astype(jnp.float32)
        y = jnp.zeros((g, d), jnp.float32).at[order // k].add(out)
        if gathered:  # each token's sum over its experts' shards, back on its own device
            y = jax.lax.psum_scatter(y, "expert", scatter_dimension=0, tiled=True)
        else:
            y = jax.lax.psum(y, "expert")
        if tensor:
            y = jax.lax.psum(y, tensor)
        return y.astype(dt), jax.lax.psum(dropped.astype(jnp.float32), counted)

    w_in, w_out = P("expert", fsdp, tensor), P("expert", tensor, fsdp)
    return jax.shard_map(
        local,
        mesh=mesh,
        in_specs=(tok_spec, tok_spec, tok_spec, w_in, w_in, w_out),
        out_specs=(tok_spec, P()),
    )(x, ids, gates, w_gate, w_up, w_down)


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
        experts run, gated by the router's probabilities at them; a token whose ids are negative (-1: no record,
        e.g. a token the sampler never fed) takes the router's own top-k. Returned in the `Route` either way, with
        the router's own top-k (`Route.top_ids`)."""
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
            ids = jnp.where(ids < 0, top_ids, ids)  # no record: the router's own choice
            gates = jnp.take_along_axis(probs, ids, axis=-1)
        if self.norm_topk_prob:
            gates = gates / jnp.sum(gates, axis=-1, keepdims=True)
        out, dropped = self.experts(xf, ids, gates.astype(x.dtype))
        out = out.reshape(b, t, d)
        w = jnp.ones((b * t,), jnp.float32) if valid is None else valid.reshape(-1).astype(jnp.float32)
        e = probs.shape[-1]
        counts = jnp.zeros((e,), jnp.float32).at[top_ids.reshape(-1)].add(jnp.repeat(w, k))
        top = top_ids.reshape(b, t, k)
        route = Route(ids.reshape(b, t, k), counts, jnp.sum(probs * w[:, None], axis=0), jnp.sum(w), top, dropped)
        return out, route
