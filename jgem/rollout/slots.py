"""The rollout engine's device side: KV-cache slots, each holding one live episode's whole token stream.

Three jitted programs (`jgem/rollout/programs.py`, shared by every engine of one layout) work on the slots, each
donating the cache so it is updated in place:
- `extend`: prefill new tokens into chosen slots, after what each already holds (the positions continue the
  stream). Chunked: one call takes at most `extend_chunk` tokens per slot, and slots are grouped by length so
  short observations are not padded to a long first prompt.
- `decode`: up to `chunk_steps` decode steps over the slots that are generating. Their decode state (token to
  feed, position, tokens so far, limit, episode, turn) stays on the device between chunks; `decode` here compares
  what the caller passes with a host mirror of it and sends only the slots that changed. Each step feeds every active
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
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jgem.models.config import ModelConfig
from jgem.models.kvcache import slot_cache_bytes
from jgem.rollout import programs
from jgem.rollout.config import Sampling
from jgem.rollout.programs import LIVE, NTOK, STATE_COLUMNS, Layout
from jgem.shapes import bucket, next_pow2
from jgem.sharding.mesh import process_max

Array = jax.Array
MIN_EXTEND_LEN = 16  # the shortest extend bucket, in tokens
MIN_WINDOW = 128  # the shortest attention window, in positions


def _bucket_size(n: int) -> int:
    """The slot bucket of n rows: 1, 2, ..., 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, ... (four sizes per doubling, at
    most a fifth of a bucket padding)."""
    return bucket(n, 4)


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


class SlotEngine:
    """A `SlotCache` of `num_slots` rows of `max_len` positions and the programs that fill and decode it.

    The host (`jgem.rollout.engine.RolloutEngine`) decides what each slot holds; this class only runs programs.
    With a `mesh`, the slots are sharded over its batch axes (when they divide) and params are used as placed. A
    program gathers its rows shard by shard (`shard_map`): a bucket is a number of rows per shard, and a row never
    leaves its shard. Slot numbers in the host API are *local*: this process's slots, 0 .. `num_local_slots` - 1.

    Several processes (a mesh over all of them): every process runs every program together (`lockstep`). Each round,
    they agree on the programs' shapes (rows per shard, window, lengths: the max over processes, one small
    all-gather) and each feeds the rows of its own shards; a decode chunk stops on a global condition. The params
    stay sharded as the trainer placed them: no process holds a full copy of the model to sample.
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
        self.chunk_steps, self.extend_chunk = chunk_steps, next_pow2(extend_chunk)
        self.eos_ids = np.asarray(sorted({int(e) for e in eos_ids}) or [-1], np.int32)
        self.pad_id = int(pad_id)
        self.mesh = mesh
        self.lockstep = mesh is not None and any(d.process_index != jax.process_index() for d in mesh.devices.flat)
        axes = tuple(a for a in batch_axes if mesh is not None and a in mesh.shape)
        shards = math.prod(mesh.shape[a] for a in axes) if axes else 1
        if shards > 1 and num_slots % shards:
            if self.lockstep:
                raise ValueError(
                    f"{num_slots} slots do not divide the {shards} shards of the mesh's batch axes {axes}; with "
                    "several processes each process's slots must be its own shards: make env.num_envs x processes "
                    "a multiple of the batch axes"
                )
            axes, shards = (), 1  # slots that do not divide the batch axes stay replicated
        self.axes, self.shards, self.per_shard = axes, shards, num_slots // shards
        # slots over the batch axes, KV heads over `tensor` (as the attention that reads them is split)
        tensor = mesh.shape.get("tensor", 1) if mesh is not None else 1
        kv = "tensor" if tensor > 1 and cfg.num_kv_heads % tensor == 0 else None
        # the programs are keyed on this (and on shapes): engines of one layout share their compiled programs
        self.layout = Layout(mesh, axes, kv, self.pad_id)
        self.rows_sharding, self.cache_sharding = self.layout.rows_sharding, self.layout.cache_sharding
        self.local_shards = [0]
        if mesh is not None:
            index = self.rows_sharding.addressable_devices_indices_map((num_slots,))
            self.local_shards = sorted({(ix[0].start or 0) // self.per_shard for ix in index.values()})
        self.num_local_slots = len(self.local_shards) * self.per_shard
        make = partial(programs.allocate, cfg, num_slots, max_len, cache_dtype, self.layout)
        if allocate:
            cache_shards = shards * (tensor if kv else 1)
            self.memory = check_slots_fit(cfg, num_slots, max_len, cache_dtype=cache_dtype, shards=cache_shards)
            self.cache, self.state = make()
        else:  # ahead-of-time compilation (experiments/tpu_pod/aot.py): shapes and shardings only
            self.memory = {"slot_bytes": slot_cache_bytes(cfg, max_len, cache_dtype)}
            cache, state = jax.eval_shape(make)
            self.cache = jax.tree.map(lambda s: self._spec(s.shape, s.dtype, sharding=self.cache_sharding), cache)
            self.state = self._spec(state.shape, state.dtype)
        # What the device's decode state holds for this process's slots (`decode` sends only what differs), and the
        # chunk whose new state is not read back yet.
        self._mirror = np.zeros((self.num_local_slots, STATE_COLUMNS), np.int32)
        self.adapter = np.zeros(self.num_local_slots, np.int32)  # each slot's LoRA adapter (policy): `set_adapter`
        self._unread: tuple | None = None
        # a mixture of experts' prefill routing not read yet (kept only with `record_routes`, which the rollout
        # engine sets): (ids on the device, [(slot, row, start, count)])
        self.record_routes = False
        self._prefill_routes: list[tuple[Any, list[tuple[int, int, int, int]]]] = []
        self._eos = jnp.asarray(self.eos_ids)
        self._scalars: dict[Sampling, tuple] = {}
        self._traces = 0

    @property
    def num_compilations(self) -> int:
        """Model programs (`extend`, `decode`) this engine compiled: none for a shape another engine of the same
        layout compiled first (the small state-update and copy programs are not counted)."""
        return self._traces

    def _run(self, program, *args):
        """Calls a shared program, counting the compilations it made for this engine."""
        before = programs.traces()
        out = program(*args)
        self._traces += programs.traces() - before
        return out

    # -- host API --------------------------------------------------------------------------------------

    def set_adapter(self, slot: int, adapter: int) -> None:
        """The LoRA adapter (policy) slot `slot` prefills and samples with from now on (a model with several)."""
        n = self.cfg.lora.policies
        if not 0 <= adapter < n:  # an id past the last would select no adapter: the base model, silently
            raise ValueError(f"adapter {adapter} for slot {slot}: the model has {n} ({'0..' * (n > 1)}{n - 1})")
        self.adapter[slot] = adapter

    def extend(self, model: tuple[Any, Any], items: Sequence[tuple[int, Sequence[int], int]]) -> tuple[int, int]:
        """Prefill `items` = (slot, tokens, start): the tokens go to positions start, start+1, ... of the slot.
        Returns (tokens prefilled, token positions computed including padding, on this process's shards)."""
        graphdef, state = model
        todo = [(s, np.asarray(t, np.int32), int(p)) for s, t, p in items if len(t)]
        for s, t, p in todo:
            if p + t.size > self.max_len:
                raise ValueError(f"slot {s}: {t.size} tokens at position {p} pass the slot length {self.max_len}")
        lengths = [MIN_EXTEND_LEN << k for k in range((self.extend_chunk // MIN_EXTEND_LEN).bit_length())]
        real = computed = 0
        while True:
            by_len: dict[int, list] = {length: [] for length in lengths}
            for s, t, p in todo:
                by_len[max(MIN_EXTEND_LEN, min(next_pow2(t.size), self.extend_chunk))].append((s, t, p))
            need = [self._rows_per_shard([s for s, _, _ in by_len[n]]) for n in lengths]
            ends = [max((p + min(n, t.size) for _, t, p in by_len[n]), default=0) for n in lengths]
            agreed = self.agree(need + ends)
            if not any(agreed[: len(lengths)]):
                return real, computed
            rest = []
            for length, rows_needed, end in zip(lengths, agreed, agreed[len(lengths) :]):
                if not rows_needed:
                    continue
                group = by_len[length]
                size = min(_bucket_size(rows_needed), self.per_shard)
                rows, where = self._rows([s for s, _, _ in group], size)
                tokens = np.zeros((rows.size, length), np.int32)
                starts = np.zeros(rows.size, np.int32)
                counts = np.zeros(rows.size, np.int32)
                adapters = np.zeros(rows.size, np.int32)
                for (s, t, p), i in zip(group, where):
                    k = min(length, t.size)
                    tokens[i, :k], starts[i], counts[i], adapters[i] = t[:k], p, k, self.adapter[s]
                    if k < t.size:
                        rest.append((s, t[k:], p + k))
                    real += k
                computed += tokens.size
                args = [self._global(x) for x in (rows, tokens, starts, counts, adapters)]
                full = size == self.per_shard
                window = self._window(end)
                out = self._run(programs.extend, self.layout, graphdef, full, window, state, self.cache, *args)
                if self.cfg.sparse_layers:  # a mixture of experts: the prefilled tokens' experts, read later
                    self.cache, ids = out
                    if self.record_routes:
                        put = [(s, int(i), p, min(length, t.size)) for (s, t, p), i in zip(group, where)]
                        self._prefill_routes.append((ids, put))
                else:
                    self.cache = out
            todo = rest

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
        stream: Sequence[int] | None = None,
    ) -> tuple[Any, int]:
        """Dispatches one decode chunk for `slots` (per slot: the token to feed and its position, tokens sampled so
        far in this action, the action's token limit, the episode and turn that key its draws, and the draws' stream:
        k >= 0 draws from fold_in(key, k), -1 (the default) from `key`); the other slots
        stop generating. Returns a handle for `fetch` without blocking, and the number of rows the chunk computes on
        this process's shards. In lockstep every process calls it, with its own slots (possibly none).

        The decode state stays on the device: a slot that goes on from the last chunk (last = its last token,
        pos and ntok advanced by what it sampled) sends nothing; only slots whose state differs are uploaded."""
        graphdef, params = model
        self._read_back()  # the last chunk's new state, if its handle was not fetched
        slots = np.asarray(list(slots), np.int64)
        want = self._mirror.copy()
        want[:, LIVE] = 0  # slots not in this chunk stop
        stream = np.full(slots.size, -1) if stream is None else stream
        cols = (last, pos, ntok, limit, episode, turn, np.ones(slots.size), stream, self.adapter[slots])
        want[slots] = np.stack([np.asarray(c, np.int64) for c in cols], axis=1).astype(np.int32)
        changed = np.flatnonzero((want != self._mirror).any(axis=1))
        need, end, k = self.agree([self._rows_per_shard(slots), max(pos, default=0), self._rows_per_shard(changed)])
        if k:
            self._send(want, changed, next_pow2(k))
        size = min(_bucket_size(max(1, need)), self.per_shard)
        where = self._where(slots, size)
        self.cache, self.state, toks, lps, rows, *routes = self._run(
            programs.decode,
            self.layout,
            graphdef,
            self.chunk_steps,
            size,
            self._window(end + self.chunk_steps),
            params,
            self.cache,
            self.state,
            key,
            *self._sampling(sampling),
            self._eos,
        )
        handle = (toks, lps, rows, where, want[slots, NTOK], slots, routes[0] if routes else None)
        self._unread = handle
        return handle, len(self.local_shards) * size

    def fetch(self, handle: Any) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per slot of a `decode` call, in its order: (tokens, log-probs) sampled in that chunk."""
        toks, lps, rows, where, ntok, slots, _ = handle
        toks, lps, rows = (self._local(x) for x in (toks, lps, rows))
        if handle is self._unread:
            self._mirror[slots] = rows[where]
            self._unread = None
        new = rows[where, NTOK] - ntok
        return [(toks[r, :k], lps[r, :k]) for r, k in zip(where, new)]

    def fetch_routes(self, handle: Any) -> list[np.ndarray] | None:
        """Per slot of a `decode` call (after `fetch`), a mixture of experts' routing of the tokens the chunk fed:
        int32[n, M, k] for its n new tokens (the token fed at each step: the slot's last token before the chunk,
        then each sampled token but the last). None for a dense model."""
        toks, _, rows, where, ntok, _, routes = handle
        if routes is None:
            return None
        routes, rows = self._local(routes), self._local(rows)
        new = rows[where, NTOK] - ntok
        return [routes[r, :k] for r, k in zip(where, new)]

    def forget_routes(self) -> None:
        """Drop the prefill routing not read yet (the rollout engine's streams were dropped)."""
        self._prefill_routes = []

    def prefill_routes(self) -> list[tuple[int, int, np.ndarray]]:
        """A mixture of experts' routing of the tokens `extend` prefilled since the last call: (slot, start,
        int32[n, M, k] for the n tokens at positions start...), in the order they were prefilled (waits for them)."""
        out = []
        pending, self._prefill_routes = self._prefill_routes, []
        for ids, where in pending:
            ids = self._local(ids)
            out += [(s, p, ids[i, :k]) for s, i, p, k in where]
        return out

    def _read_back(self) -> None:
        """Brings the mirror up to date with the last chunk (waiting for it) when its handle was not fetched."""
        if self._unread is not None:
            _, _, rows, where, _, slots, _ = self._unread
            self._mirror[slots] = self._local(rows)[where]
            self._unread = None

    def _send(self, want: np.ndarray, changed: np.ndarray, k: int) -> None:
        """Uploads the decode state of slots `changed` (k entries per local shard, padded with a row number past the
        shard, which writes nothing) and records it in the mirror."""
        new = np.zeros((len(self.local_shards), k, 1 + STATE_COLUMNS), np.int32)
        new[:, :, 0] = self.per_shard
        fill = np.zeros(len(self.local_shards), np.int64)
        for s in changed:
            j = self.shard_of(int(s))
            new[j, fill[j], 0], new[j, fill[j], 1:] = s % self.per_shard, want[s]
            fill[j] += 1
        self.state = programs.update(self.layout, self.state, self._global(new.reshape(-1, 1 + STATE_COLUMNS)))
        self._mirror[changed] = want[changed]

    def _sampling(self, sampling: Sampling) -> tuple:
        """The sampling settings as device scalars, made once per setting (they are traced: no recompilation)."""
        if sampling not in self._scalars:
            self._scalars[sampling] = (
                jnp.float32(sampling.temperature),
                jnp.float32(sampling.top_p),
                jnp.int32(sampling.top_k),
                jnp.bool_(sampling.greedy),
            )
        return self._scalars[sampling]

    def _where(self, slots: np.ndarray, size: int) -> np.ndarray:
        """Where each of `slots` (the generating slots) is among a chunk's rows: the whole shard in row order, or
        (`programs.Layout.live_rows`) each shard's `size` rows, its generating slots first in slot order."""
        shard = slots // self.per_shard
        if size == self.per_shard:
            return slots.copy()
        rank = np.zeros(slots.size, np.int64)
        order = np.argsort(slots, kind="stable")
        seen: dict[int, int] = {}
        for i in order:
            j = int(shard[i])
            rank[i] = seen.get(j, 0)
            seen[j] = rank[i] + 1
        return shard * size + rank

    def copy(self, src: Sequence[int], dst: Sequence[int]) -> None:
        """Copies slot src[i]'s row to slot dst[i] (all positions); each pair within one shard (`shard_of`)."""
        per = [[] for _ in self.local_shards]
        for a, b in zip(src, dst):
            if self.shard_of(a) != self.shard_of(b):
                raise ValueError(f"copy: slots {a} and {b} are on different shards; copy within a shard")
            per[self.shard_of(a)].append((a % self.per_shard, b % self.per_shard))
        (need,) = self.agree([max(map(len, per))])
        if not need:
            return
        size = next_pow2(need)
        # padding repeats the shard's first copy (equal writes to one slot), or copies row 0 onto itself
        pairs = [p + [(p or [(0, 0)])[0]] * (size - len(p)) for p in per]
        s = np.array([a for p in pairs for a, _ in p], np.int32)
        d = np.array([b for p in pairs for _, b in p], np.int32)
        self.cache = programs.copy(self.layout, self.cache, self._global(s), self._global(d))

    def shard_of(self, slot: int) -> int:
        """Which of this process's shards holds local slot `slot` (0 without a sharded mesh)."""
        return slot // self.per_shard

    # -- ahead-of-time lowering (the same programs, on abstract arguments) ----------------------------------

    def lower_extend(self, model: tuple[Any, Any], rows: int, length: int, window: int) -> jax.stages.Lowered:
        """`extend`'s program for `rows` slots (all slots: no gather) of `length` new tokens attending `window`
        positions; `model` = (graphdef, state of ShapeDtypeStructs). Use with a cache built with allocate=False."""
        graphdef, state = model
        per_row = [self._spec((rows,)), self._spec((rows, length))] + [self._spec((rows,))] * 3
        full = rows == self.num_slots
        return programs.extend.lower(self.layout, graphdef, full, window, state, self.cache, *per_row)

    def lower_decode(self, model: tuple[Any, Any], rows: int, window: int) -> jax.stages.Lowered:
        """`decode`'s program (a chunk of `chunk_steps` steps) for `rows` slots attending `window` positions."""
        graphdef, state = model
        key = jax.eval_shape(lambda: jax.random.key(0))
        scalar = lambda dtype: self._spec((), dtype, replicated=True)
        return programs.decode.lower(
            self.layout,
            graphdef,
            self.chunk_steps,
            max(1, rows // self.shards),
            window,
            state,
            self.cache,
            self.state,
            self._spec(key.shape, key.dtype, replicated=True),
            scalar(jnp.float32),
            scalar(jnp.float32),
            scalar(jnp.int32),
            scalar(jnp.bool_),
            self._spec(self.eos_ids.shape, replicated=True),
        )

    def _spec(
        self, shape: tuple[int, ...], dtype=jnp.int32, *, replicated: bool = False, sharding: Any = None
    ) -> jax.ShapeDtypeStruct:
        """A host-fed argument as the programs get it: per-row arrays over the batch axes (`_global`), the rest
        replicated (or `sharding`)."""
        sharding = sharding or self.rows_sharding
        if self.mesh is not None and replicated:
            sharding = NamedSharding(self.mesh, PartitionSpec())
        return jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)

    def _window(self, end: int) -> int:
        """Positions a program attends: a power of two (at least MIN_WINDOW, at most the slot) holding `end`."""
        return min(self.max_len, max(MIN_WINDOW, next_pow2(end)))

    def _rows_per_shard(self, slots: Sequence[int]) -> int:
        """The most of `slots` on any one of this process's shards."""
        return int(np.bincount([self.shard_of(s) for s in slots], minlength=1).max()) if len(slots) else 0

    def _rows(self, slots: list[int], size: int) -> tuple[np.ndarray, np.ndarray]:
        """A program's rows: for each local shard, `size` shard-local row numbers (its slots among `slots`, then
        distinct unused rows as padding; in row order when `size` is the whole shard). Returns (rows int32[
        local shards x size], where each of `slots` is in it)."""
        rows = np.zeros(len(self.local_shards) * size, np.int32)
        where = np.zeros(len(slots), np.int64)
        by_shard: list[list[int]] = [[] for _ in self.local_shards]
        for i, s in enumerate(slots):
            by_shard[self.shard_of(s)].append(i)
        for j, members in enumerate(by_shard):
            mine = [slots[i] % self.per_shard for i in members]
            if len(mine) > size:
                raise ValueError(f"{len(mine)} slots on shard {j} but a bucket of {size} rows")
            used = set(mine)
            block = mine + [r for r in range(self.per_shard) if r not in used][: size - len(mine)]
            if size == self.per_shard:
                block = list(range(size))  # every row of the shard: no gather, rows in order
            rows[j * size : (j + 1) * size] = block
            for i, r in zip(members, mine):
                where[i] = j * size + block.index(r)
        return rows, where

    def agree(self, values: Sequence[int]) -> list[int]:
        """The element-wise max of `values` over processes (lockstep), else `values`: every process then runs the
        same programs on the same shapes."""
        return process_max(values, self.mesh) if self.lockstep else [int(v) for v in values]

    def _global(self, local: np.ndarray) -> Array:
        """Rows for a program, this process's shards' blocks in order, as the global array over the batch axes."""
        if self.rows_sharding is None:
            return jnp.asarray(local)
        shape = (local.shape[0] * self.shards // len(self.local_shards), *local.shape[1:])
        return jax.make_array_from_process_local_data(self.rows_sharding, local, shape)

    def _local(self, x: Array) -> np.ndarray:
        """The rows of a program's output on this process's shards, in order (the inverse of `_global`)."""
        if self.rows_sharding is None or not self.lockstep:
            return np.asarray(jax.device_get(x))
        parts: dict[int, Any] = {}
        for shard in x.addressable_shards:
            parts.setdefault(shard.index[0].start or 0, shard.data)
        return np.concatenate([np.asarray(parts[k]) for k in sorted(parts)])
