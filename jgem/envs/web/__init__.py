"""Web environments: WebArena's contract in a real headless browser, on sites jgem ships or on WebArena's own.

Only ids are registered here; Playwright, the browser and the sites load when an env is made.

- `web:Shop-v0-easy|hard`, `web:Forum-v0-easy|hard`: tasks generated on the shipped shop and forum, a fresh site
  state per seed.
- `web:WebArena-v0` / `agentgym:WebArena-v0` (AgentGym-RL's name): the shop and the forum, alternating by seed;
  `tasks=` WebArena's task files with `urls=` (or WebArena's environment variables) runs its real sites instead.
"""

from jgem.registry import register

_E = "jgem.envs.web.env:WebEnv"
for _site, _name in (("shop", "Shop"), ("forum", "Forum")):
    register(f"web:{_name}-v0", _E, site=_site, difficulty="easy")
    for _difficulty in ("easy", "hard"):
        register(f"web:{_name}-v0-{_difficulty}", _E, site=_site, difficulty=_difficulty)
register("web:WebArena-v0", _E, site=("shop", "forum"), difficulty="hard")
register("agentgym:WebArena-v0", _E, site=("shop", "forum"), difficulty="hard")
