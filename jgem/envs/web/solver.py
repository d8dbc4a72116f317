"""The scripted solver of the web tasks jgem generates: it plays the task's own `solution`.

A shipped task carries its ground-truth plan as steps on named elements (`["click", "link", "Blue Mug"]`); the
solver turns each into WebArena's action by finding that element's id in the current observation, the way an
agent reading the accessibility tree would. Tasks without a `solution` (WebArena's own) have no solver.
"""

from __future__ import annotations

from typing import Any

from jgem.core import Env
from jgem.envs.web.observation import find


class WebSolver:
    """`reset(obs, info, env)` then `act(obs, info, env) -> action`, as the games' solvers."""

    RETRIES = 3  # go_back tries per step whose element is not on the page (after a random move of the warm start)

    def __init__(self) -> None:
        self.plan: list[list[Any]] = []
        self.next = 0
        self.lost = 0
        self.back_to: str | None = None  # the page to return to after a move it did not play (`not_played`)
        self.undo = "go_back"  # the move that returns there
        self._before: tuple[int, int, str | None] = (0, 0, None)  # (next, lost, url) before the last `act`

    def reset(self, obs: str, info: dict[str, Any], env: Env) -> None:
        task = info.get("task") or getattr(env.unwrapped, "task", None)  # the reset info carries it, also remotely
        if not task or "solution" not in task:
            raise KeyError(f"task {task and task.get('task_id')!r} has no solution to play (not a shipped task)")
        self.plan, self.next, self.lost = [list(s) for s in task["solution"]], 0, 0
        self.back_to, self._before = None, (0, 0, None)

    def act(self, obs: str, info: dict[str, Any], env: Env) -> str:
        url = _url(obs)
        if self.back_to is not None:  # a move it did not play took the page elsewhere: step back to its page first
            if url != self.back_to and self.lost < self.RETRIES:
                self.lost += 1
                return self.undo
            self.back_to = None
        self._before = (self.next, self.lost, url)
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

    def not_played(self, played: str) -> None:
        """The move `act` returned last was replaced by `played` (the warm start's random move): the plan stays where
        it was, so the step is played later (the final `stop [answer]` too), after returning to the page it was on
        if `played` navigated away (a URL-matched task is judged on the page it stops on): forward after a
        `go_back`, back after anything else."""
        self.next, self.lost, self.back_to = self._before
        self.undo = "go_forward" if played.strip() == "go_back" else "go_back"


def _url(obs: str) -> str | None:
    """The page's URL from the observation's `URL: ...` line (`observation.footer`)."""
    for line in reversed(obs.splitlines()):
        if line.startswith("URL: "):
            return line[5:].strip()
    return None
