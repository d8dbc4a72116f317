"""Off-policy corrections (pure jnp): how the learner weighs and masks tokens sampled by another policy.

Three policies meet in an update: the *behaviour* policy that sampled a token (the sampler at the version that
sampled it; its log-prob is `TrainBatch.old_logprobs` as packed), the *proximal* policy (the learner's params
before this update, recomputed by the learner on every action token), and the current policy being optimised.
With a correction on (`--learner.correction`), the learner first computes the proximal log-probs, then:

- the policy loss's ratio is taken against the proximal policy (PPO's clip is around it: decoupled PPO);
- the registered correction turns `rho = pi_prox / pi_behav` per token into a stop-gradient weight on each
  token's policy loss, and the tokens to drop from the loss (out of its numerator and its denominator, with
  their KL and entropy terms too).

`CORRECTIONS` maps a name to a `CorrectionSpec`: `fn(log_rho f32[B, T], mask bool[B, T], segment_ids i32[B, T],
low, high) -> Correction(weights, keep, capped)` and the bounds it takes (`None`: none), which are its defaults for
`--learner.correction-low` / `--learner.correction-high`. `log_rho` is 0 off `mask`; outputs matter on `mask` only.
`correct` applies one to a batch; `--learner.tis-cap C` (older runs) is `tis` with the cap C. docs/algorithms.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jgem.algos.losses import response_mean
from jgem.registry import Registry


class Correction(NamedTuple):
    """weights f32[B, T]: each token's factor on its policy loss (0 takes it out of the loss, not the denominator);
    keep bool[B, T]: the tokens that stay in the loss (False: dropped from it and from its denominator);
    capped bool[B, T]: the tokens whose weight the correction truncated."""

    weights: jax.Array
    keep: jax.Array
    capped: jax.Array


@dataclass(frozen=True)
class CorrectionSpec:
    """A registered correction: its function and its default bounds on rho (None: it takes no such bound)."""

    fn: Callable[..., Correction]
    low: float | None = None
    high: float | None = None
    summary: str = ""


CORRECTIONS: Registry[CorrectionSpec] = Registry("off-policy correction")


def resolve(cfg: Any) -> tuple[str, float | None, float | None]:
    """(correction name, low, high) of a `LearnerConfig`, the entry's defaults filled in; ("none", None, None) when
    off. `tis_cap` is `tis` with that cap (its flag predates the registry)."""
    name = cfg.correction
    if cfg.tis_cap is not None:
        return "tis", None, cfg.tis_cap
    if name == "none":
        return "none", None, None
    spec = CORRECTIONS.get(name)
    low = spec.low if cfg.correction_low is None else cfg.correction_low
    high = spec.high if cfg.correction_high is None else cfg.correction_high
    return name, low, high


def correction_errors(cfg: Any, name: Callable[[str], str] = str) -> list[str]:
    """What is wrong with a `LearnerConfig`'s correction (each message names the fields as `name(field)`)."""
    if unknown := CORRECTIONS.name_errors(cfg.correction, name("correction"), also=("none",)):
        return unknown
    if cfg.tis_cap is not None and cfg.correction not in ("none", "tis"):
        return [
            f"{name('tis_cap')} {cfg.tis_cap} is the tis correction with that cap; it cannot go with "
            f"{name('correction')} {cfg.correction!r}: drop {name('tis_cap')} ({name('correction_high')} sets the "
            f"bound of {cfg.correction!r})"
        ]
    if cfg.tis_cap is not None and (cfg.correction_low, cfg.correction_high) != (None, None):
        return [
            f"{name('tis_cap')} and {name('correction_low')} / {name('correction_high')} both set tis's bounds; "
            f"use {name('correction')} tis with {name('correction_high')} alone"
        ]
    if cfg.correction == "none":
        return [
            f"{name(k)} {getattr(cfg, k)} is set but {name('correction')} is none; pick a correction or drop it"
            for k in ("correction_low", "correction_high")
            if getattr(cfg, k) is not None
        ]
    spec = CORRECTIONS.get(cfg.correction)
    errors = [
        f"{name(k)}: the correction {cfg.correction!r} takes no {k.split('_')[1]} bound"
        for k, default in (("correction_low", spec.low), ("correction_high", spec.high))
        if getattr(cfg, k) is not None and default is None
    ]
    if errors:
        return errors
    _, low, high = resolve(cfg)
    finite = lambda x: isinstance(x, (int, float)) and not isinstance(x, bool) and x == x and abs(x) != float("inf")
    if low is not None and not (finite(low) and low >= 0):
        errors.append(f"{name('correction_low')} is {low!r}; it must be a finite number >= 0")
    if high is not None and not (finite(high) and high > 0):
        errors.append(f"{name('correction_high')} is {high!r}; it must be a finite number > 0")
    if not errors and low is not None and high is not None and low >= high:
        errors.append(
            f"{name('correction_low')} {low} must be below {name('correction_high')} {high} (the {cfg.correction!r} "
            "correction keeps the tokens whose ratio lies between them)"
        )
    return errors


def correct(batch: Any, prox_logprobs: jax.Array, cfg: Any) -> tuple[Any, dict[str, jax.Array]]:
    """`batch` (a TrainBatch whose `old_logprobs` are the behaviour policy's) corrected by `cfg`'s correction, given
    the proximal policy's log-probs f32[B, T]: the ratio's reference becomes the proximal policy, `sampler_logprobs`
    keeps the behaviour's, `is_weights` holds the weights (0 off the loss) and `loss_mask` loses the dropped tokens.
    Metrics over the action tokens: is_masked_frac (out of the policy loss: dropped or weighted 0), is_capped_frac
    (weight truncated), is_weight_mean (over the tokens still in the policy loss)."""
    name, low, high = resolve(cfg)
    if name == "none":
        raise ValueError("correct: the LearnerConfig has no correction (learner.correction none, no tis_cap)")
    mask, behav = batch.loss_mask, batch.old_logprobs
    log_rho = jnp.where(mask, prox_logprobs - behav, 0.0)
    out = CORRECTIONS.get(name).fn(log_rho, mask, batch.segment_ids, low, high)
    keep = mask & out.keep
    w = jax.lax.stop_gradient(jnp.where(keep, out.weights, 0.0))
    masked = mask & (~keep | (w == 0.0))
    live = (mask & ~masked).astype(jnp.float32)
    n = jnp.maximum(mask.sum(), 1).astype(jnp.float32)
    metrics = {
        "is_masked_frac": masked.sum() / n,
        "is_capped_frac": (out.capped & mask).sum() / n,
        "is_weight_mean": (w * live).sum() / jnp.maximum(live.sum(), 1.0),
    }
    fixed = batch.replace(old_logprobs=prox_logprobs, sampler_logprobs=behav, is_weights=w, loss_mask=keep)
    return fixed, metrics


def register_correction(name: str, *, low: float | None = None, high: float | None = None, summary: str = ""):
    """Decorator: register `fn(log_rho, mask, segment_ids, low, high) -> Correction` with its default bounds."""

    def add(fn):
        CORRECTIONS.register(name, CorrectionSpec(fn, low, high, summary or (fn.__doc__ or "").split("\n")[0]))
        return fn

    return add


def _in_range(log_x: jax.Array, low: float, high: float) -> jax.Array:
    """low <= exp(log_x) <= high, in log space (low 0: no lower bound)."""
    above = log_x >= jnp.log(low) if low > 0 else jnp.ones(log_x.shape, bool)
    return above & (log_x <= jnp.log(high))


@register_correction("tis", high=2.0)
def tis(log_rho, mask, segment_ids, low, high):
    """Truncated importance sampling (Yao et al., 2025): weight min(rho, C), C = correction_high (default 2)."""
    rho = jnp.exp(log_rho)
    return Correction(jnp.minimum(rho, high), jnp.ones(mask.shape, bool), rho > high)


@register_correction("mis", low=0.0, high=2.0)
def mis(log_rho, mask, segment_ids, low, high):
    """Masked importance sampling (Liu et al., 2025): weight rho, tokens with rho outside [low, high] dropped
    (default [0, 2]: only the upper bound)."""
    return Correction(jnp.exp(log_rho), _in_range(log_rho, low, high), jnp.zeros(mask.shape, bool))


@register_correction("icepop", low=0.5, high=5.0)
def icepop(log_rho, mask, segment_ids, low, high):
    """IcePop (Ring-1T, 2025): M(rho; alpha, beta) = rho inside [alpha, beta], else the token is dropped; the paper's
    alpha 0.5, beta 5."""
    return mis(log_rho, mask, segment_ids, low, high)


@register_correction("geo_mask", low=0.99, high=1.01)
def geo_mask(log_rho, mask, segment_ids, low, high):
    """Geometric-mean sequence masking: a response (one turn's action) whose exp(mean log rho) lies outside
    [low, high] (default [0.99, 1.01]) is dropped whole; the others weigh 1."""
    log_geo = response_mean(log_rho, mask, segment_ids)
    return Correction(jnp.ones(mask.shape, jnp.float32), _in_range(log_geo, low, high), jnp.zeros(mask.shape, bool))


@register_correction("decoupled", high=5.0)
def decoupled(log_rho, mask, segment_ids, low, high):
    """Decoupled PPO (AReaL, Fu et al., 2025): weight rho = pi_prox / pi_behav; a token whose rho exceeds the cap
    (behav_imp_weight_cap, default 5) gets weight 0 but stays in the loss's denominator, as AReaL's does."""
    rho = jnp.exp(log_rho)
    return Correction(jnp.where(rho <= high, rho, 0.0), jnp.ones(mask.shape, bool), jnp.zeros(mask.shape, bool))
