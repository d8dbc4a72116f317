"""Test envs whose actions inject faults: "raise", "sleep:<s>", "hang", "exit" (kills a process worker),
"self_fault" (the env reports a fault in its own info, as RemoteEnv does).

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
        self.t += 1
        done = self.t >= self.horizon
        info = {"t": self.t, "suffix": f"[t={self.t}]"}
        if done:
            info["success"] = action == "win"
        if action == "self_fault":  # what a RemoteEnv does when its server is gone
            info["fault"] = "remote: server went away"
            return "", 0.0, False, True, info
        return f"{self.start}:{self.t}:{action}", float(self.t), done, False, info

    def sample_random_action(self) -> str:
        return f"a{int(self.np_random.integers(10))}"


def inject(action: str) -> None:
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


class BrokenInitEnv(Env):
    def __init__(self) -> None:
        raise RuntimeError("cannot build this env")

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:  # pragma: no cover
        return "", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:  # pragma: no cover
        return "", 0.0, True, False, {}
