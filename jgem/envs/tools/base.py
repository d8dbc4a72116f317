"""The Tool protocol: parse an action into a call, execute it, return text for the agent.

A tool sees the agent's whole action. `parse` returns a call (any object the tool understands) or
None when the action does not use this tool; `execute` runs a parsed call and never raises for
problems the agent caused (bad code, bad arguments): those come back as `ToolResult(ok=False)`.

For the native tool-call formats (`jgem.envs.tools.formats`: the model's own `<tool_call>` JSON), a tool also
describes its functions as JSON schemas (`functions`, what the chat template's `tools=` lists) and runs a call by
function name and arguments (`invoke`); the format parses the action, not the tool.
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
    content: str | None = None
    """the result alone, for a tool message of a native format (no GEM wrapping such as "Code execution result:");
    None: `text`"""

    @property
    def message(self) -> str:
        """What a native format's tool message holds."""
        return self.text if self.content is None else self.content


def function_schema(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    """One function as chat templates take it in `tools=` (the OpenAI layout)."""
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


def argument_problem(name: str, arguments: dict[str, Any], parameters: dict[str, Any]) -> str | None:
    """Why `arguments` do not fit the JSON schema `parameters` of function `name`, or None when they do."""
    import jsonschema

    try:
        jsonschema.validate(arguments, parameters)
    except jsonschema.ValidationError as e:
        where = "/".join(map(str, e.absolute_path)) or "arguments"
        return f"invalid arguments for {name!r} at {where}: {e.message}"
    except jsonschema.SchemaError as e:
        return f"the schema of {name!r} is invalid: {e.message}"
    return None


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

    def functions(self) -> list[dict[str, Any]]:
        """JSON schemas of the functions this tool offers to a native format (`function_schema` each)."""
        raise NotImplementedError(
            f"tool {self.name!r} ({type(self).__name__}) has no JSON schema, so a native tool-call format cannot "
            "offer it; implement functions() and invoke(), or use the gem_tags format"
        )

    def invoke(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        """Run function `name` (one of `functions()`) with `arguments`, already checked against its schema."""
        raise NotImplementedError(f"tool {self.name!r} ({type(self).__name__}) does not implement invoke()")

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
