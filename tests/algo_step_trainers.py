"""One trainer per algorithm on the trainer-level reference setup, shared by the tests that prove the algorithms
through the trainer (tests/test_train_reference.py, tests/algos/test_gspo_cispo.py, tests/test_step_transfers.py):
each builds its trainer, plays step 0's episodes and compiles its step's programs once per process, not once per
test. The tests carry `XDIST_GROUP` so that they share one process under `pytest -n --dist loadgroup`.

`shared(algorithm)` hands out the trainer with its initial state restored (a copy: a test's updates do not leak
into the next test) and step 0's episodes, played by that initial policy. Every update of a shared trainer goes
through `guarded_learn`, the trainer's own step under a transfer guard that fails any host<->device copy except
the step's one upload and one download (counted), so that the step's first, compiling call is checked wherever it
happens."""

from __future__ import annotations

import dataclasses
import functools
import tempfile
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jgem.algos.algorithms import get_algorithm
from jgem.registry import register
from jgem.rollout.episode import Episode
from jgem.train import Trainer
from tests.rollout.envs import TalkEnv
from tests.train_utils import perturbed, small_config

XDIST_GROUP = "algo-step-trainers"
GAMMA = 0.9
LAM = 0.8
KL_COEF = 0.5  # REINFORCE++'s KL coefficient in the reference setup
CLIP = {"gspo": (0.08, 0.12), "cispo": (0.08, 0.12)}  # (clip_low, clip_high): narrow, so that some ratios clip


class ScoredTalkEnv(TalkEnv):
    """TalkEnv (2 + seed % 4 turns, whatever is said) with a reward that also varies from step to step (a counter
    over all instances; an untrained model's actions are all cut, so the env sees one text), so the episodes of
    one group differ and every estimator has something to normalise. The references read the recorded rewards."""

    steps = 0

    def step(self, action: str):
        obs, reward, done, truncated, info = super().step(action)
        ScoredTalkEnv.steps += 1
        return obs, reward + 0.25 * (ScoredTalkEnv.steps * 7 % 5), done, truncated, info


register("test:scored-talk", ScoredTalkEnv, overwrite=True)


def reference_config(run_dir: str, algorithm: str, *, kl_coef: float | None = None):
    """The setup: 8 episodes of test:scored-talk (2-5 turns) cut at 3 turns (some truncated: PPO bootstraps them),
    groups of 4 for the grouped estimators, REINFORCE++ with a KL penalty (`kl_coef`: another, or one for any
    algorithm), GSPO and CISPO with a narrow clip."""
    if kl_coef is None:
        kl_coef = KL_COEF if algorithm == "reinforce_pp" else 0.0
    learner: dict[str, Any] = {"kl_coef": kl_coef}
    if algorithm in CLIP:
        learner["clip_low"], learner["clip_high"] = CLIP[algorithm]
    return small_config(
        run_dir,
        algorithm=algorithm,
        gamma=GAMMA,
        lam=LAM,
        episodes_per_step=8,
        group_size=4 if get_algorithm(algorithm).grouped else 1,
        curriculum={"horizons": (3,), "stage_steps": 100},  # a turn limit: some episodes are cut (truncated)
        learner=learner,
        # 8 slots, one per device of the test mesh: the engine's programs take one shape per attention window (4
        # slots are replicated: a program per bucket of rows); the episodes are the same whatever the slots
        env={"env_id": "test:scored-talk", "num_envs": 8},
    )


@dataclasses.dataclass
class Shared:
    trainer: Trainer
    episodes: list[Episode]  # step 0's, as collected (faulted or empty ones included)
    initial: Any  # a copy of the trainer's state before any update
    run_dir: tempfile.TemporaryDirectory  # the trainer's run dir (nothing is written there), removed with it


_copy = jax.jit(lambda tree: jax.tree.map(jnp.copy, tree))


@functools.cache
def _build(algorithm: str, kl_coef: float | None) -> Shared:
    run_dir = tempfile.TemporaryDirectory(prefix=f"algo-{algorithm}-")
    tr = Trainer(reference_config(run_dir.name, algorithm, kl_coef=kl_coef))
    if algorithm == "reinforce_pp":  # a reference policy apart from the sampler, so the KL term is not ~0
        tr.state = tr.state.replace(ref_params=perturbed(tr.state.params, 0.05, seed=1))
    episodes = tr.collect(0)
    tr.pool.close()  # the episodes are all it plays
    return Shared(tr, episodes, _copy(tr.state), run_dir)


def shared(algorithm: str, kl_coef: float | None = None) -> tuple[Trainer, list[Episode]]:
    """The algorithm's trainer (its state reset to the initial one) and step 0's episodes."""
    s = _build(algorithm, kl_coef)
    s.trainer.state = _copy(s.initial)
    return s.trainer, s.episodes


def guarded_learn(tr: Trainer, episodes: list[Episode]) -> tuple[dict[str, float], dict[str, int]]:
    """`tr.learn(episodes)` under `jax.transfer_guard("disallow_explicit")`, which fails any host<->device copy,
    explicit or implicit, except inside the learner's `upload` and `download`; returns the step's metrics and how
    many times each of those two ran."""
    counts = {"upload": 0, "download": 0}
    learner = tr.learner
    upload, download = learner.upload, learner.download

    def counted(name, fn):
        def call(*args):
            counts[name] += 1
            with jax.transfer_guard("allow"):
                return fn(*args)

        return call

    learner.upload, learner.download = counted("upload", upload), counted("download", download)
    try:
        with jax.transfer_guard("disallow_explicit"):
            metrics = tr.learn(episodes)
    finally:
        del learner.upload, learner.download  # the learner's own methods again
    return metrics, counts


def guard_is_on() -> bool:
    """Whether a stray copy raises under the guard `guarded_learn` uses (the guard has power)."""
    with jax.transfer_guard("disallow_explicit"):
        try:
            np.asarray(jnp.ones(2) + 1)
        except Exception as e:  # noqa: BLE001
            return "Disallowed" in str(e)
    return False
