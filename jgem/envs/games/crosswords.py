"""Crosswords (GEM `game:Crosswords-v0-*`): fill a small crossword from its clues, `\\boxed{row col letter}` per turn.

Clues come from jgem's hand-written list `data/crosswords_clues.txt` (basic and hardcore words);
the grid layout is GEM's, shared with Word Search (`word_search.place_words`).
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

from jgem.envs.games.base import Reward, capped_int, last_match
from jgem.envs.games.word_search import WordGridEnv, place_words, word_cells

_CLUES = Path(__file__).resolve().parent / "data" / "crosswords_clues.txt"
_MOVE = re.compile(r"\\boxed\{(\d+)\s+(\d+)\s+([a-zA-Z])\}")
_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


@cache
def load_clues(hardcore: bool) -> tuple[tuple[str, str], ...]:
    """(WORD, clue) pairs of one level from the shipped clue file."""
    if not _CLUES.exists():
        raise FileNotFoundError(f"crossword clue file {_CLUES} is missing; reinstall jgem with its package data")
    level = "hardcore" if hardcore else "basic"
    pairs = []
    for line in _CLUES.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            word, lvl, clue = line.split("\t")
            if lvl == level:
                pairs.append((word.upper(), clue))
    return tuple(pairs)


class CrosswordsEnv(WordGridEnv):
    """Each correct letter: 1/(letter cells). A wrong letter scores 0 (not terminal); a filled or black
    cell, or one off the grid, is an invalid move (0)."""

    random_num_words = 3

    def __init__(
        self,
        hardcore: bool | None = False,
        max_turns: int | None = 100,
        num_words: int | None = 5,
        seed: int | None = None,
    ) -> None:
        super().__init__(hardcore, max_turns, num_words, seed)

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed)
        chosen = dict(self._pick_words(load_clues))
        self.solution, self.placed_words = place_words(list(chosen), self.np_random)
        # Clues in GEM's order: longest word first.
        self.clues = {w: chosen[w] for w in sorted(self.placed_words, key=len, reverse=True)}
        self.board = [["_" if ch != "." else "." for ch in row] for row in self.solution]
        self.total_letter_cells = sum(row.count("_") for row in self.board)
        self.turn_count = 0
        return self.instructions(), self.info()

    def instructions(self) -> str:
        return (
            "Let's solve a small crossword. In the grid, '_' is a square to fill with a letter and '.' is a "
            "black square. Rows and columns are numbered from 0.\n"
            "Each clue gives the direction of its word (across: left to right, down: top to bottom) and its "
            "length; words cross where they share a letter.\n"
            "Each turn, fill one square: \\boxed{row column letter}. For example, \\boxed{0 3 e} writes E in "
            "row 0, column 3.\n"
            "A correct letter scores; a wrong letter scores nothing; filled squares, black squares and squares "
            "off the grid cannot be written. A reply without a well-formed box ends the game.\n"
            f"You have {self.max_turns} turns."
        )

    def render(self) -> str:
        n = len(self.board)
        lines = ["   " + "".join(f"{c:>3}" for c in range(n))]
        lines += [f"{r:>3}" + "".join(f"{ch:>3}" for ch in row) for r, row in enumerate(self.board)]
        return "\n".join(lines)

    def suffix(self) -> str:
        clues = "\n".join(
            f"{i}. {clue} ({self.placed_words[w][2]}, {len(w)} letters)"
            for i, (w, clue) in enumerate(self.clues.items(), 1)
        )
        return f"Grid:\n{self.render()}\nClues:\n{clues}\nYour move?"

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.turn_count += 1
        match = last_match(_MOVE, action) if isinstance(action, str) else None
        if match is None:
            obs = "No move found: answer with \\boxed{row column letter}, e.g. \\boxed{0 3 e}."
            return self.format_error(obs, self.turn_count == self.max_turns)
        r, c, letter = capped_int(match[1]), capped_int(match[2]), match[3].upper()
        n, t = len(self.board), self.turn_count
        reward = Reward.INVALID
        if not (0 <= r < n and 0 <= c < n):
            obs = f"Turn {t}: ({r}, {c}) is off the grid; rows and columns run 0..{n - 1}."
        elif self.board[r][c] == ".":
            obs = f"Turn {t}: ({r}, {c}) is a black square."
        elif self.board[r][c] != "_":
            obs = f"Turn {t}: ({r}, {c}) is already filled."
        elif self.solution[r][c] != letter:
            obs, reward = f"Turn {t}: {letter} is not the letter at ({r}, {c}).", Reward.STEP
        else:
            self.board[r][c] = letter
            obs, reward = f"Turn {t}: {letter} at ({r}, {c}) is correct.", 1.0 / self.total_letter_cells
        if all("_" not in row for row in self.board):
            return "Crossword complete!", reward, True, False, self.info(success=True)
        return self.end_turn(obs, reward, self.turn_count >= self.max_turns, " That was the last turn.")

    def sample_random_action(self) -> str:
        open_cells = [(r, c) for r, row in enumerate(self.board) for c, ch in enumerate(row) if ch == "_"] or [(0, 0)]
        r, c = open_cells[int(self.np_random.integers(len(open_cells)))]
        return f"\\boxed{{{r} {c} {_LETTERS[int(self.np_random.integers(26))]}}}"


class CrosswordsSolver:
    """Reference solver: reads the answers from the env and fills one open square per turn, word by word."""

    def reset(self, obs: str, info: dict[str, Any], env: CrosswordsEnv) -> None:
        pass

    def act(self, obs: str, info: dict[str, Any], env: CrosswordsEnv) -> str:
        for word, place in env.placed_words.items():
            for r, c in word_cells(word, *place):
                if env.board[r][c] == "_":
                    return f"\\boxed{{{r} {c} {env.solution[r][c]}}}"
        return "\\boxed{0 0 A}"
