"""One turn of generation for a batch of prompts on the rollout engine's slots, without envs.

`generate(engine, model, prompts, key, max_new_tokens=...)` puts prompt i in slot i: every token but the last is
prefilled (`SlotEngine.extend`), then decode chunks run over the slots still generating until each has
`max_new_tokens` tokens or sampled a stop token. It is the engine's own path (the same programs, keys and
log-probs as a rollout's first turn), for what generates outside a rollout: parity tests against transformers,
bench/generate.py, scripts. Training, warm start and evaluation play episodes through `RolloutEngine`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from flax import nnx

from jgem.rollout.config import Sampling
from jgem.rollout.slots import SlotEngine

__all__ = ["generate"]


def generate(
    engine: SlotEngine,
    model: nnx.Module | tuple[Any, Any],
    prompts: Sequence[Sequence[int]],
    key: jax.Array,
    *,
    max_new_tokens: int,
    sampling: Sampling | None = None,
    adapters: Sequence[int] | None = None,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per prompt: (tokens int32[n], behaviour log-probs f32[n]), n <= max_new_tokens, a stop token (the engine's
    `eos_ids`) included. Prompt i's draws are keyed as episode i, turn 0 of a rollout with run key `key`, so they
    do not depend on the other prompts; `sampling` defaults to `Sampling()` (temperature 1). Overwrites slots
    0 .. len(prompts) - 1. `adapters`: prompt i's LoRA adapter (policy), for a model with several (default 0)."""
    n = len(prompts)
    if not 1 <= n <= engine.num_local_slots:
        raise ValueError(f"{n} prompts for an engine of {engine.num_local_slots} slots; give 1 to that many")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    for i, p in enumerate(prompts):
        if not 1 <= len(p) <= engine.max_len - max_new_tokens:
            raise ValueError(
                f"prompt {i} has {len(p)} tokens; with max_new_tokens {max_new_tokens} a slot of {engine.max_len} "
                f"takes 1 to {engine.max_len - max_new_tokens}"
            )
    if adapters is not None and len(adapters) != n:
        raise ValueError(f"{len(adapters)} adapters for {n} prompts; give one per prompt")
    for i, a in enumerate(adapters or [0] * n):
        engine.set_adapter(i, int(a))
    model = nnx.split(model) if isinstance(model, nnx.Module) else model
    sampling = Sampling() if sampling is None else sampling
    prompts = [list(map(int, p)) for p in prompts]
    engine.extend(model, [(i, p[:-1], 0) for i, p in enumerate(prompts)])  # the last token is the decode's first
    toks: list[list[int]] = [[] for _ in prompts]
    lps: list[list[float]] = [[] for _ in prompts]
    eos = set(engine.eos_ids.tolist())
    live = list(range(n))
    while live:
        last = [toks[i][-1] if toks[i] else prompts[i][-1] for i in live]
        pos = [len(prompts[i]) - 1 + len(toks[i]) for i in live]
        ntok = [len(toks[i]) for i in live]
        limit, turn = [max_new_tokens] * len(live), [0] * len(live)
        handle, _ = engine.decode(model, live, last, pos, ntok, limit, live, turn, key, sampling)
        for i, (t, lp) in zip(live, engine.fetch(handle)):
            toks[i] += t.tolist()
            lps[i] += lp.tolist()
        live = [i for i in live if len(toks[i]) < max_new_tokens and not (toks[i] and toks[i][-1] in eos)]
    return [(np.asarray(t, np.int32), np.asarray(lp, np.float32)) for t, lp in zip(toks, lps)]
