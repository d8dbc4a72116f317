"""WebArena task configs: load them from JSON and point their URL placeholders at real sites.

WebArena ships its 812 tasks as `config_files/test.raw.json` (a list) or one `<id>.json` per task, with the sites'
URLs as placeholders (`__SHOPPING__`, `__REDDIT__`, ...). Its own setup replaces each with an environment variable
(`SHOPPING=http://host:7770` ...); `load_tasks` does the same, from `urls` first, then the environment. jgem's
shipped sites use `__SHOP__` and `__FORUM__`, filled with the loopback URL of the site the env serves.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jgem.envs.web.evaluators import check_task

# WebArena's placeholders and the environment variables its setup reads them from.
WEBARENA_SITES = {
    "__SHOPPING__": "SHOPPING",
    "__SHOPPING_ADMIN__": "SHOPPING_ADMIN",
    "__REDDIT__": "REDDIT",
    "__GITLAB__": "GITLAB",
    "__WIKIPEDIA__": "WIKIPEDIA",
    "__MAP__": "MAP",
    "__HOMEPAGE__": "HOMEPAGE",
}
SHIPPED_SITES = {"__SHOP__": "shop", "__FORUM__": "forum"}
_PLACEHOLDER = re.compile(r"__[A-Z][A-Z_]*?__")


def read_tasks(path: str | Path) -> list[dict[str, Any]]:
    """Task configs from a JSON file (one task or a list) or a directory of `*.json` files (sorted by task_id)."""
    path = Path(path)
    if path.is_dir():
        files = sorted(path.glob("*.json"))
        if not files:
            raise FileNotFoundError(f"no *.json task configs in {path}")
        tasks = [_read(f) for f in files]
        tasks = [t for group in tasks for t in (group if isinstance(group, list) else [group])]
        return sorted(tasks, key=lambda t: (str(type(t.get("task_id"))), t.get("task_id")))
    data = _read(path)
    tasks = data if isinstance(data, list) else [data]
    if not tasks or not all(isinstance(t, dict) for t in tasks):
        raise ValueError(f"{path}: a task config file holds a JSON object or a non-empty list of them")
    return tasks


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON: {e}") from e


def fill_urls(task: dict[str, Any], urls: Mapping[str, str]) -> dict[str, Any]:
    """The task with every `__SITE__` placeholder replaced by `urls[...]` (keys: placeholder or bare name, e.g.
    "__SHOPPING__" or "SHOPPING"), falling back to WebArena's environment variables. A placeholder the task uses
    and nobody sets is an error naming it and the variable to set."""
    text = json.dumps(task)

    def url_for(m: re.Match) -> str:
        ph = m.group(0)
        name = WEBARENA_SITES.get(ph, ph.strip("_"))
        if ph not in WEBARENA_SITES and ph not in SHIPPED_SITES and ph not in urls and name not in urls:
            return ph  # not a site placeholder (e.g. text in an intent)
        url = urls.get(ph) or urls.get(name) or os.environ.get(name)
        if not url:
            raise ValueError(
                f"task {task.get('task_id')!r} uses {ph} but no URL is set for it: export {name}=http://host:port "
                "(WebArena's variable) or pass urls={" + repr(name) + ": ...}"
            )
        return json.dumps(url.rstrip("/"))[1:-1]

    filled = json.loads(_PLACEHOLDER.sub(url_for, text))
    check_task(filled)
    return filled


def placeholders(task: dict[str, Any]) -> set[str]:
    """The `__SITE__` placeholders a task uses."""
    return set(_PLACEHOLDER.findall(json.dumps(task))) & (set(WEBARENA_SITES) | set(SHIPPED_SITES))
