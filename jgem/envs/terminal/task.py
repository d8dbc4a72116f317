"""terminal-bench's task directory, read without docker.

A task directory holds `task.yaml` (`instruction`, or the older `descriptions` list; `difficulty`, `category`, `tags`,
`max_agent_timeout_sec`, `max_test_timeout_sec`), `tests/` (pytest files; `test_outputs.py` by convention),
`solution.sh` (the reference solution), a `Dockerfile` and optionally `docker-compose.yaml` and `run-tests.sh`.

Of the Dockerfile jgem reads `WORKDIR` (the session's directory; /app when absent), `ENV`, the `COPY`/`ADD` of files
from the task directory into the working directory (they make the session's starting copy), and `RUN` steps, which
run in the sandbox at reset, in order, as the sandbox's user without network (a step that fails is reported in the
reset's info, not fatal). `FROM` is not built: the base system is the host's (docs/environments.md says what a task
may assume). `run-tests.sh` is not run (it installs pytest from the network); the files under `tests/` are run by
pytest directly. A task whose docker-compose file has more services than the client, or that cannot be read, is
listed as skipped with the reason (`discover`).
"""

from __future__ import annotations

import glob
import json
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from jgem.envs.data.hub import data_root

SHIPPED_DIR = Path(__file__).with_name("tasks")
DATA_SUBDIR = "terminal-bench"
SYSTEM_DIRS = ("/bin", "/sbin", "/lib", "/lib64", "/usr", "/etc", "/opt", "/var", "/proc", "/dev", "/sys", "/tmp")


class TaskSkipped(ValueError):
    """A task directory jgem cannot run; the message is the reason."""


@dataclass(frozen=True)
class TerminalTask:
    name: str
    path: Path
    instruction: str
    difficulty: str = "unknown"
    category: str = ""
    tags: tuple[str, ...] = ()
    max_agent_timeout_sec: float = 900.0
    max_test_timeout_sec: float = 180.0
    workdir: str = "/app"
    files: tuple[tuple[str, str], ...] = ()
    """(source relative to the task directory, destination relative to `workdir`) from the Dockerfile's COPY/ADD"""
    env: tuple[tuple[str, str], ...] = ()
    setup: tuple[str, ...] = ()
    """the Dockerfile's RUN steps, in order, each as `cd <its WORKDIR> && <command>`"""
    notes: tuple[str, ...] = field(default=(), compare=False)
    """what of the Dockerfile is not done (COPY outside the working directory, multi-stage builds, ...)"""

    @property
    def tests_dir(self) -> Path:
        return self.path / "tests"

    @property
    def solution(self) -> Path | None:
        p = self.path / "solution.sh"
        return p if p.is_file() else None


def _yaml(path: Path) -> dict:
    import yaml

    with open(path) as f:
        data = yaml.safe_load(f)
    if not isinstance(data, dict):
        raise TaskSkipped(f"{path.name} is not a mapping")
    return data


def _instruction(meta: dict) -> str:
    text = meta.get("instruction")
    if not text and isinstance(meta.get("descriptions"), list):  # the format before `instruction`
        descs = [d for d in meta["descriptions"] if isinstance(d, dict)]
        base = next((d for d in descs if d.get("key") == "base"), descs[0] if descs else {})
        text = base.get("description")
    if not isinstance(text, str) or not text.strip():
        raise TaskSkipped("task.yaml has no instruction")
    return text.strip()


def _logical_lines(text: str) -> list[str]:
    lines, cur = [], ""
    for raw in text.splitlines():
        s = raw.strip()
        if not cur and (not s or s.startswith("#")):
            continue
        if s.endswith("\\"):
            cur += s[:-1] + " "
            continue
        lines.append(cur + s)
        cur = ""
    if cur:
        lines.append(cur)
    return lines


def _words(rest: str) -> list[str]:
    rest = rest.strip()
    if rest.startswith("["):
        try:
            value = json.loads(rest)
            if isinstance(value, list):
                return [str(v) for v in value]
        except json.JSONDecodeError:
            pass
    return shlex.split(rest)


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def read_dockerfile(task_dir: Path) -> tuple[str, tuple, tuple, tuple, tuple]:
    """(workdir, files, env, RUN steps, notes) from the task's Dockerfile (see the module's doc)."""
    path = task_dir / "Dockerfile"
    workdir, files, env, setup, notes = "/app", [], [], [], []
    if not path.is_file():
        return workdir, (), (), (), ("no Dockerfile: the session starts in an empty /app",)
    seen_workdir = False
    for line in _logical_lines(path.read_text()):
        word, _, rest = line.partition(" ")
        op = word.upper()
        if op == "FROM" and files:
            notes.append("a multi-stage build: only the COPY steps of the task directory are done")
        elif op == "WORKDIR":
            target = rest.strip()
            workdir = os.path.normpath(target if target.startswith("/") else os.path.join(workdir, target))
            seen_workdir = True
        elif op == "ENV":
            words = _words(rest)
            if words and "=" not in words[0] and len(words) >= 2:
                env.append((words[0], " ".join(words[1:])))
            else:
                env.extend(tuple(w.split("=", 1)) for w in words if "=" in w)
        elif op == "RUN":
            cmd = rest.strip()
            if cmd.startswith("["):
                cmd = shlex.join(_words(cmd))
            setup.append(f"cd {shlex.quote(workdir if seen_workdir else '/')} && {cmd}")
        elif op in ("COPY", "ADD"):
            words = [w for w in _words(rest) if not w.startswith("--")]
            if any(w.startswith("--from") for w in _words(rest)):
                notes.append(f"{op} --from (another build stage) is not done: {rest.strip()}")
                continue
            if len(words) < 2:
                continue
            *srcs, dest = words
            dest_abs = dest if dest.startswith("/") else os.path.join(workdir, dest)
            dest_abs = os.path.normpath(dest_abs) + ("/" if dest.endswith("/") else "")
            if not _under(dest_abs.rstrip("/") or "/", workdir):
                notes.append(f"{op} to {dest} is outside the working directory {workdir}: not done")
                continue
            rel = os.path.relpath(dest_abs.rstrip("/"), workdir)
            for src in srcs:
                if "://" in src:
                    notes.append(f"{op} from a URL is not done: {src}")
                    continue
                matches = sorted(glob.glob(str(task_dir / src))) or []
                if not matches:
                    notes.append(f"{op} source {src} is not in the task directory")
                for m in matches:
                    m_rel = os.path.relpath(m, task_dir)
                    if m_rel.startswith(".."):
                        continue
                    if os.path.isdir(m):
                        files.append((m_rel, rel))  # a directory's contents go into the destination
                    elif dest.endswith("/") or len(srcs) > 1 or len(matches) > 1:
                        files.append((m_rel, os.path.normpath(os.path.join(rel, os.path.basename(m)))))
                    else:
                        files.append((m_rel, rel))
    return workdir, tuple(files), tuple(env), tuple(setup), tuple(notes)


def _compose_services(task_dir: Path) -> list[str]:
    for name in ("docker-compose.yaml", "docker-compose.yml", "compose.yaml", "compose.yml"):
        p = task_dir / name
        if p.is_file():
            services = _yaml(p).get("services") or {}
            return list(services) if isinstance(services, dict) else []
    return []


def load_task(task_dir: str | os.PathLike) -> TerminalTask:
    """The task in `task_dir`; `TaskSkipped` with the reason when jgem cannot run it."""
    path = Path(task_dir)
    if not (path / "task.yaml").is_file():
        raise TaskSkipped("no task.yaml")
    try:
        meta = _yaml(path / "task.yaml")
    except TaskSkipped:
        raise
    except Exception as e:  # a YAML error
        raise TaskSkipped(f"task.yaml cannot be read: {e}") from None
    services = _compose_services(path)
    if len(services) > 1:
        raise TaskSkipped(f"needs docker services ({', '.join(services)}): jgem runs no docker")
    if not (path / "tests").is_dir() or not any((path / "tests").glob("test*.py")):
        raise TaskSkipped("no tests/test*.py")
    instruction = _instruction(meta)
    workdir, files, env, setup, notes = read_dockerfile(path)
    if workdir == "/" or any(_under(workdir, d) for d in SYSTEM_DIRS) or _under(workdir, "/tests"):
        raise TaskSkipped(f"WORKDIR {workdir} is a system directory; the session's directory must be its own")
    tags = meta.get("tags") or ()
    return TerminalTask(
        name=path.name,
        path=path,
        instruction=instruction,
        difficulty=str(meta.get("difficulty", "unknown")),
        category=str(meta.get("category", "")),
        tags=tuple(str(t) for t in tags) if isinstance(tags, list) else (),
        max_agent_timeout_sec=float(meta.get("max_agent_timeout_sec", 900.0)),
        max_test_timeout_sec=float(meta.get("max_test_timeout_sec", 180.0)),
        workdir=workdir,
        files=files,
        env=env,
        setup=setup,
        notes=notes,
    )


def tasks_root(data_dir: str | os.PathLike | None = None) -> Path:
    """Where a local terminal-bench checkout's tasks are: `data_dir` (or `$JGEM_DATA/terminal-bench`), or its `tasks/`
    folder when it has one."""
    root = Path(data_dir).expanduser() if data_dir is not None else None
    if root is None:
        base = data_root()
        if base is None:
            raise FileNotFoundError(
                "no terminal-bench tasks directory: pass data_dir= (a checkout of terminal-bench or its tasks/ folder) "
                f"or set $JGEM_DATA and put the checkout at $JGEM_DATA/{DATA_SUBDIR}"
            )
        root = base / DATA_SUBDIR
    if (root / "tasks").is_dir() and not (root / "task.yaml").exists():
        root = root / "tasks"
    if not root.is_dir():
        raise FileNotFoundError(f"the terminal-bench tasks directory {root} does not exist")
    return root


def discover(root: str | os.PathLike) -> tuple[dict[str, TerminalTask], dict[str, str]]:
    """The tasks under `root` by name, and the skipped ones with the reason, both sorted by name."""
    tasks: dict[str, TerminalTask] = {}
    skipped: dict[str, str] = {}
    for d in sorted(Path(root).iterdir()):
        if not d.is_dir() or d.name.startswith((".", "_")):
            continue
        try:
            tasks[d.name] = load_task(d)
        except TaskSkipped as e:
            skipped[d.name] = str(e)
    return tasks, skipped


def shipped_names() -> list[str]:
    """The names of the tasks shipped with jgem (cheap: a directory listing)."""
    if not SHIPPED_DIR.is_dir():
        return []
    return sorted(d.name for d in SHIPPED_DIR.iterdir() if (d / "task.yaml").is_file())
