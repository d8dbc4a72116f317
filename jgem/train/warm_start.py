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
from jgem.config import TrainConfig
from jgem.envs.with_tools import tool_wrapper
from jgem.models.tokenizer import ChatFormat
from jgem.rollout.engine import EpisodeSpec
from jgem.rollout.episode import Episode
from jgem.rollout.scripted import scripted_agent_episodes, scripted_episodes
from jgem.train.evaluate import episode_metrics
from jgem.train.learn import Learner, check_finite_loss
from jgem.train.transport import InProcess

TEACHER_SEED_OFFSET = 3 * 10**9  # the teacher's games never share a seed with RL's or evaluation's


@dataclasses.dataclass(frozen=True)
class Teacher:
    """The scripted teacher's games of the warm start: the run's config and chat format, the turn limit, and
    `share()`, this (learner) process's first game and count of a step's (`Roles.share`)."""

    cfg: TrainConfig
    chat: ChatFormat
    max_turns: int
    share: Callable[[int], tuple[int, int]]

    @property
    def multiagent(self) -> bool:
        from jgem.rollout.workflows import get_workflow

        return get_workflow(self.cfg.rollout.workflow).raw_env

    def games(self, s: int) -> list[Episode]:
        """Warm-start step `s`'s games on this process: its share, numbered over all processes as `Run.specs`
        numbers RL's (they need no model)."""
        cfg, ws = self.cfg, self.cfg.warm_start
        n, procs = ws.episodes_per_step, jax.process_count()
        first, count = self.share(n)
        specs = [EpisodeSpec(i, i, TEACHER_SEED_OFFSET + s * n * procs + i) for i in range(first, first + count)]
        common = dict(
            view=cfg.rollout.view,
            max_turns=self.max_turns,
            epsilon=ws.epsilon,
            teacher=ws.teacher,
            seed=s,
            env_kwargs=dict(cfg.env.env_kwargs),
        )
        if self.multiagent:  # the game's players at every seat (no system prompt or tools: refused in the config)
            return scripted_agent_episodes(cfg.env.env_id, specs, self.chat, policies=cfg.rollout.policies, **common)
        return scripted_episodes(
            cfg.env.env_id,
            specs,
            self.chat,
            system_prompt=cfg.env.system_prompt,
            wrappers=tool_wrapper(cfg.env),
            **common,
        )


def warm_start(
    learner: Learner, teacher: Teacher, transport: InProcess, log: Callable[[int, dict[str, float]], None]
) -> None:
    """`cfg.warm_start.steps` supervised steps of `learner` on `teacher`'s games, each logged by `log(step,
    metrics)` at the run's steps 1 - W .. 0 on every process (`transport`: in a role split the learners' processes
    train and the first sends each step's metrics to the samplers'); the sampler gets the warm-started policy at the
    end."""
    ws = learner.cfg.warm_start
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
    critic = {k: getattr(learner.state, k) for k in ("critic_params", "critic_opt_state", "critic_state")}
    transport.from_learners(None, lambda: _set_state(learner, cfg=sft_cfg, **dict.fromkeys(critic)))
    for s in range(ws.steps):
        log(s + 1 - ws.steps, transport.from_learners("warm", lambda s=s: _teacher_step(learner, teacher, s)))
    transport.from_learners(None, lambda: _finish(learner, rl_cfg, critic))
    transport.publish()


def _set_state(learner: Learner, **fields) -> None:
    learner.state = learner.state.replace(**fields)


def _teacher_step(learner: Learner, teacher: Teacher, s: int) -> dict[str, float]:
    """Warm-start step `s` on a learner's process: its share of the teacher's games, one supervised update; the
    step's metrics."""
    eps = teacher.games(s)
    m = learner.learn(eps, sft=True)  # the sampler needs only the warm start's end
    check_finite_loss(m["loss"], s, eps, what="warm-start loss")
    return {"warm/step": s + 1, "warm/loss": m["loss"], **episode_metrics(eps, "warm/teacher")}


def _finish(learner: Learner, rl_cfg, critic: dict) -> None:
    """Back to RL: its learner config and the critic as they were; the optimizer reset (`reset_optimizer`); with a
    KL penalty the reference is the warm-started policy (KL keeps RL near what the warm start taught)."""
    learner.state = learner.state.replace(cfg=rl_cfg, **critic)
    if learner.cfg.warm_start.reset_optimizer:
        learner.state = reset_optimizer(learner.state)
    if learner.state.ref_params is not None:
        learner.state = learner.state.replace(ref_params=jax.tree.map(jnp.copy, learner.state.params))
