"""Minesweeper (GEM's Minesweeper-v0): reveal every safe cell and flag every mine."""

from __future__ import annotations

import itertools
import math
import re
from collections import deque
from typing import Any

from jgem.core import Env, StepResult
from jgem.envs.games.base import GameEnv, Reward
from jgem.envs.games.guess_the_number import parse_number

_MOVE = re.compile(r"\\boxed{([a-zA-Z]+)\s(\d+)\s(\d+)}")
MINE = -1
Cell = tuple[int, int]


def neighbours(r: int, c: int, rows: int, cols: int) -> list[Cell]:
    return [
        (r + dr, c + dc)
        for dr in (-1, 0, 1)
        for dc in (-1, 0, 1)
        if (dr or dc) and 0 <= r + dr < rows and 0 <= c + dc < cols
    ]


class MinesweeperEnv(GameEnv):
    """`\\boxed{reveal r c}` or `\\boxed{flag r c}` (0-indexed row and column).

    Rules and rewards (GEM): mines are placed at the first reveal, never in the 3x3 block around it.
    Revealing a safe cell earns (cells it uncovers, zero-count cells flood out) / (all safe cells);
    revealing a mine ends the game with 0.0 (a flagged mine too); flagging toggles a flag, 0.0;
    out-of-board cells, revealed or flagged cells and unknown commands are invalid (0.0); no
    `\\boxed{command r c}` is a format error (-0.1, episode ends). The game is won when every safe
    cell is revealed and every mine is flagged.
    GEM fix: GEM checks for the win only after a reveal, so flagging the last mine after the last
    reveal could never win; jgem checks after flags too.
    """

    def __init__(
        self,
        rows: int | None = 8,
        cols: int | None = 8,
        num_mines: int | None = 10,
        max_turns: int | None = 20,
        seed: int | None = None,
    ) -> None:
        super().__init__(seed=seed)
        self._is_random = rows is None or cols is None or num_mines is None or max_turns is None
        if not self._is_random:
            if rows < 1 or cols < 1 or max_turns < 1 or num_mines < 0:
                raise ValueError(
                    f"need rows, cols, max_turns >= 1 and num_mines >= 0; got rows={rows}, cols={cols}, "
                    f"num_mines={num_mines}, max_turns={max_turns}"
                )
            if num_mines > rows * cols - 9:
                raise ValueError(
                    f"{num_mines} mines do not fit on {rows}x{cols} outside the first reveal's 3x3 safe block; "
                    f"use at most {max(0, rows * cols - 9)} mines"
                )
        self.rows, self.cols, self.num_mines, self.max_turns = rows, cols, num_mines, max_turns
        self.grid: list[list[int]] = []
        self.revealed: list[list[bool]] = []
        self.flags: list[list[bool]] = []
        self.first_reveal = True

    def instructions(self) -> str:
        r, c = self.rows // 2, self.cols // 2
        return (
            "Let's play Minesweeper.\n"
            f"The board has {self.rows} rows and {self.cols} columns (numbered from 0) with {self.num_mines} "
            "hidden mines. You win by revealing every cell without a mine and flagging every mine.\n"
            "Each turn, give one command with a row and a column inside \\boxed{}:\n"
            f"- \\boxed{{reveal {r} {c}}} uncovers the cell in row {r}, column {c};\n"
            f"- \\boxed{{flag {r} {c}}} puts a flag on that cell, or removes it.\n"
            "Your first reveal is always safe. A revealed cell shows how many of its up to 8 neighbours are "
            "mines; a cell with no mine around uncovers its neighbours too. On the board, '.' is hidden, 'F' is "
            "flagged and a digit is a revealed cell.\n"
            "Revealing a mine ends the game. Do not pick revealed or flagged cells. Flag all mines before you "
            f"reveal the last safe cell. You have {self.max_turns} turns.\n"
        )

    def public_board(self) -> list[str]:
        """What the player sees, one string per row: '.' hidden, 'F' flagged, '0'-'8' revealed."""
        return [
            "".join(
                str(self.grid[r][c]) if self.revealed[r][c] else "F" if self.flags[r][c] else "."
                for c in range(self.cols)
            )
            for r in range(self.rows)
        ]

    def render(self) -> str:
        lines = ["   " + " ".join(f"{c:2}" for c in range(self.cols))]
        lines += [f"{r:2} " + "".join(f" {ch} " for ch in row) for r, row in enumerate(self.public_board())]
        return "\n".join(lines)

    def suffix(self) -> str:
        return f"The board now:\n{self.render()}\nEnter your move."

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed)
        if self._is_random:
            n = int(self.np_random.integers(5, 9))
            self.rows = self.cols = n
            self.num_mines, self.max_turns = n * n // 5, n * n
        self.grid = [[0] * self.cols for _ in range(self.rows)]
        self.revealed = [[False] * self.cols for _ in range(self.rows)]
        self.flags = [[False] * self.cols for _ in range(self.rows)]
        self.first_reveal = True
        self.turn_count = 0
        return self.instructions(), self.info()

    def _place_mines(self, row: int, col: int) -> None:
        allowed = [
            (r, c)
            for r in range(self.rows)
            for c in range(self.cols)
            if abs(r - row) > 1 or abs(c - col) > 1  # never in the 3x3 block around the first reveal
        ]
        for i in self.np_random.choice(len(allowed), size=min(self.num_mines, len(allowed)), replace=False):
            r, c = allowed[int(i)]
            self.grid[r][c] = MINE
        for r in range(self.rows):
            for c in range(self.cols):
                if self.grid[r][c] != MINE:
                    self.grid[r][c] = sum(self.grid[a][b] == MINE for a, b in neighbours(r, c, self.rows, self.cols))

    def _flood(self, row: int, col: int) -> int:
        """Reveal (row, col) and, from zero cells, their unflagged neighbours; returns cells revealed."""
        self.revealed[row][col] = True
        count, queue = 1, deque([(row, col)])
        while queue:
            r, c = queue.popleft()
            if self.grid[r][c] == 0:
                for a, b in neighbours(r, c, self.rows, self.cols):
                    if not self.revealed[a][b] and not self.flags[a][b]:
                        self.revealed[a][b] = True
                        count += 1
                        queue.append((a, b))
        return count

    def is_solved(self) -> bool:
        return all(
            self.flags[r][c] if self.grid[r][c] == MINE else self.revealed[r][c]
            for r in range(self.rows)
            for c in range(self.cols)
        )

    def step(self, action: str) -> StepResult:
        self.turn_count += 1
        last_turn = self.turn_count >= self.max_turns
        match = next(iter(deque(_MOVE.finditer(action), maxlen=1)), None)  # GEM reads the last match
        if match is None:
            obs = f"Turn {self.turn_count}: no move found; write \\boxed{{reveal ROW COL}} or \\boxed{{flag ROW COL}}."
            return obs + " Game over.", Reward.FORMAT_ERROR, True, last_turn, self.info(success=False)
        command, row, col = match.group(1).lower(), parse_number(match.group(2)), parse_number(match.group(3))
        reward, t, changed = Reward.INVALID, self.turn_count, False
        if not (0 <= row < self.rows and 0 <= col < self.cols):
            obs = f"Turn {t}: ({row}, {col}) is off the board."
        elif command == "reveal":
            if self.first_reveal:
                self._place_mines(row, col)
                self.first_reveal = False
            if self.grid[row][col] == MINE:  # checked before flags, as in GEM
                obs = f"Turn {t}: boom! ({row}, {col}) was a mine. Game over."
                return obs, Reward.FAIL, True, False, self.info(success=False)
            if self.revealed[row][col] or self.flags[row][col]:
                obs = f"Turn {t}: ({row}, {col}) is already revealed or flagged."
            else:
                safe_cells = self.rows * self.cols - self.num_mines
                reward = self._flood(row, col) / safe_cells
                obs, changed = f"Turn {t}: revealed ({row}, {col}).", True
        elif command == "flag":
            if self.revealed[row][col]:
                obs = f"Turn {t}: ({row}, {col}) is revealed and cannot be flagged."
            else:
                self.flags[row][col] = not self.flags[row][col]
                obs = f"Turn {t}: {'flagged' if self.flags[row][col] else 'unflagged'} ({row}, {col})."
                reward, changed = Reward.STEP, True
        else:
            obs = f"Turn {t}: unknown command {command[:20]!r}; use reveal or flag."
        if changed and not self.first_reveal and self.is_solved():
            obs += " Every safe cell is revealed and every mine flagged: you win!"
            return obs, reward, True, False, self.info(success=True)
        if last_turn:
            obs += "\nThat was the last turn."
            return obs, reward, True, True, self.info(success=False)
        return obs, reward, False, False, self.info()

    def sample_random_action(self) -> str:
        command = "flag" if self.np_random.random() < 0.1 else "reveal"
        r, c = int(self.np_random.integers(self.rows)), int(self.np_random.integers(self.cols))
        return f"\\boxed{{{command} {r} {c}}}"


class MinesweeperSolver:
    """Logic first (single-cell, subset and mine-count rules), then the lowest-risk guess from an
    enumeration of the frontier's mine layouts. Flags every known mine, and flags the remaining
    hidden cells before uncovering the last safe one, since the win needs all mines flagged."""

    max_frontier = 22  # larger frontiers fall back to a local estimate of each cell's risk

    def reset(self, obs: str, info: dict[str, Any], env: Env) -> None:
        pass

    def act(self, obs: str, info: dict[str, Any], env: Env) -> str:
        board, rows, cols = env.public_board(), env.rows, env.cols
        hidden = {(r, c) for r in range(rows) for c in range(cols) if board[r][c] == "."}
        flagged = {(r, c) for r in range(rows) for c in range(cols) if board[r][c] == "F"}
        if len(hidden) + len(flagged) == rows * cols:  # nothing revealed yet: the first reveal is safe
            return f"\\boxed{{reveal {rows // 2} {cols // 2}}}"
        mines_left = env.num_mines - len(flagged)
        constraints = _constraints(board, rows, cols)
        safe, mines = _deduce(constraints, hidden, mines_left)
        if mines:
            return _move("flag", min(mines))
        if safe and (len(hidden) - mines_left > 1 or not mines_left):
            return _move("reveal", min(safe))
        risk = _risks(constraints, hidden, mines_left, self.max_frontier)
        target = min(safe) if safe else min(hidden, key=lambda cell: (risk[cell], cell))
        if len(hidden) - mines_left == 1:  # the last safe cell: flag every other hidden cell first
            others = sorted(hidden - {target})
            if others:
                return _move("flag", others[0])
        return _move("reveal", target)


def _move(command: str, cell: Cell) -> str:
    return f"\\boxed{{{command} {cell[0]} {cell[1]}}}"


Constraint = tuple[frozenset[Cell], int]  # hidden cells around a number, and how many of them are mines


def _constraints(board: list[str], rows: int, cols: int) -> list[Constraint]:
    out = []
    for r in range(rows):
        for c in range(cols):
            if board[r][c].isdigit():
                around = neighbours(r, c, rows, cols)
                cells = frozenset((a, b) for a, b in around if board[a][b] == ".")
                if cells:
                    out.append((cells, int(board[r][c]) - sum(board[a][b] == "F" for a, b in around)))
    return out


def _deduce(constraints: list[Constraint], hidden: set[Cell], mines_left: int) -> tuple[set[Cell], set[Cell]]:
    """Cells that must be safe / must be mines, by the single-cell, subset and global-count rules."""
    safe: set[Cell] = set()
    mines: set[Cell] = set()
    if mines_left == 0:
        return set(hidden), set()
    if mines_left == len(hidden):
        return set(), set(hidden)
    rules = set(constraints)
    for a, b in itertools.permutations(constraints, 2):
        if a[0] < b[0]:  # a's cells inside b's: the rest of b holds b's extra mines
            rules.add((b[0] - a[0], b[1] - a[1]))
    for cells, count in rules:
        if count == 0:
            safe |= cells
        elif count == len(cells):
            mines |= cells
    return safe - mines, mines - safe


def _risks(constraints: list[Constraint], hidden: set[Cell], mines_left: int, max_frontier: int) -> dict[Cell, float]:
    """Chance that each hidden cell is a mine, over all layouts consistent with the numbers
    (weighted by how many ways the other hidden cells take the remaining mines)."""
    frontier = sorted({cell for cells, _ in constraints for cell in cells})
    others = len(hidden) - len(frontier)
    if not frontier or len(frontier) > max_frontier:
        local: dict[Cell, float] = {}  # the most pessimistic of the numbers around each frontier cell
        for cells, count in constraints:
            for cell in cells:
                local[cell] = max(local.get(cell, 0.0), count / len(cells))
        density = mines_left / max(1, len(hidden))
        return {cell: local.get(cell, density) for cell in hidden}
    index = {cell: i for i, cell in enumerate(frontier)}
    cons = [([index[c] for c in cells], count) for cells, count in constraints]
    by_cell = [[k for k, (idx, _) in enumerate(cons) if i in idx] for i in range(len(frontier))]
    assign: list[int] = []
    mine_weight = [0.0] * len(frontier)
    totals = {"all": 0.0, "others": 0.0}

    def ok(i: int) -> bool:  # every constraint touching cell i can still be met
        for k in by_cell[i]:
            idx, count = cons[k]
            placed = sum(assign[j] for j in idx if j < len(assign))
            open_ = sum(1 for j in idx if j >= len(assign))
            if placed > count or placed + open_ < count:
                return False
        return True

    def walk(i: int, used: int) -> None:
        if used > mines_left:
            return
        if i == len(frontier):
            rest = mines_left - used
            if rest > others:
                return
            w = float(math.comb(others, rest))
            totals["all"] += w
            totals["others"] += w * rest / others if others else 0.0
            for j, m in enumerate(assign):
                if m:
                    mine_weight[j] += w
            return
        for m in (0, 1):
            assign.append(m)
            if ok(i):
                walk(i + 1, used + m)
            assign.pop()

    walk(0, 0)
    total = totals["all"] or 1.0
    risk = {cell: totals["others"] / total for cell in hidden}
    risk.update({cell: mine_weight[i] / total for i, cell in enumerate(frontier)})
    return risk
