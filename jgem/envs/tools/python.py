"""Python tool (GEM's PythonCodeTool semantics) on jgem's process sandbox.

The first `<python>...</python>` or fenced python block of the action runs in the sandbox; its
output comes back as "Code execution result: ..." in the next observation.
"""

from __future__ import annotations

import re
import threading
from typing import Any

from jgem.envs.tools.base import Tool, ToolResult, function_schema
from jgem.envs.tools.sandbox import Sandbox, SandboxConfig, local, shared_sandbox

_PATTERNS = (re.compile(r"<python>(.*?)</python>", re.DOTALL), re.compile(r"```\n?python(.*?)```", re.DOTALL))


def parse_python(action: str) -> str | None:
    """Code of the block that ends first (a `<python>` tag or a fenced python block), or None."""
    best = None
    for pat in _PATTERNS:
        m = pat.search(action)
        if m and (best is None or m.end() < best.end()):
            best = m
    return None if best is None else best.group(1).strip()


class PythonTool(Tool):
    """Runs the agent's Python in a Sandbox: `sandbox` if given, else this process's shared one for
    `config` (started on first use, so building envs stays cheap)."""

    name = "python"

    def __init__(
        self,
        timeout: float = 5.0,
        config: SandboxConfig | None = None,
        workers: int = 2,
        sandbox: Sandbox | None = None,
        keep_error_last_line: bool = False,
    ) -> None:
        self.config = config or SandboxConfig(timeout=timeout)
        self.workers = workers
        self.keep_error_last_line = keep_error_last_line
        self._sandbox = sandbox
        self._lock = threading.Lock()

    @property
    def sandbox(self) -> Sandbox:
        with self._lock:
            return local(self._sandbox) if self._sandbox is not None else shared_sandbox(self.config, self.workers)

    def instruction(self) -> str:
        return (
            "You can write executable Python code to help your reasoning. The code runs in a sandbox and its "
            'output (after "Code execution result: ") is returned to you. Write complete scripts, including '
            "imports, inside <python>...</python> tags or a ```python ... ``` block. "
            "Return your final answer within \\boxed{}."
        )

    def parse(self, action: str) -> str | None:
        return parse_python(action)

    def functions(self) -> list[dict[str, Any]]:
        return [
            function_schema(
                "python",
                "Run a Python script in a sandbox and return what it prints (stdout, then stderr). Write a complete "
                "script with its imports and print the values you need.",
                {
                    "type": "object",
                    "properties": {"code": {"type": "string", "description": "The Python script to run."}},
                    "required": ["code"],
                },
            )
        ]

    def invoke(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        return self.execute(arguments["code"])

    def execute(self, call: str) -> ToolResult:
        res = self.sandbox.run(call)
        if self.keep_error_last_line:  # GEM's option: only the last line of stderr (the exception)
            err = res.stderr.rstrip("\n").split("\n")[-1] if res.stderr else ""
            text = f"{res.stdout}\n{err}" if err else res.stdout
        else:
            text = res.message()
        text = text.lstrip(" \n")
        return ToolResult("Code execution result: " + text + "\n", ok=res.ok, content=text.rstrip("\n"))

    def close(self) -> None:
        # A given sandbox belongs to the caller and the shared one to the process (closed at exit).
        return None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_lock": None}  # a given sandbox pickles as the receiver's shared one

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
