"""Observation and bookkeeping wrappers.

- `HistoryWrapper(mode="concat" | "concat_with_action")`: the text views of GEM's `ObservationWrapper`
  (same string, byte for byte): earlier observations (and actions) joined by newlines, then the
  current one, with `info["prefix"]` / `info["suffix"]` around it.
- `ChatWrapper`: the same history as chat messages (`[{"role": ..., "content": ...}]`), append-only,
  so a collector can tokenise each new message once instead of re-templating the whole prompt.
- `EpisodeStatistics`: `info["episode"] = {"return", "length", "success"}` on the step that ends an episode.

`wrapper_fns("concat,episode_stats")` builds a wrapper list from names (GEM's `get_wrapper_fns` style).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Any, Literal

from jgem.core import Env, StepResult, Wrapper


def _with_newline(text: str) -> str:
    return text + "\n" if text and not text.endswith("\n") else text


class HistoryWrapper(Wrapper):
    """GEM's text history observation.

    `concat`: all observations so far; `concat_with_action`: observations interleaved with the
    actions (or `info["parsed_action"]` when the env reports one). `max_history_length` keeps the last
    k turns (GEM semantics: k+1 observations, k actions).
    """

    def __init__(
        self,
        env: Env,
        mode: Literal["concat", "concat_with_action"] = "concat_with_action",
        max_history_length: int | None = None,
    ) -> None:
        super().__init__(env)
        if mode not in ("concat", "concat_with_action"):
            raise ValueError(f"unknown history mode {mode!r}; use 'concat' or 'concat_with_action' (or ChatWrapper)")
        if max_history_length is not None and max_history_length < 1:
            raise ValueError(f"max_history_length must be >= 1 or None, got {max_history_length}")
        self.mode = mode
        self.max_history_length = max_history_length
        self.obs_queue: deque[str] = deque(maxlen=max_history_length + 1 if max_history_length else None)
        self.act_queue: deque[str] = deque(maxlen=max_history_length)

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        self.obs_queue.clear()
        self.act_queue.clear()
        obs, info = self.env.reset(seed=seed)
        self.obs_queue.append(obs)
        return self._render(info), info

    def step(self, action: str) -> StepResult:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.act_queue.append(info.get("parsed_action", action))
        self.obs_queue.append(obs)
        return self._render(info), reward, terminated, truncated, info

    def _render(self, info: dict[str, Any]) -> str:
        parts: list[str] = []
        if self.mode == "concat_with_action":
            for o, a in zip(list(self.obs_queue)[:-1], self.act_queue):
                parts.append(_with_newline(o))
                parts.append(_with_newline(a))
            parts.append(_with_newline(self.obs_queue[-1]))
        else:
            parts.extend(_with_newline(o) for o in self.obs_queue)
        text = "".join(parts)
        return info.get("prefix", "") + text + info.get("suffix", "")


class ChatWrapper(Wrapper):
    """History as chat messages: user (or tool) observations and the assistant's raw actions.

    Messages are only ever appended, so message k is the same on every later turn. The current
    turn's `info["suffix"]` (board, instruction) is appended to its own message with `include_suffix`
    and stays there. `system_prompt` adds a first system message. A step whose info carries
    `tool_messages` (a native tool format's results, one message per call) appends those as they are.
    Observations are lists of dicts; each step returns a new list (the dicts are shared, treat them as
    read-only).
    """

    def __init__(self, env: Env, system_prompt: str | None = None, include_suffix: bool = True) -> None:
        super().__init__(env)
        self.system_prompt = system_prompt
        self.include_suffix = include_suffix
        self.messages: list[dict[str, str]] = []

    def _message(self, obs: str, info: dict[str, Any]) -> dict[str, str]:
        content = obs
        if self.include_suffix and info.get("suffix"):
            content = _with_newline(obs) + info["suffix"]
        if info.get("prefix"):
            content = info["prefix"] + content
        return {"role": "tool" if info.get("use_tool") else "user", "content": content}

    def reset(self, seed: int | None = None) -> tuple[list[dict[str, str]], dict[str, Any]]:
        obs, info = self.env.reset(seed=seed)
        self.messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        self.messages.append(self._message(obs, info))
        return list(self.messages), info

    def step(self, action: str) -> StepResult:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.messages.append({"role": "assistant", "content": action})
        if info.get("tool_messages"):
            self.messages.extend(dict(m) for m in info["tool_messages"])
        else:
            self.messages.append(self._message(obs, info))
        return list(self.messages), reward, terminated, truncated, info


class EpisodeStatistics(Wrapper):
    """Adds `info["episode"] = {"return", "length", "success"}` to the step that ends an episode."""

    def __init__(self, env: Env) -> None:
        super().__init__(env)
        self.episode_return = 0.0
        self.episode_length = 0

    def reset(self, seed: int | None = None) -> tuple[Any, dict[str, Any]]:
        self.episode_return = 0.0
        self.episode_length = 0
        return self.env.reset(seed=seed)

    def step(self, action: str) -> StepResult:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.episode_return += float(reward)
        self.episode_length += 1
        if terminated or truncated:
            info["episode"] = {
                "return": self.episode_return,
                "length": self.episode_length,
                "success": bool(info.get("success", False)),
            }
        return obs, reward, terminated, truncated, info


WRAPPERS: dict[str, Callable[[Env], Env]] = {
    "concat": partial(HistoryWrapper, mode="concat"),
    "concat_with_action": partial(HistoryWrapper, mode="concat_with_action"),
    "chat": ChatWrapper,
    "episode_stats": EpisodeStatistics,
}


def wrapper_fns(names: str | list[str]) -> list[Callable[[Env], Env]]:
    """Wrapper constructors from names, e.g. "concat_with_action,episode_stats" (applied in order)."""
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",") if n.strip()]
    fns = []
    for name in names:
        if name not in WRAPPERS:
            raise ValueError(f"unknown wrapper {name!r}; choose from {', '.join(WRAPPERS)}")
        fns.append(WRAPPERS[name])
    return fns
