"""Terminal envs (`terminal:` ids): shell commands in a sandboxed bash session, graded by the task's tests.

`terminal:<task>` for each task shipped in `tasks/`, `terminal:shipped` for all of them (one drawn per reset), and
`terminal:tb` for a local terminal-bench checkout (`data_dir=` or `$JGEM_DATA/terminal-bench`; `task=` picks one).
Registration lists the `tasks/` folder and imports nothing else.
"""

from pathlib import Path

from jgem.registry import register

_E = "jgem.envs.terminal.env:TerminalEnv"
_TASKS = Path(__file__).with_name("tasks")

SHIPPED_TASKS = sorted(d.name for d in _TASKS.iterdir() if (d / "task.yaml").is_file()) if _TASKS.is_dir() else []
for _name in SHIPPED_TASKS:
    register(f"terminal:{_name}", _E, task=_name)
register("terminal:shipped", _E)
register("terminal:tb", _E, source="data")
