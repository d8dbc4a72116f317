"""Tower of Hanoi (GEM `game:TowerofHanoi-v0-*`): move every disk from peg A to peg C, `\\boxed{A C}` per turn."""

from __future__ import annotations

import re
from typing import Any

from jgem.envs.games.base import GameEnv, Reward

# GEM's -random variant: (num_disks, max_turns).
_RANDOM_CHOICES = ((3, 10), (4, 20), (5, 35))
_MOVE = re.compile(r"\\boxed\{([ABCabc])\s*,?\s*([ABCabc])\}")
PEGS = ("A", "B", "C")


class TowerofHanoiEnv(GameEnv):
    """Solved: 1.0. Legal moves 0, illegal moves 0 (not terminal). At the turn limit the reward is
    the fraction of disks on peg C (GEM)."""

    def __init__(self, num_disks: int | None = 3, max_turns: int | None = 100, seed: int | None = None) -> None:
        super().__init__(seed=seed)
        self._is_random = num_disks is None or max_turns is None
        if not self._is_random and num_disks < 1:
            raise ValueError(f"num_disks must be at least 1, got {num_disks}")
        self.num_disks, self.max_turns = num_disks, max_turns
        self.reset()

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed)
        if self._is_random:
            self.num_disks, self.max_turns = _RANDOM_CHOICES[int(self.np_random.integers(len(_RANDOM_CHOICES)))]
        # Each peg lists its disks bottom to top; disk k has size k.
        self.board: dict[str, list[int]] = {"A": list(range(self.num_disks, 0, -1)), "B": [], "C": []}
        self.turn_count = 0
        return self.instructions(), self.info()

    def instructions(self) -> str:
        return (
            f"Tower of Hanoi with {self.num_disks} disks on three pegs A, B and C.\n"
            "All disks start on peg A; move the whole tower to peg C.\n"
            "Only the top disk of a peg can move, and a disk may never sit on a smaller one.\n"
            "Each turn, move one disk by writing the source and destination pegs in a box, e.g. \\boxed{A C} "
            "moves the top disk of A onto C. Illegal moves score nothing and use a turn; a reply without a "
            "well-formed box ends the game.\n"
            f"You have {self.max_turns} turns; if time runs out you score the fraction of disks on peg C."
        )

    def suffix(self) -> str:
        pegs = "\n".join(f"{p}: {' '.join(map(str, self.board[p])) or '(empty)'}" for p in PEGS)
        return f"Pegs (disks listed bottom to top, larger number = larger disk):\n{pegs}\nYour move?"

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self.turn_count += 1
        matches = _MOVE.findall(action) if isinstance(action, str) else []
        if not matches:
            obs = "No move found: answer with \\boxed{source destination}, e.g. \\boxed{A C}."
            return obs, Reward.FORMAT_ERROR, True, self.turn_count == self.max_turns, self.info(success=False)
        src, dst = (p.upper() for p in matches[-1])
        reward = Reward.INVALID
        if not self.board[src]:
            obs = f"Turn {self.turn_count}: peg {src} is empty, nothing to move."
        elif self.board[dst] and self.board[src][-1] > self.board[dst][-1]:
            top, under = self.board[src][-1], self.board[dst][-1]
            obs = f"Turn {self.turn_count}: disk {top} cannot go on the smaller disk {under}."
        else:
            disk = self.board[src].pop()
            self.board[dst].append(disk)
            reward = Reward.STEP
            if len(self.board["C"]) == self.num_disks:
                return "Solved! The whole tower is on peg C.", Reward.SUCCESS, True, False, self.info(success=True)
            obs = f"Turn {self.turn_count}: moved disk {disk} from {src} to {dst}."
        if self.turn_count >= self.max_turns:
            partial = len(self.board["C"]) / self.num_disks
            return obs + " That was the last turn.", partial, True, True, self.info(success=False)
        return obs, reward, False, False, self.info()

    def sample_random_action(self) -> str:
        src, dst = self.np_random.choice(3, size=2, replace=False)
        return f"\\boxed{{{PEGS[src]} {PEGS[dst]}}}"


def plan(board: dict[str, list[int]], target: str = "C") -> list[tuple[str, str]]:
    """Shortest move list that gathers every disk on `target`, from any legal position."""
    where = {d: p for p, disks in board.items() for d in disks}
    pegs = {p: list(disks) for p, disks in board.items()}
    moves: list[tuple[str, str]] = []

    def gather(k: int, to: str) -> None:
        # Put disks 1..k on `to`: the largest one moves at most once.
        if k == 0:
            return
        if where[k] == to:
            gather(k - 1, to)
            return
        spare = next(p for p in PEGS if p not in (where[k], to))
        gather(k - 1, spare)
        src = where[k]
        pegs[to].append(pegs[src].pop())
        where[k] = to
        moves.append((src, to))
        gather(k - 1, to)

    gather(len(where), target)
    return moves


class TowerofHanoiSolver:
    """Recursive optimal plan from the current position (2^n - 1 moves from the start)."""

    def reset(self, obs: str, info: dict[str, Any], env: TowerofHanoiEnv) -> None:
        pass

    def act(self, obs: str, info: dict[str, Any], env: TowerofHanoiEnv) -> str:
        moves = plan(env.board)
        src, dst = moves[0] if moves else ("A", "B")
        return f"\\boxed{{{src} {dst}}}"
