"""The scripted solver of the web tasks jgem generates: it plays the task's own `solution`.

A shipped task carries its ground-truth plan as steps on named elements (`["click", "link", "Blue Mug"]`); the
solver turns each into WebArena's action by finding that element's id in the current observation, the way an
agent reading the accessibility tree would. Tasks without a `solution` (WebArena's own) have no solver.
"""

from __future__ import annotations

from typing import Any

from jgem.core import Env
from jgem.envs.web.observation import find


class Solver:
    """`reset(obs, info, env)` then `act(obs, info, env) -> action`, as the games' solvers."""

    RETRIES = 3  # go_back tries per step whose element is not on the page (after a random move of the warm start)

    def __init__(self) -> None:
        self.plan: list[list[Any]] = []
        self.next = 0
        self.lost = 0

    def reset(self, obs: str, info: dict[str, Any], env: Env) -> None:
        task = info.get("task") or getattr(env.unwrapped, "task", None)  # the reset info carries it, also remotely
        if not task or "solution" not in task:
            raise KeyError(f"task {task and task.get('task_id')!r} has no solution to play (not a shipped task)")
        self.plan, self.next, self.lost = [list(s) for s in task["solution"]], 0, 0

    def act(self, obs: str, info: dict[str, Any], env: Env) -> str:
        if self.next >= len(self.plan):
            return "stop []"
        step = self.plan[self.next]
        kind, args = step[0], step[1:]
        if kind in ("click", "hover", "type"):
            try:
                i = find(obs, args[0], args[1])
            except LookupError as e:
                if self.lost < self.RETRIES:  # a move off the plan (the warm start's random action): step back
                    self.lost += 1
                    return "go_back"
                raise LookupError(f"solution step {step}: {e}") from None
            self.next, self.lost = self.next + 1, 0
            if kind == "type":
                return f"type [{i}] [{args[2]}] [{int(args[3]) if len(args) > 3 else 1}]"
            return f"{kind} [{i}]"
        self.next, self.lost = self.next + 1, 0
        if kind in ("goto", "press", "scroll", "stop", "tab_focus"):
            return f"{kind} [{args[0]}]"
        if kind in ("go_back", "go_forward", "new_tab", "close_tab"):
            return kind
        raise ValueError(f"solution step {step}: unknown kind {kind!r}")
