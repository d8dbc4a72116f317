"""Episodes played by a scripted agent, tokenised exactly as the collector would: warm-start data.

A game's reference solver (`jgem.envs.games.solvers`) plays; with probability `epsilon` a turn is a
random legal action instead (a weaker teacher, so RL has room to improve on the warm start). Actions
become `ChatFormat.action_ids(text)` (canonical tokens plus the end-of-turn token) and the prompts come
from the same `jgem.rollout.views` as the rollout engine's, so supervised warm start and RL see one token
layout: in the chat view one stream per episode (transitions hold offsets into it), in the per-turn view
one prompt per transition.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from jgem.core import Env, Wrapper
from jgem.envs.games.solvers import solver_for
from jgem.models.tokenizer import ChatFormat
from jgem.registry import make
from jgem.rollout.config import View
from jgem.rollout.engine import EpisodeSpec
from jgem.rollout.episode import Episode, Transition
from jgem.rollout.views import first_prompt, next_prompt, observation_suffix, wrappers_for_view


class _Tap(Wrapper):
    """Remembers the raw observation and info under the view wrapper (what the solver reads)."""

    def reset(self, seed: int | None = None) -> tuple[Any, dict[str, Any]]:
        self.last = self.env.reset(seed=seed)
        return self.last

    def step(self, action: str):
        out = self.env.step(action)
        self.last = (out[0], out[4])
        return out


def scripted_episodes(
    env_id: str,
    specs: Sequence[EpisodeSpec],
    chat: ChatFormat,
    *,
    view: View = "chat",
    max_turns: int = 100,
    epsilon: float = 0.0,
    teacher: str = "solver",
    seed: int = 0,
    env_kwargs: dict | None = None,
    system_prompt: str | None = None,
    wrappers: Sequence[Callable[[Env], Env]] = (),
) -> list[Episode]:
    """Play `specs` with the scripted solver of `env_id` (or its named weaker `teacher`, whose moves are drawn from
    (seed, episode id) as the random ones are); log-probs are 0 (the teacher is not the model).
    `wrappers` go between the env and the view's, as the pool's do (e.g. the training config's tools), so the
    teacher's prompts are the ones RL will see; the solver itself reads the bare env's observations."""
    raw: Env = make(env_id, **(env_kwargs or {}))
    tap = _Tap(raw)
    env: Env = tap
    for w in (*wrappers, *wrappers_for_view(view, system_prompt)):
        env = w(env)
    episodes = []
    for spec in specs:
        # the teacher's random moves are a function of (seed, episode id): the same whichever process plays it
        rng = np.random.default_rng([seed, spec.episode_id])
        solver = solver_for(env_id, teacher, np.random.default_rng([seed, spec.episode_id, 1]))
        obs, info = env.reset(seed=spec.seed)
        solver.reset(*tap.last, raw)
        prompt, num_messages = first_prompt(chat, view, obs)
        stream = list(prompt) if view == "chat" else None  # chat view: one growing list, appended to (linear)
        transitions: list[Transition] = []
        done = truncated = False
        while not done:
            text = solver.act(*tap.last, raw)
            if epsilon > 0 and rng.random() < epsilon:
                text = raw.sample_random_action()
                if hasattr(solver, "not_played"):  # its move was not played: a plan-following solver stays put
                    solver.not_played(text)
            ids = chat.action_ids(text)
            obs, reward, terminated, truncated, info = env.step(text)
            k, logprobs = len(transitions), np.zeros(len(ids), np.float32)
            if stream is not None:
                transitions.append(Transition(spec.episode_id, k, len(stream), ids, logprobs, reward))
                stream.extend(ids)
            else:
                transitions.append(
                    Transition(spec.episode_id, k, len(prompt), ids, logprobs, reward, prompt_ids=prompt)
                )
            done = terminated or truncated
            if not done and len(transitions) >= max_turns:
                done = truncated = True
            if not done:
                if stream is not None:
                    stream.extend(observation_suffix(chat, num_messages, ids, obs))
                    num_messages = len(obs)
                else:
                    prompt, num_messages = next_prompt(chat, view, prompt, num_messages, ids, obs)
        episodes.append(
            Episode(
                spec.episode_id,
                spec.group_id,
                env_id,
                spec.seed,
                transitions,
                success=bool(info.get("success", False)),
                truncated=truncated,
                stream=None if stream is None else np.asarray(stream, np.int32),
            )
        )
    env.close()
    return episodes
