"""The Tool protocol: parse an action into a call, execute it, return text for the agent.

A tool sees the agent's whole action. `parse` returns a call (any object the tool understands) or
None when the action does not use this tool; `execute` runs a parsed call and never raises for
problems the agent caused (bad code, bad arguments): those come back as `ToolResult(ok=False)`.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ToolResult:
    """What a tool call produced: the observation text and whether the call succeeded."""

    text: str
    ok: bool


class Tool(abc.ABC):
    """A tool an agent can call from its action text (GEM's BaseTool, split into parse + execute)."""

    name: str = "tool"

    @abc.abstractmethod
    def instruction(self) -> str:
        """How the agent calls this tool; appended to the first observation by ToolEnv."""

    @abc.abstractmethod
    def parse(self, action: str) -> Any | None:
        """The call in `action` (the first one), or None if the action does not call this tool."""

    @abc.abstractmethod
    def execute(self, call: Any) -> ToolResult:
        """Run a parsed call."""

    def __call__(self, action: str) -> ToolResult | None:
        """Parse and execute; None when the action does not call this tool."""
        call = self.parse(action)
        return None if call is None else self.execute(call)

    def __deepcopy__(self, memo: dict) -> Tool:
        # Tools are shared services (processes, indexes, connections): env clones share them.
        return self

    def close(self) -> None:
        """Release processes, connections and servers. Idempotent."""
        return None
