"""BabyAI (AgentGym's 40 levels) on `minigrid`, as a text env with macro actions.

Each turn the agent reads its egocentric view in words and the list of available actions; a macro
action ("go to red ball 1", "toggle and go through blue closed door 1", ...) runs as a sequence of
minigrid primitives planned on the visible cells. The reward is minigrid's (1 - 0.9 * steps / max_steps
on success, else 0), summed over the primitives of the turn.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from jgem.core import Env, StepResult
from jgem.envs.agentgym import babyai_render as R
from jgem.envs.agentgym.levels import BABYAI_LEVELS

LEVELS = BABYAI_LEVELS


def level_name(level: int | str) -> str:
    """A level by AgentGym number (1..40) or name ("GoToRedBall", "BabyAI-GoToRedBall-v0") -> "GoToRedBall-v0"."""
    if isinstance(level, int) and not isinstance(level, bool):
        if not 1 <= level <= len(LEVELS):
            raise ValueError(f"BabyAI level {level} is out of range; AgentGym numbers levels 1..{len(LEVELS)}")
        return LEVELS[level - 1]
    name = str(level).removeprefix("BabyAI-")
    for full in LEVELS:
        if name in (full, full.rsplit("-", 1)[0]):
            return full
    raise ValueError(f"unknown BabyAI level {level!r}; use a number 1..40 or one of {', '.join(LEVELS)}")


def _print_unless_rejected(*args: Any, **kwargs: Any) -> None:
    if not (args and args[0] == "Sampling rejected:"):
        print(*args, **kwargs)


def _quiet_rejection_sampling() -> None:
    """minigrid's BabyAI levels print a line to stdout for each layout their rejection sampling throws away
    (`Sampling rejected: unreachable object at (1, 13)`; several per reset on some levels), which fills a server's
    log: that one module's `print` drops those lines (thread-safe, unlike swapping sys.stdout around a reset)."""
    from minigrid.envs.babyai.core import roomgrid_level

    roomgrid_level.print = _print_unless_rejected


def _normalise(action: str) -> str:
    a = re.sub(r"\s+", " ", action.strip().lower().strip(" .\"'`"))
    return re.sub(r"^pickup\b", "pick up", a)


class BabyAIEnv(Env):
    """A BabyAI level (or, with `level=None`, a level drawn per episode) behind text and macro actions."""

    def __init__(self, level: int | str | None = None, max_turns: int = 50, seed: int | None = None) -> None:
        super().__init__(seed=seed)
        self.levels = LEVELS if level is None else (level_name(level),)
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.max_turns = max_turns
        self._games: dict[str, Any] = {}
        self.level = self.levels[0]
        self.turn = 0
        self.done = True
        self.total_reward = 0.0
        self._acts: dict[str, list[int]] = {}
        self._why: dict[str, str] = {}
        self._text = ""

    @property
    def game(self) -> Any:
        """The current minigrid env (unwrapped)."""
        if self.level not in self._games:
            import gymnasium as gym
            import minigrid  # noqa: F401  registers the BabyAI-* ids with gymnasium

            _quiet_rejection_sampling()
            self._games[self.level] = gym.make(f"BabyAI-{self.level}").unwrapped
        return self._games[self.level]

    def _observe(self) -> str:
        view = R.perceive(self.game)
        self._acts, self._why = R.macro_actions(view)
        self._text = R.describe(view)
        return self._text

    def available_actions(self) -> list[str]:
        return list(self._acts)

    def macro_plan(self, action: str) -> list[int] | None:
        """The primitive actions `action` would run now (None if it is not available)."""
        return self._acts.get(_normalise(action))

    def _with_actions(self, text: str) -> str:
        return text + "\nAvailable actions: [" + ", ".join(f'"{a}"' for a in self._acts) + "]"

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed)
        self.level = self.levels[int(self.np_random.integers(len(self.levels)))]
        self.game.reset(seed=int(self.np_random.integers(2**31)))
        self.turn, self.done, self.total_reward = 0, False, 0.0
        text = f"Your goal: {self.game.mission}\n{self._observe()}"
        return self._with_actions(text), {"level": self.level, "mission": self.game.mission}

    def step(self, action: str) -> StepResult:
        if self.done:
            raise RuntimeError("step() after the episode ended; call reset()")
        self.turn += 1
        a = _normalise(action)
        if a not in self._acts and f"{a} 1" in self._acts | self._why:
            a = f"{a} 1"  # "go to red ball" means the nearest one
        reward, terminated, truncated, valid = 0.0, False, False, True
        if a.startswith("check"):
            text = "You can take the following actions: " + ", ".join(self._acts)
        elif a not in self._acts:
            valid = False
            text = (self._why.get(a) or "The action is not recognized. Please check valid actions.") + " " + self._text
        else:
            u = self.game
            for prim in self._acts[a]:
                before = (tuple(u.agent_pos), u.agent_dir)
                _, r, terminated, truncated, _ = u.step(prim)
                reward += float(r)
                if terminated or truncated:
                    break
                if prim == R.FORWARD and (tuple(u.agent_pos), u.agent_dir) == before:
                    break  # blocked (e.g. a door that stayed locked): stop the macro, the agent sees why
            text = self._observe()
            if terminated:
                text += " The task is completed." if reward > 0 else " The episode has ended."
        self.total_reward += reward
        if not (terminated or truncated) and self.turn >= self.max_turns:
            truncated = True
        self.done = terminated or truncated
        info: dict[str, Any] = {"action_is_valid": valid, "level": self.level, "turn": self.turn}
        if self.done:
            info["success"] = bool(terminated and reward > 0)
        return self._with_actions(text), reward, bool(terminated), bool(truncated), info

    def get_state(self) -> Any:
        # Only the current level's minigrid env matters; the other cached levels are rebuilt on demand.
        state = {k: v for k, v in vars(self).items() if k not in ("spec", "_games")}
        return copy.deepcopy({**state, "_game": self._games.get(self.level)})

    def set_state(self, state: Any) -> None:
        state = copy.deepcopy(state)
        game = state.pop("_game")
        vars(self).update(state)
        if game is not None:
            self._games[self.level] = game

    def sample_random_action(self) -> str:
        acts = self.available_actions()
        return acts[int(self.np_random.integers(len(acts)))]

    def close(self) -> None:
        for g in self._games.values():
            g.close()
        self._games.clear()
