"""Test envs whose actions inject faults: "raise", "sleep:<s>", "hang", "exit" (kills a process worker),
"self_fault" (the env reports a fault in its own info, as RemoteEnv does), "sysexit" (raises SystemExit),
"bad:<name>" (returns the malformed result `BAD_RESULTS[name]`).

Module-level classes so the process backend can pickle them.
"""

from __future__ import annotations

import os
import time
from typing import Any

from jgem.core import Env


class CounterEnv(Env):
    """obs "<start>:<t>:<action>", reward t; ends (terminated) after `horizon` steps; reset draws `start`."""

    def __init__(self, horizon: int = 3, seed: int | None = None) -> None:
        super().__init__(seed=seed)
        self.horizon = horizon
        self.start = -1
        self.t = 0

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed)
        self.start = int(self.np_random.integers(1_000_000))
        self.t = 0
        return f"start {self.start}", {"start": self.start, "suffix": "Go."}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        inject(action)
        if action.startswith("bad:"):
            return BAD_RESULTS[action[4:]]
        self.t += 1
        done = self.t >= self.horizon
        info = {"t": self.t, "suffix": f"[t={self.t}]"}
        if done:
            info["success"] = action == "win"
        if action == "unpicklable_info":  # fine in-process; cannot cross a pipe to the parent
            return f"{self.start}:{self.t}:{action}", 0.0, done, False, {**info, "fn": lambda: None}
        if action == "self_fault":  # what a RemoteEnv does when its server is gone
            info["fault"] = "remote: server went away"
            return "", 0.0, False, True, info
        return f"{self.start}:{self.t}:{action}", float(self.t), done, False, info

    def sample_random_action(self) -> str:
        return f"a{int(self.np_random.integers(10))}"


BAD_RESULTS: dict[str, Any] = {
    "reward_str": ("o", "abc", False, False, {}),
    "reward_none": ("o", None, False, False, {}),
    "reward_nan": ("o", float("nan"), False, False, {}),
    "reward_inf": ("o", float("inf"), False, False, {}),
    "info_none": ("o", 0.0, False, False, None),
    "obs_int": (7, 0.0, False, False, {}),
    "obs_none": (None, 0.0, False, False, {}),
    "flag_str": ("o", 0.0, "yes", False, {}),
    "flag_none": ("o", 0.0, False, None, {}),
    "short": ("o", 0.0, False),
}


def inject(action: str) -> None:
    if action == "sysexit":
        raise SystemExit(3)
    if action == "raise":
        raise RuntimeError("injected failure")
    if action == "hang":
        time.sleep(3600)
    if action == "exit":
        os._exit(3)
    if action.startswith("sleep:"):
        time.sleep(float(action.split(":", 1)[1]))


class ResetFailsEnv(CounterEnv):
    """Raises on reset when the seed is 13 (a fault during reset)."""

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        if seed == 13:
            raise ValueError("unlucky seed")
        return super().reset(seed)


class ListObsEnv(CounterEnv):
    """Observations are message-like lists; the action "str" returns a plain string instead."""

    def reset(self, seed: int | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed)
        return [], {}

    def step(self, action: str) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = super().step(action)
        return (obs if action == "str" else [action]), reward, terminated, truncated, info


class HangingCloseEnv(CounterEnv):
    """`close()` never returns."""

    def close(self) -> None:
        time.sleep(3600)


class CloseRecordingEnv(CounterEnv):
    """Records each `close()` in the class-level `closed` list (thread backend: one process)."""

    closed: list[int] = []

    def close(self) -> None:
        CloseRecordingEnv.closed.append(self.start)


class BrokenInitEnv(Env):
    def __init__(self) -> None:
        raise RuntimeError("cannot build this env")

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:  # pragma: no cover
        return "", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:  # pragma: no cover
        return "", 0.0, True, False, {}
