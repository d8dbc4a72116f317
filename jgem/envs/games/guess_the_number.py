"""Guess the Number (GEM's GuessTheNumber-v0): find a hidden integer from higher/lower hints."""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from jgem.core import Env, StepResult
from jgem.envs.games.base import GameEnv, Reward, last_match

_GUESS = re.compile(r"\\boxed{(\d+)}")
_HINT = re.compile(r"you guessed (\d+), the target is (higher|lower)")


def parse_number(digits: str) -> int:
    """`int(digits)`, except that numbers too long for Python's int parser come back as a huge number."""
    return int(digits) if len(digits) <= 18 else 10**18


class GuessTheNumberEnv(GameEnv):
    """Guess an integer in [min_number, max_number]; each valid guess is answered with higher/lower.

    Rewards (GEM): correct guess 1.0; other guesses 0.0; no `\\boxed{<digits>}` is a format error
    (-0.1, episode ends). If the last turn's guess is wrong but in range it scores
    `1 - |guess - target| / (max - min)`. `None` parameters are sampled at each reset as in GEM.
    """

    def __init__(
        self,
        min_number: int | None = 1,
        max_number: int | None = 20,
        max_turns: int | None = 20,
        seed: int | None = None,
    ) -> None:
        super().__init__(seed=seed)
        self._is_random = min_number is None or max_number is None
        if not self._is_random:
            if max_number <= min_number:
                raise ValueError(f"max_number ({max_number}) must be greater than min_number ({min_number})")
            if max_turns is None or max_turns < 1:
                raise ValueError(f"max_turns must be a positive int when the range is fixed, got {max_turns}")
        self.min_number, self.max_number, self.max_turns = min_number, max_number, max_turns
        self.target = 0
        self.previous_guesses: set[int] = set()

    def instructions(self) -> str:
        lo, hi = self.min_number, self.max_number
        return (
            "Let's play Guess the Number.\n"
            f"I am thinking of a whole number from {lo} to {hi}, both included. Find it in at most "
            f"{self.max_turns} guesses.\n"
            "After each guess I tell you whether the number is higher or lower than your guess. Guesses outside "
            "the range or repeated guesses are wasted turns.\n"
            "Write anything you like, but put your guess inside \\boxed{}: only the last \\boxed{} number counts, "
            f"for example \\boxed{{{(lo + hi) // 2}}}.\n"
            "Your earlier guesses and my answers appear below. Make your first guess.\n"
        )

    def suffix(self) -> str:
        return "Enter your next guess."

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed)
        if self._is_random:
            self.min_number = int(self.np_random.integers(1, 11))
            self.max_number = int(self.np_random.integers(self.min_number + 5, self.min_number + 51))
            self.max_turns = math.ceil(math.sqrt(self.max_number - self.min_number)) + 1
        self.target = int(self.np_random.integers(self.min_number, self.max_number + 1))
        self.previous_guesses = set()
        self.turn_count = 0
        return self.instructions(), self.info()

    def step(self, action: str) -> StepResult:
        last_turn = self.next_turn()
        match = last_match(_GUESS, action)
        if match is None:
            return self.no_boxed("a whole number", last_turn)
        guess = parse_number(match.group(1))
        in_range = self.min_number <= guess <= self.max_number
        if not in_range:  # GEM counts a guess of 0 as a format error; jgem treats it as out of range
            obs = f"Turn {self.turn_count}: {guess} is outside {self.min_number}..{self.max_number}."
            reward = Reward.INVALID
        elif guess in self.previous_guesses:
            obs = f"Turn {self.turn_count}: you already guessed {guess}."
            reward = Reward.INVALID
        elif guess == self.target:
            obs = f"Correct! The number was {self.target}; you found it in {self.turn_count} turns."
            return obs, Reward.SUCCESS, True, False, self.info(success=True)
        else:
            self.previous_guesses.add(guess)
            hint = "lower" if guess > self.target else "higher"
            obs = f"Turn {self.turn_count}: you guessed {guess}, the target is {hint} than {guess}."
            reward = Reward.STEP
        if last_turn and in_range:  # GEM's last-turn score: how close the final guess was
            reward = 1 - abs(guess - self.target) / (self.max_number - self.min_number)
        return self.end_turn(obs, reward, last_turn, f"\nThat was the last turn; the number was {self.target}.")

    def sample_random_action(self) -> str:
        return f"\\boxed{{{int(self.np_random.integers(self.min_number, self.max_number + 1))}}}"


class GuessTheNumberSolver:
    """Binary search on the higher/lower hints in the observations."""

    def reset(self, obs: str, info: dict[str, Any], env: Env) -> None:
        self.lo, self.hi = env.min_number, env.max_number

    def narrow(self, obs: str) -> None:
        """Shrink [lo, hi] to the numbers the hints so far leave possible."""
        for guess, hint in _HINT.findall(obs):
            if hint == "higher":
                self.lo = max(self.lo, int(guess) + 1)
            else:
                self.hi = min(self.hi, int(guess) - 1)

    def act(self, obs: str, info: dict[str, Any], env: Env) -> str:
        self.narrow(obs)
        return f"\\boxed{{{(self.lo + self.hi) // 2}}}"


class UniformTeacher(GuessTheNumberSolver):
    """A weaker teacher: guesses uniformly among the numbers the hints still leave possible. It always wins given
    enough turns (about 2 ln n guesses for n numbers against binary search's log2 n), so a policy that imitates it
    has turns to save: what a discount factor below 1 rewards (GEM's study of gamma)."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def act(self, obs: str, info: dict[str, Any], env: Env) -> str:
        self.narrow(obs)
        return f"\\boxed{{{int(self.rng.integers(self.lo, self.hi + 1))}}}"


TEACHERS = {"uniform": UniformTeacher}
