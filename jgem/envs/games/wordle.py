"""Wordle (GEM's Wordle-v0): find a secret word from green/yellow/grey letter feedback."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from jgem.core import Env, StepResult
from jgem.envs.games.base import GameEnv, Reward, last_match
from jgem.envs.games.words import load_words

_GUESS = re.compile(r"\\boxed{([a-zA-Z]+(?:\s+[a-zA-Z]+)*)}")
_FEEDBACK = re.compile(r"you guessed ([A-Z]+)\nFeedback:\n[A-Z ]+\n([GYX ]+)")


def feedback(secret: str, guess: str) -> str:
    """Per letter: G right place, Y in the word elsewhere (counted once per secret letter), X absent."""
    marks = ["G" if g == s else "" for g, s in zip(guess, secret)]
    left = Counter(s for s, m in zip(secret, marks) if not m)
    for i, g in enumerate(guess):
        if not marks[i]:
            if left[g] > 0:
                marks[i], left[g] = "Y", left[g] - 1
            else:
                marks[i] = "X"
    return "".join(marks)


class WordleEnv(GameEnv):
    """Guess a `word_length`-letter secret word; each guess gets G/Y/X marks per letter.

    Rewards (GEM): 0.5 / word_length for each position that turns green for the first time, plus
    0.5 for solving; wrong length and repeated guesses are invalid (0.0); no `\\boxed{letters}` is a
    format error (-0.1, episode ends). As in GEM, guesses are not checked against a dictionary
    (`only_real_words` is accepted for compatibility); secrets come from jgem's common-word list.
    """

    def __init__(
        self,
        word_length: int | None = 5,
        only_real_words: bool = True,
        max_turns: int | None = 20,
        seed: int | None = None,
    ) -> None:
        super().__init__(seed=seed)
        self._is_random = word_length is None or max_turns is None
        if not self._is_random and not load_words(word_length, common=True):
            raise ValueError(f"no secret words of length {word_length}; use a length from 3 to 12")
        if not self._is_random and max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.word_length, self.max_turns = word_length, max_turns
        self.only_real_words = only_real_words
        self.secret = ""
        self.previous_guesses: set[str] = set()
        self.milestones: list[bool] = []

    def instructions(self) -> str:
        example = load_words(self.word_length, common=True)[0].upper()  # a fixed, frequent word
        return (
            "Let's play Wordle.\n"
            f"I have chosen a secret English word of {self.word_length} letters. Find it in at most "
            f"{self.max_turns} guesses.\n"
            "After each guess I mark every letter:\n"
            "  G (green): the letter is in the word, in this position\n"
            "  Y (yellow): the letter is in the word, in another position\n"
            "  X (grey): the letter is not in the word (or not as many times as you used it)\n"
            f"Think as much as you like, then put your guess inside \\boxed{{}}, for example \\boxed{{{example}}}.\n"
            "Your earlier guesses and their marks appear below.\n"
        )

    def suffix(self) -> str:
        return "Enter your guess."

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed)
        if self._is_random:
            self.word_length = int(self.np_random.integers(3, 6))
            self.max_turns = self.word_length * 5
        secrets = load_words(self.word_length, common=True)
        self.secret = secrets[int(self.np_random.integers(len(secrets)))].upper()
        self.previous_guesses = set()
        self.milestones = [False] * self.word_length
        self.turn_count = 0
        return self.instructions(), self.info()

    def step(self, action: str) -> StepResult:
        last_turn = self.next_turn()
        match = last_match(_GUESS, action)
        if match is None:
            return self.no_boxed("a word", last_turn)
        guess = match.group(1).upper().replace(" ", "")  # GEM joins words split by spaces
        reward = Reward.INVALID
        if len(guess) != self.word_length:
            obs = (
                f"Turn {self.turn_count}: {guess[:40]!r} has {len(guess)} letters but the secret word has "
                f"{self.word_length}."
            )
        elif guess in self.previous_guesses:
            obs = f"Turn {self.turn_count}: you already guessed {guess}."
        else:
            self.previous_guesses.add(guess)
            marks = feedback(self.secret, guess)
            new_greens = [i for i, m in enumerate(marks) if m == "G" and not self.milestones[i]]
            for i in new_greens:
                self.milestones[i] = True
            reward = 0.5 * len(new_greens) / self.word_length
            obs = f"Turn {self.turn_count}: you guessed {guess}\nFeedback:\n{' '.join(guess)}\n{' '.join(marks)}"
            if marks == "G" * self.word_length:
                obs += f"\nSolved: the word was {self.secret}, found in {self.turn_count} turns."
                return obs, reward + 0.5 * Reward.SUCCESS, True, False, self.info(success=True)
        return self.end_turn(obs, reward, last_turn, f"\nThat was the last turn; the word was {self.secret}.")

    def sample_random_action(self) -> str:
        words = load_words(self.word_length, common=True)
        return f"\\boxed{{{words[int(self.np_random.integers(len(words)))].upper()}}}"


class WordleSolver:
    """Filters the secret-word list by every feedback seen; guesses the candidate with the most
    frequent (distinct) letters, or the one splitting the candidates best once few remain."""

    split_limit = 60

    def reset(self, obs: str, info: dict[str, Any], env: Env) -> None:
        self.length = env.word_length
        self.candidates = [w.upper() for w in load_words(self.length, common=True)]
        self.history: list[tuple[str, str]] = []

    def act(self, obs: str, info: dict[str, Any], env: Env) -> str:
        for guess, marks in _FEEDBACK.findall(obs):
            marks = marks.replace(" ", "")
            self.history.append((guess, marks))
            self.candidates = [w for w in self.candidates if w != guess and feedback(w, guess) == marks]
        if not self.candidates:  # the secret is not a common word: search the full list
            self.candidates = [
                w.upper()
                for w in load_words(self.length)
                if all(w.upper() != g and feedback(w.upper(), g) == m for g, m in self.history)
            ] or ["Q" * self.length]  # nothing fits (a misread feedback): any well-formed guess
        return f"\\boxed{{{self._choose()}}}"

    def _choose(self) -> str:
        cands = self.candidates
        if 2 < len(cands) <= self.split_limit:
            return max(cands, key=lambda g: len({feedback(w, g) for w in cands}))
        freq = Counter(c for w in cands for c in set(w))
        return max(cands, key=lambda w: sum(freq[c] for c in set(w)))
