"""A training step moves its batch to the devices once and its metrics back once (jgem/algos/step.py).

Every algorithm's step (`Trainer.learn`: pack, upload, one program, download) runs under
`jax.transfer_guard("disallow_explicit")`, which fails any host<->device copy, explicit or implicit, except inside
the trainer's `upload` and `download`, which are counted. A host round trip in between (reading the reference
log-probs or the critic's values on the host, uploading advantages) raises.

The trainers are tests/algo_step_trainers.py's (8 episodes of test:scored-talk, 2-5 turns cut at 3: PPO bootstraps
some), shared with the trainer-level reference tests; every update of theirs runs under this guard
(`guarded_learn`), so a step's first, compiling call is checked whichever test makes it.
"""

from __future__ import annotations

import math

import pytest

from jgem.algos.algorithms import ALGORITHMS
from tests.algo_step_trainers import KL_COEF, XDIST_GROUP, guard_is_on, guarded_learn, shared

# REINFORCE++ folds its KL penalty (KL_COEF) into the rewards; ppo also with a KL penalty in its loss: the reference
# log-probs and the critic's values both on the devices
CASES = [(name, None) for name in ALGORITHMS.names()] + [("ppo", 0.1)]


@pytest.mark.xdist_group(XDIST_GROUP)  # the trainers are shared with test_train_reference and test_gspo_cispo
@pytest.mark.parametrize(("algorithm", "kl_coef"), CASES, ids=[f"{a}-kl{k}" if k else a for a, k in CASES])
def test_a_step_uploads_once_and_downloads_once(algorithm, kl_coef):
    tr, episodes = shared(algorithm, kl_coef)
    assert tr.cfg.learner.kl_coef == (KL_COEF if algorithm == "reinforce_pp" else kl_coef or 0.0)
    assert guard_is_on(), "under the guard a stray copy must raise"
    for _ in (1, 2):  # the first call may compile (unless another test's step did); the second is a step as in a run
        metrics, counts = guarded_learn(tr, episodes)
        assert counts == {"upload": 1, "download": 1}
    assert math.isfinite(metrics["loss"]) and metrics["batch/loss_tokens"] > 0
    if algorithm == "ppo":
        assert "value_loss" in metrics and metrics["rollout/bootstrapped"] > 0
