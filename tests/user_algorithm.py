"""A user's algorithm module, as `--import tests.user_algorithm` loads it (docs/algorithms.md, "Adding an algorithm").

Importing it registers, beside jgem's own entries:

- the advantage estimator `test_user_sign`: A_t = sign(G_t), the sign of the discounted return (no baseline: an
  untrained policy whose episodes all end alike still gets a non-zero advantage): every action token's advantage is
  exactly -1, 0 or +1, which no built-in estimator gives on a batch whose returns are not all in {-1, 0, 1};
- the policy loss `test_user_ratio`: the unclipped importance-sampled surrogate -A pi / pi_old per token (nothing
  clipped);
- the algorithm `test_user_algo`, which pairs them.

Only this import registers them (jgem knows none of the names), so a run that trains with `--algorithm
test_user_algo` proves that the registries reached the config's validation and the trainer. With
`JGEM_TEST_USER_ALGO_TRACE` set to a file, the estimator and the loss append their name to it when the step's program
is traced: a run can show that its program used them. Registration is idempotent (`overwrite=True`;
`register_advantage` replaces an estimator of the same name): importing or reloading the module twice is fine.
"""

from __future__ import annotations

import os

import jax.numpy as jnp

from jgem.algos.advantages import Advantages, register_advantage
from jgem.algos.algorithms import Algorithm, register_algorithm
from jgem.algos.losses import POLICY_LOSSES
from jgem.algos.returns import discounted_returns

ADVANTAGE = "test_user_sign"
POLICY_LOSS = "test_user_ratio"
ALGORITHM = "test_user_algo"
TRACE_ENV = "JGEM_TEST_USER_ALGO_TRACE"


def _traced(what: str) -> None:
    """Note that `what` was traced into a program (runs in Python at trace time, not on the device)."""
    path = os.environ.get(TRACE_ENV)
    if path:
        with open(path, "a") as f:
            f.write(what + "\n")


@register_advantage(ADVANTAGE)
def return_sign(rewards, turn_mask, *, gamma: float = 1.0, **_) -> Advantages:
    """A_t = sign(G_t); 0 on masked turns. Returns G as the returns."""
    _traced(ADVANTAGE)
    g = discounted_returns(rewards, turn_mask, gamma)
    return Advantages(jnp.where(turn_mask, jnp.sign(g), 0.0), g)


@POLICY_LOSSES.register(POLICY_LOSS, overwrite=True)
def ratio_loss(logprobs, batch, cfg):
    """-A pi / pi_old per token: (loss f32[B, T], clipped bool[B, T], all False)."""
    _traced(POLICY_LOSS)
    ratio = jnp.exp(logprobs - batch.old_logprobs)
    return -batch.advantages * ratio, jnp.zeros(logprobs.shape, bool)


register_algorithm(
    Algorithm(
        ALGORITHM, ADVANTAGE, policy_loss=POLICY_LOSS, summary="test: the sign of the return, the unclipped ratio loss"
    ),
    overwrite=True,
)
