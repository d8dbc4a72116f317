"""The rollout engine's device side: KV-cache slots, each holding one live episode's whole token stream.

Three jitted programs work on the slots, each donating the cache so it is updated in place:
- `extend`: prefill new tokens into chosen slots, after what each already holds (the positions continue the
  stream). Chunked: one call takes at most `extend_chunk` tokens per slot, and slots are grouped by length so
  short observations are not padded to a long first prompt.
- `decode`: up to `chunk_steps` decode steps over the slots that are generating. Each step feeds every active
  slot's last token (writing its key and value) and samples the next. A slot stops at a stop token or at its
  own token limit; the others go on, until a quarter of the chunk's slots have stopped (their envs are waiting).
  The sampling key of a token is a function of (run key, episode, turn,
  index in the action) only, so the tokens do not depend on which slot, chunk or batch served them.
- `copy`: copy slots' rows to other slots (the shared first prompt of a group of episodes).

Programs run on a *bucket* of slots: when fewer slots take part than the cache has, their rows are gathered
into a smaller batch, run, and scattered back; with every slot taking part, the cache is used as it is. They
attend a *window* of positions: the smallest power of two that holds every position the call writes, not the
whole slot, so attention costs what the streams hold. Bucket sizes (eighths of powers of two), windows and
the token lengths of `extend` (powers of two) are few, so the programs compile a bounded number of times.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jgem.models.config import ModelConfig
from jgem.models.kvcache import SlotCache, init_slots, slot_cache_bytes
from jgem.models.sampler import sample_logits

Array = jax.Array
MIN_EXTEND_LEN = 16  # the shortest extend bucket, in tokens
MIN_WINDOW = 128  # the shortest attention window, in positions
STOP_FRACTION = 4  # a decode chunk ends early once 1/STOP_FRACTION of its generating slots have stopped


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _bucket_size(n: int) -> int:
    """The smallest of 1, 2, ..., 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, ... (multiples of an eighth of a power of
    two) that is >= n: at most an eighth of a bucket is padding, and there are eight sizes per doubling."""
    p = _pow2(n)
    step = max(1, p // 8)
    return -(-n // step) * step


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


def device_memory_bytes(device: Any) -> int | None:
    """What one device can hold: the allocator's limit on accelerators, the machine's memory on CPU."""
    stats = device.memory_stats() if hasattr(device, "memory_stats") else None
    if stats and stats.get("bytes_limit"):
        return int(stats["bytes_limit"])
    if device.platform == "cpu" and hasattr(os, "sysconf"):
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    return None


def check_slots_fit(
    cfg: ModelConfig, num_slots: int, max_len: int, *, cache_dtype=None, shards: int = 1, device: Any = None
) -> dict[str, int]:
    """Bytes per slot, per device, and what the device holds; raises ValueError, before anything compiles, when the
    params plus the cache (and a working copy of half of it: the slots a program gathers) do not fit one device."""
    per_slot = slot_cache_bytes(cfg, max_len, cache_dtype)
    cache = per_slot * num_slots // shards
    params = cfg.num_params * jnp.dtype(cfg.param_dtype).itemsize
    need = params + cache + cache // 2
    device = jax.local_devices()[0] if device is None else device
    have = device_memory_bytes(device)
    if have is not None and need > have:
        gib = 2**30
        raise ValueError(
            f"the rollout engine's cache does not fit: {num_slots} slots x {max_len} tokens take "
            f"{per_slot / 2**20:.1f} MiB a slot, {cache / gib:.2f} GiB per device ({shards} shard(s)); with the "
            f"{params / gib:.2f} GiB of params and a working copy of half the cache that is {need / gib:.2f} GiB, "
            f"more than the {have / gib:.2f} GiB of {device.platform} device {device.id}. Lower "
            "rollout.max_episode_tokens or env.num_envs (one slot per env), or shard the slots over more devices"
        )
    return {"slot_bytes": per_slot, "cache_bytes_per_device": cache, "device_bytes": have or 0}


@dataclass(frozen=True)
class Sampling:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    greedy: bool = False


class SlotEngine:
    """A `SlotCache` of `num_slots` rows of `max_len` positions and the programs that fill and decode it.

    The host (`jgem.rollout.engine.RolloutEngine`) decides what each slot holds; this class only runs programs.
    With a `mesh`, the slots are sharded over its batch axes (when they divide) and params are used as placed.
    """

    def __init__(
        self,
        cfg: ModelConfig,
        *,
        num_slots: int,
        max_len: int,
        eos_ids: Sequence[int],
        pad_id: int = 0,
        chunk_steps: int = 8,
        extend_chunk: int = 512,
        cache_dtype: str | None = None,
        mesh: Mesh | None = None,
        batch_axes: Sequence[str] = ("data", "fsdp"),
        allocate: bool = True,
    ) -> None:
        if num_slots < 1 or max_len < 2 or chunk_steps < 1 or extend_chunk < MIN_EXTEND_LEN:
            raise ValueError(
                f"need num_slots >= 1 ({num_slots}), max_len >= 2 ({max_len}), chunk_steps >= 1 ({chunk_steps}) "
                f"and extend_chunk >= {MIN_EXTEND_LEN} ({extend_chunk})"
            )
        self.cfg, self.num_slots, self.max_len = cfg, num_slots, max_len
        self.chunk_steps, self.extend_chunk = chunk_steps, _pow2(extend_chunk)
        self.eos_ids = np.asarray(sorted({int(e) for e in eos_ids}) or [-1], np.int32)
        self.pad_id = int(pad_id)
        axes = tuple(a for a in batch_axes if mesh is not None and a in mesh.shape)
        shards = math.prod(mesh.shape[a] for a in axes) if axes else 1
        if shards > 1 and num_slots % shards:
            axes, shards = (), 1  # slots that do not divide the batch axes stay replicated
        self.mesh = mesh
        # slots over the batch axes, KV heads over `tensor` (as the attention that reads them is split)
        kv = "tensor" if mesh is not None and cfg.num_kv_heads % mesh.shape.get("tensor", 1) == 0 else None
        self.cache_sharding = None if mesh is None else NamedSharding(mesh, PartitionSpec(axes or None, kv))
        shards *= mesh.shape.get("tensor", 1) if kv else 1
        if allocate:
            self.memory = check_slots_fit(cfg, num_slots, max_len, cache_dtype=cache_dtype, shards=shards)
            cache = init_slots(cfg, num_slots, max_len, cache_dtype)
            if mesh is not None:
                cache = jax.device_put(cache, self.cache_sharding)
        else:  # ahead-of-time compilation (experiments/tpu_pod/aot.py): the cache's shapes and shardings only
            self.memory = {"slot_bytes": slot_cache_bytes(cfg, max_len, cache_dtype)}
            shapes = jax.eval_shape(lambda: init_slots(cfg, num_slots, max_len, cache_dtype))
            cache = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=self.cache_sharding), shapes)
        self.cache = cache
        self._traces = 0
        self._extend = jax.jit(self._extend_fn, static_argnums=(0, 1, 2), donate_argnums=(4,))
        self._decode = jax.jit(self._decode_fn, static_argnums=(0, 1, 2, 3), donate_argnums=(5,))
        self._copy = jax.jit(self._copy_fn, donate_argnums=(0,))

    @property
    def num_compilations(self) -> int:
        return self._traces

    # -- host API --------------------------------------------------------------------------------------

    def extend(self, model: tuple[Any, Any], items: Sequence[tuple[int, Sequence[int], int]]) -> tuple[int, int]:
        """Prefill `items` = (slot, tokens, start): the tokens go to positions start, start+1, ... of the slot.
        Returns (tokens prefilled, token positions computed including padding)."""
        graphdef, state = model
        todo = [(s, np.asarray(t, np.int32), int(p)) for s, t, p in items if len(t)]
        for s, t, p in todo:
            if p + t.size > self.max_len:
                raise ValueError(f"slot {s}: {t.size} tokens at position {p} pass the slot length {self.max_len}")
        real = computed = 0
        while todo:
            by_len: dict[int, list] = {}
            for s, t, p in todo:
                by_len.setdefault(max(MIN_EXTEND_LEN, min(_pow2(t.size), self.extend_chunk)), []).append((s, t, p))
            rest = []
            for length, group in sorted(by_len.items()):
                slots, pad_rows = self._bucket([s for s, _, _ in group])
                n = len(slots) + len(pad_rows)
                tokens = np.zeros((n, length), np.int32)
                starts = np.zeros(n, np.int32)
                counts = np.zeros(n, np.int32)
                rows = np.array(slots + pad_rows, np.int32)
                for i, (s, t, p) in enumerate(group):
                    k = min(length, t.size)
                    tokens[i, :k], starts[i], counts[i] = t[:k], p, k
                    if k < t.size:
                        rest.append((s, t[k:], p + k))
                    real += k
                computed += tokens.size
                full = n == self.num_slots
                if full:  # every slot takes part: put the rows in slot order, no gather
                    order = np.argsort(rows)
                    rows, tokens, starts, counts = rows[order], tokens[order], starts[order], counts[order]
                window = self._window(int(np.max(starts + counts)))
                self.cache = self._extend(graphdef, full, window, state, self.cache, rows, tokens, starts, counts)
            todo = rest
        return real, computed

    def decode(
        self,
        model: tuple[Any, Any],
        slots: Sequence[int],
        last: Sequence[int],
        pos: Sequence[int],
        ntok: Sequence[int],
        limit: Sequence[int],
        episode: Sequence[int],
        turn: Sequence[int],
        key: Array,
        sampling: Sampling,
    ) -> tuple[Any, int]:
        """Dispatches one decode chunk for `slots` (per slot: the token to feed and its position, tokens sampled so
        far in this action, the action's token limit, and the episode and turn that key its draws). Returns a
        handle for `fetch` without blocking, and the number of rows the chunk computes."""
        graphdef, state = model
        slot_list, pad_rows = self._bucket(list(slots))
        n = len(slot_list) + len(pad_rows)

        def col(x, fill):
            return np.concatenate([np.asarray(x, np.int32), np.full(len(pad_rows), fill, np.int32)])

        rows = np.array(slot_list + pad_rows, np.int32)
        arrays = [col(last, self.pad_id), col(pos, 0), col(ntok, 0), col(limit, 0), col(episode, 0), col(turn, 0)]
        order = np.arange(n)
        full = n == self.num_slots
        if full:
            order = np.argsort(rows)
            rows, arrays = rows[order], [a[order] for a in arrays]
        window = self._window(int(np.max(arrays[1])) + self.chunk_steps)
        self.cache, toks, lps, counts = self._decode(
            graphdef,
            self.chunk_steps,
            full,
            window,
            state,
            self.cache,
            rows,
            *arrays,
            key,
            jnp.float32(sampling.temperature),
            jnp.float32(sampling.top_p),
            jnp.int32(sampling.top_k),
            jnp.bool_(sampling.greedy),
            jnp.asarray(self.eos_ids),
        )
        back = np.argsort(order)[: len(slot_list)]  # the caller's slots, in its order
        return (toks, lps, counts, back, np.asarray(ntok, np.int32)), n

    @staticmethod
    def fetch(handle: Any) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per slot of a `decode` call, in its order: (tokens, log-probs) sampled in that chunk."""
        toks, lps, counts, back, ntok = handle
        toks, lps, counts = jax.device_get((toks, lps, counts))
        new = counts[back] - ntok
        return [(toks[r, :k], lps[r, :k]) for r, k in zip(back, new)]

    def copy(self, src: Sequence[int], dst: Sequence[int]) -> None:
        """Copies slot src[i]'s row to slot dst[i] (all positions)."""
        if not len(src):
            return
        pad = _pow2(len(src)) - len(src)  # padding repeats the first copy (equal writes to one slot)
        s = np.array(list(src) + [src[0]] * pad, np.int32)
        d = np.array(list(dst) + [dst[0]] * pad, np.int32)
        self.cache = self._copy(self.cache, s, d)

    # -- ahead-of-time lowering (the same programs, on abstract arguments) ----------------------------------

    def lower_extend(self, model: tuple[Any, Any], rows: int, length: int, window: int) -> jax.stages.Lowered:
        """`extend`'s program for `rows` slots (all slots: no gather) of `length` new tokens attending `window`
        positions; `model` = (graphdef, state of ShapeDtypeStructs). Use with a cache built with allocate=False."""
        graphdef, state = model
        ints = [self._spec((rows, length))] + [self._spec((rows,))] * 2
        full = rows == self.num_slots
        return self._extend.lower(graphdef, full, window, state, self.cache, self._spec((rows,)), *ints)

    def lower_decode(self, model: tuple[Any, Any], rows: int, window: int) -> jax.stages.Lowered:
        """`decode`'s program (a chunk of `chunk_steps` steps) for `rows` slots attending `window` positions."""
        graphdef, state = model
        key = jax.eval_shape(lambda: jax.random.key(0))
        scalar = lambda dtype: self._spec((), dtype)
        return self._decode.lower(
            graphdef,
            self.chunk_steps,
            rows == self.num_slots,
            window,
            state,
            self.cache,
            *[self._spec((rows,))] * 7,
            self._spec(key.shape, key.dtype),
            scalar(jnp.float32),
            scalar(jnp.float32),
            scalar(jnp.int32),
            scalar(jnp.bool_),
            self._spec(self.eos_ids.shape),
        )

    def _spec(self, shape: tuple[int, ...], dtype=jnp.int32) -> jax.ShapeDtypeStruct:
        """A host-fed argument: replicated over the mesh (as numpy inputs are placed)."""
        sharding = None if self.mesh is None else NamedSharding(self.mesh, PartitionSpec())
        return jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)

    def _window(self, end: int) -> int:
        """Positions a program attends: a power of two (at least MIN_WINDOW, at most the slot) holding `end`."""
        return min(self.max_len, max(MIN_WINDOW, _pow2(end)))

    def _bucket(self, slots: list[int]) -> tuple[list[int], list[int]]:
        """(slots, padding slots): a bucket (`_bucket_size`, at most num_slots) filled with distinct unused slots."""
        n = min(_bucket_size(len(slots)), self.num_slots)
        used = set(slots)
        pad = [s for s in range(self.num_slots) if s not in used][: n - len(slots)]
        return slots, pad

    # -- device programs ------------------------------------------------------------------------------

    def _extend_fn(
        self, graphdef, full: bool, window: int, state, cache: SlotCache, rows, tokens, starts, counts
    ) -> SlotCache:
        self._traces += 1
        model = nnx.merge(graphdef, state)
        rows = None if full else rows
        sub = take_rows(cache, rows, window)
        t = jnp.arange(tokens.shape[1], dtype=jnp.int32)
        positions = starts[:, None] + t[None, :]
        seg = (t[None, :] < counts[:, None]).astype(jnp.int32)
        _, sub = model.hidden(tokens, positions, segment_ids=seg, cache=sub)
        return self._pin(put_rows(cache, rows, sub))

    def _decode_fn(
        self,
        graphdef,
        steps: int,
        full: bool,
        window: int,
        state,
        cache: SlotCache,
        rows,
        last,
        pos,
        ntok,
        limit,
        episode,
        turn,
        key,
        temperature,
        top_p,
        top_k,
        greedy,
        eos,
    ):
        self._traces += 1
        model = nnx.merge(graphdef, state)
        rows = None if full else rows
        sub = take_rows(cache, rows, window)  # attention reads `window` positions, not the whole slot
        n = last.shape[0]
        fold = jax.vmap(jax.random.fold_in)
        base = fold(fold(jnp.broadcast_to(key, (n,)), episode), turn)  # one key per (episode, turn)

        def body(c):
            i, sub, last, pos, ntok, active, toks, lps = c
            h, sub = model.hidden(last[:, None], pos[:, None], segment_ids=active[:, None].astype(jnp.int32), cache=sub)
            logits = model.logits(h)[:, 0]
            tok, lp = sample_logits(logits, fold(base, ntok), temperature, top_p, top_k, greedy)
            tok = jnp.where(active, tok, self.pad_id)
            lp = jnp.where(active, lp, 0.0)
            toks = jax.lax.dynamic_update_slice(toks, tok[:, None], (0, i))
            lps = jax.lax.dynamic_update_slice(lps, lp[:, None], (0, i))
            ntok = ntok + active
            stop = jnp.any(tok[:, None] == eos[None, :], axis=1) | (ntok >= limit)
            return (i + 1, sub, jnp.where(active, tok, last), pos + active, ntok, active & ~stop, toks, lps)

        init = (
            jnp.zeros((), jnp.int32),
            sub,
            last,
            pos,
            ntok,
            ntok < limit,
            jnp.full((n, steps), self.pad_id, jnp.int32),
            jnp.zeros((n, steps), jnp.float32),
        )
        started = init[5]
        quota = (jnp.sum(started) + STOP_FRACTION - 1) // STOP_FRACTION

        def more(c):  # steps left, a slot still generating, and fewer than `quota` stopped since the chunk began
            return (c[0] < steps) & jnp.any(c[5]) & (jnp.sum(started & ~c[5]) < quota)

        _, sub, _, _, ntok, _, toks, lps = jax.lax.while_loop(more, body, init)
        return self._pin(put_rows(cache, rows, sub)), toks, lps, ntok

    def _copy_fn(self, cache: SlotCache, src, dst) -> SlotCache:
        return self._pin(put_rows(cache, dst, take_rows(cache, src, cache.max_len)))

    def _pin(self, cache: SlotCache) -> SlotCache:
        """The cache laid out as it came in, so the donated buffers are reused and the next call does not
        reshard (the compiler would otherwise pick its own layout for the result)."""
        return cache if self.mesh is None else jax.lax.with_sharding_constraint(cache, self.cache_sharding)
