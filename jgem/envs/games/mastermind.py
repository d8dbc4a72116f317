"""Mastermind (GEM's Mastermind-v0): find a secret code of digits from black/white peg feedback."""

from __future__ import annotations

import itertools
import re
from collections import Counter
from typing import Any

from jgem.core import Env, StepResult
from jgem.envs.games.base import GameEnv, Reward, last_match
from jgem.envs.games.guess_the_number import parse_number

_GUESS = re.compile(r"\\boxed{(\d+(?:\s+\d+)*)}")
_PEGS = re.compile(r"guessed ([\d ]+)\. Pegs: (\d+) black, (\d+) white")
_RANDOM_VARIANTS = ((2, 4, 10), (4, 6, 20), (4, 8, 30))  # (code_length, num_numbers, max_turns), as GEM


def score(code: tuple[int, ...], guess: tuple[int, ...]) -> tuple[int, int]:
    """(black, white): right digit in the right place / right digit in the wrong place."""
    black = sum(c == g for c, g in zip(code, guess))
    if len(set(code)) == len(code):  # distinct digits: common digits are a set intersection (fast path)
        return black, len(set(code).intersection(guess)) - black
    common = sum((Counter(code) & Counter(guess)).values())
    return black, common - black


class MastermindEnv(GameEnv):
    """Guess a code of `code_length` digits from 1..num_numbers, e.g. `\\boxed{1 2 3 4}`.

    Rewards (GEM): each valid guess earns (black pegs beyond the best so far) / code_length, so a
    solved game sums to 1.0; wrong length, out-of-range digits and repeated guesses are invalid (0.0);
    no `\\boxed{digits}` is a format error (-0.1, episode ends).
    """

    def __init__(
        self,
        code_length: int | None = 4,
        num_numbers: int | None = 6,
        duplicate_numbers: bool = False,
        max_turns: int | None = 20,
        seed: int | None = None,
    ) -> None:
        super().__init__(seed=seed)
        self._is_random = code_length is None or num_numbers is None or max_turns is None
        if not self._is_random:
            if code_length < 1 or num_numbers < 1 or max_turns < 1:
                raise ValueError(
                    f"code_length, num_numbers, max_turns must be >= 1, got {code_length, num_numbers, max_turns}"
                )
            if not duplicate_numbers and code_length > num_numbers:
                raise ValueError(
                    f"a code of {code_length} distinct digits needs num_numbers >= {code_length}, got {num_numbers}; "
                    "raise num_numbers or pass duplicate_numbers=True"
                )
        self.code_length, self.num_numbers, self.max_turns = code_length, num_numbers, max_turns
        self.duplicate_numbers = bool(duplicate_numbers)
        self.code: tuple[int, ...] = ()
        self.previous_guesses: set[tuple[int, ...]] = set()
        self.milestone = 0

    def instructions(self) -> str:
        example = " ".join(str(d) for d in range(1, self.code_length + 1))
        repeats = "may repeat" if self.duplicate_numbers else "are all different"
        return (
            "Let's play Mastermind.\n"
            f"I have chosen a secret code of {self.code_length} digits, each from 1 to {self.num_numbers}; "
            f"the digits {repeats}. Find it in at most {self.max_turns} guesses.\n"
            "For each guess I answer with pegs: a black peg for each digit that is right and in the right place, "
            "a white peg for each digit that is in the code but in another place.\n"
            "Write your reasoning if you like, then give the guess as digits separated by spaces inside "
            f"\\boxed{{}}, for example \\boxed{{{example}}}.\n"
            "Your earlier guesses and their pegs appear below. Make your first guess.\n"
        )

    def suffix(self) -> str:
        return "Enter your guess."

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed)
        if self._is_random:
            pick = _RANDOM_VARIANTS[int(self.np_random.integers(len(_RANDOM_VARIANTS)))]
            self.code_length, self.num_numbers, self.max_turns = pick
        digits = range(1, self.num_numbers + 1)
        if self.duplicate_numbers:
            self.code = tuple(int(d) for d in self.np_random.choice(digits, size=self.code_length))
        else:
            self.code = tuple(int(d) for d in self.np_random.choice(digits, size=self.code_length, replace=False))
        self.previous_guesses = set()
        self.milestone = 0
        self.turn_count = 0
        return self.instructions(), self.info()

    def step(self, action: str) -> StepResult:
        last_turn = self.next_turn()
        match = last_match(_GUESS, action)
        if match is None:
            return self.no_boxed("digits separated by spaces", last_turn)
        guess = tuple(parse_number(d) for d in match.group(1).split())
        shown = " ".join(map(str, guess[:12])) + (" ..." if len(guess) > 12 else "")
        reward = Reward.INVALID
        if len(guess) != self.code_length:
            obs = f"Turn {self.turn_count}: {shown} has {len(guess)} digits but the code has {self.code_length}."
        elif any(not 1 <= d <= self.num_numbers for d in guess):
            obs = f"Turn {self.turn_count}: {shown} uses digits outside 1..{self.num_numbers}."
        elif guess in self.previous_guesses:
            obs = f"Turn {self.turn_count}: you already guessed {shown}."
        else:
            self.previous_guesses.add(guess)
            black, white = score(self.code, guess)
            reward = max(0, black - self.milestone) / self.code_length
            self.milestone = max(self.milestone, black)
            obs = f"Turn {self.turn_count}: you guessed {shown}. Pegs: {black} black, {white} white."
            if black == self.code_length:
                obs += f"\nYou cracked the code in {self.turn_count} turns!"
                return obs, reward, True, False, self.info(success=True)
        code = " ".join(map(str, self.code))
        return self.end_turn(obs, reward, last_turn, f"\nThat was the last turn; the code was {code}.")

    def sample_random_action(self) -> str:
        digits = self.np_random.choice(
            range(1, self.num_numbers + 1), size=self.code_length, replace=self.duplicate_numbers
        )
        return "\\boxed{" + " ".join(str(int(d)) for d in digits) + "}"


def all_codes(code_length: int, num_numbers: int, duplicates: bool) -> list[tuple[int, ...]]:
    digits = range(1, num_numbers + 1)
    if duplicates:
        return list(itertools.product(digits, repeat=code_length))
    return list(itertools.permutations(digits, code_length))


class MastermindSolver:
    """Keeps the codes consistent with all feedback; minimax (Knuth) guess once few remain."""

    minimax_limit = 32  # bounds the work per turn to 32 x |all codes| scorings

    def reset(self, obs: str, info: dict[str, Any], env: Env) -> None:
        self.codes = all_codes(env.code_length, env.num_numbers, env.duplicate_numbers)
        self.candidates = list(self.codes)

    def act(self, obs: str, info: dict[str, Any], env: Env) -> str:
        for shown, black, white in _PEGS.findall(obs):
            guess, pegs = tuple(int(d) for d in shown.split()), (int(black), int(white))
            self.candidates = [c for c in self.candidates if score(c, guess) == pegs]
        return "\\boxed{" + " ".join(map(str, self._choose())) + "}"

    def _choose(self) -> tuple[int, ...]:
        if len(self.candidates) <= 2 or len(self.candidates) > self.minimax_limit:
            return self.candidates[0]
        pool = set(self.candidates)

        def worst_case(guess: tuple[int, ...]) -> tuple[int, bool]:
            parts = Counter(score(c, guess) for c in self.candidates)
            return max(parts.values()), guess not in pool  # prefer a guess that could win

        return min(self.codes, key=worst_case)
