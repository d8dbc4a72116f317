"""Sudoku (GEM `game:Sudoku-v0-*`): fill a 4x4 or 9x9 grid, one `\\boxed{row col num}` per turn.

Puzzles always have exactly one solution: the generator empties cells one at a time and keeps a cell
empty only if a solution counter still finds a single solution.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from jgem.envs.games.base import GameEnv, Reward, capped_int, last_match

Grid = list[list[int]]

# GEM's -random variant: (scale, clues, max_turns).
_RANDOM_CHOICES = ((4, 10, 15), (9, 50, 50))
_MOVE = re.compile(r"\\boxed\{(\d+)\s(\d+)\s(\d+)\}")


def _box_size(scale: int) -> int:
    box = int(round(scale**0.5))
    if box * box != scale:
        raise ValueError(f"Sudoku scale must be a perfect square (4 or 9), got {scale}")
    return box


def count_solutions(grid: Grid, limit: int = 2) -> int:
    """Number of solutions of `grid` (0 = empty cell), counting at most `limit`."""
    return _search(grid, limit, [])


def solve(grid: Grid) -> Grid | None:
    """The first solution of `grid` found by propagation + backtracking, or None if it has none."""
    found: list[Grid] = []
    _search(grid, 1, found)
    return found[0] if found else None


def _search(grid: Grid, limit: int, found: list[Grid]) -> int:
    """Backtracking over bitmask candidates; always branches on the most constrained cell.

    Picking a cell with one candidate first is naked-single propagation; a cell with none prunes.
    """
    n = len(grid)
    box = _box_size(n)
    full = (1 << (n + 1)) - 2  # bits 1..n
    rows, cols, boxes = [0] * n, [0] * n, [0] * n
    empty: list[tuple[int, int, int]] = []
    for r in range(n):
        for c in range(n):
            v = grid[r][c]
            b = (r // box) * box + c // box
            if v:
                bit = 1 << v
                if rows[r] & bit or cols[c] & bit or boxes[b] & bit:
                    return 0  # the givens already clash
                rows[r] |= bit
                cols[c] |= bit
                boxes[b] |= bit
            else:
                empty.append((r, c, b))
    work = [row[:] for row in grid]
    count = 0

    def rec(todo: list[tuple[int, int, int]]) -> None:
        nonlocal count
        if not todo:
            count += 1
            if len(found) < limit:
                found.append([row[:] for row in work])
            return
        best, best_mask, best_n = -1, 0, n + 1
        for i, (r, c, b) in enumerate(todo):
            mask = full & ~(rows[r] | cols[c] | boxes[b])
            k = mask.bit_count()
            if k < best_n:
                best, best_mask, best_n = i, mask, k
                if k <= 1:
                    break
        if best_n == 0:
            return
        r, c, b = todo[best]
        rest = todo[:best] + todo[best + 1 :]
        mask = best_mask
        while mask and count < limit:
            bit = mask & -mask
            mask ^= bit
            rows[r] |= bit
            cols[c] |= bit
            boxes[b] |= bit
            work[r][c] = bit.bit_length() - 1
            rec(rest)
            rows[r] ^= bit
            cols[c] ^= bit
            boxes[b] ^= bit
        work[r][c] = 0

    rec(empty)
    return min(count, limit)


def random_full_grid(scale: int, rng: np.random.Generator) -> Grid:
    """A uniformly relabelled, row/column-shuffled solved grid (a valid Sudoku by construction)."""
    box = _box_size(scale)

    def order() -> list[int]:
        return [int(g) * box + int(i) for g in rng.permutation(box) for i in rng.permutation(box)]

    rows, cols = order(), order()
    digits = [int(d) + 1 for d in rng.permutation(scale)]
    grid = [[digits[(box * (r % box) + r // box + c) % scale] for c in cols] for r in rows]
    if rng.random() < 0.5:
        grid = [list(col) for col in zip(*grid)]
    return grid


def make_puzzle(scale: int, clues: int, rng: np.random.Generator) -> tuple[Grid, Grid]:
    """(solution, puzzle). As GEM does, `clues` is the number of cells the generator *tries* to empty;
    a removal that would allow a second solution is undone, so the puzzle stays uniquely solvable."""
    solution = random_full_grid(scale, rng)
    puzzle = [row[:] for row in solution]
    cells = rng.permutation(scale * scale)[: max(0, min(clues, scale * scale))]
    for cell in cells:
        r, c = divmod(int(cell), scale)
        kept = puzzle[r][c]
        puzzle[r][c] = 0
        if count_solutions(puzzle, limit=2) != 1:
            puzzle[r][c] = kept
    return solution, puzzle


def render(board: Grid) -> str:
    n = len(board)
    box = _box_size(n)

    def line(cells: list[str], gap: str) -> str:
        return gap.join("".join(f"{x:>3}" for x in cells[s * box : (s + 1) * box]) for s in range(box))

    lines = ["  " + line([f"C{c + 1}" for c in range(n)], "  ")]
    for r, row in enumerate(board):
        if r and r % box == 0:
            lines.append("  " + "-+".join(["-" * (3 * box)] * box))
        lines.append(f"R{r + 1}" + line([str(v) if v else "." for v in row], " |"))
    return "\n".join(lines)


class SudokuEnv(GameEnv):
    """GEM's Sudoku: 1/(initially empty cells) per correct fill; wrong fills score 0 and are not terminal."""

    def __init__(
        self, clues: int | None = 30, max_turns: int | None = 100, scale: int | None = 9, seed: int | None = None
    ) -> None:
        super().__init__(seed=seed)
        self._is_random = scale is None or clues is None or max_turns is None
        if not self._is_random:
            _box_size(scale)
        self.clues, self.max_turns, self.scale = clues, max_turns, scale
        self.reset()

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed)
        if self._is_random:
            self.scale, self.clues, self.max_turns = _RANDOM_CHOICES[int(self.np_random.integers(len(_RANDOM_CHOICES)))]
        self.solution, self.board = make_puzzle(self.scale, self.clues, self.np_random)
        self.init_num_empty = sum(row.count(0) for row in self.board)
        self.turn_count = 0
        return self.instructions(), self.info()

    def instructions(self) -> str:
        n, box = self.scale, _box_size(self.scale)
        return (
            f"Let's play Sudoku on a {n}x{n} grid.\n"
            f"Rows and columns are numbered 1 to {n}. A '.' marks an empty cell; the other cells hold the "
            "given digits, which cannot be changed.\n\n"
            f"Goal: fill every empty cell with a digit from 1 to {n} so that every row, every column and each "
            f"of the {n} {box}x{box} boxes contains each digit 1..{n} exactly once. The puzzle has one solution.\n\n"
            "Each turn, place one digit: write \\boxed{row column digit} somewhere in your reply (the last such "
            "box counts). For example, \\boxed{2 3 1} puts 1 in row 2, column 3.\n"
            "A correct digit scores; a digit that does not match the solution, a given cell or a position off "
            "the grid scores nothing and uses a turn. A reply without a well-formed box ends the game.\n"
            f"You have {self.max_turns} turns."
        )

    def suffix(self) -> str:
        return f"Current grid:\n{render(self.board)}\nYour move?"

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.turn_count += 1
        match = last_match(_MOVE, action) if isinstance(action, str) else None
        if match is None:
            obs = "No move found: answer with \\boxed{row column digit}, e.g. \\boxed{1 2 3}."
            return self.format_error(obs, self.turn_count == self.max_turns)
        row, col, num = (capped_int(x) for x in match.groups())
        where = f"{num} at R{row} C{col}"
        n, t = self.scale, self.turn_count
        reward = Reward.INVALID
        if not (1 <= row <= n and 1 <= col <= n and 1 <= num <= n):
            obs = f"Turn {t}: {where} is off the board; rows, columns and digits run 1..{n}."
        elif self.board[row - 1][col - 1] != 0:
            obs = f"Turn {t}: R{row} C{col} is already filled; choose an empty cell."
        elif self.solution[row - 1][col - 1] != num:
            obs = f"Turn {t}: {where} breaks the Sudoku rules."
        else:
            self.board[row - 1][col - 1] = num
            reward = 1.0 / self.init_num_empty
            if all(all(row) for row in self.board):
                return "Solved! Every cell is filled correctly.", reward, True, False, self.info(success=True)
            obs = f"Turn {t}: {where} is correct."
        if self.turn_count >= self.max_turns:
            return obs + " That was the last turn.", reward, True, True, self.info(success=False)
        return obs, reward, False, False, self.info()

    def sample_random_action(self) -> str:
        r, c, v = (int(x) for x in self.np_random.integers(1, self.scale + 1, size=3))
        return f"\\boxed{{{r} {c} {v}}}"


class SudokuSolver:
    """Solves the visible grid (propagation + backtracking) and fills the first empty cell each turn."""

    def reset(self, obs: str, info: dict[str, Any], env: SudokuEnv) -> None:
        self.solution = solve(env.board)
        if self.solution is None:
            raise ValueError("this Sudoku grid has no solution; the env generated an invalid puzzle")

    def act(self, obs: str, info: dict[str, Any], env: SudokuEnv) -> str:
        for r, row in enumerate(env.board):
            for c, v in enumerate(row):
                if v == 0:
                    return f"\\boxed{{{r + 1} {c + 1} {self.solution[r][c]}}}"
        return "\\boxed{1 1 1}"
