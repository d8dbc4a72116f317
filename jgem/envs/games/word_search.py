"""Word Search (GEM `game:WordSearch-v0-*`): find hidden words, `\\boxed{start_row start_col end_row end_col}` per turn.

Words run across or down and cross each other where letters agree (GEM's layout, shared with
Crosswords through `place_words`). Basic puzzles use frequent words, hardcore ones rarer words from
jgem's shipped lists (`jgem.envs.games.words`).
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any, TypeVar

import numpy as np

from jgem.envs.games.base import GameEnv, Reward, capped_int, last_match
from jgem.envs.games.words import load_words

_MOVE = re.compile(r"\\boxed\{(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\}")
T = TypeVar("T")
Placement = dict[str, tuple[int, int, str]]  # word -> (row, col, "across" | "down")


def _fits(grid: list[list[str]], word: str, direction: str, row: int, col: int) -> bool:
    n = len(grid)
    dr, dc = (0, 1) if direction == "across" else (1, 0)
    if not (0 <= row <= n - 1 - dr * (len(word) - 1) and 0 <= col <= n - 1 - dc * (len(word) - 1)):
        return False
    return all(grid[row + dr * i][col + dc * i] in (".", ch) for i, ch in enumerate(word))


def _write(grid: list[list[str]], word: str, direction: str, row: int, col: int) -> None:
    dr, dc = (0, 1) if direction == "across" else (1, 0)
    for i, ch in enumerate(word):
        grid[row + dr * i][col + dc * i] = ch


def place_words(words: list[str], rng: np.random.Generator) -> tuple[list[list[str]], Placement]:
    """GEM's layout: longest word centred, each next word crossing a placed one where possible,
    else at the first free spot in its direction; a word that fits nowhere is left out.
    Returns the grid ('.' = empty, size round(1.5 * longest)) and where each word went."""
    words = sorted(dict.fromkeys(words), key=len, reverse=True)
    directions = {w: ("across", "down")[int(rng.integers(2))] for w in words}
    size = round(max(map(len, words)) * 1.5)
    grid = [["."] * size for _ in range(size)]
    placed: Placement = {}
    for word in words:
        d = directions[word]
        if not placed:
            spots = [(size // 2, (size - len(word)) // 2) if d == "across" else ((size - len(word)) // 2, size // 2)]
        else:
            spots = []
            for other, (r, c, od) in placed.items():
                if od == d:
                    continue  # only crossings: a word runs perpendicular to the one it meets
                for i, ch in enumerate(word):
                    for j, och in enumerate(other):
                        if ch == och:
                            spots.append((r - i, c + j) if od == "across" else (r + j, c - i))
            spots = [spots[int(k)] for k in rng.permutation(len(spots))]
            spots += [(r, c) for r in range(size) for c in range(size)]
        for r, c in spots:
            if _fits(grid, word, d, r, c):
                _write(grid, word, d, r, c)
                placed[word] = (r, c, d)
                break
    return grid, placed


def word_cells(word: str, row: int, col: int, direction: str) -> list[tuple[int, int]]:
    dr, dc = (0, 1) if direction == "across" else (1, 0)
    return [(row + dr * i, col + dc * i) for i in range(len(word))]


@cache
def word_pool(hardcore: bool) -> tuple[str, ...]:
    """Basic: the frequent list (3-8 letters). Hardcore: rarer words outside it (5-12 letters)."""
    if not hardcore:
        return tuple(w for w in load_words(common=True) if 3 <= len(w) <= 8)
    common = set(load_words(common=True))
    return tuple(w for w in load_words() if w not in common and 5 <= len(w) <= 12)


class WordGridEnv(GameEnv):
    """What Word Search and Crosswords share: `num_words` words drawn from a basic or hardcore pool.
    With any parameter `None`, each reset draws them as GEM does: hardcore or not, `random_num_words`
    words, 20 turns."""

    random_num_words: int

    def __init__(self, hardcore: bool | None, max_turns: int | None, num_words: int | None, seed: int | None) -> None:
        super().__init__(seed=seed)
        self._is_random = hardcore is None or max_turns is None or num_words is None
        if not self._is_random and num_words < 1:
            raise ValueError(f"num_words must be at least 1, got {num_words}")
        self.hardcore, self.max_turns, self.num_words = hardcore, max_turns, num_words
        self.reset()

    def _pick_words(self, pool_of: Callable[[bool], Sequence[T]]) -> list[T]:
        """Called by `reset` after seeding: the draw of random parameters, then this episode's words."""
        if self._is_random:
            self.hardcore, self.num_words = bool(self.np_random.integers(2)), self.random_num_words
            self.max_turns = 20
        pool = pool_of(bool(self.hardcore))
        picks = self.np_random.choice(len(pool), size=min(self.num_words, len(pool)), replace=False)
        return [pool[int(i)] for i in picks]


class WordSearchEnv(WordGridEnv):
    """Each word found: 1/(number of words). Wrong, repeated, diagonal or off-grid guesses: 0."""

    random_num_words = 5

    def __init__(
        self,
        hardcore: bool | None = False,
        max_turns: int | None = 20,
        num_words: int | None = 5,
        seed: int | None = None,
    ) -> None:
        super().__init__(hardcore, max_turns, num_words, seed)

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed)
        grid, self.placed_words = place_words([w.upper() for w in self._pick_words(word_pool)], self.np_random)
        letters = string.ascii_uppercase
        self.grid = [[ch if ch != "." else letters[int(self.np_random.integers(26))] for ch in row] for row in grid]
        self.found: set[str] = set()
        self.highlighted: set[tuple[int, int]] = set()
        self.attempts: set[tuple[int, int, int, int]] = set()
        self.turn_count = 0
        return self.instructions(), self.info()

    def instructions(self) -> str:
        kind = "hardcore" if self.hardcore else "basic"
        return (
            f"Word Search ({kind}): {len(self.placed_words)} English words are hidden in the letter grid below.\n"
            "Every word reads left to right (across) or top to bottom (down); some words cross.\n"
            "Rows and columns are numbered from 0. Found words are shown in [brackets].\n"
            "Each turn, name one word by the row and column of its first and last letters: "
            "\\boxed{start_row start_col end_row end_col}. For example, \\boxed{2 0 2 4} claims the five letters "
            "of row 2 from column 0 to column 4.\n"
            "Wrong, repeated, diagonal or off-grid guesses score nothing and use a turn; a reply without a "
            "well-formed box ends the game.\n"
            f"You have {self.max_turns} turns."
        )

    def render(self) -> str:
        n = len(self.grid)
        lines = ["   " + "".join(f"{c:>3} " for c in range(n)).rstrip()]
        for r, row in enumerate(self.grid):
            cells = "".join(f" [{ch}]" if (r, c) in self.highlighted else f"  {ch} " for c, ch in enumerate(row))
            lines.append(f"{r:>3}{cells}".rstrip())
        return "\n".join(lines)

    def suffix(self) -> str:
        return f"Grid:\n{self.render()}\nWords found: {len(self.found)}/{len(self.placed_words)}\nYour guess?"

    def _word_at(self, r0: int, c0: int, r1: int, c1: int) -> str | None:
        for word, (r, c, d) in self.placed_words.items():
            cells = word_cells(word, r, c, d)
            if {(r0, c0), (r1, c1)} == {cells[0], cells[-1]}:
                return word
        return None

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.turn_count += 1
        match = last_match(_MOVE, action) if isinstance(action, str) else None
        if match is None:
            obs = "No guess found: answer with \\boxed{start_row start_col end_row end_col}, e.g. \\boxed{0 1 0 5}."
            return self.format_error(obs, self.turn_count == self.max_turns)
        guess = tuple(capped_int(x) for x in match.groups())
        r0, c0, r1, c1 = guess
        n, t = len(self.grid), self.turn_count
        reward = Reward.INVALID
        word = None
        if not all(0 <= x < n for x in guess):
            obs = f"Turn {t}: ({r0}, {c0})-({r1}, {c1}) is off the grid; rows and columns run 0..{n - 1}."
        elif guess in self.attempts:
            obs = f"Turn {t}: you already tried ({r0}, {c0})-({r1}, {c1})."
        elif r0 != r1 and c0 != c1:
            obs = f"Turn {t}: ({r0}, {c0})-({r1}, {c1}) is diagonal; words run across or down only."
        elif (word := self._word_at(r0, c0, r1, c1)) in self.found:
            obs = f"Turn {t}: you already found {word} there."
        elif word is not None:
            self.found.add(word)
            self.highlighted.update(word_cells(word, *self.placed_words[word]))
            reward = 1.0 / len(self.placed_words)
            obs = f"Turn {t}: correct, ({r0}, {c0})-({r1}, {c1}) spells {word}."
        else:
            reward = Reward.STEP
            obs = f"Turn {t}: no hidden word runs from ({r0}, {c0}) to ({r1}, {c1})."
        self.attempts.add(guess)
        if len(self.found) == len(self.placed_words):
            return "You found every word!", reward, True, False, self.info(success=True)
        return self.end_turn(obs, reward, self.turn_count >= self.max_turns, " That was the last turn.")

    def sample_random_action(self) -> str:
        r0, c0, r1, c1 = (int(x) for x in self.np_random.integers(len(self.grid), size=4))
        return f"\\boxed{{{r0} {c0} {r1} {c1}}}"


class WordSearchSolver:
    """Reference solver: reads the hidden words' places from the env and claims one per turn."""

    def reset(self, obs: str, info: dict[str, Any], env: WordSearchEnv) -> None:
        pass

    def act(self, obs: str, info: dict[str, Any], env: WordSearchEnv) -> str:
        for word, (r, c, d) in env.placed_words.items():
            if word not in env.found:
                (r0, c0), (r1, c1) = word_cells(word, r, c, d)[0], word_cells(word, r, c, d)[-1]
                return f"\\boxed{{{r0} {c0} {r1} {c1}}}"
        return "\\boxed{0 0 0 0}"
