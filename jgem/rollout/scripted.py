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


def scripted_agent_episodes(
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
    policies: Sequence[str] = (),
) -> list[Episode]:
    """Multi-agent games played by the game's scripted `teacher` (a name in its module's `PLAYERS`; "solver": the
    first) at every seat; spec k is one game, and its episode is the turns of seat k mod the seats, rendered as the
    `agents` workflow renders a seat's conversation (its first observation, then per action the observations since
    its last one as one message). With probability `epsilon` a teacher's move is a random legal one. `policies`
    (rollout.policies): the policy (LoRA adapter) each seat's episodes train, with several."""
    from jgem.rollout.workflows.agents import player_for, players_of, seat_errors, seat_message, seat_policies

    if view not in ("chat", "chat_per_turn"):
        raise ValueError(f"multi-agent games render chat views only, not {view!r}")
    name = next(iter(players_of(env_id)), "none") if teacher == "solver" else teacher
    env = make(env_id, **(env_kwargs or {}))
    errors = seat_errors(env_id, list(env.possible_agents), name, "alternate", 1, "warm_start.teacher", evaluation=True)
    if errors:
        env.close()
        raise KeyError("; ".join(errors))
    episodes = []
    for spec in specs:
        rng = np.random.default_rng([seed, spec.episode_id])
        obs, infos = env.reset(seed=spec.seed)
        agents = list(obs)
        me = agents[spec.episode_id % len(agents)]
        bots = {}
        for i, a in enumerate(agents):
            bots[a] = player_for(env_id, name, a)(np.random.default_rng([seed, spec.episode_id, i]))
            bots[a].reset(a, obs[a], infos[a])
        messages: list[dict[str, str]] = []
        stream: list[int] | None = None
        prompt: list[int] = []
        num_messages = 0
        transitions: list[Transition] = []
        waiting: list[str] = [obs[me]]
        last_ids: list[int] = []
        steps, truncated, last_info = 0, False, infos[me]
        while env.active_agents():
            active = env.active_agents()
            if me in active and waiting:  # what came since its last action (or the reset), as one message
                messages.append(seat_message(waiting))
                if not transitions:
                    prompt, num_messages = first_prompt(chat, view, messages)
                    stream = list(prompt) if view == "chat" else None
                elif stream is not None:
                    stream.extend(observation_suffix(chat, num_messages, last_ids, messages))
                else:
                    prompt = first_prompt(chat, view, messages)[0]
                num_messages, waiting = len(messages), []
            actions = {}
            for a in active:
                actions[a] = env.sample_agent_action(a) if epsilon and rng.random() < epsilon else bots[a].act()
            obs, rewards, _, _, infos = env.step(actions)
            steps += 1
            if me in actions:
                ids = chat.action_ids(actions[me])
                k, logprobs = len(transitions), np.zeros(len(ids), np.float32)
                if stream is not None:
                    transitions.append(Transition(spec.episode_id, k, len(stream), ids, logprobs, 0.0))
                    stream.extend(ids)
                else:
                    transitions.append(
                        Transition(spec.episode_id, k, len(prompt), ids, logprobs, 0.0, prompt_ids=prompt)
                    )
                messages.append({"role": "assistant", "content": actions[me]})
                last_ids = list(ids)
            if transitions and rewards.get(me):
                transitions[-1].reward += float(rewards[me])
            for a in obs:
                bots[a].update(obs[a], infos[a])
            if me in obs:
                waiting.append(obs[me])
                last_info = infos[me]
            if env.active_agents() and steps >= max_turns:
                truncated = True
                break
        episode = Episode(
            spec.episode_id,
            spec.group_id,
            env_id,
            spec.seed,
            transitions,
            success=last_info.get("outcome") in ("win", "success") and bool(transitions),
            truncated=truncated,
            stream=None if stream is None else np.asarray(stream, np.int32),
            role=agents.index(me),
            outcome=last_info.get("outcome"),
            policy=seat_policies(policies).get(me, 0),
        )
        episodes.append(episode)
    env.close()
    return episodes
