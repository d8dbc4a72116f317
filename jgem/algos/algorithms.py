"""Algorithms as records: what `--algorithm` names (docs/algorithms.md).

An `Algorithm` says which registered advantage estimator turns per-turn rewards into advantages, which registered
policy loss trains on them, where a KL penalty to the reference policy goes, and whether it needs a critic or
groups of rollouts. The trainer, the config's validation, the ablation scripts and the AOT tool read this registry
and nothing else: adding an algorithm is one `register_algorithm` call (plus a new estimator or loss, if it needs
one, registered beside it). Light: no jax here (the config imports it).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from jgem.registry import Registry


@dataclass(frozen=True)
class Algorithm:
    name: str
    advantage: str  # a registered advantage estimator (jgem.algos.advantages.ADVANTAGES)
    # a registered policy loss (jgem.algos.losses.POLICY_LOSSES); None: `learner.policy_loss` (PPO's clip by default)
    policy_loss: str | None = None
    # where `learner.kl_coef` > 0 puts the KL to the reference policy: "loss": a per-token loss term (estimator
    # `learner.kl_estimator`); "reward": each turn's summed log pi_old - log pi_ref, times kl_coef, taken off its
    # reward before the advantages (REINFORCE++)
    kl: Literal["loss", "reward"] = "loss"
    critic: bool = False  # a value model trained beside the policy (its values go to the estimator)
    grouped: bool = False  # the estimator compares episodes of one start state: needs group_size >= 2
    summary: str = ""  # one line for --help and the docs

    def __post_init__(self) -> None:
        if self.kl not in ("loss", "reward"):
            raise ValueError(f"Algorithm {self.name!r}: kl must be 'loss' or 'reward', got {self.kl!r}")

    def errors(self) -> list[str]:
        """What this record names that nobody registered (a user's record with a typo). Imports the estimators and
        the losses, and with them jax."""
        from jgem.algos.advantages import ADVANTAGES
        from jgem.algos.losses import POLICY_LOSSES

        errors = ADVANTAGES.name_errors(self.advantage, f"algorithm {self.name!r}: advantage estimator")
        if self.policy_loss is not None:
            errors += POLICY_LOSSES.name_errors(self.policy_loss, f"algorithm {self.name!r}: policy loss")
        return errors

    def learner(self, cfg):
        """The `LearnerConfig` this algorithm trains with, from the run's: the record's policy loss, and no KL term
        in the loss when the KL goes into the rewards."""
        if self.kl == "reward":
            cfg = dataclasses.replace(cfg, kl_coef=0.0)
        if self.policy_loss is not None:
            cfg = dataclasses.replace(cfg, policy_loss=self.policy_loss)
        return cfg


ALGORITHMS: Registry[Algorithm] = Registry("algorithm")


def register_algorithm(algorithm: Algorithm, *, overwrite: bool = False) -> Algorithm:
    """Add `algorithm` under its name (a module passed with `--import` may call this)."""
    return ALGORITHMS.register(algorithm.name, algorithm, overwrite=overwrite)


def get_algorithm(name: str) -> Algorithm:
    return ALGORITHMS.get(name)


for _a in (
    Algorithm("rebn", "rebn", summary="REINFORCE with Return Batch Normalization (GEM): any gamma, per-turn rewards"),
    Algorithm("reinforce", "reinforce", summary="REINFORCE: A_t = G_t, the discounted return"),
    Algorithm("rae", "rae", summary="Role-conditioned advantages (SPIRAL's RAE) for multi-agent games: ReBN per seat"),
    Algorithm("grpo", "grpo", grouped=True, summary="GRPO: episode return normalised within its group"),
    Algorithm("drgrpo", "drgrpo", grouped=True, summary="Dr. GRPO: return minus its group's mean, no std"),
    Algorithm("rloo", "rloo", grouped=True, summary="RLOO: return minus the mean of the group's other episodes"),
    Algorithm(
        "reinforce_pp", "reinforce_pp", kl="reward", summary="REINFORCE++: KL-shaped rewards, globally normalised"
    ),
    Algorithm("ppo", "gae", critic=True, summary="PPO with a critic and turn-level GAE(gamma, lam)"),
    Algorithm(
        "gspo",
        "grpo",
        policy_loss="gspo",
        grouped=True,
        summary="GSPO: group advantages, the clipped geometric-mean ratio of each whole response",
    ),
    Algorithm(
        "cispo",
        "grpo",
        policy_loss="cispo",
        grouped=True,
        summary="CISPO (MiniMax-M1): group advantages, clipped importance weights as stop-gradient factors",
    ),
):
    register_algorithm(_a)
