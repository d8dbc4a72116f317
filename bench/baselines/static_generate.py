"""Static-batch generation: the peer of the rollout engine in bench/rollout.py, on the model's one cache type.

It does what jgem's old `Sampler.generate` did (removed after commit 2f11069, when the engine became jgem's only
sampler): a call takes a static batch of prompts, pads it to a power-of-two batch bucket and the longest prompt
to a power-of-two prompt bucket P, prefills every prompt whole from position 0 into a fresh `SlotCache` of P + N
slots (N = max_new_tokens; padding writes nothing), then decodes all rows in one `lax.while_loop` until every row
has stopped (a stop token) or N steps ran. Each row sits at its own positions; every step attends all P + N slots.
Nothing carries over between calls: a multi-turn caller prefills each turn's whole prompt again. (The old sampler
also split the decode into phases over a growing cache and could decode on [out, in] weight copies on CPU; this
baseline does neither.) Sampling and log-probs are the engine's (`jgem.rollout.sampling.sample_logits`), each row
drawing with a key of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jgem.models.config import ModelConfig
from jgem.models.kvcache import init_slots
from jgem.rollout.sampling import sample_logits
from jgem.shapes import next_pow2

Array = jax.Array
MIN_PROMPT_BUCKET = 64


@flax.struct.dataclass
class StaticOutput:
    tokens: Array  # int32[B, N]; pad_id after a row stops
    logprobs: Array  # f32[B, N]; 0 after a row stops
    lengths: Array  # int32[B]: tokens produced, the stop token included


class StaticGenerate:
    """`generate(model, prompts, rng, max_new_tokens=...)` over a static batch (see the module docstring). Compiles
    once per (batch bucket, prompt bucket, max_new_tokens): `num_compilations`."""

    def __init__(self, cfg: ModelConfig, *, eos_ids: Sequence[int], pad_id: int = 0) -> None:
        self.cfg = cfg
        self.eos_ids = np.asarray(sorted({int(e) for e in eos_ids}) or [-1], np.int32)
        self.pad_id = int(pad_id)
        self._traces = 0
        self._jit = jax.jit(self._generate, static_argnums=(0, 1))

    @property
    def num_compilations(self) -> int:
        return self._traces

    def bucket_batch(self, n: int) -> int:
        return next_pow2(n)

    def bucket_prompt(self, n: int) -> int:
        return max(MIN_PROMPT_BUCKET, next_pow2(n))

    def generate(
        self,
        model: nnx.Module | tuple[Any, Any],
        prompts: Sequence[Sequence[int]],
        rng: Array,
        *,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        greedy: bool = False,
    ) -> StaticOutput:
        """Up to max_new_tokens per prompt; device arrays, returned without blocking."""
        lens = [len(p) for p in prompts]
        if not prompts or min(lens) < 1 or max_new_tokens < 1:
            raise ValueError(f"need prompts of >= 1 token ({lens}) and max_new_tokens >= 1 ({max_new_tokens})")
        bsz, plen = self.bucket_batch(len(prompts)), self.bucket_prompt(max(lens))
        tokens = np.full((bsz, plen), self.pad_id, np.int32)
        for i, p in enumerate(prompts):
            tokens[i, : len(p)] = p
        lengths = np.ones(bsz, np.int32)  # padding rows: one token, never sampled from (inactive)
        lengths[: len(prompts)] = lens
        graphdef, state = nnx.split(model) if isinstance(model, nnx.Module) else model
        out = self._jit(
            graphdef,
            int(max_new_tokens),
            state,
            jnp.asarray(tokens),
            jnp.asarray(lengths),
            jnp.asarray(np.arange(bsz) < len(prompts)),
            rng,
            jnp.float32(temperature),
            jnp.float32(top_p),
            jnp.int32(top_k),
            jnp.bool_(greedy),
            jnp.asarray(self.eos_ids),
        )
        return out if bsz == len(prompts) else jax.tree.map(lambda x: x[: len(prompts)], out)

    def _generate(
        self, graphdef, max_new: int, state, tokens, lengths, active, rng, temperature, top_p, top_k, greedy, eos
    ) -> StaticOutput:
        self._traces += 1  # runs once per trace, i.e. per compilation
        model = nnx.merge(graphdef, state)
        bsz, plen = tokens.shape
        settings = (temperature, top_p, top_k, greedy)
        row_keys = lambda key: jax.vmap(jax.random.fold_in, (None, 0))(key, jnp.arange(bsz, dtype=jnp.int32))
        # prefill: the whole prompt of every row, from position 0, into a fresh cache of P + N slots
        pos = jnp.broadcast_to(jnp.arange(plen, dtype=jnp.int32), (bsz, plen))
        seg = (pos < lengths[:, None]).astype(jnp.int32)
        h, cache = model.hidden(tokens, pos, segment_ids=seg, cache=init_slots(self.cfg, bsz, plen + max_new))
        h_last = jnp.take_along_axis(h, (lengths - 1)[:, None, None], axis=1)  # each row's last prompt token
        rng, sub = jax.random.split(rng)
        tok, lp = sample_logits(model.logits(h_last)[:, 0], row_keys(sub), *settings)
        done = ~active | jnp.isin(tok, eos)
        init = (
            jnp.ones((), jnp.int32),
            tok,
            lengths,
            done,
            jnp.full((bsz, max_new), self.pad_id, jnp.int32).at[:, 0].set(tok),
            jnp.zeros((bsz, max_new), jnp.float32).at[:, 0].set(lp),
            active.astype(jnp.int32),
            cache,
            rng,
        )

        def body(c):
            step, last, pos, done, toks, lps, n, cache, rng = c
            live = (~done)[:, None].astype(jnp.int32)  # a stopped row writes nothing
            h, cache = model.hidden(last[:, None], pos[:, None], segment_ids=live, cache=cache)
            rng, sub = jax.random.split(rng)
            tok, lp = sample_logits(model.logits(h)[:, 0], row_keys(sub), *settings)
            tok = jnp.where(done, self.pad_id, tok)
            lp = jnp.where(done, 0.0, lp)
            toks = jax.lax.dynamic_update_slice(toks, tok[:, None], (0, step))
            lps = jax.lax.dynamic_update_slice(lps, lp[:, None], (0, step))
            n = n + (~done).astype(jnp.int32)
            return step + 1, tok, pos + 1, done | jnp.isin(tok, eos), toks, lps, n, cache, rng

        more = lambda c: (c[0] < max_new) & ~jnp.all(c[3])
        _, _, _, _, toks, lps, n, _, _ = jax.lax.while_loop(more, body, init)
        return StaticOutput(tokens=toks, logprobs=lps, lengths=n)
