"""Scripted reference solvers for the games: `solver_for(env_id)` -> a fresh Solver.

The web envs' tasks carry their own solutions; `solver_for` hands out their solver too
(`jgem.envs.web.solver`), so the warm start and the tools that play solvers treat them like games.

Each game module defines `class <Game>Solver` (beside its `<Game>Env`) with `reset(obs, info, env)` and
`act(obs, info, env) -> str`; `env` is the unwrapped game, for solvers that need what a player can see on the board.
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol

import numpy as np

from jgem.core import Env


class Solver(Protocol):
    """A solver may also define `not_played(played)`: called when the move `act` returned was replaced by `played`
    (the warm start's random move), for a solver whose state advances with its own moves (the web tasks' plan); the
    games' solvers read the board and feedback instead and need none."""

    def reset(self, obs: str, info: dict[str, Any], env: Env) -> None: ...

    def act(self, obs: str, info: dict[str, Any], env: Env) -> str: ...


_MODULES = {
    "GuessTheNumber": "guess_the_number",
    "Mastermind": "mastermind",
    "Minesweeper": "minesweeper",
    "Wordle": "wordle",
    "FifteenPuzzle": "fifteen_puzzle",
    "Hangman": "hangman",
    "Sudoku": "sudoku",
    "TowerofHanoi": "tower_of_hanoi",
    "Game2048": "game_2048",
    "Sokoban": "sokoban",
    "Crosswords": "crosswords",
    "WordSearch": "word_search",
    "WikiGame": "wikigame",
}


def game_name(env_id: str) -> str:
    """'game:Sudoku-v0-easy' -> 'Sudoku'."""
    return env_id.removeprefix("game:").split("-v0")[0]


def has_solver(env_id: str) -> bool:
    """Whether `env_id` has a scripted reference solver (what a warm start plays): a game, or a web id (its shipped
    tasks carry their solutions; WebArena's own task files have none)."""
    return (env_id.startswith("game:") and game_name(env_id) in _MODULES) or env_id.startswith(WEB_IDS)


WEB_IDS = ("web:", "agentgym:WebArena-v0")


def solver_for(env_id: str, teacher: str = "solver", rng: np.random.Generator | None = None) -> Solver:
    """A fresh scripted player of `env_id`: its reference solver, or with `teacher` one of the game's named weaker
    teachers (a game module's `TEACHERS`, classes built with `rng`, a seeded generator that draws their moves)."""
    if env_id.startswith(WEB_IDS):
        from jgem.envs.web.solver import WebSolver

        if teacher != "solver":
            raise KeyError(f"no teacher {teacher!r} for {env_id!r}; the web tasks have their 'solver' only")
        return WebSolver()
    name = game_name(env_id)
    if name not in _MODULES:
        raise KeyError(f"no scripted solver for {env_id!r}; games with solvers: {', '.join(_MODULES)}")
    module = importlib.import_module(f"jgem.envs.games.{_MODULES[name]}")
    if teacher == "solver":
        return getattr(module, f"{name}Solver")()
    named = getattr(module, "TEACHERS", {})
    if teacher not in named:
        raise KeyError(f"no teacher {teacher!r} for {env_id!r}; its teachers: {', '.join(teachers(env_id))}")
    if rng is None:  # an unseeded teacher would make the warm start differ from run to run
        raise ValueError(f"the teacher {teacher!r} of {env_id!r} draws its moves: pass its rng (a seeded Generator)")
    return named[teacher](rng)


def teachers(env_id: str) -> list[str]:
    """The scripted players `solver_for(env_id, teacher)` knows: 'solver' and the game's named weaker teachers."""
    if not has_solver(env_id) or env_id.startswith(WEB_IDS):
        return ["solver"] if has_solver(env_id) else []
    module = importlib.import_module(f"jgem.envs.games.{_MODULES[game_name(env_id)]}")
    return ["solver", *getattr(module, "TEACHERS", {})]


def play(env: Env, solver: Solver, seed: int | None = None, max_steps: int = 1000) -> tuple[float, int, bool]:
    """Play one episode; returns (return, turns, success)."""
    obs, info = env.reset(seed=seed)
    solver.reset(obs, info, env.unwrapped)
    total, turns = 0.0, 0
    for _ in range(max_steps):
        obs, reward, terminated, truncated, info = env.step(solver.act(obs, info, env.unwrapped))
        total += reward
        turns += 1
        if terminated or truncated:
            return total, turns, bool(info.get("success", False))
    return total, turns, False
