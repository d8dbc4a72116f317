"""A training step moves its batch to the devices once and its metrics back once (jgem/algos/step.py).

Every algorithm's step (`Trainer.learn`: pack, upload, one program, download) runs under
`jax.transfer_guard("disallow_explicit")`, which fails any host<->device copy, explicit or implicit, except inside
the trainer's `upload` and `download`, which are counted. A host round trip in between (reading the reference
log-probs or the critic's values on the host, uploading advantages) raises.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jgem.algos.algorithms import ALGORITHMS
from jgem.train import Trainer
from tests.test_train_reference import ScoredTalkEnv  # noqa: F401  (registers test:scored-talk)
from tests.train_utils import small_config

# ppo with a KL penalty in its loss: the reference log-probs and the critic's values both on the devices
CASES = [(name, 0.0) for name in ALGORITHMS.names() if name != "reinforce_pp"] + [("reinforce_pp", 0.1), ("ppo", 0.1)]


@pytest.mark.parametrize(("algorithm", "kl_coef"), CASES, ids=[f"{a}-kl{k}" for a, k in CASES])
def test_a_step_uploads_once_and_downloads_once(tmp_path, algorithm, kl_coef):
    cfg = small_config(
        str(tmp_path),
        algorithm=algorithm,
        episodes_per_step=8,
        env={"env_id": "test:scored-talk"},  # 2-5 turns, cut at 3: ppo bootstraps some
        curriculum={"horizons": (3,), "stage_steps": 100},
        learner={"kl_coef": kl_coef, "lr": 1e-3},
    )
    tr = Trainer(cfg)
    try:
        episodes = tr.collect(0)
        counts = {"upload": 0, "download": 0}
        upload, download = tr.upload, tr.download

        def counted(name, fn):
            def call(*args):
                counts[name] += 1
                with jax.transfer_guard("allow"):
                    return fn(*args)

            return call

        tr.upload, tr.download = counted("upload", upload), counted("download", download)
        with jax.transfer_guard("disallow_explicit"):
            with pytest.raises(Exception, match="Disallowed"):  # the guard is on: a stray copy would raise
                np.asarray(jnp.ones(2) + 1)
            for step in (1, 2):  # the first call compiles; the second is a step as a run makes it
                metrics = tr.learn(episodes)
                assert counts == {"upload": step, "download": step}
        assert math.isfinite(metrics["loss"]) and metrics["batch/loss_tokens"] > 0
        if algorithm == "ppo":
            assert "value_loss" in metrics and metrics["rollout/bootstrapped"] > 0
    finally:
        tr.pool.close()
