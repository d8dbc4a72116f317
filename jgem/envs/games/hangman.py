"""Hangman (GEM's Hangman-v0): uncover a secret word by guessing letters or the whole word."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from jgem.core import Env, StepResult
from jgem.envs.games.base import GameEnv, Reward, last_match
from jgem.envs.games.words import load_words

_GUESS = re.compile(r"\\boxed{([a-zA-Z]+)}")
_RANDOM_VARIANTS = ((3, 10), (5, 15), (7, 20))  # (word_length, max_turns), as GEM


class HangmanEnv(GameEnv):
    """Guess one letter (`\\boxed{E}`) or the whole word (`\\boxed{HOUSE}`) per turn.

    Rewards (GEM): a letter in the word earns 0.5 * (letters it reveals) / word_length; the right
    word earns 0.5 * (fraction still hidden) + 0.5 and wins; wrong letters and wrong words of the
    right length 0.0; repeated letters and words of another length are invalid (0.0); no
    `\\boxed{letters}` is a format error (-0.1, episode ends). As in GEM, revealing every letter does
    not end the game: the word must be submitted. `hardcore` draws secrets from the full word list.
    """

    def __init__(
        self,
        word_length: int | None = 5,
        hardcore: bool = False,
        max_turns: int | None = 20,
        seed: int | None = None,
    ) -> None:
        super().__init__(seed=seed)
        self._is_random = word_length is None or max_turns is None
        if not self._is_random and not load_words(word_length, common=not hardcore):
            raise ValueError(f"no secret words of length {word_length}; use a length from 3 to 12")
        if not self._is_random and max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.word_length, self.max_turns = word_length, max_turns
        self.hardcore = bool(hardcore)
        self.secret = ""
        self.board: list[str] = []
        self.guessed_letters: set[str] = set()

    def instructions(self) -> str:
        return (
            "Let's play Hangman.\n"
            f"I have chosen a secret English word of {self.word_length} letters; each '_' on the board below is "
            "a letter you have not uncovered yet.\n"
            "Each turn, guess either one letter, for example \\boxed{E}, or the whole word, for example "
            f"\\boxed{{{load_words(self.word_length, common=True)[0].upper()}}}.\n"
            "A letter that is in the word is uncovered everywhere it occurs. You win by submitting the whole "
            "word correctly (uncovering every letter is not enough).\n"
            f"Guess one letter or one word per turn; you have {self.max_turns} turns.\n"
            "Your earlier guesses appear below.\n"
        )

    def render(self) -> str:
        header = " ".join(f"C{i:02}" for i in range(len(self.board)))
        return header + "\n" + "".join(f"  {c} " for c in self.board)

    def suffix(self) -> str:
        return f"The board now:\n{self.render()}\n\nEnter your guess."

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed)
        if self._is_random:
            pick = _RANDOM_VARIANTS[int(self.np_random.integers(len(_RANDOM_VARIANTS)))]
            self.word_length, self.max_turns = pick
        words = load_words(self.word_length, common=not self.hardcore)
        self.secret = words[int(self.np_random.integers(len(words)))].upper()
        self.board = ["_"] * self.word_length
        self.guessed_letters = set()
        self.turn_count = 0
        return self.instructions(), self.info()

    def step(self, action: str) -> StepResult:
        last_turn = self.next_turn()
        match = last_match(_GUESS, action)
        if match is None:
            return self.no_boxed("one letter or a word", last_turn)
        guess = match.group(1).upper()
        reward = Reward.STEP
        if len(guess) > 1:
            if guess == self.secret:
                hidden = self.board.count("_") / len(self.board)
                self.board = list(self.secret)
                obs = f"Turn {self.turn_count}: {guess} is the word. You win!"
                return obs, 0.5 * hidden + 0.5 * Reward.SUCCESS, True, False, self.info(success=True)
            if len(guess) != len(self.secret):
                obs = (
                    f"Turn {self.turn_count}: {guess[:40]!r} has {len(guess)} letters; the word has {self.word_length}."
                )
                reward = Reward.INVALID
            else:
                obs = f"Turn {self.turn_count}: {guess} is not the word."
        elif guess in self.guessed_letters:
            obs = f"Turn {self.turn_count}: you already guessed {guess}."
            reward = Reward.INVALID
        else:
            self.guessed_letters.add(guess)
            hits = [i for i, c in enumerate(self.secret) if c == guess]
            for i in hits:
                self.board[i] = guess
            reward = 0.5 * len(hits) / len(self.secret)
            obs = f"Turn {self.turn_count}: {guess} is {'in' if hits else 'not in'} the word."
        return self.end_turn(obs, reward, last_turn, f"\nThat was the last turn; the word was {self.secret}.")

    def sample_random_action(self) -> str:
        if self.np_random.random() < 0.5:
            words = load_words(self.word_length, common=not self.hardcore)
            return f"\\boxed{{{words[int(self.np_random.integers(len(words)))].upper()}}}"
        return f"\\boxed{{{chr(ord('A') + int(self.np_random.integers(26)))}}}"


class HangmanSolver:
    """Keeps the words that fit the board, the missed letters and its wrong word guesses; guesses the
    letter (or word) that leaves the fewest words on average, and the word once only one fits."""

    def reset(self, obs: str, info: dict[str, Any], env: Env) -> None:
        self.candidates = [w.upper() for w in load_words(env.word_length, common=not env.hardcore)]
        self.wrong_words: set[str] = set()
        self.last = ""

    def act(self, obs: str, info: dict[str, Any], env: Env) -> str:
        board, tried = env.board, env.guessed_letters
        if len(self.last) > 1:  # the game goes on, so the last word guessed was wrong
            self.wrong_words.add(self.last)
        self.last = self._choose(board, tried)
        return f"\\boxed{{{self.last}}}"

    def _choose(self, board: list[str], tried: set[str]) -> str:
        if "_" not in board:
            return "".join(board)
        missed = {c for c in tried if c not in board}
        fits = [w for w in self.candidates if w not in self.wrong_words and _fits(w, board, missed)]
        if not fits:  # the secret is outside the solver's list: fall back to the full list
            full = (w.upper() for w in load_words(len(board)))
            fits = [w for w in full if w not in self.wrong_words and _fits(w, board, missed)] or ["Q" * len(board)]
        self.candidates = fits
        if len(fits) == 1:
            return fits[0]
        # Expected number of words left after each guess: a letter splits the words by where it
        # occurs; a word guess wins with chance 1/n and otherwise removes one word.
        n = len(fits)
        best, best_left = fits[0], (n - 1) ** 2 / n
        for letter in sorted({c for w in fits for c in w} - tried):  # sorted: no hash-order dependence
            groups = Counter(tuple(i for i, c in enumerate(w) if c == letter) for w in fits)
            left = sum(k * k for k in groups.values()) / n
            if left < best_left:
                best, best_left = letter, left
        return best


def _fits(word: str, board: list[str], missed: set[str]) -> bool:
    # An uncovered letter shows every occurrence, so a '_' can never hide an uncovered letter.
    shown = set(board) - {"_"}
    return all(b == w if b != "_" else (w not in shown and w not in missed) for w, b in zip(word, board))
