"""Fifteen Puzzle (GEM's FifteenPuzzle-v0): slide numbered tiles into order on an n x n board."""

from __future__ import annotations

import heapq
import re
from collections import deque
from functools import cache
from typing import Any

from jgem.core import Env, StepResult
from jgem.envs.games.base import GameEnv, Reward, last_match

_MOVE = re.compile(r"\\boxed{(up|down|left|right)}")
_RANDOM_VARIANTS = ((2, 10), (3, 20), (4, 50))  # (num_rows, max_turns), as GEM
# A move names the direction the tile slides, so the blank goes the opposite way: (d_row, d_col) of the blank.
_BLANK_STEP = {"up": (1, 0), "down": (-1, 0), "left": (0, 1), "right": (0, -1)}
_OPPOSITE = {"up": "down", "down": "up", "left": "right", "right": "left"}

Board = tuple[int, ...]  # row-major tiles, 0 is the blank


def solved_board(n: int) -> Board:
    return tuple(range(1, n * n)) + (0,)


def apply_move(board: Board, n: int, move: str) -> Board | None:
    """The board after `move`, or None if no tile can slide that way."""
    b = board.index(0)
    dr, dc = _BLANK_STEP[move]
    r, c = divmod(b, n)
    if not (0 <= r + dr < n and 0 <= c + dc < n):
        return None
    t = (r + dr) * n + c + dc
    out = list(board)
    out[b], out[t] = out[t], 0
    return tuple(out)


@cache
def reachable_boards(n: int) -> tuple[Board, ...]:
    """Every board reachable from the solved one (BFS; only for small n)."""
    start = solved_board(n)
    seen, queue = {start}, deque([start])
    while queue:
        board = queue.popleft()
        for move in _BLANK_STEP:
            nxt = apply_move(board, n, move)
            if nxt is not None and nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)
    return tuple(sorted(seen))


class FifteenPuzzleEnv(GameEnv):
    """Slide tiles with `\\boxed{up|down|left|right}` until 1..n*n-1 are in order, blank bottom-right.

    Rewards (GEM): solving 1.0; other moves 0.0 (impossible moves are invalid, 0.0); no boxed
    direction is a format error (-0.1, episode ends). At the turn limit the last move also earns the
    fraction of squares (blank included) that hold the right tile.
    GEM fix: GEM shuffles the tiles at random, so half of its boards cannot be solved and most 4x4
    ones need more moves than the turn limit. jgem draws a solvable board instead: on 2x2 uniformly
    among all reachable unsolved boards, otherwise by `max_turns` random moves (never undoing the
    previous one) from the solved board, so a solution within the turn limit always exists.
    """

    def __init__(self, max_turns: int | None = 20, num_rows: int | None = 2, seed: int | None = None) -> None:
        super().__init__(seed=seed)
        self._is_random = num_rows is None or max_turns is None
        if not self._is_random and (num_rows < 2 or max_turns < 1):
            raise ValueError(f"need num_rows >= 2 and max_turns >= 1, got num_rows={num_rows}, max_turns={max_turns}")
        self.num_rows, self.max_turns = num_rows, max_turns
        self.board: Board = ()

    @property
    def greatest_num(self) -> int:
        return self.num_rows**2 - 1

    def instructions(self) -> str:
        return (
            f"Let's play the {self.greatest_num}-puzzle.\n"
            f"Tiles numbered 1 to {self.greatest_num} lie on a {self.num_rows}x{self.num_rows} board with one "
            "empty square, shown as __. Put the tiles in increasing order, row by row, with the empty square "
            "in the bottom-right corner.\n"
            "Each move slides one tile next to the empty square into it:\n"
            "- up: the tile below the empty square moves up\n"
            "- down: the tile above the empty square moves down\n"
            "- left: the tile right of the empty square moves left\n"
            "- right: the tile left of the empty square moves right\n"
            f"Give one move per turn inside \\boxed{{}}, for example \\boxed{{up}}. You have {self.max_turns} moves.\n"
            "The current board is shown below.\n"
        )

    def render(self) -> str:
        n = self.num_rows
        rows = (self.board[r * n : (r + 1) * n] for r in range(n))
        return "\n".join(" ".join("__" if t == 0 else f"{t:2}" for t in row) for row in rows)

    def suffix(self) -> str:
        return f"The board now:\n{self.render()}\nEnter your move."

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed)
        if self._is_random:
            self.num_rows, self.max_turns = _RANDOM_VARIANTS[int(self.np_random.integers(len(_RANDOM_VARIANTS)))]
        self.board = self._scramble()
        self.turn_count = 0
        return self.instructions(), self.info()

    def _scramble(self) -> Board:
        n, goal = self.num_rows, solved_board(self.num_rows)
        if n == 2:
            boards = [b for b in reachable_boards(2) if b != goal]
            return boards[int(self.np_random.integers(len(boards)))]
        board, last = goal, None
        while board == goal:
            for _ in range(self.max_turns):
                moves = [m for m in _BLANK_STEP if m != _OPPOSITE.get(last) and apply_move(board, n, m) is not None]
                last = moves[int(self.np_random.integers(len(moves)))]
                board = apply_move(board, n, last)
        return board

    def step(self, action: str) -> StepResult:
        last_turn = self.next_turn()
        match = last_match(_MOVE, action)
        if match is None:
            return self.no_boxed("up, down, left or right", last_turn, noun="move")
        move = match.group(1)
        after = apply_move(self.board, self.num_rows, move)
        if after is None:
            obs, reward = f"Turn {self.turn_count}: no tile can move {move}.", Reward.INVALID
        else:
            self.board = after
            if after == solved_board(self.num_rows):
                obs = f"Turn {self.turn_count}: moved {move}. Solved in {self.turn_count} moves!"
                return obs, Reward.SUCCESS, True, False, self.info(success=True)
            obs, reward = f"Turn {self.turn_count}: moved {move}.", Reward.STEP
        if last_turn:
            goal = solved_board(self.num_rows)
            reward += sum(a == b for a, b in zip(self.board, goal)) / len(goal)  # GEM's partial credit
        return self.end_turn(obs, reward, last_turn, "\nThat was the last move.")

    def sample_random_action(self) -> str:
        return f"\\boxed{{{list(_BLANK_STEP)[int(self.np_random.integers(4))]}}}"


class FifteenPuzzleSolver:
    """Plans with weighted A* (fast); if the plan is longer than the moves left, retries with smaller
    weights and finally plays a shortest solution (BFS on 2x2, IDA* with Manhattan distance + linear
    conflict above). Every board jgem deals has a solution within the turn limit."""

    weights = (1.5, 1.2, 1.05)

    def reset(self, obs: str, info: dict[str, Any], env: Env) -> None:
        self.plan: list[str] = []
        self.expect: Board | None = None

    def act(self, obs: str, info: dict[str, Any], env: Env) -> str:
        board, n = tuple(env.board), env.num_rows
        if board != self.expect or not self.plan:
            self.plan = self._plan(board, n, env.max_turns - env.turn_count) or ["up"]  # unsolvable: any move
        move = self.plan.pop(0)
        self.expect = apply_move(board, n, move)
        return f"\\boxed{{{move}}}"

    def _plan(self, board: Board, n: int, turns_left: int) -> list[str] | None:
        for weight in self.weights:
            plan = solve(board, n, weight=weight)
            if plan is None or len(plan) <= turns_left:
                return plan
        return solve(board, n)


def solve(board: Board, n: int, weight: float = 1.0, max_depth: int = 80) -> list[str] | None:
    """Moves that solve `board`, or None if it cannot be solved (within max_depth for IDA*).

    weight == 1: a shortest solution (BFS on 2x2, IDA* above). weight > 1: weighted A*, much faster
    on 4x4 and at most `weight` times longer than the shortest."""
    if n == 2:
        return _bfs(board, n)
    if weight > 1:
        return _weighted_a_star(board, n, weight)
    return _ida_star(board, n, max_depth)


def _bfs(board: Board, n: int) -> list[str] | None:
    goal = solved_board(n)
    parent: dict[Board, tuple[Board, str] | None] = {board: None}
    queue = deque([board])
    while queue:
        cur = queue.popleft()
        if cur == goal:
            path = []
            while parent[cur] is not None:
                cur, move = parent[cur]
                path.append(move)
            return path[::-1]
        for move in _BLANK_STEP:
            nxt = apply_move(cur, n, move)
            if nxt is not None and nxt not in parent:
                parent[nxt] = (cur, move)
                queue.append(nxt)
    return None


@cache
def _line_penalty(goals: tuple[int, ...]) -> int:
    """Linear conflict of one line: tiles that must leave it so the rest are in order, 2 moves each.

    `goals` are the goal positions along the line of the tiles that belong to it, in board order."""
    longest = [1] * len(goals)  # longest increasing subsequence
    for i in range(len(goals)):
        for j in range(i):
            if goals[j] < goals[i]:
                longest[i] = max(longest[i], longest[j] + 1)
    return 2 * (len(goals) - max(longest, default=0))


def _row_penalty(s: list[int], n: int, i: int) -> int:
    return _line_penalty(tuple((t - 1) % n for t in s[i * n : (i + 1) * n] if t and (t - 1) // n == i))


def _col_penalty(s: list[int], n: int, i: int) -> int:
    return _line_penalty(tuple((t - 1) // n for t in s[i::n] if t and (t - 1) % n == i))


def _heuristic(s: list[int], n: int) -> int:
    """Manhattan distance plus linear conflict (admissible)."""
    h = 0
    for p, t in enumerate(s):
        if t:
            r, c = divmod(p, n)
            gr, gc = divmod(t - 1, n)
            h += abs(r - gr) + abs(c - gc)
    return h + sum(_row_penalty(s, n, i) + _col_penalty(s, n, i) for i in range(n))


def _conflicts(s: list[int], n: int, r: int, c: int, dr: int, dc: int) -> int:
    """Linear conflict of the two lines a move between (r, c) and (r + dr, c + dc) can change:
    the rows for a vertical move, the columns for a horizontal one."""
    if dr:
        return _row_penalty(s, n, r) + _row_penalty(s, n, r + dr)
    return _col_penalty(s, n, c) + _col_penalty(s, n, c + dc)


@cache
def _distances(n: int) -> list[list[int]]:
    """dist[tile][pos]: Manhattan distance of `tile` at `pos` from its goal square (0 for the blank)."""
    cells = range(n * n)
    return [[0] * (n * n)] + [[abs(p // n - (t - 1) // n) + abs(p % n - (t - 1) % n) for p in cells] for t in cells[1:]]


def _weighted_a_star(board: Board, n: int, weight: float) -> list[str] | None:
    goal, dist = solved_board(n), _distances(n)
    steps = [(m, dr * n + dc, dr, dc) for m, (dr, dc) in _BLANK_STEP.items()]
    h0 = _heuristic(list(board), n)
    parent: dict[Board, tuple[Board, str] | None] = {board: None}
    best_g = {board: 0}
    heap = [(weight * h0, 0, h0, board, board.index(0))]
    while heap:
        _, g, h, s, blank = heapq.heappop(heap)
        if s == goal:
            path = []
            while parent[s] is not None:
                s, move = parent[s]
                path.append(move)
            return path[::-1]
        if g > best_g[s]:
            continue  # a stale entry: s was reached more cheaply since
        r, c = divmod(blank, n)
        for move, delta, dr, dc in steps:
            if not (0 <= r + dr < n and 0 <= c + dc < n):
                continue
            t, cells = blank + delta, list(s)
            tile = cells[t]
            before = _conflicts(cells, n, r, c, dr, dc)
            cells[blank], cells[t] = tile, 0
            nxt = tuple(cells)
            if g + 1 < best_g.get(nxt, 1 << 30):
                best_g[nxt], parent[nxt] = g + 1, (s, move)
                nh = h + dist[tile][blank] - dist[tile][t] + _conflicts(cells, n, r, c, dr, dc) - before
                heapq.heappush(heap, (g + 1 + weight * nh, g + 1, nh, nxt, t))
    return None


def _ida_star(board: Board, n: int, max_depth: int) -> list[str] | None:
    s, goal = list(board), list(solved_board(n))
    path: list[str] = []
    steps = [(m, dr * n + dc, dr, dc) for m, (dr, dc) in _BLANK_STEP.items()]
    dist = _distances(n)

    def search(blank: int, g: int, h: int, bound: int, last: str | None) -> int:
        f = g + h
        if f > bound:
            return f
        if h == 0 and s == goal:
            return -1
        best = 1 << 30
        r, c = divmod(blank, n)
        for move, delta, dr, dc in steps:
            if last == _OPPOSITE[move] or not (0 <= r + dr < n and 0 <= c + dc < n):
                continue
            t = blank + delta
            tile = s[t]
            before = _conflicts(s, n, r, c, dr, dc)
            s[blank], s[t] = tile, 0
            change = dist[tile][blank] - dist[tile][t] + _conflicts(s, n, r, c, dr, dc) - before
            path.append(move)
            res = search(t, g + 1, h + change, bound, move)
            if res == -1:
                return -1
            path.pop()
            s[t], s[blank] = tile, 0
            best = min(best, res)
        return best

    bound = h0 = _heuristic(s, n)
    while bound <= max_depth:
        res = search(s.index(0), 0, h0, bound, None)
        if res == -1:
            return path
        bound = res
    return None
