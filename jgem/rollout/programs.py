"""The rollout engine's device programs: module-level jitted functions, shared by every `SlotEngine` of a layout.

A program's static arguments are what it depends on besides its arrays' shapes: a `Layout` (the mesh, the axes the
slots and KV heads are split over, the pad token), the model's graphdef, and the bucket, window and step counts.
jax keys its compilation cache on them, so two engines of the same configuration (the trainer's and an
evaluation's, a warm start's, a test's) run the same compiled programs: the second compiles nothing.

Per-slot decode state lives on the device, next to the cache (`state` int32[slots, STATE_COLUMNS]: the token to
feed, its position, tokens sampled in the action, the action's limit, the episode and turn that key the draws,
whether the slot is generating, the draws' stream: a slot with stream k >= 0 draws from fold_in(key, k), one
with -1 from the call's key itself, so episodes of several training steps, each with its step's key, share a
chunk; and the LoRA adapter (policy) the slot samples with, where the model holds several). `decode` reads it
and writes it back; between chunks the host sends only the rows that changed (`update`: slots that start an
action, slots taken out).

Slot rows are gathered into a smaller batch (a *bucket*) when fewer slots take part than the cache has, shard by
shard (`shard_map`): a row never leaves its shard. Programs attend a *window* of the first positions of a slot.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jgem.models.config import ModelConfig
from jgem.models.kvcache import SlotCache, init_slots
from jgem.rollout.sampling import sample_logits

Array = jax.Array
# the decode state's columns
LAST, POS, NTOK, LIMIT, EPISODE, TURN, LIVE, STREAM, ADAPTER = range(9)
STATE_COLUMNS = 9
STOP_FRACTION = 4  # a decode chunk ends early once 1/STOP_FRACTION of its generating slots have stopped

_traces = threading.local()  # model programs traced (= compiled) by this thread: jit traces on the calling thread


def traces() -> int:
    """How many times this thread traced `extend` or `decode` (each trace is a compilation: the jit cache missed)."""
    return getattr(_traces, "n", 0)


def _traced() -> None:
    _traces.n = traces() + 1  # runs while tracing only: a cached program does not run Python


def take_rows(cache: SlotCache, rows: Array | None, window: int) -> SlotCache:
    """The first `window` positions of slots `rows` (all slots when None): keyT[..., :w], value[..., :w, :]."""
    pick = (lambda x: x) if rows is None else (lambda x: x[rows])
    return SlotCache(k=tuple(pick(x)[..., :window] for x in cache.k), v=tuple(pick(x)[:, :, :window] for x in cache.v))


def put_rows(cache: SlotCache, rows: Array | None, sub: SlotCache) -> SlotCache:
    """Writes `take_rows`' result back."""
    w = sub.max_len
    if rows is None:
        return SlotCache(
            k=tuple(x.at[..., :w].set(y) for x, y in zip(cache.k, sub.k)),
            v=tuple(x.at[:, :, :w].set(y) for x, y in zip(cache.v, sub.v)),
        )
    return SlotCache(
        k=tuple(x.at[rows, ..., :w].set(y) for x, y in zip(cache.k, sub.k)),
        v=tuple(x.at[rows, :, :w].set(y) for x, y in zip(cache.v, sub.v)),
    )


@dataclass(frozen=True)
class Layout:
    """Where the slots live: split over `axes` of `mesh` (the batch axes they divide), KV heads over `kv` (or not),
    and the token that fills rows that do not sample. Hashable: a static argument of every program."""

    mesh: Mesh | None = None
    axes: tuple[str, ...] = ()
    kv: str | None = None
    pad_id: int = 0

    @property
    def shards(self) -> int:
        return 1 if self.mesh is None else math.prod(self.mesh.shape[a] for a in self.axes)

    @property
    def rows_sharding(self) -> NamedSharding | None:
        """Per-slot arrays (host-fed rows, the decode state): split over the batch axes."""
        return None if self.mesh is None else NamedSharding(self.mesh, PartitionSpec(self.axes or None))

    @property
    def cache_sharding(self) -> NamedSharding | None:
        """The cache: slots over the batch axes, KV heads over `kv`."""
        return None if self.mesh is None else NamedSharding(self.mesh, PartitionSpec(self.axes or None, self.kv))

    def per_shard(self, fn, in_specs: tuple, out_specs: Any):
        """`fn` run on each shard's block of rows (shard-local row numbers), or as is without sharded slots."""
        if self.shards == 1:
            return fn
        return jax.shard_map(fn, mesh=self.mesh, in_specs=in_specs, out_specs=out_specs)

    def constrain(self, x: Any, sharding: NamedSharding | None) -> Any:
        """Outputs keep the layout their inputs came in with, so donated buffers are reused and nothing reshards."""
        return x if sharding is None else jax.lax.with_sharding_constraint(x, sharding)

    def take(self, cache: SlotCache, rows: Array | None, window: int) -> SlotCache:
        """The first `window` positions of rows `rows` (shard-local numbers; all rows when None)."""
        if rows is None:
            return take_rows(cache, None, window)
        c, r = self.cache_sharding and self.cache_sharding.spec, self.rows_sharding and self.rows_sharding.spec
        return self.per_shard(partial(take_rows, window=window), (c, r), c)(cache, rows)

    def put(self, cache: SlotCache, rows: Array | None, sub: SlotCache) -> SlotCache:
        """Writes `take`'s result back."""
        if rows is None:
            out = put_rows(cache, None, sub)
        else:
            c, r = self.cache_sharding and self.cache_sharding.spec, self.rows_sharding and self.rows_sharding.spec
            out = self.per_shard(put_rows, (c, r, c), c)(cache, rows, sub)
        return self.constrain(out, self.cache_sharding)

    def take_state(self, state: Array, rows: Array | None) -> Array:
        if rows is None:
            return state
        r = self.rows_sharding and self.rows_sharding.spec
        return self.per_shard(lambda s, i: s[i], (r, r), r)(state, rows)

    def put_state(self, state: Array, rows: Array | None, sub: Array) -> Array:
        if rows is not None:
            r = self.rows_sharding and self.rows_sharding.spec
            sub = self.per_shard(lambda s, i, x: s.at[i].set(x), (r, r, r), r)(state, rows, sub)
        return self.constrain(sub, self.rows_sharding)

    def live_rows(self, state: Array, size: int) -> Array:
        """Each shard's `size` rows for a chunk: its generating slots in order, then its other slots in order as
        padding (`SlotEngine._where` mirrors this on the host)."""
        r = self.rows_sharding and self.rows_sharding.spec
        pick = lambda s: jnp.argsort(s[:, LIVE] == 0, stable=True)[:size].astype(jnp.int32)
        return self.per_shard(pick, (r,), r)(state)


@partial(jax.jit, static_argnums=(0, 1, 2, 3, 4))
def allocate(cfg: ModelConfig, num_slots: int, max_len: int, cache_dtype: str | None, layout: Layout):
    """An empty cache and decode state (no slot generating), made in place on each shard: no host ever builds the
    whole (global) cache."""
    cache = layout.constrain(init_slots(cfg, num_slots, max_len, cache_dtype), layout.cache_sharding)
    state = layout.constrain(jnp.zeros((num_slots, STATE_COLUMNS), jnp.int32), layout.rows_sharding)
    return cache, state


@partial(jax.jit, static_argnums=(0, 1, 2, 3), donate_argnums=(5,))
def extend(
    layout: Layout, graphdef, full: bool, window: int, params, cache: SlotCache, rows, tokens, starts, counts, adapters
) -> SlotCache:
    """Prefill tokens[R, T] (the first counts[r] of each row) at positions starts[r]... of slots `rows`, each row
    with its LoRA adapter `adapters[r]` (a model with several; ignored otherwise). A mixture of experts also returns
    each prefilled token's experts in every sparse layer, int32[R, T, M, k] (routing replay's record)."""
    _traced()
    model = nnx.merge(graphdef, params)
    rows = None if full else rows
    sub = layout.take(cache, rows, window)
    t = jnp.arange(tokens.shape[1], dtype=jnp.int32)
    positions = starts[:, None] + t[None, :]
    seg = (t[None, :] < counts[:, None]).astype(jnp.int32)
    if not model.cfg.sparse_layers:  # a dense model: the program it always was
        _, sub = model.hidden(tokens, positions, segment_ids=seg, cache=sub, adapter_ids=adapters)
        return layout.put(cache, rows, sub)
    _, sub, routing = model.hidden_routed(tokens, positions, segment_ids=seg, cache=sub, adapter_ids=adapters)
    ids = layout.constrain(jnp.transpose(routing.expert_ids, (1, 2, 0, 3)), layout.rows_sharding)
    return layout.put(cache, rows, sub), ids


@partial(jax.jit, static_argnums=(0,), donate_argnums=(1,))
def update(layout: Layout, state: Array, new: Array) -> Array:
    """Sets decode-state rows: new[K, 1 + STATE_COLUMNS] = (shard-local slot, its columns), per shard; a slot
    number past the shard (padding) writes nothing."""
    r = layout.rows_sharding and layout.rows_sharding.spec
    put = lambda s, u: s.at[u[:, 0]].set(u[:, 1:], mode="drop")
    return layout.constrain(layout.per_shard(put, (r, r), r)(state, new), layout.rows_sharding)


@partial(jax.jit, static_argnums=(0, 1, 2, 3, 4), donate_argnums=(6, 7))
def decode(
    layout: Layout,
    graphdef,
    steps: int,
    size: int,
    window: int,
    params,
    cache: SlotCache,
    state: Array,
    key,
    temperature,
    top_p,
    top_k,
    greedy,
    eos,
):
    """Up to `steps` decode steps over the generating slots, `size` rows per shard (all rows when that is the
    whole shard). Returns (cache, state, tokens int32[R, steps], log-probs f32[R, steps], the rows' new state), and
    for a mixture of experts the experts of the token each step fed, int32[R, steps, M, k] (-1 where a row did not
    feed one): the routing of the forward that sampled the step's token, routing replay's record."""
    _traced()
    model = nnx.merge(graphdef, params)
    rows = None if size * layout.shards == state.shape[0] else layout.live_rows(state, size)
    sub = layout.take(cache, rows, window)  # attention reads `window` positions, not the whole slot
    mine = layout.take_state(state, rows)
    last, pos, ntok, limit, episode, turn, live, stream, adapter = (mine[:, c] for c in range(STATE_COLUMNS))
    n = last.shape[0]
    fold = jax.vmap(jax.random.fold_in)
    run = jnp.broadcast_to(key, (n,))
    run = jnp.where(stream >= 0, fold(run, jnp.maximum(stream, 0)), run)  # a step's stream, or the key itself
    base = fold(fold(run, episode), turn)  # one key per (episode, turn)

    moe = bool(model.cfg.sparse_layers)

    def body(c):
        i, sub, last, pos, ntok, active, toks, lps, *routes = c
        seg = active[:, None].astype(jnp.int32)
        if moe:  # the fed token's experts, recorded at its step
            h, sub, routing = model.hidden_routed(
                last[:, None], pos[:, None], segment_ids=seg, cache=sub, adapter_ids=adapter
            )
            fed = jnp.where(active[:, None, None], jnp.transpose(routing.expert_ids[:, :, 0], (1, 0, 2)), -1)
            routes = [jax.lax.dynamic_update_slice(routes[0], fed[:, None], (0, i, 0, 0))]
        else:
            h, sub = model.hidden(last[:, None], pos[:, None], segment_ids=seg, cache=sub, adapter_ids=adapter)
        logits = model.logits(h)[:, 0]
        tok, lp = sample_logits(logits, fold(base, ntok), temperature, top_p, top_k, greedy)
        tok = jnp.where(active, tok, layout.pad_id)
        lp = jnp.where(active, lp, 0.0)
        toks = jax.lax.dynamic_update_slice(toks, tok[:, None], (0, i))
        lps = jax.lax.dynamic_update_slice(lps, lp[:, None], (0, i))
        ntok = ntok + active
        stop = jnp.any(tok[:, None] == eos[None, :], axis=1) | (ntok >= limit)
        return (i + 1, sub, jnp.where(active, tok, last), pos + active, ntok, active & ~stop, toks, lps, *routes)

    started = (live > 0) & (ntok < limit)
    init = (
        jnp.zeros((), jnp.int32),
        sub,
        last,
        pos,
        ntok,
        started,
        jnp.full((n, steps), layout.pad_id, jnp.int32),
        jnp.zeros((n, steps), jnp.float32),
    )
    if moe:
        m, k = len(model.cfg.sparse_layers), model.cfg.num_experts_per_tok
        init += (jnp.full((n, steps, m, k), -1, jnp.int32),)
    quota = (jnp.sum(started) + STOP_FRACTION - 1) // STOP_FRACTION

    def more(c):  # steps left, a slot still generating, and fewer than `quota` stopped since the chunk began
        return (c[0] < steps) & jnp.any(c[5]) & (jnp.sum(started & ~c[5]) < quota)

    _, sub, last, pos, ntok, active, toks, lps, *routes = jax.lax.while_loop(more, body, init)
    mine = jnp.stack([last, pos, ntok, limit, episode, turn, active.astype(jnp.int32), stream, adapter], axis=1)
    out = (layout.put(cache, rows, sub), layout.put_state(state, rows, mine), toks, lps, mine)
    return out + tuple(layout.constrain(r, layout.rows_sharding) for r in routes)


@partial(jax.jit, static_argnums=(0,), donate_argnums=(1,))
def copy(layout: Layout, cache: SlotCache, src, dst) -> SlotCache:
    """Copies rows src[i] to rows dst[i] (shard-local numbers, all positions)."""
    return layout.put(cache, dst, layout.take(cache, src, cache.max_len))
