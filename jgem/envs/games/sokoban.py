"""Sokoban (GEM `game:Sokoban-v0-*`): push every box onto a goal, one `\\boxed{up|down|left|right}` per turn.

Levels come from `sokoban_gen` (GEM's room shapes and reverse play) and, unlike GEM's, are always
solvable within the turn limit.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from jgem.envs.games.base import GameEnv, Reward
from jgem.envs.games.sokoban_gen import FLOOR, MOVES, TARGET, WALL, generate_level, solve

# GEM's -random variant: (dim_room, num_boxes, max_turns).
_RANDOM_CHOICES = (((6, 6), 2, 20), ((8, 8), 5, 50))
_MOVE = re.compile(r"\\boxed\{(up|down|left|right)\}", re.IGNORECASE)
DIRECTIONS = tuple(MOVES)


class SokobanEnv(GameEnv):
    """Moves into a wall or an unpushable box score 0 and use a turn; all boxes on goals: 1.0.
    At the turn limit the reward is the fraction of boxes on goals (GEM)."""

    def __init__(
        self,
        dim_room: tuple[int, int] | None = (6, 6),
        max_turns: int | None = 100,
        num_boxes: int | None = 3,
        seed: int | None = None,
    ) -> None:
        super().__init__(seed=seed)
        self._is_random = dim_room is None or max_turns is None or num_boxes is None
        if not self._is_random:
            if len(dim_room) != 2 or min(dim_room) < 4:
                raise ValueError(f"dim_room must be (rows, cols) of at least (4, 4) including walls, got {dim_room}")
            if num_boxes < 1:
                raise ValueError(f"num_boxes must be at least 1, got {num_boxes}")
        self.dim_room = None if dim_room is None else tuple(dim_room)
        self.max_turns, self.num_boxes = max_turns, num_boxes
        self.reset()

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed)
        if self._is_random:
            self.dim_room, self.num_boxes, self.max_turns = _RANDOM_CHOICES[
                int(self.np_random.integers(len(_RANDOM_CHOICES)))
            ]
        level = generate_level(self.dim_room, self.num_boxes, self.max_turns, self.np_random)
        self.room_fixed: np.ndarray = level.fixed
        self.boxes: set[tuple[int, int]] = set(level.boxes)
        self.player: tuple[int, int] = level.player
        self.turn_count = 0
        return self.instructions(), self.info()

    @property
    def room_state(self) -> np.ndarray:
        """The board in GEM's codes: 0 wall, 1 floor, 2 goal, 3 box on goal, 4 box, 5 player."""
        state = self.room_fixed.copy()
        for b in self.boxes:
            state[b] = 3 if self.room_fixed[b] == TARGET else 4
        state[self.player] = 5
        return state

    def boxes_on_targets(self) -> int:
        return sum(1 for b in self.boxes if self.room_fixed[b] == TARGET)

    def instructions(self) -> str:
        return (
            "Let's play Sokoban. You are the player 'P' in a walled room; push every box onto a goal square.\n"
            "Step into a box to push it one square in the same direction. Boxes cannot be pulled, and a box "
            "cannot be pushed into a wall or into another box.\n"
            "Map symbols: 'P' you, 'S' you standing on a goal, '#' wall, '_' floor, 'O' empty goal, "
            "'X' box, '√' box on a goal.\n"
            "Each turn, write one direction in a box: \\boxed{up}, \\boxed{down}, \\boxed{left} or "
            "\\boxed{right}; for example \\boxed{up} moves you one square up. A move that is blocked scores "
            "nothing and uses a turn; a reply without a well-formed box ends the game.\n"
            f"You have {self.max_turns} turns; if time runs out you score the fraction of boxes on goals."
        )

    def render(self) -> str:
        symbols = {WALL: "#", FLOOR: "_", TARGET: "O"}
        grid = [[symbols[int(v)] for v in row] for row in self.room_fixed]
        for r, c in self.boxes:
            grid[r][c] = "√" if self.room_fixed[r, c] == TARGET else "X"
        r, c = self.player
        grid[r][c] = "S" if self.room_fixed[r, c] == TARGET else "P"
        return "\n".join(" ".join(row) for row in grid)

    def suffix(self) -> str:
        return f"Map:\n{self.render()}\nYour move?"

    def _free(self, r: int, c: int) -> bool:
        h, w = self.room_fixed.shape
        return 0 <= r < h and 0 <= c < w and self.room_fixed[r, c] != WALL and (r, c) not in self.boxes

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.turn_count += 1
        matches = _MOVE.findall(action) if isinstance(action, str) else []
        if not matches:
            obs = "No move found: answer with \\boxed{up}, \\boxed{down}, \\boxed{left} or \\boxed{right}."
            return obs, Reward.FORMAT_ERROR, True, self.turn_count == self.max_turns, self.info(success=False)
        direction = matches[-1].lower()
        dr, dc = MOVES[direction]
        r, c = self.player[0] + dr, self.player[1] + dc
        reward = Reward.INVALID
        if (r, c) in self.boxes and not self._free(r + dr, c + dc):
            obs = f"Turn {self.turn_count}: the box {direction} of you is blocked and cannot be pushed."
        elif (r, c) not in self.boxes and not self._free(r, c):
            obs = f"Turn {self.turn_count}: a wall blocks the way {direction}."
        else:
            pushed = (r, c) in self.boxes
            if pushed:
                self.boxes.remove((r, c))
                self.boxes.add((r + dr, c + dc))
            self.player = (r, c)
            reward = Reward.STEP
            if self.boxes_on_targets() == self.num_boxes:
                return "Solved! Every box is on a goal.", Reward.SUCCESS, True, False, self.info(success=True)
            obs = f"Turn {self.turn_count}: moved {direction}" + (" and pushed a box." if pushed else ".")
        if self.turn_count >= self.max_turns:
            partial = Reward.SUCCESS * self.boxes_on_targets() / self.num_boxes
            return obs + " That was the last turn.", partial, True, True, self.info(success=False)
        return obs, reward, False, False, self.info()

    def sample_random_action(self) -> str:
        return f"\\boxed{{{DIRECTIONS[int(self.np_random.integers(4))]}}}"


class SokobanSolver:
    """A* over box pushes (shortest in player moves); replans whenever the board is not where it expects."""

    def reset(self, obs: str, info: dict[str, Any], env: SokobanEnv) -> None:
        self._plan: list[str] = []
        self._expect: tuple[tuple[int, int], frozenset[tuple[int, int]]] | None = None

    def act(self, obs: str, info: dict[str, Any], env: SokobanEnv) -> str:
        here = (env.player, frozenset(env.boxes))
        if not self._plan or here != self._expect:
            self._plan = solve(env.room_fixed, env.boxes, env.player) or ["up"]
        move = self._plan.pop(0)
        dr, dc = MOVES[move]
        nxt = (here[0][0] + dr, here[0][1] + dc)
        boxes = here[1]
        if nxt in boxes:
            boxes = (boxes - {nxt}) | {(nxt[0] + dr, nxt[1] + dc)}
        self._expect = (nxt, boxes)
        return f"\\boxed{{{move}}}"
