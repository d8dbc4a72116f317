"""Sokoban levels and plans: GEM's random-walk rooms, reverse-play generation, and an A* push solver.

Cells are flat indices `r * width + c`. A level is generated backwards: boxes start on their targets
and the player walks and *pulls* them away (every pull undoes a legal push). A best-first search over
pulls, bounded by the turn limit, keeps the state that scores best by GEM's measure (box switches x
box displacement); replaying its pulls forwards is a solution, so every level is solvable within the
turn limit. `solve` finds a shortest solution in player moves with A* over pushes.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass

import numpy as np

WALL, FLOOR, TARGET = 0, 1, 2
_ON_TARGET = 4  # search priority of a box still on its target, in moves
MOVES = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}

# GEM's room masks: floor cells carved around each step of the random walk.
_MASKS = np.array(
    [
        [[0, 0, 0], [1, 1, 1], [0, 0, 0]],
        [[0, 1, 0], [0, 1, 0], [0, 1, 0]],
        [[0, 0, 0], [1, 1, 0], [0, 1, 0]],
        [[0, 0, 0], [1, 1, 0], [1, 1, 0]],
        [[0, 0, 0], [0, 1, 1], [0, 1, 0]],
    ]
)


@dataclass(frozen=True)
class Level:
    fixed: np.ndarray  # [H, W] int: WALL, FLOOR or TARGET
    boxes: frozenset[tuple[int, int]]
    player: tuple[int, int]
    bound: int  # a solution of at most this many moves exists


def room_topology(dim: tuple[int, int], num_steps: int, rng: np.random.Generator, p_change: float = 0.35) -> np.ndarray:
    """GEM's room shape: a random walk stamps floor masks; the border stays wall."""
    h, w = dim
    directions = ((1, 0), (0, 1), (-1, 0), (0, -1))
    direction = directions[int(rng.integers(4))]
    pos = [int(rng.integers(1, h - 1)), int(rng.integers(1, w - 1))]
    level = np.zeros((h, w), dtype=int)
    for _ in range(num_steps):
        if rng.random() < p_change:
            direction = directions[int(rng.integers(4))]
        pos = [min(max(pos[0] + direction[0], 1), h - 2), min(max(pos[1] + direction[1], 1), w - 2)]
        level[pos[0] - 1 : pos[0] + 2, pos[1] - 1 : pos[1] + 2] += _MASKS[int(rng.integers(len(_MASKS)))]
    room = (level > 0).astype(int)
    room[[0, h - 1], :] = WALL
    room[:, [0, w - 1]] = WALL
    return room


class _Grid:
    """Flat-index view of a room's static cells."""

    def __init__(self, fixed: np.ndarray) -> None:
        self.h, self.w = fixed.shape
        flat = fixed.reshape(-1)
        self.free = [bool(v != WALL) for v in flat]
        self.targets = frozenset(i for i, v in enumerate(flat) if v == TARGET)
        # Border cells are walls, so a free cell's neighbours are always inside the grid.
        self.deltas = {name: dr * self.w + dc for name, (dr, dc) in MOVES.items()}
        self.nbrs = [
            [i + d for d in self.deltas.values() if self.free[i + d]] if self.free[i] else [] for i in range(len(flat))
        ]

    def cell(self, rc: tuple[int, int]) -> int:
        return rc[0] * self.w + rc[1]

    def rc(self, i: int) -> tuple[int, int]:
        r, c = divmod(int(i), self.w)
        return r, c

    def walk(self, start: int, boxes: frozenset[int] | set[int]) -> dict[int, int]:
        """BFS of the player around the boxes: reachable cell -> distance in moves."""
        dist = {start: 0}
        queue = deque([start])
        nbrs = self.nbrs
        while queue:
            p = queue.popleft()
            d = dist[p] + 1
            for q in nbrs[p]:
                if q not in dist and q not in boxes:
                    dist[q] = d
                    queue.append(q)
        return dist

    def route(self, start: int, boxes: frozenset[int] | set[int], to: int) -> list[str]:
        """Move names of a shortest walk from `start` to `to` around the boxes."""
        prev: dict[int, tuple[int, str] | None] = {start: None}
        queue = deque([start])
        while queue and to not in prev:
            p = queue.popleft()
            for name, delta in self.deltas.items():
                q = p + delta
                if self.free[q] and q not in boxes and q not in prev:
                    prev[q] = (p, name)
                    queue.append(q)
        moves: list[str] = []
        while prev[to] is not None:
            to, name = prev[to]
            moves.append(name)
        return moves[::-1]

    def goal_distance(self) -> list[float]:
        """Pushes a lone box needs from each cell to its nearest target (inf: a dead cell)."""
        dist = [float("inf")] * (self.h * self.w)
        queue = deque()
        for t in self.targets:
            dist[t] = 0
            queue.append(t)
        while queue:
            x = queue.popleft()
            for delta in self.deltas.values():
                # A box at x + delta can be pushed to x by a player standing at x + 2 * delta.
                y, stand = x + delta, x + 2 * delta
                if 0 <= stand < len(dist) and self.free[y] and self.free[stand] and dist[y] == float("inf"):
                    dist[y] = dist[x] + 1
                    queue.append(y)
        return dist


def _reverse_search(
    grid: _Grid, player: int, max_moves: int, max_states: int
) -> tuple[tuple[int, ...], int, int] | None:
    """Pull boxes off their targets; returns (boxes, player, moves) of the best-scoring state found.

    States are expanded cheapest first, with each box still on its target counted as `_ON_TARGET`
    extra moves, so the search reaches all-boxes-off states within its budget. A state's moves are
    those of the path that found it: an upper bound on its shortest solution.
    """
    origin = tuple(sorted(grid.targets))
    heap = [(_ON_TARGET * len(origin), 0, 0, origin, player, 0, -1)]
    done: set[tuple[frozenset[int], int]] = set()
    best, best_score, tie = None, 0, 0
    while heap and len(done) < max_states:
        _, _, cost, boxes, pl, swaps, last = heapq.heappop(heap)
        key = (frozenset(boxes), pl)
        if key in done:
            continue
        done.add(key)
        if not grid.targets.intersection(boxes):
            moved = sum(abs(a // grid.w - b // grid.w) + abs(a % grid.w - b % grid.w) for a, b in zip(boxes, origin))
            score = swaps * moved
            if score > best_score:
                best, best_score = (boxes, pl, cost), score
        occupied = set(boxes)
        for p, dp in grid.walk(pl, occupied).items():
            if cost + dp + 1 > max_moves:
                continue
            for delta in grid.deltas.values():
                box, to = p - delta, p + delta
                if box in occupied and grid.free[to] and to not in occupied:
                    i = boxes.index(box)
                    nxt = boxes[:i] + (p,) + boxes[i + 1 :]
                    ncost = cost + dp + 1
                    tie += 1
                    on = len(grid.targets.intersection(nxt))
                    heapq.heappush(heap, (ncost + _ON_TARGET * on, tie, ncost, nxt, to, swaps + (i != last), i))
    return best


def generate_level(
    dim: tuple[int, int],
    num_boxes: int,
    max_moves: int,
    rng: np.random.Generator,
    *,
    num_steps: int | None = None,
    max_states: int = 1500,
    tries: int = 200,
) -> Level:
    """A level with `num_boxes` boxes, none on a target, solvable in at most `max_moves` moves."""
    steps = int(1.7 * (dim[0] + dim[1])) if num_steps is None else num_steps
    for _ in range(tries):
        room = room_topology(dim, steps, rng)
        floor = np.argwhere(room == FLOOR)
        if len(floor) < num_boxes + 2:
            continue
        picks = rng.choice(len(floor), size=num_boxes + 1, replace=False)
        fixed = room.copy()
        for r, c in floor[picks[1:]]:
            fixed[r, c] = TARGET
        grid = _Grid(fixed)
        found = _reverse_search(
            grid, grid.cell((int(floor[picks[0]][0]), int(floor[picks[0]][1]))), max_moves, max_states
        )
        if found is None:
            continue
        boxes, pl, cost = found
        # Start the player anywhere it could have walked to after its last pull, within the bound.
        reach = [(p, d) for p, d in grid.walk(pl, set(boxes)).items() if cost + d <= max_moves]
        start, extra = reach[int(rng.integers(len(reach)))]
        return Level(fixed, frozenset(grid.rc(b) for b in boxes), grid.rc(start), cost + extra)
    raise RuntimeError(
        f"could not generate a {dim[0]}x{dim[1]} Sokoban level with {num_boxes} boxes solvable in {max_moves} moves "
        f"after {tries} rooms; use fewer boxes, a larger room or more turns"
    )


def solve(
    fixed: np.ndarray,
    boxes: frozenset[tuple[int, int]] | set[tuple[int, int]],
    player: tuple[int, int],
    max_states: int = 200_000,
) -> list[str] | None:
    """A shortest move list (in player moves) that puts every box on a target, or None.

    A* over pushes: walking to a push position costs its BFS distance, a push costs 1; the heuristic
    (sum of each box's push distance to its nearest target) never overestimates.
    """
    grid = _Grid(fixed)
    goal = grid.goal_distance()
    start = frozenset(grid.cell(b) for b in boxes)
    if len(start) > len(grid.targets):
        return None
    pl0 = grid.cell(player)

    def h(bs: frozenset[int]) -> float:
        return sum(goal[b] for b in bs)

    if h(start) == float("inf"):
        return None
    Key = tuple[frozenset[int], int]
    parents: dict[Key, tuple[Key, int, str] | None] = {(start, pl0): None}
    best_cost = {(start, pl0): 0}
    heap = [(h(start), 0, 0, start, pl0)]
    tie = 0
    while heap and len(parents) < max_states:
        _, cost, _, bs, pl = heapq.heappop(heap)
        key = (bs, pl)
        if cost > best_cost[key]:
            continue
        if bs <= grid.targets:
            moves: list[str] = []
            while parents[key] is not None:
                prev, stand, name = parents[key]
                moves[:0] = grid.route(prev[1], prev[0], stand) + [name]
                key = prev
            return moves
        dist = grid.walk(pl, bs)
        for name, delta in grid.deltas.items():
            for b in bs:
                stand, to = b - delta, b + delta
                if stand not in dist or not grid.free[to] or to in bs or goal[to] == float("inf"):
                    continue
                nbs = (bs - {b}) | {to}
                ncost = cost + dist[stand] + 1
                nkey = (nbs, b)
                if ncost < best_cost.get(nkey, float("inf")):
                    best_cost[nkey] = ncost
                    parents[nkey] = (key, stand, name)
                    tie += 1
                    heapq.heappush(heap, (ncost + h(nbs), ncost, tie, nbs, b))
    return None
