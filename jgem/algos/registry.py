"""A named registry: what `--algorithm`, `--learner.policy-loss`, `--learner.kl-estimator`, `--learner.aggregation`
and `--learner.schedule` choose from (docs/algorithms.md). One class for the whole package (`jgem.registry.Registry`,
which the envs' tool-call formats use too); light: no jax here, so the config can read the names."""

from __future__ import annotations

from jgem.registry import Registry

__all__ = ["Registry"]
