"""Sampling: a jitted prefill plus a `lax.while_loop` decode, and teacher-forced `token_logprobs`.

Prompt layout: each prompt is right-aligned in a row of a bucketed length P (left padding has segment 0,
real tokens segment 1 and positions 0..len-1), so every row writes the same cache slot at each decode
step. Logprobs are of the behaviour policy: log-softmax of logits / temperature, *before* top-p/top-k
truncation (what `token_logprobs(..., temperature=t)` recomputes).
"""

from __future__ import annotations

import contextlib
import math
import weakref
from collections.abc import Sequence
from functools import partial
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jgem.models.config import ModelConfig
from jgem.models.cpu import (
    OUT_IN_MAX_BATCH,
    OUT_IN_MIN_BYTES,
    PROJECTIONS,
    cpu_decode_mesh,
    cpu_tuning,
    layer_projection_bytes,
    out_in_weights,
    to_out_in,
)
from jgem.models.head import vocab_logprobs
from jgem.models.kvcache import KVCache, init_cache
from jgem.models.transformer import Transformer

Array = jax.Array
__all__ = ["Sampler", "SampleOutput", "cpu_decode_mesh", "sample_logits", "token_logprobs"]
DEFAULT_PROMPT_BUCKETS = tuple(2**i for i in range(6, 16))  # 64 .. 32768
MIN_PHASE_STEPS = 32  # `Sampler(decode_phases=...)`: the shortest decode phase, in steps


# ---------------------------------------------------------------------- teacher-forced log-probs


def token_logprobs(
    model: Transformer,
    tokens: Array,
    positions: Array,
    segment_ids: Array | None = None,
    *,
    chunk_size: int = 1024,
    temperature: float = 1.0,
    keep_logits_mb: float = 0.0,
) -> tuple[Array, Array]:
    """logprobs, entropy f32[B,T]: logprobs[:, t] = log p(tokens[:, t] | tokens[:, <t]); entropy[:, t] is the
    entropy of that predictive distribution. Both are 0 at t=0, at segment starts and on padding (segment 0).

    The vocab projection runs over chunks of `chunk_size` tokens, recomputed in the backward pass
    (`jgem.models.head`), so memory stays O(chunk_size * V) whatever B*T is; unless all B*T x V float32 logits
    take at most `keep_logits_mb` MB: then they are computed in one piece and the backward pass reuses them.
    Differentiable.
    """
    h, _ = model.hidden(tokens, positions, segment_ids=segment_ids)
    b, t, d = h.shape
    h_prev = jnp.concatenate([jnp.zeros((b, 1, d), h.dtype), h[:, :-1]], axis=1)  # h_prev[t] predicts tokens[t]
    first = jnp.arange(t)[None, :] == 0
    if segment_ids is None:
        valid = jnp.broadcast_to(~first, (b, t))
    else:
        prev_seg = jnp.concatenate([jnp.zeros((b, 1), segment_ids.dtype), segment_ids[:, :-1]], axis=1)
        valid = ~first & (segment_ids == prev_seg) & (segment_ids != 0)
    n = b * t
    keep = n * model.cfg.vocab_size * 4 <= keep_logits_mb * 2**20
    c = n if keep else max(1, min(chunk_size, n))  # kept logits need no chunking: one bigger matmul
    chunks = math.ceil(n / c)
    hf = jnp.pad(h_prev.reshape(n, d), ((0, chunks * c - n), (0, 0)))
    tf = jnp.pad(tokens.reshape(n), (0, chunks * c - n))
    w, vocab_major = model.head_weight(h.dtype)
    lp, ent = vocab_logprobs(hf, tf, w, temperature, chunk=c, vocab_major=vocab_major, keep_logits=keep)
    lp = lp[:n].reshape(b, t)
    ent = ent[:n].reshape(b, t)
    return jnp.where(valid, lp, 0.0), jnp.where(valid, ent, 0.0)


# ---------------------------------------------------------------------- sampling


@flax.struct.dataclass
class SampleOutput:
    tokens: Array  # int32[B,N]; pad_id after a row stops
    logprobs: Array  # f32[B,N]; 0 after a row stops
    lengths: Array  # int32[B]; tokens produced, including the EOS / stop sequence


@flax.struct.dataclass
class _Loop:
    step: Array  # int32[]: index of the next token to sample
    last: Array  # int32[B]: token to feed next
    pos: Array  # int32[B]: its position
    done: Array  # bool[B]
    recent: Array  # int32[B,L]: last L sampled tokens (stop-sequence window)
    tokens: Array
    logprobs: Array
    lengths: Array
    cache: KVCache
    rng: Array


def first_argmax(x: Array, top: Array | None = None, axis: int = -1) -> Array:
    """jnp.argmax(x, axis) (the first index of the max) for rows without NaN, as two plain reductions: XLA:CPU's
    fused (value, index) argmax reduce is 4-6x slower (2.4 vs 0.4 ms for [32, 32000]). `top`: the max along
    `axis`, if known (kept as a size-1 axis). Indices are exact in float32 up to 2**24."""
    axis = axis % x.ndim
    top = jnp.max(x, axis=axis, keepdims=True) if top is None else top
    iota = jax.lax.broadcasted_iota(jnp.float32, x.shape, axis)
    idx = jnp.min(jnp.where(x == top, iota, jnp.inf), axis=axis)
    return jnp.minimum(idx, x.shape[axis] - 1).astype(jnp.int32)  # a NaN row (no index matches) gives the last


def sample_logits(
    logits: Array,
    rng: Array,
    temperature: Array,
    top_p: Array,
    top_k: Array,
    greedy: Array,
    *,
    vocab_first: bool = False,
) -> tuple[Array, Array]:
    """logits f32[B,V] (f32[V,B] with `vocab_first`) -> (token int32[B], behaviour logprob f32[B]). Scalars are
    traced (no recompiles).

    `rng`: one key for the whole batch, or a key per row ([B]; what `Sampler` passes, so a row's draw does not
    depend on how the batch is split over devices). `vocab_first` is the CPU decode's layout (the head computed
    as [V,D] @ h^T): the greedy pick and the normaliser reduce over the vocab axis as it is, and only sampling
    transposes to [B,V]."""
    ax = 0 if vocab_first else 1
    scaled = logits / jnp.maximum(temperature, 1e-6)
    top = jnp.max(scaled, axis=ax, keepdims=True)
    lse = jnp.squeeze(top, ax) + jnp.log(jnp.sum(jnp.exp(scaled - top), axis=ax))  # the log-softmax's normaliser

    def truncate(x):
        srt = -jnp.sort(-x, axis=-1)  # descending
        probs = jax.nn.softmax(srt, axis=-1)
        keep = (jnp.cumsum(probs, axis=-1) - probs) < top_p
        keep &= (top_k <= 0) | (jnp.arange(x.shape[-1]) < top_k)
        thr = jnp.min(jnp.where(keep, srt, jnp.inf), axis=-1, keepdims=True)
        return jnp.where(x >= thr, x, -jnp.inf)

    def sample(x):
        x = jax.lax.cond((top_p < 1.0) | (top_k > 0), truncate, lambda y: y, x)
        # jax.random.categorical's draw (argmax of x plus Gumbel noise), with `first_argmax`: 3x faster on CPU.
        if rng.ndim == 0:
            noise = jax.random.gumbel(rng, x.shape, x.dtype)
        else:
            noise = jax.vmap(lambda k: jax.random.gumbel(k, x.shape[1:], x.dtype))(rng)
        return first_argmax(x + noise)

    # A real branch: greedy decoding skips the sort and the random bits ([B,V] each step).
    tok = jax.lax.cond(greedy, lambda x: first_argmax(x, top, axis=ax), lambda x: sample(x.T if ax == 0 else x), scaled)
    return tok, jnp.squeeze(jnp.take_along_axis(scaled, jnp.expand_dims(tok, ax), axis=ax), ax) - lse


def _stopped(tok: Array, recent: Array, eos: Array, stop: Array) -> tuple[Array, Array]:
    """Appends tok[B] to recent[B,L]; done if tok is an EOS id or recent ends with a stop sequence (stop[S,L],
    right-aligned, -1 = wildcard)."""
    recent = jnp.concatenate([recent[:, 1:], tok[:, None]], axis=1)
    hit = jnp.any(tok[:, None] == eos[None, :], axis=1)
    if stop.shape[0]:
        match = (stop[None] == -1) | (recent[:, None, :] == stop[None])  # [B,S,L]
        hit |= jnp.any(jnp.all(match, axis=-1), axis=-1)
    return hit, recent


def _grow(cache: KVCache, extra: int) -> KVCache:
    """Appends `extra` empty slots (segment 0) to every row of the cache."""
    pad = lambda x, axis: jnp.pad(x, [(0, extra if i == axis else 0) for i in range(x.ndim)])
    return KVCache(
        k=tuple(pad(x, 3) for x in cache.k),
        v=tuple(pad(x, 2) for x in cache.v),
        segment_ids=pad(cache.segment_ids, 1),
        end=cache.end,
    )


def decode_phase_ends(max_new: int, phases: int, min_steps: int | None = None) -> list[int]:
    """The step at which each decode phase ends (the last is max_new): `phases` equal runs of steps, rounded up to
    a multiple of 8 and at least `min_steps` (default MIN_PHASE_STEPS) long, so short generations take fewer
    phases (one for up to min_steps steps): each phase compiles a loop body of its own."""
    min_steps = MIN_PHASE_STEPS if min_steps is None else min_steps
    chunk = max(min_steps, -(-max_new // (8 * phases)) * 8)
    return list(range(chunk, max_new, chunk)) + [max_new]


@partial(jax.jit, static_argnums=1)
def _transposed(ws: list[Array], n_in: tuple[int, ...]) -> list[Array]:
    # A jit of its own: its outputs are row-major [out, in] arrays (inside the generate jit XLA would turn the
    # transpose into a layout change, and the dots would read the weights column-major).
    return [to_out_in(w, k) for w, k in zip(ws, n_in)]


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


class Sampler:
    """Batched generation with prompt-length (and batch-size) buckets, so compilations stay bounded.

    With `mesh`, prompts and the KV cache are sharded over the batch axes (`batch_axes` present in the mesh);
    params are used as placed by the caller. When the mesh is pure data parallelism (every axis of size > 1 is a
    batch axis) and the params are replicated over it, each device decodes its rows in a loop of its own: no
    collective per step, and a device stops when its rows are done. That is also how a small model uses several
    CPU cores: one JAX device per core and a data mesh over them (`cpu_decode_mesh` says when it pays). Every row
    samples with a key of its own (the step's key folded with the row's index), so the tokens do not depend on
    the mesh.

    `out_in_decode` runs the decode steps on a transposed copy of the projection weights ([out, in],
    `jgem.models.cpu.out_in_weights`), which XLA:CPU's few-row matmuls stream 13-30% faster when the weights do
    not fit in cache. None (the default) turns it on for the CPU backend when one layer's projections take at least
    8 MiB, for batches up to 128 rows (measured: 8-128); True or False force it for every call. The copy is made
    once per parameter version (a jitted transpose, 0.1-0.2 s for 100M parameters) and kept for later calls with
    the same param arrays, such as the turns of a multi-turn rollout: it costs one more copy of those weights in
    memory (`clear_cache` frees it).

    `decode_phases` splits the decode steps into up to that many runs (multiples of 8 steps, at least
    MIN_PHASE_STEPS long: one run for up to 32 new tokens), one `while_loop` each, whose cache holds only the slots
    filled by the run's end: with 4 phases a step attends to P + 5N/8 slots on average, not P + N (P prompt bucket,
    N max_new_tokens). Each phase compiles its own loop body, so the first call of a shape compiles longer
    (2.2 -> 3.5 s for the tiny preset, 13 -> 16 s for the 100m one); 1 gives one loop.
    """

    def __init__(
        self,
        cfg: ModelConfig,
        *,
        eos_ids: Sequence[int],
        pad_id: int = 0,
        max_prompt_buckets: Sequence[int] = DEFAULT_PROMPT_BUCKETS,
        batch_buckets: Sequence[int] | None = None,
        mesh: Mesh | None = None,
        batch_axes: Sequence[str] = ("data", "fsdp"),
        cache_dtype: str | None = None,
        out_in_decode: bool | None = None,
        decode_phases: int = 4,
    ):
        self.cfg = cfg
        self.eos_ids = np.asarray(sorted(set(int(e) for e in eos_ids)) or [-1], np.int32)
        self.pad_id = int(pad_id)
        self.prompt_buckets = tuple(sorted(int(b) for b in max_prompt_buckets))
        self.batch_buckets = None if batch_buckets is None else tuple(sorted(int(b) for b in batch_buckets))
        self.mesh = mesh
        self.batch_axes = tuple(a for a in batch_axes if mesh is not None and a in mesh.shape)
        self.batch_multiple = 1 if mesh is None else math.prod(mesh.shape[a] for a in self.batch_axes)
        self.cache_dtype = cache_dtype
        if int(decode_phases) < 1:
            raise ValueError(f"decode_phases must be >= 1, got {decode_phases}")
        self.decode_phases = int(decode_phases)
        if out_in_decode is None:
            self.out_in_decode = cpu_tuning("out_in_decode") and layer_projection_bytes(cfg) >= OUT_IN_MIN_BYTES
            self.out_in_max_batch = OUT_IN_MAX_BATCH
        else:
            self.out_in_decode, self.out_in_max_batch = bool(out_in_decode), None
        self._out_in: tuple[list[weakref.ref], list[Array]] | None = None  # (the sources, their [out, in] copies)
        self._traces = 0
        # Pure data parallelism (every mesh axis of size > 1 is a batch axis): with replicated params each device
        # can decode its rows in a loop of its own (`_generate_per_device`).
        self._data_only = self.batch_multiple > 1 and all(a in self.batch_axes for a, n in mesh.shape.items() if n > 1)
        self._jit = jax.jit(self._generate_entry, static_argnums=(0, 1, 2))

    def _use_out_in(self, bsz: int) -> bool:
        return self.out_in_decode and (self.out_in_max_batch is None or bsz <= self.out_in_max_batch)

    def clear_cache(self) -> None:
        """Drops the [out, in] weight copies (`out_in_decode`): frees their memory; the next call remakes them."""
        self._out_in = None

    @property
    def num_compilations(self) -> int:
        return self._traces

    def _bucket_prompt(self, n: int) -> int:
        for b in self.prompt_buckets:
            if b >= n:
                return b
        raise ValueError(
            f"prompt of {n} tokens exceeds the largest prompt bucket {self.prompt_buckets[-1]}; "
            "add a larger bucket to max_prompt_buckets or truncate the prompt"
        )

    def _bucket_batch(self, n: int) -> int:
        if self.batch_buckets is None:
            b = _pow2(n)
        else:
            b = next((x for x in self.batch_buckets if x >= n), None)
            if b is None:
                raise ValueError(f"batch of {n} prompts exceeds the largest batch bucket {self.batch_buckets[-1]}")
        m = self.batch_multiple
        return -(-b // m) * m

    def _shard(self, x: np.ndarray) -> Array:
        if self.mesh is None:
            return jnp.asarray(x)
        spec = PartitionSpec(self.batch_axes or None, *([None] * (x.ndim - 1)))
        return jax.device_put(x, NamedSharding(self.mesh, spec))

    def generate(
        self,
        model: Transformer | tuple[Any, Any],
        prompts: Sequence[Sequence[int]],
        rng: Array,
        *,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        greedy: bool = False,
        stop_sequences: Sequence[Sequence[int]] = (),
    ) -> SampleOutput:
        """Samples up to max_new_tokens per prompt. Returns device arrays without blocking."""
        if not prompts:
            raise ValueError("generate() needs at least one prompt")
        lens = [len(p) for p in prompts]
        if min(lens) < 1:
            raise ValueError(f"prompt {lens.index(0)} is empty; every prompt needs at least one token (e.g. BOS)")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        bsz, plen = self._bucket_batch(len(prompts)), self._bucket_prompt(max(lens))
        tokens = np.full((bsz, plen), self.pad_id, np.int32)
        positions = np.zeros((bsz, plen), np.int32)
        segs = np.zeros((bsz, plen), np.int32)
        for i, p in enumerate(prompts):
            n = len(p)
            tokens[i, plen - n :] = p
            positions[i, plen - n :] = np.arange(n)
            segs[i, plen - n :] = 1
        active = np.arange(bsz) < len(prompts)
        # Stop sequences are padded to power-of-two buckets (rows of -3 never match) to avoid recompiles.
        width = _pow2(max([len(s) for s in stop_sequences] + [8]))
        stop = np.full((_pow2(max(len(stop_sequences), 4)), width), -3, np.int32)
        for i, s in enumerate(stop_sequences):
            if len(s) == 0:
                raise ValueError(f"stop sequence {i} is empty")
            stop[i, : width - len(s)] = -1
            stop[i, width - len(s) :] = s
        if isinstance(model, nnx.Module):
            graphdef, state = nnx.split(model)
        else:
            graphdef, state = model
        per_device = self._data_only and all(
            getattr(x, "sharding", None) is None or x.sharding.is_fully_replicated for x in jax.tree.leaves(state)
        )
        out = self._jit(
            graphdef,
            int(max_new_tokens),
            per_device,
            state,
            self._out_in_state(state) if self._use_out_in(bsz) else None,
            self._shard(tokens),
            self._shard(positions),
            self._shard(segs),
            self._shard(active),
            rng,
            jnp.float32(temperature),
            jnp.float32(top_p),
            jnp.int32(top_k),
            jnp.bool_(greedy),
            jnp.asarray(self.eos_ids),
            jnp.asarray(stop),
        )
        if bsz == len(prompts):
            return out
        return jax.tree.map(lambda x: x[: len(prompts)], out)

    def _generate_entry(self, graphdef, max_new: int, per_device: bool, state, state_t, tokens, *args):
        self._traces += 1  # runs once per trace, i.e. per compilation
        if not per_device:
            return self._generate(graphdef, max_new, 0, state, state_t, tokens, *args)
        return self._generate_per_device(graphdef, max_new, state, state_t, tokens, *args)

    def _generate_per_device(self, graphdef, max_new: int, state, state_t, tokens, positions, segs, active, *rest):
        """`_generate` on each device's rows, in a decode loop of its own (shard_map over the batch axes): no
        collective per step (the loop's all-rows-done test stays on the device), and a device whose rows are all
        done stops. On CPU this is what makes several devices pay: XLA:CPU runs a small model's decode dots one
        at a time on one thread, and each device's loop runs on a thread of its own (docs/benchmarks.md)."""
        rows, rep = PartitionSpec(self.batch_axes), PartitionSpec()

        def local(state, state_t, tokens, positions, segs, active, *rest):
            row0 = jax.lax.axis_index(self.batch_axes) * tokens.shape[0]
            args = (state, state_t, tokens, positions, segs, active, *rest)
            return self._generate(graphdef, max_new, row0, *args, constrain=False)

        return jax.shard_map(
            local,
            mesh=self.mesh,
            in_specs=(rep, rep, rows, rows, rows, rows) + (rep,) * len(rest),
            out_specs=SampleOutput(rows, rows, rows),
            check_vma=False,
        )(state, state_t, tokens, positions, segs, active, *rest)

    def _generate(
        self,
        graphdef,
        max_new: int,
        row0: Array | int,
        state,
        state_t,
        tokens,
        positions,
        segs,
        active,
        rng,
        temperature,
        top_p,
        top_k,
        greedy,
        eos,
        stop,
        *,
        constrain: bool = True,
    ) -> SampleOutput:
        """The rows of `tokens` (the global rows row0, row0 + 1, ...: each row samples with a key of its own, so the
        draws do not depend on how the batch is split over devices). `constrain`: keep the cache sharded over the
        mesh (off inside the per-device loops, where the mesh axes are manual)."""
        place = self._constrain if constrain else (lambda c: c)
        model = nnx.merge(graphdef, state)
        # The decode steps read the projections as [out, in] from state_t (see `out_in_decode`).
        model_t, layout = (
            (model, contextlib.nullcontext) if state_t is None else (nnx.merge(graphdef, state_t), out_in_weights)
        )
        vfirst = state_t is not None
        bsz, plen = tokens.shape
        # Prefill into a prompt-sized cache (attention over P keys, not P+N); the decode phases below grow it.
        cache = place(init_cache(self.cfg, bsz, plen, self.cache_dtype))
        h, cache = model.hidden(tokens, positions, segment_ids=segs, cache=cache)
        logits = model.logits(h[:, -1:])[:, 0]
        row_ids = row0 + jnp.arange(bsz, dtype=jnp.int32)
        row_keys = lambda key: jax.vmap(jax.random.fold_in, (None, 0))(key, row_ids)
        rng, sub = jax.random.split(rng)
        tok, lp = sample_logits(logits, row_keys(sub), temperature, top_p, top_k, greedy)
        recent = jnp.full((bsz, stop.shape[1]), -2, jnp.int32)
        hit, recent = _stopped(tok, recent, eos, stop)
        loop = _Loop(
            step=jnp.ones((), jnp.int32),
            last=tok,
            pos=positions[:, -1] + 1,
            done=hit | ~active,
            recent=recent,
            tokens=jnp.full((bsz, max_new), self.pad_id, jnp.int32).at[:, 0].set(tok),
            logprobs=jnp.zeros((bsz, max_new), jnp.float32).at[:, 0].set(lp),
            lengths=jnp.where(active, 1, 0).astype(jnp.int32),
            cache=cache,
            rng=rng,
        )

        def body(s: _Loop) -> _Loop:
            with layout():
                h, cache = model_t.hidden(
                    s.last[:, None], s.pos[:, None], segment_ids=jnp.ones((bsz, 1), jnp.int32), cache=s.cache
                )
                # [V, B] as the [out, in] head computes it (no transpose of the logits), else [B, V]
                logits = model_t.logits(h, vocab_first=True) if vfirst else model_t.logits(h)[:, 0]
            rng, sub = jax.random.split(s.rng)
            tok, lp = sample_logits(logits, row_keys(sub), temperature, top_p, top_k, greedy, vocab_first=vfirst)
            tok = jnp.where(s.done, self.pad_id, tok)
            lp = jnp.where(s.done, 0.0, lp)
            hit, recent = _stopped(tok, s.recent, eos, stop)
            return _Loop(
                step=s.step + 1,
                last=tok,
                pos=s.pos + 1,
                done=s.done | hit,
                recent=recent,
                tokens=jax.lax.dynamic_update_slice(s.tokens, tok[:, None], (0, s.step)),
                logprobs=jax.lax.dynamic_update_slice(s.logprobs, lp[:, None], (0, s.step)),
                lengths=s.lengths + (~s.done).astype(jnp.int32),
                cache=place(cache),
                rng=rng,
            )

        # One while loop per phase, each over a cache just long enough for its steps: step s writes slot P+s-1,
        # so attention reads the slots filled so far (to the phase's end), not all P+N of them.
        start = 0
        for end in decode_phase_ends(max_new, self.decode_phases):
            loop = loop.replace(cache=place(_grow(loop.cache, end - start)))
            loop = jax.lax.while_loop(lambda s, end=end: (s.step < end) & ~jnp.all(s.done), body, loop)
            start = end
        return SampleOutput(tokens=loop.tokens, logprobs=loop.logprobs, lengths=loop.lengths)

    def _out_in_state(self, state):
        """`state` with every projection weight (and an untied lm_head) as a 2-D [out, in] copy, reused while
        the caller passes the same param arrays."""
        flat = list(nnx.to_flat_state(state))
        picks = [
            i
            for i, (path, _) in enumerate(flat)
            if path == ("lm_head",) or (len(path) >= 2 and path[-2] in ("attn", "mlp") and path[-1] in PROJECTIONS)
        ]
        sources = [flat[i][1][...] for i in picks]
        cached = self._out_in
        if cached is None or len(cached[0]) != len(sources) or any(r() is not a for r, a in zip(cached[0], sources)):
            n_in = tuple(PROJECTIONS.get(flat[i][0][-1], 1) for i in picks)
            self._out_in = None  # drop the old copies before making new ones
            cached = self._out_in = ([weakref.ref(a) for a in sources], _transposed(sources, n_in))
        for i, t in zip(picks, cached[1]):
            flat[i] = (flat[i][0], flat[i][1].replace(t))
        return nnx.from_flat_state(flat)

    def _constrain(self, cache: KVCache) -> KVCache:
        """Keeps the cache sharded over the batch axes (and kv heads over `tensor` when it divides)."""
        if self.mesh is None:
            return cache
        batch = self.batch_axes or None
        t = self.mesh.shape.get("tensor", 1)
        heads = "tensor" if t > 1 and self.cfg.num_kv_heads % t == 0 else None
        kv = NamedSharding(self.mesh, PartitionSpec(batch, heads, None, None))  # k [B,K,H,S], v [B,K,S,H]
        seg = NamedSharding(self.mesh, PartitionSpec(batch, None))
        c = partial(jax.lax.with_sharding_constraint)
        return KVCache(
            k=tuple(c(x, kv) for x in cache.k),
            v=tuple(c(x, kv) for x in cache.v),
            segment_ids=c(cache.segment_ids, seg),
            end=cache.end,
        )
