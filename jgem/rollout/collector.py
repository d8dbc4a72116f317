"""The multi-turn episode loop: EnvPool <-> ChatFormat <-> Sampler.

The pool's envs are split into `num_groups` groups that take turns: while the device samples the
actions of one group (dispatched asynchronously), the host steps the envs of another and builds its
next prompts. Each group's generation is a fixed-size batch, so the sampler compiles once per
prompt-length bucket.

Token exactness: in the chat view an env's conversation is one growing list of token ids: the first
prompt from the chat template, then for every turn the sampled action ids exactly as sampled, then
`ChatFormat.observation_tokens` of the new observation. Nothing is decoded and re-encoded. In the
per-turn view (GEM style) every turn's prompt is a fresh template of the history wrapper's text.

Every step collects a fixed list of episodes (`EpisodeSpec`s) from scratch and leaves no episode in
flight, so a checkpoint between steps captures the whole rollout state (exact resume).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import jax
import numpy as np

from jgem.envs.pool import EnvPool, StepBatch
from jgem.models.tokenizer import ChatFormat
from jgem.rollout.episode import Episode, Transition

View = Literal["chat", "per_turn"]


@dataclass(frozen=True)
class RolloutConfig:
    """How episodes are played. Token budgets: `max_new_tokens` per turn, `max_episode_tokens` per
    episode (chat view: the whole stream; per-turn view: one prompt plus its action)."""

    view: View = "chat"
    num_groups: int = 2  # env groups in flight: >= 2 overlaps host env steps with device sampling
    max_new_tokens: int = 32
    max_episode_tokens: int = 1024
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    greedy: bool = False
    # What the env receives for a response cut at max_new_tokens (no stop token): an invalid action,
    # which GEM's games score as a format error.
    invalid_action: str = ""

    def __post_init__(self) -> None:
        if self.view not in ("chat", "per_turn"):
            raise ValueError(f"RolloutConfig.view {self.view!r}; choose 'chat' or 'per_turn'")
        if self.num_groups < 1:
            raise ValueError(f"RolloutConfig.num_groups must be >= 1, got {self.num_groups}")
        if self.max_new_tokens < 1 or self.max_episode_tokens <= self.max_new_tokens:
            raise ValueError(
                f"need 1 <= max_new_tokens ({self.max_new_tokens}) < max_episode_tokens ({self.max_episode_tokens})"
            )


@dataclass(frozen=True)
class EpisodeSpec:
    """One episode to play: its id, its group (episodes of a group share a start state) and seed."""

    episode_id: int
    group_id: int
    seed: int


class Policy(Protocol):
    """Chooses actions for a batch of prompts; `dispatch` must not block (device work is async)."""

    def dispatch(self, prompts: list[list[int]], rng: jax.Array) -> Any: ...

    def fetch(self, handle: Any) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per prompt: (action_ids i32[n], action_logprobs f32[n]); ids end with a stop token unless cut."""
        ...


class SamplerPolicy:
    """The LLM policy: `Sampler.generate` on `model` (an nnx module or `(graphdef, state)`)."""

    def __init__(self, sampler: Any, model: Any, cfg: RolloutConfig) -> None:
        self.sampler, self.model, self.cfg = sampler, model, cfg

    def dispatch(self, prompts: list[list[int]], rng: jax.Array) -> Any:
        c = self.cfg
        return self.sampler.generate(
            self.model,
            prompts,
            rng,
            max_new_tokens=c.max_new_tokens,
            temperature=c.temperature,
            top_p=c.top_p,
            top_k=c.top_k,
            greedy=c.greedy,
        )

    def fetch(self, handle: Any) -> list[tuple[np.ndarray, np.ndarray]]:
        tokens, logprobs, lengths = jax.device_get((handle.tokens, handle.logprobs, handle.lengths))
        return [(tokens[i, : lengths[i]], logprobs[i, : lengths[i]]) for i in range(len(lengths))]


@dataclass
class _Live:
    """An episode in progress on one env."""

    spec: EpisodeSpec
    prompt: list[int] = field(default_factory=list)  # what the model is conditioned on this turn
    num_messages: int = 0  # chat view: messages of the ChatWrapper already in the stream
    transitions: list[Transition] = field(default_factory=list)


@dataclass
class CollectStats:
    """Counters of one `collect` call."""

    turns: int = 0
    faults: int = 0
    truncated_actions: int = 0
    budget_truncations: int = 0
    dispatches: int = 0

    def as_metrics(self) -> dict[str, float]:
        return {f"collect/{k}": float(v) for k, v in dataclasses.asdict(self).items()}


class Collector:
    """Plays `EpisodeSpec`s on a pool with a policy. The pool's envs must be wrapped for the view:
    `ChatWrapper` for "chat", `HistoryWrapper` for "per_turn" (`wrappers_for_view` gives them)."""

    def __init__(self, pool: EnvPool, chat: ChatFormat, cfg: RolloutConfig, env_name: str = "") -> None:
        if cfg.num_groups > pool.num_envs:
            raise ValueError(f"num_groups={cfg.num_groups} exceeds the pool's {pool.num_envs} envs")
        self.pool, self.chat, self.cfg, self.env_name = pool, chat, cfg, env_name
        self.groups = [list(map(int, g)) for g in np.array_split(np.arange(pool.num_envs), cfg.num_groups)]
        self.stats = CollectStats()

    # -- public ------------------------------------------------------------------------------------

    def collect(self, policy: Policy, specs: Sequence[EpisodeSpec], rng: jax.Array, *, max_turns: int) -> list[Episode]:
        """Play every spec to its end (or `max_turns`, or a token budget); episodes in `specs` order."""
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.stats = CollectStats()
        queue = list(reversed(specs))
        live: dict[int, _Live] = {}
        finished: dict[int, Episode] = {}
        inflight: dict[int, tuple[list[int], Any]] = {}

        def dispatch(g: int) -> None:
            ids = [i for i in self.groups[g] if i in live]
            if ids:
                key = jax.random.fold_in(rng, self.stats.dispatches)
                self.stats.dispatches += 1
                inflight[g] = (ids, policy.dispatch([live[i].prompt for i in ids], key))

        for g, env_ids in enumerate(self.groups):
            self._start(env_ids, queue, live, finished)
            dispatch(g)
        while inflight:
            for g in range(len(self.groups)):
                if g not in inflight:
                    continue
                ids, handle = inflight.pop(g)
                actions = policy.fetch(handle)  # waits for this group's sampling only
                self._advance(ids, actions, live, finished, max_turns)
                self._start([i for i in ids if i not in live], queue, live, finished)
                dispatch(g)
        return [finished[s.episode_id] for s in specs]

    # -- internals ---------------------------------------------------------------------------------

    def _await(self, ids: list[int]) -> dict[int, tuple]:
        """Results of exactly `ids` (the only commands in flight), keyed by env id."""
        out: dict[int, tuple] = {}
        while len(out) < len(ids):
            b: StepBatch = self.pool.recv()
            for j, i in enumerate(b.env_ids.tolist()):
                out[i] = (b.obs[j], float(b.rewards[j]), bool(b.terminated[j]), bool(b.truncated[j]), b.infos[j])
        return out

    def _start(self, env_ids: list[int], queue: list[EpisodeSpec], live: dict, finished: dict) -> None:
        """Reset idle envs onto the next specs; an env that faults on reset ends that episode empty."""
        while env_ids and queue:
            take = env_ids[: len(queue)]
            specs = [queue.pop() for _ in take]
            self.pool.reset(take, [s.seed for s in specs])
            results = self._await(take)
            retry = []
            for i, s in zip(take, specs):
                obs, _, _, _, info = results[i]
                if "fault" in info:
                    self.stats.faults += 1
                    finished[s.episode_id] = self._episode(s, [], info, truncated=True)
                    retry.append(i)
                    continue
                ep = live[i] = _Live(s)
                ep.prompt, ep.num_messages = first_prompt(self.chat, self.cfg.view, obs)
                if len(ep.prompt) + self.cfg.max_new_tokens > self.cfg.max_episode_tokens:
                    raise ValueError(
                        f"the first prompt of episode {s.episode_id} has {len(ep.prompt)} tokens, which leaves no room "
                        f"for {self.cfg.max_new_tokens} new tokens within max_episode_tokens="
                        f"{self.cfg.max_episode_tokens}; raise max_episode_tokens"
                    )
            env_ids = retry

    def _advance(self, ids: list[int], actions: list, live: dict, finished: dict, max_turns: int) -> None:
        """Send the sampled actions, record transitions, end finished episodes."""
        cfg, chat = self.cfg, self.chat
        texts = []
        for ids_, _ in actions:
            stopped = chat.ends_with_stop(ids_.tolist())
            self.stats.truncated_actions += not stopped
            texts.append(chat.action_text(ids_.tolist()) if stopped else cfg.invalid_action)
        batch = self.pool.step(ids, texts)
        self.stats.turns += len(ids)
        for j, i in enumerate(ids):
            ep = live[i]
            action_ids, logprobs = actions[j]
            obs, reward = batch.obs[j], float(batch.rewards[j])
            terminated, truncated, info = bool(batch.terminated[j]), bool(batch.truncated[j]), batch.infos[j]
            stopped = chat.ends_with_stop(action_ids.tolist())
            ep.transitions.append(
                Transition(
                    ep.spec.episode_id,
                    len(ep.transitions),
                    np.asarray(ep.prompt, np.int32),
                    action_ids,
                    logprobs,
                    reward,
                    stopped=stopped,
                )
            )
            fault = "fault" in info
            self.stats.faults += fault
            done = terminated or truncated or fault
            if not done and len(ep.transitions) >= max_turns:
                done, truncated = True, True
            if not done:
                nxt = self._next_prompt(ep, action_ids.tolist(), obs)
                if len(nxt) + cfg.max_new_tokens > cfg.max_episode_tokens:
                    self.stats.budget_truncations += 1
                    done, truncated = True, True
                else:
                    ep.prompt = nxt
            if done:
                finished[ep.spec.episode_id] = self._episode(ep.spec, ep.transitions, info, truncated=truncated)
                del live[i]

    def _next_prompt(self, ep: _Live, action_ids: list[int], obs: Any) -> list[int]:
        prompt, ep.num_messages = next_prompt(self.chat, self.cfg.view, ep.prompt, ep.num_messages, action_ids, obs)
        return prompt

    def _episode(self, spec: EpisodeSpec, transitions: list[Transition], info: dict, *, truncated: bool) -> Episode:
        return Episode(
            spec.episode_id,
            spec.group_id,
            self.env_name,
            spec.seed,
            list(transitions),
            success=bool(info.get("success", False)),
            truncated=truncated,
            fault=info.get("fault"),
        )


def first_prompt(chat: ChatFormat, view: View, obs: Any) -> tuple[list[int], int]:
    """(prompt ids, messages in the stream) for a reset observation."""
    if view == "chat":  # obs: the ChatWrapper's messages
        return chat.start(obs), len(obs)
    return chat.start([{"role": "user", "content": obs}]), 0


def next_prompt(
    chat: ChatFormat, view: View, prompt: list[int], num_messages: int, action_ids: list[int], obs: Any
) -> tuple[list[int], int]:
    """The next turn's prompt after `action_ids` was played and `obs` came back.

    Chat view: the stream grows by the action exactly as sampled, a closing token if it was cut, and the
    new message(s) of the ChatWrapper (`obs[num_messages]` is the assistant action, already in the stream).
    Per-turn view: a fresh template of the history text.
    """
    if view == "per_turn":
        return chat.start([{"role": "user", "content": obs}]), 0
    new = obs[num_messages + 1 :]
    return prompt + action_ids + chat.close_action(action_ids) + chat.observation_tokens(new), len(obs)


def wrappers_for_view(view: View, system_prompt: str | None = None) -> list:
    """The pool wrappers a view needs (picklable, so process backends can build them)."""
    from functools import partial

    from jgem.envs.wrappers import ChatWrapper, HistoryWrapper

    if view == "chat":
        return [partial(ChatWrapper, system_prompt=system_prompt)]
    return [partial(HistoryWrapper, mode="concat_with_action")]
