"""Host records of collected experience: one `Transition` per turn, one `Episode` per finished episode.

Token arrays are the exact ids the model was conditioned on (the prompt) and sampled (`action_ids`);
`action_logprobs[i]` is log p(action_ids[i] | prompt, action_ids[:i]) under the sampling policy.
Chat-history view: a turn's prompt extends the previous turn's prompt + action (+ the tokens `ChatFormat`
appended: a closing token for a truncated action, then the observation), so the episode keeps one token stream
(`Episode.stream`, ending with the last action) and a transition only the offset where its action starts
(`prompt_len`): turn k's prompt is `stream[:prompt_len]`, its action the next `action_ids.size` tokens. Memory is
linear in the episode's length, not quadratic in its turns.
Per-turn view: every prompt is a fresh template, so each transition owns it (`prompt_ids`) and there is no stream.
`Episode.prompt_ids(k)` gives turn k's prompt in both views.
A mixture of experts' rollouts also record each token's routing (routing replay): int32[L, M, k], the experts the
token ran in each of the M sparse layers when the sampler fed it, -1 for a token it never fed (an action's last
token when nothing followed it). It rides beside the tokens it describes: `Episode.routes` beside `stream`,
`Transition.routes` beside a transition's own `prompt_ids` and its `action_ids`. None for a dense model (and for a
scripted teacher's episodes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


def _ids(x: Any) -> np.ndarray:
    return np.asarray(x, dtype=np.int32).reshape(-1)


def _routes(x: Any, n: int, who: str, what: str) -> np.ndarray:
    """A routing record checked: int32[n, M, k] for the n tokens of `what`."""
    x = np.asarray(x, dtype=np.int32)
    if x.ndim != 3 or x.shape[0] != n:
        raise ValueError(f"{who}: routes of shape {x.shape}; a mixture of experts records [{n}, M, k] for {what}")
    return x


@dataclass(frozen=True)
class EpisodeSpec:
    """One episode to play: its id, its group (episodes of a group share a start state) and seed."""

    episode_id: int
    group_id: int
    seed: int


@dataclass
class Transition:
    """One turn: where its prompt ends (or the prompt itself), the action sampled, the reward the env returned."""

    episode_id: int
    turn: int
    prompt_len: int  # where the action starts in the episode's stream (chat view), or prompt_ids.size (per-turn)
    action_ids: np.ndarray
    action_logprobs: np.ndarray
    reward: float = 0.0
    stopped: bool = True  # the action ended with a stop token (False: cut at the token limit)
    info: dict[str, Any] = field(default_factory=dict)
    prompt_ids: np.ndarray | None = None  # per-turn view only: this turn's own prompt (a fresh template)
    # the policy version (updates applied) that sampled each action token; None: not recorded (scripted teachers)
    versions: np.ndarray | None = None
    # a mixture of experts' routing of prompt_ids then action_ids (a transition that owns its prompt): int32[
    # prompt_len + action_ids.size, M, k], -1 where not recorded; None: dense, or the episode's `routes` hold it
    routes: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.prompt_len = int(self.prompt_len)
        self.action_ids = _ids(self.action_ids)
        self.action_logprobs = np.asarray(self.action_logprobs, dtype=np.float32).reshape(-1)
        if self.action_logprobs.shape != self.action_ids.shape:
            raise ValueError(
                f"transition {self.episode_id}/{self.turn}: {self.action_logprobs.size} action_logprobs for "
                f"{self.action_ids.size} action_ids; the sampler returns one log-prob per sampled token"
            )
        if self.versions is not None:
            self.versions = _ids(self.versions)
            if self.versions.shape != self.action_ids.shape:
                raise ValueError(
                    f"transition {self.episode_id}/{self.turn}: {self.versions.size} versions for "
                    f"{self.action_ids.size} action_ids; the engine records one policy version per sampled token"
                )
        if self.prompt_ids is not None:
            self.prompt_ids = _ids(self.prompt_ids)
            if self.prompt_len != self.prompt_ids.size:
                raise ValueError(
                    f"transition {self.episode_id}/{self.turn}: prompt_len={self.prompt_len} but prompt_ids holds "
                    f"{self.prompt_ids.size} tokens; a transition that owns its prompt has prompt_len == its size"
                )
        if self.prompt_len < 1:
            raise ValueError(f"transition {self.episode_id}/{self.turn} has an empty prompt")
        if self.routes is not None:
            self.routes = _routes(
                self.routes,
                self.prompt_len + self.action_ids.size,
                f"transition {self.episode_id}/{self.turn}",
                "its prompt and action",
            )
        self.reward = float(self.reward)


@dataclass
class Episode:
    """A finished episode. `truncated`: ended by the turn limit or a fault rather than by the game;
    `fault`: the env failed (the pool's message), in which case the episode is usually dropped;
    `stream`: chat view only, every token the model was conditioned on and sampled, ending with the last action;
    `next_prompt`: a truncated episode's prompt for the turn it was cut before (the state it was cut in, as the
    policy would have seen it), which a critic scores to bootstrap the return; None for ended or faulted ones."""

    episode_id: int
    group_id: int
    env_id: str
    seed: int | None
    transitions: list[Transition]
    success: bool = False
    truncated: bool = False
    fault: str | None = None
    stream: np.ndarray | None = None
    next_prompt: np.ndarray | None = None
    role: int = 0  # which seat of a multi-agent game it played (a per-role estimator's baseline; 0 for one agent)
    outcome: str | None = None  # a multi-agent game's result for its seat: win, loss, draw, success, failure
    # the policy version its game's other seats were drawn to play (an opponent pool's draw; for a draw of the current
    # policy, the version the game started at, which then follows the run's)
    opponent: int | None = None
    # the policy that played it: its LoRA adapter, in a model with several (`--rollout.policies`; 0 otherwise)
    policy: int = 0
    # a mixture of experts' routing of each `stream` token (int32[stream.size, M, k], -1 where not recorded; module
    # docstring); None: dense, no stream, or not recorded
    routes: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.next_prompt is not None:
            self.next_prompt = _ids(self.next_prompt)
        if self.stream is not None:
            self.stream = np.asarray(self.stream, dtype=np.int32)
            if self.stream.ndim != 1:
                raise ValueError(f"episode {self.episode_id}: stream must be 1-D, got shape {self.stream.shape}")
        if self.routes is not None:
            if self.stream is None:
                raise ValueError(
                    f"episode {self.episode_id}: routes without a stream; a turn's own go on its transition"
                )
            self.routes = _routes(self.routes, self.stream.size, f"episode {self.episode_id}", "its stream")
        end = 0  # where the previous stream turn's action ends
        for k, t in enumerate(self.transitions):
            if t.episode_id != self.episode_id:
                raise ValueError(f"episode {self.episode_id} holds transition {k} of episode {t.episode_id}")
            if t.prompt_ids is not None:
                continue
            if self.stream is None:
                raise ValueError(
                    f"episode {self.episode_id} turn {k} has no prompt_ids and the episode has no stream to "
                    "find its prompt in; pass stream= (chat view) or the transition's prompt_ids (per-turn view)"
                )
            if t.prompt_len < end:
                raise ValueError(
                    f"episode {self.episode_id} turn {k}: prompt_len={t.prompt_len} ends before the previous "
                    f"turn's action (which ends at {end}); each turn's prompt extends the previous prompt and action"
                )
            end = t.prompt_len + t.action_ids.size
            if end > self.stream.size or not np.array_equal(self.stream[t.prompt_len : end], t.action_ids):
                raise ValueError(
                    f"episode {self.episode_id} turn {k}: the action does not match the stream at "
                    f"[{t.prompt_len}:{end}] (stream of {self.stream.size} tokens)"
                )

    def prompt_ids(self, k: int) -> np.ndarray:
        """Turn k's prompt: the transition's own (per-turn view) or a view of the stream's head (chat view)."""
        t = self.transitions[k]
        if t.prompt_ids is not None:
            return t.prompt_ids
        assert self.stream is not None  # checked in __post_init__
        return self.stream[: t.prompt_len]

    @property
    def num_turns(self) -> int:
        return len(self.transitions)

    @property
    def rewards(self) -> np.ndarray:
        """f32[K] per-turn rewards."""
        return np.array([t.reward for t in self.transitions], dtype=np.float32)

    @property
    def episode_return(self) -> float:
        """Undiscounted sum of rewards (`return` is a Python keyword)."""
        return float(self.rewards.sum())

    @property
    def num_action_tokens(self) -> int:
        return int(sum(t.action_ids.size for t in self.transitions))


def turn_arrays(
    episodes: list[Episode], *, num_turns: int | None = None, num_rows: int | None = None
) -> dict[str, np.ndarray]:
    """Turn-level arrays for the advantage estimators: rewards f32[E, K], turn_mask bool[E, K], group_ids i32[E],
    role_ids i32[E] and policy_ids i32[E] (a critic's values come from the device step, `jgem.algos.step`).

    `num_turns` / `num_rows` pad K / E to fixed sizes (padded entries are masked out) so the jitted
    estimators compile once per shape.
    """
    E = len(episodes) if num_rows is None else num_rows
    K = max((e.num_turns for e in episodes), default=0) if num_turns is None else num_turns
    if len(episodes) > E:
        raise ValueError(f"num_rows={num_rows} is smaller than the {len(episodes)} episodes given")
    longest = max((e.num_turns for e in episodes), default=0)
    if longest > K:
        raise ValueError(f"num_turns={num_turns} is smaller than the longest episode ({longest} turns)")
    rewards = np.zeros((E, K), np.float32)
    mask = np.zeros((E, K), bool)
    group_ids = np.full((E,), -1, np.int32)
    role_ids = np.zeros((E,), np.int32)
    policy_ids = np.zeros((E,), np.int32)
    for i, e in enumerate(episodes):
        rewards[i, : e.num_turns] = e.rewards
        mask[i, : e.num_turns] = True
        group_ids[i] = e.group_id
        role_ids[i] = e.role
        policy_ids[i] = e.policy
    # padded rows get unique negative groups so they never join a real group
    pad = np.arange(len(episodes), E)
    group_ids[pad] = -1 - pad
    return {
        "rewards": rewards,
        "turn_mask": mask,
        "group_ids": group_ids,
        "role_ids": role_ids,
        "policy_ids": policy_ids,
    }
