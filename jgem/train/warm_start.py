"""The warm start: supervised steps (cross-entropy on the action tokens) on a scripted teacher's games, before RL.

The teacher plays through `jgem.rollout.scripted`; each step's episodes go through the same `Learner.learn` as RL's
with a supervised `StepSpec` and a learner config of the warm start's own (lr, epochs, minibatches; no KL, no
entropy bonus). The critic (PPO) sits the phase out and comes back unchanged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp

from jgem.algos.learner import reset_optimizer
from jgem.envs.with_tools import tool_wrapper
from jgem.rollout.engine import EpisodeSpec
from jgem.rollout.scripted import scripted_episodes
from jgem.train.evaluate import episode_metrics
from jgem.train.learn import Learner, check_finite_loss

TEACHER_SEED_OFFSET = 3 * 10**9  # the teacher's games never share a seed with RL's or evaluation's


def warm_start(learner: Learner, log: Callable[[int, dict[str, float]], None]) -> None:
    """`cfg.warm_start.steps` supervised steps on `learner`, each logged by `log(step, metrics)` at the run's
    steps 1 - W .. 0."""
    cfg = learner.cfg
    ws = cfg.warm_start
    rl_cfg = learner.state.cfg
    sft_cfg = dataclasses.replace(
        rl_cfg,
        lr=ws.lr,
        policy_loss="reinforce",
        epochs=ws.epochs,
        minibatches=ws.minibatches,
        kl_coef=0.0,
        entropy_coef=0.0,
        # supervised: the teacher's tokens have no behaviour log-probs, so an off-policy correction would weigh
        # each token's loss by its own probability under the model (a random model's loss near 0, not ~7)
        correction="none",
        tis_cap=None,
    )
    roles = learner.roles
    if not roles.learns:  # a role split's sampler process: the learners train; it logs their metrics
        for s in range(ws.steps):
            log(s + 1 - ws.steps, roles.receive("warm", [roles.lead])[0])
        learner.sync_sampler()
        return
    critic = {k: getattr(learner.state, k) for k in ("critic_params", "critic_opt_state", "critic_state")}
    learner.state = learner.state.replace(cfg=sft_cfg, **dict.fromkeys(critic))
    n, procs = ws.episodes_per_step, jax.process_count()
    first, count = roles.share(n, side="learner")
    for s in range(ws.steps):
        # numbered over all processes, as `Run.specs` numbers RL's: each (learner) process plays its own teacher
        # games, which need no model
        specs = [EpisodeSpec(i, i, TEACHER_SEED_OFFSET + s * n * procs + i) for i in range(first, first + count)]
        eps = scripted_episodes(
            cfg.env.env_id,
            specs,
            learner.chat,
            view=cfg.rollout.view,
            max_turns=learner.curriculum.max_turns(0),
            epsilon=ws.epsilon,
            teacher=ws.teacher,
            seed=s,
            env_kwargs=dict(cfg.env.env_kwargs),
            system_prompt=cfg.env.system_prompt,
            wrappers=tool_wrapper(cfg.env),
        )
        m = learner.learn(eps, sft=True, publish=False)  # the sampler needs only the warm start's end
        check_finite_loss(m["loss"], s, eps, what="warm-start loss")
        metrics = {"warm/step": s + 1, "warm/loss": m["loss"], **episode_metrics(eps, "warm/teacher")}
        if roles.split and jax.process_index() == roles.lead:
            roles.send("warm", metrics)
        log(s + 1 - ws.steps, metrics)
    learner.state = learner.state.replace(cfg=rl_cfg, **critic)
    if ws.reset_optimizer:
        learner.state = reset_optimizer(learner.state)
    if learner.state.ref_params is not None:  # KL keeps RL near what the warm start taught
        learner.state = learner.state.replace(ref_params=jax.tree.map(jnp.copy, learner.state.params))
    learner.sync_sampler()
