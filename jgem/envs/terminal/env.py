"""The terminal env: shell commands in a persistent bash session in the sandbox, graded by the task's tests.

An episode: reset opens a session (`jgem.envs.tools.shell`) on a fresh copy-on-write view of the task's files (nothing
is copied: the episode's writes go to a fresh layer of their own) and runs the task's setup steps; the observation is
the task's instruction and how to act. Each action calls tools in the env's tool format (`gem_tags`, `hermes`,
`llama3_json`): `bash` runs one command (its output, exit code and any limit that stopped it come back) and `submit`
ends the episode. A turn that calls no tool ends it too (as an agent loop ends on a
reply without a tool call; `finish_without_call=False` answers such a turn with a reminder instead). A call that cannot
be read is answered with the reason and uses a turn. The episode also ends at `max_turns` turns or when its commands
have used `episode_timeout` seconds (both `truncated`).

At the end the task's tests run in a fresh sandbox on the final state of the task directory: the reward is the
fraction of tests passed, success (`info["success"]`) when all pass, as terminal-bench grades. Rewards of earlier
turns are 0.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jgem.core import Env, JgemError, StepResult
from jgem.envs.terminal.task import (
    SHIPPED_DIR,
    TaskSkipped,
    TerminalTask,
    discover,
    load_task,
    tasks_root,
)
from jgem.envs.tools.base import function_schema
from jgem.envs.tools.formats import BadCall, Call, ToolCall, get_format
from jgem.envs.tools.shell import CommandResult, ShellConfig, ShellError, ShellSession, TestReport, pack_dir

_TAG = re.compile(r"<bash>(.*?)(</bash>|\Z)|<submit\s*/?>(?:\s*</submit>)?", re.DOTALL)

BASH_SCHEMA = function_schema(
    "bash",
    "Run one bash command in the task's shell and return its output (stdout and stderr) and exit code. The shell "
    "keeps its working directory and variables between calls; there is no network and no terminal (stdin is empty).",
    {
        "type": "object",
        "properties": {"command": {"type": "string", "description": "The command to run, as you would type it."}},
        "required": ["command"],
    },
)
SUBMIT_SCHEMA = function_schema(
    "submit",
    "End the episode: the task's tests then check the task directory.",
    {"type": "object", "properties": {}},
)


def parse_tags(action: str) -> list[Call] | None:
    """gem_tags: every `<bash>...</bash>` and `<submit/>` after the last `</think>`, in order; None when none."""
    text = action.rsplit("</think>", 1)[-1]
    calls: list[Call] = []
    for m in _TAG.finditer(text):
        if m.group(0).startswith("<submit"):
            calls.append(ToolCall("submit", {}))
        elif not m.group(2):
            calls.append(BadCall("the <bash> block is not closed with </bash>", "bash"))
        else:
            calls.append(ToolCall("bash", {"command": m.group(1).strip("\n")}))
    return calls or None


class TerminalEnv(Env):
    """One task (`task=`) or a set drawn from per reset: the shipped tasks, or a local terminal-bench checkout
    (`data_dir=` or `$JGEM_DATA/terminal-bench`; `source="data"`). `tasks` narrows the set to those names."""

    def __init__(
        self,
        task: str | None = None,
        source: str = "shipped",
        data_dir: str | None = None,
        tasks: Sequence[str] | None = None,
        tool_format: str = "gem_tags",
        max_turns: int = 30,
        command_timeout: float = 30.0,
        episode_timeout: float | None = None,
        test_timeout: float | None = None,
        memory_mb: int = 1024,
        max_output: int = 4096,
        finish_without_call: bool = True,
        index_seeds: bool = False,
        seed: int | None = None,
    ) -> None:
        super().__init__(seed=seed)
        if source not in ("shipped", "data"):
            raise ValueError(f"source must be 'shipped' or 'data', got {source!r}")
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.source = source
        self.root = SHIPPED_DIR if source == "shipped" else tasks_root(data_dir)
        if task is not None:
            try:
                self.tasks = [load_task(self.root / task)]
            except TaskSkipped as e:
                raise ValueError(f"terminal task {task!r} in {self.root} cannot run: {e}") from None
            self.skipped: dict[str, str] = {}
        else:
            found, self.skipped = discover(self.root)
            if tasks is not None:
                missing = [t for t in tasks if t not in found]
                if missing:
                    raise ValueError(f"no runnable terminal task {', '.join(missing)} in {self.root}")
                found = {t: found[t] for t in tasks}
            self.tasks = list(found.values())
        if not self.tasks:
            raise ValueError(f"no runnable terminal task in {self.root} (skipped: {self.skipped})")
        self.format = get_format(tool_format)
        self.max_turns = max_turns
        self.command_timeout = command_timeout
        self.episode_timeout = episode_timeout
        self.test_timeout = test_timeout
        self.finish_without_call = finish_without_call
        self.index_seeds = index_seeds
        self.shell_config = ShellConfig(command_timeout=command_timeout, memory_mb=memory_mb, max_output=max_output)
        self.hide = tuple(str(p) for p in {SHIPPED_DIR.resolve(), Path(self.root).resolve()})
        self.task: TerminalTask | None = None
        self.session: ShellSession | None = None
        self.turn = 0
        self.used = 0.0
        self.done = True

    # -- the tools ------------------------------------------------------------------------------------------
    @property
    def tool_schemas(self) -> list[dict[str, Any]] | None:
        """The functions for the chat template's `tools=` (None in the gem_tags format)."""
        return None if not self.format.native else [BASH_SCHEMA, SUBMIT_SCHEMA]

    def _how_to_act(self, task: TerminalTask) -> str:
        limits = f"Each command may run for {self.command_timeout:g} s"
        if self.format.native:
            return (
                f"You work in a bash shell in {task.workdir}, in a sandbox without network. Call the `bash` function "
                f"to run a command; its output and exit code come back. The shell keeps its working directory and "
                f"variables between commands. {limits}. When the task is done, call `submit` (a reply without a "
                "function call also ends the episode); the task's tests then check the directory."
            )
        return (
            f"You work in a bash shell in {task.workdir}, in a sandbox without network. Run a command by writing it "
            "inside <bash>...</bash> tags, for example <bash>ls -la</bash>; its output and exit code come back. The "
            f"shell keeps its working directory and variables between commands. {limits}. When the task is done, "
            "reply <submit/> (a reply without a command also ends the episode); the task's tests then check the "
            "directory."
        )

    def parse(self, action: str) -> list[Call] | None:
        return self.format.parse(action) if self.format.native else parse_tags(action)

    # -- the episode ----------------------------------------------------------------------------------------
    def _pick(self, seed: int | None) -> TerminalTask:
        if len(self.tasks) == 1:
            return self.tasks[0]
        if self.index_seeds and seed is not None:
            return self.tasks[seed % len(self.tasks)]
        return self.tasks[int(self.np_random.integers(len(self.tasks)))]

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed)
        self._end_session()
        task = self._pick(seed)
        self.task = task
        self.turn = 0
        self.used = 0.0
        self.session = self._open(task)
        setup = []
        for step in task.setup:
            res = self.session.run(f"({step}\n)", timeout=max(self.command_timeout, 60.0))  # a shell per step
            if not res.ok:
                setup.append({"step": step, "exit_code": res.exit_code, "output": res.output[-2000:], "note": res.note})
        self.done = False
        obs = f"{task.instruction}\n\n{self._how_to_act(task)}"
        info = {
            "task": task.name,
            "difficulty": task.difficulty,
            "category": task.category,
            "workdir": task.workdir,
            "setup_failed": setup,
            "not_done": list(task.notes),
        }
        return obs, info

    def _open(self, task: TerminalTask) -> ShellSession:
        return ShellSession(
            pack_dir(task.path, task.files),
            config=self.shell_config,
            workdir=task.workdir,
            env=dict(task.env),
            hide=self.hide,
        )

    def _episode_limit(self) -> float:
        assert self.task is not None
        return self.episode_timeout if self.episode_timeout is not None else self.task.max_agent_timeout_sec

    def step(self, action: str) -> StepResult:
        if self.done or self.session is None:
            raise JgemError("the episode is over; call reset")
        self.turn += 1
        calls = self.parse(action)
        if not calls:
            if self.finish_without_call:
                return self._finish("no_call", [], truncated=False)
            obs = "No command found. " + self._how_to_act(self.task)  # type: ignore[arg-type]
            return self._after_turn(obs, {"use_tool": False})
        messages, submitted = [], False
        info: dict[str, Any] = {"use_tool": True, "commands": 0, "tool_call_errors": 0}
        for call in calls:
            name, content = self._answer(call, info)
            messages.append(self.format.result_message(name, content))
            if name == "submit" and isinstance(call, ToolCall):
                submitted = True
                break
            if self.session is None or self.used >= self._episode_limit():
                break
        if self.format.native:
            info["tool_messages"] = messages
        if submitted:
            return self._finish("submit", messages, truncated=False, info=info)
        if self.session is None:  # the sandbox failed under the episode
            return self._finish("sandbox_error", messages, truncated=True, info=info)
        if self.used >= self._episode_limit():
            return self._finish("time_limit", messages, truncated=True, info=info)
        return self._after_turn(self.format.results_text(messages), info)

    def _after_turn(self, obs: str, info: dict[str, Any]) -> StepResult:
        if self.turn >= self.max_turns:
            return self._finish("max_turns", [], truncated=True, info=info, last_obs=obs)
        info["turn"] = self.turn
        return obs, 0.0, False, False, info

    def _answer(self, call: Call, info: dict[str, Any]) -> tuple[str, str]:
        """(function name, the result's text) of one call; bash calls run in the session."""
        if isinstance(call, BadCall):
            info["tool_call_errors"] += 1
            return call.name or "bash", f"Error: {call.reason}"
        if call.name == "submit":
            return "submit", "Submitted: the task's tests now check the directory."
        if call.name != "bash":
            info["tool_call_errors"] += 1
            return call.name, f"Error: unknown function {call.name!r}; the functions are bash and submit"
        command = call.arguments.get("command")
        if not isinstance(command, str):
            info["tool_call_errors"] += 1
            return "bash", 'Error: bash takes one argument, "command", a string'
        if not command.strip():
            return "bash", "Error: the command is empty"
        left = self._episode_limit() - self.used
        try:
            res = self.session.run(command, timeout=min(self.command_timeout, max(left, 0.001)))  # type: ignore[union-attr]
        except ShellError as e:
            self.session = None
            return "bash", f"Error: the sandbox failed ({e}); the episode ends"
        self.used += res.wall
        info["commands"] += 1
        info.setdefault("results", []).append(_result_info(res))
        return "bash", res.message()

    def _finish(
        self,
        reason: str,
        messages: list[dict[str, Any]],
        truncated: bool,
        info: dict[str, Any] | None = None,
        last_obs: str | None = None,
    ) -> StepResult:
        self.done = True
        report = self.grade()
        info = dict(info or {})
        info.update(
            ended_by=reason,
            turn=self.turn,
            tests=report.results,
            passed=report.passed,
            total=report.total,
            success=report.success,
            test_status=report.status,
            test_output=report.output,
        )
        if report.error:
            info["test_error"] = report.error
        lead = {
            "submit": "Submitted.",
            "no_call": "No command in the reply: the episode ends.",
            "max_turns": f"The turn limit ({self.max_turns}) is reached.",
            "time_limit": f"The episode's time limit ({self._episode_limit():g} s of commands) is reached.",
            "sandbox_error": "The sandbox failed.",
        }[reason]
        obs = f"{last_obs}\n\n{lead}" if last_obs else lead
        return f"{obs} Tests: {report.summary()}", float(report.fraction), True, truncated, info

    def grade(self) -> TestReport:
        """Run the task's tests on the current state of the task directory (ends the session)."""
        assert self.task is not None
        timeout = self.test_timeout if self.test_timeout is not None else self.task.max_test_timeout_sec
        session, self.session = self.session, None
        if session is None:  # the sandbox failed: grade a fresh copy would be wrong; nothing to grade
            return TestReport(status="sandbox_error", error="the session was lost")
        return session.grade(pack_dir(self.task.tests_dir), timeout=timeout)

    # -- helpers for reference runs and tests ----------------------------------------------------------------
    def run(self, command: str, timeout: float | None = None) -> CommandResult:
        """Run `command` in the episode's session directly (not a turn)."""
        if self.session is None:
            raise JgemError("no open session; call reset")
        return self.session.run(command, timeout=timeout)

    def run_solution(self, timeout: float = 120.0) -> CommandResult:
        """Run the task's reference `solution.sh` in the episode's session, from the task directory."""
        if self.task is None or self.task.solution is None:
            raise JgemError(f"task {self.task and self.task.name!r} has no solution.sh")
        assert self.session is not None
        self.session.put_file("/tmp/.jgem-solution.sh", self.task.solution.read_bytes(), 0o755)
        return self.session.run(f"cd {self.task.workdir} && bash /tmp/.jgem-solution.sh", timeout=timeout)

    def sample_random_action(self) -> str:
        cmd = ["ls -la", "pwd", "cat *.txt", "<submit>"][int(self.np_random.integers(4))]
        if cmd == "<submit>":
            return "<submit/>" if not self.format.native else _native_call(self.format.name, "submit", {})
        if not self.format.native:
            return f"<bash>{cmd}</bash>"
        return _native_call(self.format.name, "bash", {"command": cmd})

    EPISODE_FIELDS = ("task", "turn", "used", "done")

    def get_state(self) -> Any:
        """The episode now: its counters, the RNG and the session's snapshot (`ShellSession.snapshot`: the files the
        episode changed, the working directory, exported variables and functions; not running processes). Each
        `set_state` with it opens a new session in that state, so a state forks an episode as often as it is set."""
        state = {k: getattr(self, k) for k in self.EPISODE_FIELDS}
        state["np_random"] = copy.deepcopy(self.np_random)
        state["shell"] = self.session.snapshot() if self.session is not None else None
        return state

    def set_state(self, state: Any) -> None:
        self._end_session()
        for k in self.EPISODE_FIELDS:
            setattr(self, k, state[k])
        self.np_random = copy.deepcopy(state["np_random"])
        if state["shell"] is not None:
            self.session = ShellSession.from_snapshot(state["shell"])

    def spawn(self, same_state: bool = False) -> TerminalEnv:
        """A new env of the same configuration; with `same_state`, a fork of this episode (its own session, in this
        one's state: see `get_state`), else no episode (reset it) and an RNG of its own."""
        import numpy as np

        clone = object.__new__(type(self))
        vars(clone).update({k: v for k, v in vars(self).items() if k not in ("session", "np_random")})
        clone.session, clone.done = None, True
        clone.np_random = np.random.default_rng(self.np_random.integers(2**63))
        if same_state:
            clone.set_state(self.get_state())
        return clone

    def _end_session(self) -> None:
        if self.session is not None:
            self.session.close()
            self.session = None

    def close(self) -> None:
        self._end_session()
        self.done = True


def _native_call(fmt: str, name: str, arguments: dict[str, Any]) -> str:
    import json

    if fmt == "llama3_json":
        return json.dumps({"name": name, "parameters": arguments})
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def _result_info(res: CommandResult) -> dict[str, Any]:
    return {
        "exit_code": res.exit_code,
        "timed_out": res.timed_out,
        "omitted": res.omitted,
        "restarted": res.restarted,
        "wall": res.wall,
    }
