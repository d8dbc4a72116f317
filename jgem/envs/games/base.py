"""What every game shares: GEM's reward constants, action parsing and turn accounting."""

from __future__ import annotations

import re
from collections import deque
from typing import Any

from jgem.core import Env, StepResult


class Reward:
    """GEM's LanguageGameReward values."""

    SUCCESS = 1.0
    STEP = 0.0
    FAIL = 0.0
    INVALID = 0.0
    FORMAT_ERROR = -0.1


def last_boxed(text: str) -> str | None:
    """Content of the last balanced `\\boxed{...}` in `text`, or None.

    Linear time and robust to any input (unbalanced braces, huge or non-ASCII strings).
    """
    idx = text.rfind("\\boxed{")
    if idx < 0:
        return None
    depth = 0
    start = idx + len("\\boxed{")
    for i in range(start - 1, len(text)):
        c = text[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[start:i]
    return None


_INT = re.compile(r"[+-]?\d+")


def parse_ints(text: str) -> list[int]:
    return [int(m) for m in _INT.findall(text)]


def last_match(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    """The last (non-overlapping) match of `pattern` in `text`, or None: GEM reads the last match."""
    return next(iter(deque(pattern.finditer(text), maxlen=1)), None)


def capped_int(digits: str) -> int:
    """`int(digits)` up to 9 digits, else 10**9: Python refuses int() on >4300 digits, and any number that
    long is out of range anyway."""
    return int(digits) if len(digits) <= 9 else 10**9


class GameEnv(Env):
    """Base for turn-limited games. Subclasses implement `_reset` and `_step`.

    Turn limit (GEM convention): when the turn that just ran was the last one and the game did not
    end otherwise, the step returns `terminated=True, truncated=True`.
    Every episode-ending step's info carries `success: bool` (the game was won).
    """

    max_turns: int

    def __init__(self, seed: int | None = None) -> None:
        super().__init__(seed=seed)
        self.turn_count = 0

    def instructions(self) -> str:
        raise NotImplementedError

    def suffix(self) -> str:
        """Per-turn instruction or rendered board (info["suffix"])."""
        return ""

    def info(self, **extra: Any) -> dict[str, Any]:
        return {"suffix": self.suffix(), "turn": self.turn_count, **extra}

    def next_turn(self) -> bool:
        """Count the turn now being played; True when it is the last one."""
        self.turn_count += 1
        return self.turn_count >= self.max_turns

    def format_error(self, obs: str, truncated: bool) -> StepResult:
        """The episode-ending step for a reply without a well-formed move."""
        return obs, Reward.FORMAT_ERROR, True, truncated, self.info(success=False)

    def no_boxed(self, what: str, last_turn: bool, noun: str = "guess") -> StepResult:
        """`format_error` with the standard text: no `\\boxed{}` holding `what` was found."""
        obs = f"Turn {self.turn_count}: no {noun} found; put {what} inside \\boxed{{}}. Game over."
        return self.format_error(obs, last_turn)

    def end_turn(self, obs: str, reward: float, last_turn: bool, last_note: str) -> StepResult:
        """A step that did not win: on the last turn, `obs + last_note`, ended and truncated; else the game goes on."""
        if last_turn:
            return obs + last_note, reward, True, True, self.info(success=False)
        return obs, reward, False, False, self.info()
