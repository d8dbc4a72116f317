"""Tic-tac-toe for two agents (perfect information, zero-sum), with scripted reference players."""

from __future__ import annotations

import functools
import re
from typing import Any

import numpy as np

from jgem.envs.games.base import last_match
from jgem.envs.multiagent.base import AgentSelector, MultiAgentEnv

_CELL = re.compile(r"\\boxed{\s*(\d{1,4})\s*}")
MARKS = {"x": "X", "o": "O"}


class TicTacToeEnv(MultiAgentEnv):
    """`size` x `size` board, agents "x" (moves first) and "o" take turns; `win_length` marks in a row, column or
    diagonal win. A move is a cell number 1..size*size inside `\\boxed{}` (the last one counts).

    Rewards at the end: win +1, loss -1, draw 0 for both. A reply without a boxed cell number, or naming a cell
    off the board or taken, forfeits: the game ends with -1 for the offender (`outcome` "loss",
    `info["invalid"] = True`) and 0 for the other (`outcome` "win"). Both agents see the whole board (public
    information); each result's info carries `board` (one of "x", "o", "" per cell), `mark` and `outcome` at the end.
    """

    def __init__(self, size: int = 3, win_length: int = 3, seed: int | None = None) -> None:
        if not 3 <= size <= 9:
            raise ValueError(f"size must be 3..9, got {size}")
        if not 3 <= win_length <= size:
            raise ValueError(f"win_length must be 3..size ({size}), got {win_length}")
        self.possible_agents = ["x", "o"]
        self.agent_selector = AgentSelector(self.possible_agents)
        super().__init__(seed=seed)
        self.size, self.win_length = size, win_length
        self.board: list[str] = [""] * size * size
        self.last_note: dict[str, str] = {}

    def _reset(self) -> None:
        self.board = [""] * self.size * self.size
        self.last_note = {}

    def instructions(self, agent: str) -> str:
        n = self.size * self.size
        first = "You move first." if agent == "x" else "Your opponent (X) moves first."
        return (
            f"Let's play tic-tac-toe on a {self.size}x{self.size} board. You are {MARKS[agent]}; get "
            f"{self.win_length} of your marks in a row, column or diagonal to win. {first}\n"
            f"Cells are numbered 1 to {n}, row by row; an empty cell shows its number. Put the cell you mark inside "
            "\\boxed{}, for example \\boxed{5}. Naming a taken cell or giving no \\boxed{} number loses the game.\n"
        )

    def render(self) -> str:
        rows = []
        for r in range(self.size):
            cells = self.board[r * self.size : (r + 1) * self.size]
            rows.append(" ".join(MARKS[c] if c else str(r * self.size + i + 1) for i, c in enumerate(cells)))
        return "\n".join(rows)

    def observe(self, agent: str) -> str:
        head = self.last_note.get(agent, self.instructions(agent))
        tail = "Your move." if agent in self.active_agents() else ""
        return f"{head}\n{self.render()}\n{tail}".rstrip() + "\n"

    def extra_info(self, agent: str) -> dict[str, Any]:
        return {"board": list(self.board), "mark": agent}

    def _process_actions(self, actions: dict[str, str]) -> tuple[dict, dict, dict, dict, dict]:
        (agent, text), other = next(iter(actions.items())), None
        other = "o" if agent == "x" else "x"
        match = last_match(_CELL, text)
        cell = int(match.group(1)) if match else 0
        if not 1 <= cell <= len(self.board) or self.board[cell - 1]:
            why = "no \\boxed{} cell number" if match is None else f"cell {cell} is not an empty cell of the board"
            self.end()
            self.last_note = {agent: f"Invalid move ({why}): you lose.", other: "Your opponent forfeits: you win."}
            infos = {agent: {"outcome": "loss", "invalid": True}, other: {"outcome": "win"}}
            return {}, {agent: -1.0, other: 0.0}, {}, {}, infos
        self.board[cell - 1] = agent
        note = f"{MARKS[agent]} marked cell {cell}."
        if self._wins(agent):
            self.end()
            self.last_note = {agent: f"{note} You win!", other: f"{note} You lose."}
            return {}, {agent: 1.0, other: -1.0}, {}, {}, {agent: {"outcome": "win"}, other: {"outcome": "loss"}}
        if all(self.board):
            self.end()
            self.last_note = dict.fromkeys(actions.keys() | {other}, f"{note} The board is full: a draw.")
            return {}, {}, {}, {}, {agent: {"outcome": "draw"}, other: {"outcome": "draw"}}
        self.last_note = {agent: note, other: f"Your opponent {note[0]} marked cell {cell}."}
        return {}, {}, {}, {}, {}

    def _wins(self, agent: str) -> bool:
        return winner(tuple(self.board), self.size, self.win_length) == agent

    def sample_agent_action(self, agent: str) -> str:
        empty = [i + 1 for i, c in enumerate(self.board) if not c]
        return f"\\boxed{{{int(self.np_random.choice(empty))}}}"


@functools.cache
def _lines(size: int, k: int) -> tuple[tuple[int, ...], ...]:
    """Every run of `k` cells in a row, column or diagonal."""
    out = []
    for r in range(size):
        for c in range(size):
            for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
                cells = [(r + dr * i, c + dc * i) for i in range(k)]
                if all(0 <= y < size and 0 <= x < size for y, x in cells):
                    out.append(tuple(y * size + x for y, x in cells))
    return tuple(out)


def winner(board: tuple[str, ...], size: int, k: int) -> str:
    """ "x" or "o" when that mark holds a line of `k`, else ""."""
    for line in _lines(size, k):
        first = board[line[0]]
        if first and all(board[i] == first for i in line):
            return first
    return ""


class _BoardPlayer:
    """Reads the board and its mark from the infos it is given (public information only)."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def reset(self, agent: str, obs: str, info: dict[str, Any]) -> None:
        self.mark, self.board = agent, tuple(info["board"])

    def update(self, obs: str, info: dict[str, Any]) -> None:
        self.board = tuple(info["board"])

    @property
    def size(self) -> int:
        return int(round(len(self.board) ** 0.5))

    def empty(self) -> list[int]:
        return [i for i, c in enumerate(self.board) if not c]

    def act(self) -> str:
        return f"\\boxed{{{self.choose() + 1}}}"

    def choose(self) -> int:
        return int(self.rng.choice(self.empty()))


class TicTacToeRandomPlayer(_BoardPlayer):
    """A uniformly random empty cell."""


class TicTacToeHeuristicPlayer(_BoardPlayer):
    """Wins when it can, blocks the opponent's win, else takes the centre, then a random corner, then any cell."""

    win_length = 3

    def reset(self, agent: str, obs: str, info: dict[str, Any]) -> None:
        super().reset(agent, obs, info)
        found = re.search(r"get (\d+) of your marks", obs)
        self.win_length = int(found.group(1)) if found else 3

    def choose(self) -> int:
        other = "o" if self.mark == "x" else "x"
        for who in (self.mark, other):
            for i in self.empty():
                trial = list(self.board)
                trial[i] = who
                if winner(tuple(trial), self.size, self.win_length) == who:
                    return i
        n = self.size
        centre = [i for i in self.empty() if n % 2 and i == (n * n) // 2]
        corners = [i for i in self.empty() if i in (0, n - 1, n * (n - 1), n * n - 1)]
        for pick in (centre, corners, self.empty()):
            if pick:
                return int(self.rng.choice(pick))
        raise ValueError("no empty cell")


class TicTacToeMinimaxPlayer(_BoardPlayer):
    """Perfect play on the 3x3 board (ties broken at random): it never loses."""

    def choose(self) -> int:
        if len(self.board) != 9:
            raise ValueError("TicTacToeMinimaxPlayer plays the 3x3 board only; use TicTacToeHeuristicPlayer")
        scores = {i: _minimax(_place(self.board, i, self.mark), _other(self.mark), self.mark) for i in self.empty()}
        best = max(scores.values())
        return int(self.rng.choice([i for i, s in scores.items() if s == best]))


def _other(mark: str) -> str:
    return "o" if mark == "x" else "x"


def _place(board: tuple[str, ...], i: int, mark: str) -> tuple[str, ...]:
    return board[:i] + (mark,) + board[i + 1 :]


@functools.cache
def _minimax(board: tuple[str, ...], to_move: str, me: str) -> int:
    """The game value for `me` (+1 win, 0 draw, -1 loss) with `to_move` next, both sides perfect."""
    won = winner(board, 3, 3)
    if won:
        return 1 if won == me else -1
    empty = [i for i, c in enumerate(board) if not c]
    if not empty:
        return 0
    values = [_minimax(_place(board, i, to_move), _other(to_move), me) for i in empty]
    return max(values) if to_move == me else min(values)


# the first is the default teacher and evaluation opponent: the heuristic plays every board size
PLAYERS = {"heuristic": TicTacToeHeuristicPlayer, "minimax": TicTacToeMinimaxPlayer, "random": TicTacToeRandomPlayer}
