"""What every game shares: GEM's reward constants, action parsing and turn accounting."""

from __future__ import annotations

import re
from typing import Any

from jgem.core import Env


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
