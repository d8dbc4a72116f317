"""SciWorld on the `scienceworld` package (a Java simulator behind py4j), as a jgem text env.

ScienceWorld scores a task 0..100 (negative on failure); jgem maps that to 0..1: each step's reward is the
score change / 100, so an episode's rewards sum to its final score in 0..1. The JVM starts on the first
reset (a few seconds) and stops on `close()`; one JVM per env, so keep env counts modest.
"""

from __future__ import annotations

import shutil
from typing import Any

from jgem.core import Env, StepResult

SPLITS = ("train", "dev", "test")


def check_runtime() -> None:
    """Raise ImportError/RuntimeError saying what to install when scienceworld or Java is missing."""
    try:
        import scienceworld  # noqa: F401
    except ImportError as e:
        raise ImportError("SciWorld needs the scienceworld package: pip install 'jgem[agentgym]'") from e
    if shutil.which("java") is None:
        raise RuntimeError(
            "SciWorld needs a Java runtime (>= 1.8) on PATH, e.g. apt-get install openjdk-17-jre-headless"
        )


class SciWorldEnv(Env):
    """A ScienceWorld task. `task` is a name ("boil") or index into the sorted task names; None draws one
    per episode. `variation` fixes the variation; None draws one from `split`."""

    def __init__(
        self,
        task: str | int | None = None,
        variation: int | None = None,
        split: str = "train",
        simplification: str = "easy",
        max_turns: int = 100,
        gold_path: bool = False,
        seed: int | None = None,
    ) -> None:
        super().__init__(seed=seed)
        if split not in SPLITS:
            raise ValueError(f"split {split!r} is not one of {SPLITS}")
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.task, self.variation, self.split = task, variation, split
        self.simplification, self.max_turns, self.gold_path = simplification, max_turns, gold_path
        self._sw: Any = None
        self._variations: dict[tuple[str, str], list[int]] = {}
        self.task_name = ""
        self.variation_idx = -1
        self.score = 0  # ScienceWorld's 0..100 (clipped at 0)
        self.turn = 0
        self.done = True

    # -- simulator -----------------------------------------------------------------------------------
    @property
    def sim(self) -> Any:
        if self._sw is None:
            check_runtime()
            from scienceworld import ScienceWorldEnv

            self._sw = ScienceWorldEnv("", envStepLimit=10**6)  # jgem enforces max_turns itself
        return self._sw

    def task_names(self) -> list[str]:
        return sorted(self.sim.get_task_names())

    def _task_name(self) -> str:
        names = self.task_names()
        if self.task is None:
            return names[int(self.np_random.integers(len(names)))]
        if isinstance(self.task, int):
            if not 0 <= self.task < len(names):
                raise ValueError(f"task index {self.task} is out of range 0..{len(names) - 1}")
            return names[self.task]
        if self.task not in names:
            raise ValueError(f"unknown SciWorld task {self.task!r}; tasks: {', '.join(names)}")
        return self.task

    def _split_variations(self, name: str) -> list[int]:
        key = (name, self.split)
        if key not in self._variations:
            self.sim.load(name, 0, self.simplification)  # a task must be loaded to list its variations
            getter = {
                "train": self.sim.get_variations_train,
                "dev": self.sim.get_variations_dev,
                "test": self.sim.get_variations_test,
            }[self.split]
            self._variations[key] = list(getter())
        return self._variations[key]

    # -- Env API -------------------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed)
        name = self._task_name()
        if self.variation is None:
            options = self._split_variations(name)
            var = options[int(self.np_random.integers(len(options)))]
        else:
            var = self.variation
        self.sim.load(name, var, self.simplification, generateGoldPath=self.gold_path)
        obs, info = self.sim.reset()
        self.task_name, self.variation_idx = name, var
        self.score, self.turn, self.done = 0, 0, False
        text = f"{info['taskDesc']}\n\n{obs}"
        return text, {"task": name, "variation": var, "score": 0.0}

    def step(self, action: str) -> StepResult:
        if self.done:
            raise RuntimeError("step() after the episode ended; call reset()")
        self.turn += 1
        obs, _, completed, info = self.sim.step(action.strip())
        raw = int(info["score"])
        score = min(max(raw, 0), 100)
        reward = (score - self.score) / 100.0
        self.score = score
        terminated = bool(completed) or raw < 0
        truncated = not terminated and self.turn >= self.max_turns
        self.done = terminated or truncated
        out: dict[str, Any] = {
            "score": score / 100.0,
            "moves": info["moves"],
            "task": self.task_name,
            "variation": self.variation_idx,
        }
        if self.done:
            out["success"] = raw >= 100
        return obs, reward, terminated, truncated, out

    def gold_actions(self) -> list[str]:
        """The simulator's reference solution of the loaded variation (needs `gold_path=True`)."""
        if not self.gold_path:
            raise RuntimeError("gold actions need SciWorldEnv(gold_path=True) (the path is made when a task loads)")
        return list(self.sim.get_gold_action_sequence())

    def valid_actions(self) -> list[str]:
        return list(self.sim.get_valid_action_object_combinations())

    def get_state(self) -> Any:
        raise NotImplementedError("SciWorld's state lives in its JVM and cannot be copied; replay actions instead")

    def set_state(self, state: Any) -> None:
        raise NotImplementedError("SciWorld's state lives in its JVM and cannot be restored; replay actions instead")

    def spawn(self, same_state: bool = False) -> Env:
        if same_state:
            raise NotImplementedError("SciWorld cannot clone a running episode; spawn(same_state=False) only")
        return SciWorldEnv(
            self.task,
            self.variation,
            self.split,
            self.simplification,
            self.max_turns,
            self.gold_path,
            seed=int(self.np_random.integers(2**63)),
        )

    def close(self) -> None:
        if self._sw is not None:
            self._sw.close()  # stops the JVM
            self._sw = None
