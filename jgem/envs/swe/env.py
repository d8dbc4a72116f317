"""The repository env: fix a Python package's injected bug with tools, graded by the package's own tests.

An episode: reset opens a shell session (`jgem.envs.tools.shell`, the terminal env's sandbox: no network, rlimits,
a private root) on a copy of the task's repository with its bug applied (`jgem.envs.swe.build` makes the tasks);
the observation is the task's problem statement (the failing tests and the first failure, never the bug) and how to
act. Tools, as SWE-agent and OpenHands give them: `view` (a file's numbered lines, or a directory), `search` (a
pattern over the files), `str_replace` (replace one exact, unique occurrence in a file), `run_tests` (pytest on some
tests, by default the failing ones), `bash`, and `submit`, which ends the episode. The native tool formats (`hermes`,
`llama3_json`) call them all; `gem_tags` has `<bash>...</bash>` and `<submit/>` (the terminal env's tags: the
other tools are shell commands there). A reply without a call ends the episode too (`finish_without_call`).

Grading is SWE-bench's: the repository's test files are put back as they were (an agent's edits to them do not
count), and its FAIL_TO_PASS and PASS_TO_PASS tests run in a fresh process tree of the sandbox on the final state of
the code. Reward 1 when every one of both passes (the bug is fixed and nothing else broke), else 0; `info` has both
fractions. Earlier turns' rewards are 0.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jgem.core import Env, JgemError
from jgem.envs.swe.build import DATA_SUBDIR
from jgem.envs.swe.mutations import Mutation
from jgem.envs.terminal.env import BASH_SCHEMA, SUBMIT_SCHEMA, TerminalEnv
from jgem.envs.tools.base import function_schema
from jgem.envs.tools.formats import BadCall, Call, get_format
from jgem.envs.tools.shell import ShellConfig, ShellSession, TestReport, pack_dir

WORKDIR = "/app"

_PATH = {"type": "string", "description": "A path relative to the repository root (or absolute, under /app)."}
TOOL_SCHEMAS = [
    function_schema(
        "view",
        "Show a file's lines, numbered (optionally only start_line..end_line), or list a directory.",
        {
            "type": "object",
            "properties": {
                "path": _PATH,
                "start_line": {"type": "integer", "description": "The first line to show (1-based)."},
                "end_line": {"type": "integer", "description": "The last line to show."},
            },
            "required": ["path"],
        },
    ),
    function_schema(
        "search",
        "Search the repository's files for a regular expression (grep -rnE); optionally under one path.",
        {
            "type": "object",
            "properties": {"pattern": {"type": "string", "description": "The regular expression."}, "path": _PATH},
            "required": ["pattern"],
        },
    ),
    function_schema(
        "str_replace",
        "Replace old_str by new_str in a file. old_str must occur exactly once (include enough context).",
        {
            "type": "object",
            "properties": {
                "path": _PATH,
                "old_str": {"type": "string", "description": "The exact text to replace, whitespace included."},
                "new_str": {"type": "string", "description": "The text to put in its place."},
            },
            "required": ["path", "old_str", "new_str"],
        },
    ),
    function_schema(
        "run_tests",
        "Run tests with pytest and show the result. Default: the failing tests of the problem statement.",
        {
            "type": "object",
            "properties": {
                "tests": {"type": "array", "items": {"type": "string"}, "description": "pytest node ids or paths."}
            },
        },
    ),
    BASH_SCHEMA,
    SUBMIT_SCHEMA,
]

# the in-sandbox half of view, search and str_replace: a stdlib script run with the call's JSON arguments
_TOOL_SCRIPT = r"""
import json, os, re, subprocess, sys
name, a = sys.argv[1], json.loads(sys.argv[2])
def path(p):
    p = os.path.normpath(os.path.join("/app", p))
    return p
if name == "view":
    p = path(a["path"])
    if os.path.isdir(p):
        for e in sorted(os.listdir(p)):
            print(e + ("/" if os.path.isdir(os.path.join(p, e)) else ""))
        sys.exit(0)
    lines = open(p, encoding="utf-8", errors="replace").read().splitlines()
    lo = max(1, int(a.get("start_line") or 1)); hi = min(len(lines), int(a.get("end_line") or len(lines)))
    for i in range(lo, hi + 1):
        print(f"{i:6d}\t{lines[i - 1]}")
    if not lines:
        print("(empty file)")
elif name == "search":
    p = path(a.get("path") or ".")
    r = subprocess.run(["grep", "-rnE", "--include=*.py", "--include=*.txt", "--include=*.rst", "--include=*.md",
                        "--include=*.cfg", "--include=*.toml", a["pattern"], p], capture_output=True, text=True)
    out = r.stdout.replace("/app/", "")
    print(out if out else ("no match" if r.returncode == 1 else r.stderr), end="")
    sys.exit(0 if r.returncode in (0, 1) else r.returncode)
elif name == "str_replace":
    p = path(a["path"])
    text = open(p, encoding="utf-8").read()
    n = text.count(a["old_str"])
    if n != 1:
        print(f"old_str occurs {n} times in {a['path']}; it must occur exactly once (add context)" if n else
              f"old_str does not occur in {a['path']} (check whitespace and indentation with view)")
        sys.exit(1)
    at = text.index(a["old_str"])
    open(p, "w", encoding="utf-8").write(text.replace(a["old_str"], a["new_str"], 1))
    line = text[:at].count("\n") + 1
    new = open(p, encoding="utf-8").read().splitlines()
    end = line + a["new_str"].count("\n")
    print(f"Replaced at line {line} of {a['path']}:")
    for i in range(max(1, line - 3), min(len(new), end + 3) + 1):
        print(f"{i:6d}\t{new[i - 1]}")
"""


@dataclass(frozen=True)
class SWETask:
    """A built task (jgem.envs.swe.build): the pristine repository, the bug, the tests that grade it."""

    id: str
    repo: Path
    tests: tuple[str, ...]
    mutation: Mutation
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    problem_statement: str

    @classmethod
    def load(cls, path: Path) -> SWETask:
        d = json.loads(Path(path).read_text())
        return cls(
            id=d["id"],
            repo=(Path(path).parent.parent / d["repo"]).resolve(),
            tests=tuple(d["tests"]),
            mutation=Mutation.from_dict(d["mutation"]),
            fail_to_pass=tuple(d["FAIL_TO_PASS"]),
            pass_to_pass=tuple(d["PASS_TO_PASS"]),
            problem_statement=d["problem_statement"],
        )


def tasks_dir(data_dir: str | os.PathLike | None) -> Path:
    """Where the built tasks are: `data_dir` (or $JGEM_DATA/swe), built by `python -m jgem.envs.swe.build`."""
    root = Path(data_dir) if data_dir is not None else None
    if root is None and os.environ.get("JGEM_DATA"):
        root = Path(os.environ["JGEM_DATA"]) / DATA_SUBDIR
    if root is None or not (root / "tasks").is_dir():
        raise ValueError(
            f"no built SWE tasks in {root if root is not None else '$JGEM_DATA/swe ($JGEM_DATA is not set)'}: build "
            "them with `python -m jgem.envs.swe.build --out DIR` and pass data_dir=DIR (or set $JGEM_DATA)"
        )
    return root / "tasks"


class SWEEnv(TerminalEnv):
    """The built tasks under `data_dir` (or $JGEM_DATA/swe): one (`task=`, an id or a unique prefix), those named in
    `tasks`, or all of them, one drawn per reset."""

    def __init__(
        self,
        task: str | None = None,
        data_dir: str | None = None,
        tasks: Sequence[str] | None = None,
        tool_format: str = "hermes",
        max_turns: int = 30,
        command_timeout: float = 60.0,
        episode_timeout: float = 900.0,
        test_timeout: float = 300.0,
        memory_mb: int = 2048,
        max_output: int = 8192,
        finish_without_call: bool = True,
        index_seeds: bool = False,
        seed: int | None = None,
    ) -> None:
        Env.__init__(self, seed=seed)
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        root = tasks_dir(data_dir)
        found = {p.stem: p for p in sorted(root.glob("*.json"))}
        if task is not None:
            names = [n for n in found if n == task] or [n for n in found if n.startswith(task)]
            if len(names) != 1:
                raise ValueError(f"SWE task {task!r} matches {len(names)} of the {len(found)} tasks in {root}")
            found = {names[0]: found[names[0]]}
        elif tasks is not None:
            missing = [t for t in tasks if t not in found]
            if missing:
                raise ValueError(f"no SWE task {', '.join(missing)} in {root}")
            found = {t: found[t] for t in tasks}
        if not found:
            raise ValueError(f"no SWE task in {root}")
        self.tasks = [SWETask.load(p) for p in found.values()]
        self.skipped = {}
        self.root = root
        self.format = get_format(tool_format)
        self.max_turns = max_turns
        self.command_timeout = command_timeout
        self.episode_timeout = episode_timeout
        self.test_timeout = test_timeout
        self.finish_without_call = finish_without_call
        self.index_seeds = index_seeds
        self.shell_config = ShellConfig(
            command_timeout=command_timeout, memory_mb=memory_mb, max_output=max_output, workdir_mb=512
        )
        self.hide = (str(root.parent.resolve()),)  # the tasks (their fixes and test lists) stay out of sight
        self.task = None
        self.session = None
        self.turn = 0
        self.used = 0.0
        self.done = True

    @property
    def tool_schemas(self) -> list[dict[str, Any]] | None:
        return None if not self.format.native else TOOL_SCHEMAS

    def _how_to_act(self, task: SWETask) -> str:  # type: ignore[override]
        where = f"The repository is checked out in {WORKDIR}, in a sandbox without network."
        if self.format.native:
            return (
                f"{where} Use the functions to look at the code (view, search), edit it (str_replace), run tests "
                "(run_tests) or any shell command (bash). When the bug is fixed, call `submit`: the repository's tests "
                "then decide (your changes to test files are not kept)."
            )
        return (
            f"{where} Run shell commands inside <bash>...</bash> tags (for example <bash>grep -rn 'def merge' ."
            "</bash>; run tests with <bash>python -m pytest -q path/to/test_file.py</bash>), one or more a turn. When "
            "the bug is fixed, reply <submit/>: the repository's tests then decide (your changes to test files are "
            "not kept)."
        )

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        Env.reset(self, seed)
        self._end_session()
        task = self._pick(seed)
        self.task, self.turn, self.used = task, 0, 0.0
        self.session = self._open(task)
        self.done = False
        obs = f"{task.problem_statement}\n{self._how_to_act(task)}"
        return obs, {"task": task.id, "file": task.mutation.file, "fail_to_pass": len(task.fail_to_pass)}

    def _open(self, task: SWETask) -> ShellSession:  # type: ignore[override]
        env = {"PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"}
        session = ShellSession(pack_dir(task.repo), config=self.shell_config, workdir=WORKDIR, env=env, hide=self.hide)
        try:
            buggy = task.mutation.apply((task.repo / task.mutation.file).read_bytes())
            session.put_file(f"{WORKDIR}/{task.mutation.file}", buggy)
            session.put_file("/tmp/.jgem-swe-tools.py", _TOOL_SCRIPT)
        except BaseException:
            session.close()
            raise
        return session

    def _episode_limit(self) -> float:
        return self.episode_timeout

    def _answer(self, call: Call, info: dict[str, Any]) -> tuple[str, str]:
        if isinstance(call, BadCall) or call.name in ("bash", "submit"):
            return super()._answer(call, info)
        args = call.arguments
        if call.name in ("view", "search", "str_replace"):
            need = {"view": ("path",), "search": ("pattern",), "str_replace": ("path", "old_str", "new_str")}
            missing = [k for k in need[call.name] if not isinstance(args.get(k), str)]
            if missing:
                info["tool_call_errors"] += 1
                return call.name, f"Error: {call.name} needs the string argument(s) {', '.join(missing)}"
            command = f"python3 /tmp/.jgem-swe-tools.py {call.name} {shlex.quote(json.dumps(args))}"
        elif call.name == "run_tests":
            tests = args.get("tests") or list(self.task.fail_to_pass[:20])  # type: ignore[union-attr]
            if not isinstance(tests, list) or not all(isinstance(t, str) for t in tests):
                info["tool_call_errors"] += 1
                return call.name, "Error: run_tests takes `tests`, a list of pytest node ids or paths"
            command = "python -m pytest -q -p no:cacheprovider -o addopts= " + " ".join(map(shlex.quote, tests))
        else:
            info["tool_call_errors"] += 1
            names = ", ".join(s["function"]["name"] for s in TOOL_SCHEMAS)
            return call.name, f"Error: unknown function {call.name!r}; the functions are {names}"
        name, text = super()._answer(type(call)("bash", {"command": command}), info)
        return call.name, text

    def grade(self) -> TestReport:
        """SWE-bench's grading: the test files put back, FAIL_TO_PASS and PASS_TO_PASS run on the final code. The
        report's results are those tests' outcomes alone."""
        task = self.task
        assert task is not None
        session, self.session = self.session, None
        if session is None:
            return TestReport(status="sandbox_error", error="the session was lost")
        tests = pack_dir(task.repo, tuple((t, t) for t in task.tests))  # the pristine tests, at their paths
        args = ("-o", f"pythonpath={WORKDIR}")
        report = session.grade(tests, timeout=self.test_timeout, pytest_args=args)
        wanted = (*task.fail_to_pass, *task.pass_to_pass)
        return TestReport(
            results={t: report.results.get(t, "not run") for t in wanted},
            status=report.status,
            output=report.output,
            wall=report.wall,
            error=report.error,
        )

    def _finish(self, reason, messages, truncated, info=None, last_obs=None):
        obs, _, terminated, truncated, info = super()._finish(reason, messages, truncated, info, last_obs)
        task = self.task
        assert task is not None
        tests = info["tests"]
        f2p = sum(tests.get(t) == "passed" for t in task.fail_to_pass) / len(task.fail_to_pass)
        p2p = sum(tests.get(t) == "passed" for t in task.pass_to_pass) / max(len(task.pass_to_pass), 1)
        resolved = f2p == 1.0 and p2p == 1.0
        info.update(fail_to_pass=f2p, pass_to_pass=p2p, resolved=resolved, success=resolved)
        info.pop("tests")  # hundreds of pass-to-pass ids: the fractions say it
        return obs, 1.0 if resolved else 0.0, terminated, truncated, info

    def run_solution(self, timeout: float = 120.0):
        """The reference fix (the file as it was) written into the episode's session directly (not a turn)."""
        if self.session is None or self.task is None:
            raise JgemError("no open session; call reset")
        m = self.task.mutation
        self.session.put_file(f"{WORKDIR}/{m.file}", (self.task.repo / m.file).read_bytes())
