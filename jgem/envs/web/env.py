"""WebEnv: WebArena's web-navigation contract in a real headless browser.

An episode is one task config (WebArena's JSON format): the agent starts at `start_url`, sees the page as
WebArena's accessibility tree (or a cheaper text rendering), acts with WebArena's action grammar
(`jgem.envs.web.actions`), and ends with `stop [answer]`; the task's evaluators then score the episode (1.0 or 0.0,
the reward of that last step). Reaching `max_turns`, or `max_invalid` malformed actions in a row (WebArena's
early stop), ends it too, scored the same way with an empty answer.

Tasks come from one of two places:
- a site jgem ships (`site="shop"` or `"forum"`): the env serves it on a free loopback port; each reset refills the
  site's database from the episode's seed and draws a task of `difficulty` from that state, so the same seed gives
  the same site and task. `tasks=` may instead name WebArena-format files written for the shipped site
  (`__SHOP__` / `__FORUM__` URLs), run against the state of `site_seed`.
- WebArena's own task files (`tasks="config_files/"`, no `site`): the URLs come from `urls` or WebArena's
  environment variables (`SHOPPING`, `REDDIT`, ...); resetting those sites between episodes is the deployment's job,
  as in WebArena. Logged-in tasks need WebArena's storage-state files under `auth_dir`.

The browser, the site server and their threads belong to the env: `close()` ends them, and a dead or hung browser
(`BrowserError`) or a page that does not load within `timeout_s` (`PageTimeout`) raises from `reset`/`step`, which
the pool counts as a fault and answers by building a fresh env.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from jgem.core import Env, StepResult
from jgem.envs.web.actions import ActionError, parse
from jgem.envs.web.browser import BrowserSession
from jgem.envs.web.evaluators import FuzzyJudge, evaluate
from jgem.envs.web.observation import elements
from jgem.envs.web.tasks import SHIPPED_SITES, fill_urls, placeholders, read_tasks

SITES = {"shop": "jgem.envs.web.sites.shop:ShopSite", "forum": "jgem.envs.web.sites.forum:ForumSite"}
OBSERVATIONS = ("accessibility_tree", "text")

INSTRUCTIONS = """\
You are browsing the web to complete a task. Each turn you see the current page as an accessibility tree: one \
element per line, `[id] role 'name'`, then the URL and the open tabs. Reply with exactly one action:
click [id] | type [id] [text] [press_enter_after=0|1] | hover [id] | press [key_comb] | scroll [down|up] | \
new_tab | tab_focus [tab_index] | close_tab | goto [url] | go_back | go_forward | stop [answer]
Issue `stop [answer]` when the task is done: the answer is what the task asks for, or empty when it asks for \
nothing to be reported."""


class WebEnv(Env):
    def __init__(
        self,
        site: str | Sequence[str] | None = None,
        difficulty: str = "easy",
        tasks: str | Path | Sequence[dict[str, Any]] | None = None,
        urls: Mapping[str, str] | None = None,
        observation: str = "accessibility_tree",
        budget: int = 12_000,
        max_turns: int = 30,
        max_invalid: int = 3,
        site_seed: int = 0,
        auth_dir: str | Path | None = None,
        fuzzy_judge: FuzzyJudge | None = None,
        timeout_s: float = 20.0,
        seed: int | None = None,
    ) -> None:
        super().__init__(seed=seed)
        names = [] if site is None else [site] if isinstance(site, str) else list(site)
        for name in names:
            if name not in SITES:
                raise ValueError(f"site {name!r} is not shipped; sites: {', '.join(SITES)} (or None with tasks=)")
        if not names and tasks is None:
            raise ValueError("WebEnv needs a shipped site (site='shop' or 'forum') or WebArena task configs (tasks=)")
        if difficulty not in ("easy", "hard"):
            raise ValueError(f"difficulty {difficulty!r} is not 'easy' or 'hard'")
        if observation not in OBSERVATIONS:
            raise ValueError(f"observation {observation!r} is not one of {OBSERVATIONS}")
        for name, value, low in (("budget", budget, 200), ("max_turns", max_turns, 1), ("max_invalid", max_invalid, 1)):
            if not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
        self.site_names, self.difficulty, self.observation, self.budget = names, difficulty, observation, budget
        self.max_turns, self.max_invalid, self.site_seed = max_turns, max_invalid, site_seed
        self.urls = dict(urls or {})
        self.auth_dir = None if auth_dir is None else Path(auth_dir)
        self.fuzzy_judge = fuzzy_judge
        if tasks is None:
            self.tasks: list[dict[str, Any]] | None = None
        else:
            self.tasks = read_tasks(tasks) if isinstance(tasks, (str, Path)) else [dict(t) for t in tasks]
            if not self.tasks:
                raise ValueError("tasks= holds no task configs")
        self.sites: dict[str, Any] = {}  # name -> running shipped site, started on first use
        self.session = BrowserSession(timeout_s=timeout_s)
        self.task: dict[str, Any] | None = None
        self.turn = 0
        self.invalid_streak = 0
        self.done = True

    # -- episode ---------------------------------------------------------------------------------------------------

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed)
        draw = int(self.np_random.integers(2**31))
        if self.tasks is None:  # a fresh task on a freshly seeded shipped site
            name = self.site_names[draw % len(self.site_names)]
            self._site(name).reset(draw)
            raw, used = self._site(name).make_task(draw, self.difficulty), [name]
        else:  # a task file's task; the shipped sites it names start from `site_seed`'s state
            raw = self.tasks[draw % len(self.tasks)]
            used = sorted({SHIPPED_SITES[ph] for ph in placeholders(raw) if ph in SHIPPED_SITES})
            for name in used:
                self._site(name).reset(self.site_seed)
        urls = {**self.urls, **{ph: self._site(n).start() for ph, n in SHIPPED_SITES.items() if n in used}}
        self.task = fill_urls(raw, urls)
        self._open(self.task, used)
        self.turn, self.invalid_streak, self.done = 0, 0, False
        obs = f"{INSTRUCTIONS}\n\nObjective: {self.task['intent']}\n\n{self._observe()}"
        # the task config rides in the reset info (agents are not shown infos): a remote solver or a logger reads it
        return obs, {"task_id": self.task.get("task_id"), "task": self.task, "url": self.session.url}

    def _site(self, name: str) -> Any:
        if name not in self.sites:
            module, _, cls = SITES[name].partition(":")
            self.sites[name] = getattr(importlib.import_module(module), cls)()
        return self.sites[name]

    def _open(self, task: dict[str, Any], shipped: Sequence[str]) -> None:
        start = task["start_url"].split(" |AND| ")  # WebArena opens a tab per site for multi-site tasks
        if task.get("require_login") and shipped:
            self.session.reset(self._site(shipped[0]).login_url(task.get("login_user")))  # sets the session cookie
            for name in shipped[1:]:
                self.session.goto(self._site(name).login_url(task.get("login_user")))
            self.session.goto(start[0])
        else:
            state = self._storage_state(task) if task.get("require_login") else None
            self.session.reset(start[0], storage_state=state)
        for url in start[1:]:
            self.session.execute(parse("new_tab"))
            self.session.goto(url)

    def _storage_state(self, task: dict[str, Any]) -> str:
        name = task.get("storage_state")
        if not name:
            raise ValueError(f"task {task.get('task_id')!r} requires login but names no storage_state file")
        if self.auth_dir is None:
            raise ValueError(
                f"task {task.get('task_id')!r} requires login: pass auth_dir= (the directory of WebArena's "
                f"{Path(name).name}, made by its auto_login.py)"
            )
        path = self.auth_dir / Path(name).name
        if not path.is_file():
            raise FileNotFoundError(f"task {task.get('task_id')!r}: storage state {path} does not exist")
        return str(path)

    def step(self, action: str) -> StepResult:
        if self.done or self.task is None:
            raise RuntimeError("step() after the episode ended: call reset() first")
        self.turn += 1
        info: dict[str, Any] = {"turn": self.turn, "task_id": self.task.get("task_id")}
        answer = None
        try:
            parsed = parse(action)
            if parsed.kind == "stop":
                answer = parsed.text
            else:
                self.session.execute(parsed)
            self.invalid_streak = 0
            info["action_is_valid"] = True
            feedback = ""
        except ActionError as e:
            self.invalid_streak += 1
            info["action_is_valid"] = False
            feedback = f"Invalid action: {e}\n\n"
        terminated = answer is not None or self.invalid_streak >= self.max_invalid
        truncated = not terminated and self.turn >= self.max_turns
        if terminated or truncated:
            self.done = True
            score = evaluate(self.task, answer or "", self.session, self.fuzzy_judge)
            info["success"] = score == 1.0
            info["url"] = self.session.url
            return f"{feedback}The episode is over.", float(score), terminated, truncated, info
        info["url"] = self.session.url
        return feedback + self._observe(), 0.0, False, False, info

    def _observe(self) -> str:
        return self.session.observe(kind=self.observation, budget=self.budget)

    def sample_random_action(self) -> str:
        """A click on a link or button of the page, a scroll or a step back (what a random agent would do)."""
        clickable = [i for i, role, _ in elements(self._observe()) if role in ("link", "button")]
        choices = ["scroll [down]", "scroll [up]", "go_back"] + [f"click [{i}]" for i in clickable]
        return choices[int(self.np_random.integers(len(choices)))]

    # -- lifecycle -------------------------------------------------------------------------------------------------

    def get_state(self) -> Any:
        raise NotImplementedError("a WebEnv's state lives in a browser and a site server; it cannot be copied")

    def set_state(self, state: Any) -> None:
        raise NotImplementedError("a WebEnv's state lives in a browser and a site server; it cannot be restored")

    def spawn(self, same_state: bool = False) -> Env:
        if same_state:
            raise NotImplementedError("a WebEnv cannot be cloned mid-episode (its state lives in a browser)")
        if self.spec is None:
            raise NotImplementedError("spawn() needs a registered WebEnv (made by jgem.make)")
        from jgem.registry import make

        return make(self.spec.id, seed=int(self.np_random.integers(2**63)))

    def close(self) -> None:
        self.session.close()
        for site in self.sites.values():
            site.close()
