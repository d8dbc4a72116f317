"""ToolEnv: GEM's ToolEnvWrapper semantics on jgem's Tool protocol.

An action that calls a tool is answered by the tool and never reaches the env, nor uses an env turn.
After `max_tool_uses` calls in an episode the agent is told to answer, and later actions go to the
env. Tool calls earn `tool_reward`, plus `tool_success_reward` when they succeed (both default 0).

`tool_format` (`jgem.envs.tools.formats`) says how the model calls them: GEM's tags (the default, one call a turn,
the tools' instructions appended to the first observation) or a native format such as `hermes`, where the format
parses one or several calls a turn, the chat template lists the tools (`tool_schemas`), and each call is answered by
a message in `info["tool_messages"]` (the chat view appends them as they are).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jgem.core import Env, StepResult, Wrapper
from jgem.envs.tools.base import Tool, ToolResult, argument_problem
from jgem.envs.tools.formats import BadCall, Call, ToolFormat, get_format

LIMIT_MESSAGE = "\n\nReached the maximum number of tool use. Please output final answer directly."


class ToolEnv(Wrapper):
    """Adds tools to an env. Tools are tried in order; the first that parses and succeeds answers.

    `close()` closes the tools too, unless `close_tools` is False: tools shared by many envs (one MCP session
    for a whole pool) belong to whoever made them, and one env's close (the pool rebuilding a faulted env, or
    closing) must not end them for the others.
    """

    def __init__(
        self,
        env: Env,
        tools: Sequence[Tool],
        max_tool_uses: int | None = 5,
        tool_reward: float = 0.0,
        tool_success_reward: float = 0.0,
        close_tools: bool = True,
        tool_format: str | ToolFormat = "gem_tags",
    ) -> None:
        super().__init__(env)
        if not tools:
            raise ValueError("ToolEnv needs at least one tool")
        if max_tool_uses is not None and max_tool_uses < 0:
            raise ValueError(f"max_tool_uses must be >= 0 or None (unlimited), got {max_tool_uses}")
        self.tools = list(tools)
        self.format = get_format(tool_format)
        self._functions: dict[str, tuple[Tool, dict[str, Any]]] = {}
        if self.format.native:
            self._functions = _functions(self.tools, self.format.name)
        self.max_tool_uses = max_tool_uses
        self.tool_reward = tool_reward
        self.tool_success_reward = tool_success_reward
        self.close_tools = close_tools
        self.tool_use_counter = 0
        self.tool_success_counter = 0

    def instructions(self) -> str:
        text = "\n".join(t.instruction() for t in self.tools)
        return f"Available tools:\n{text}" if len(self.tools) > 1 else text

    @property
    def tool_schemas(self) -> list[dict[str, Any]] | None:
        """The functions' JSON schemas for the chat template's `tools=` (None in the gem_tags format)."""
        return self.format.schemas(self.tools)

    def reset(self, seed: int | None = None) -> tuple[Any, dict[str, Any]]:
        prev_uses, prev_success = self.tool_use_counter, self.tool_success_counter
        self.tool_use_counter = self.tool_success_counter = 0
        obs, info = self.env.reset(seed=seed)
        info = dict(info)
        info.update(
            tool_use_counter=0,
            tool_success_counter=0,
            prev_ep_tool_use_counter=prev_uses,
            prev_ep_tool_success_counter=prev_success,
            use_tool=False,
        )
        if self.format.native:  # the chat template lists the tools
            return obs, info
        return f"{obs}\n{self.instructions()}", info

    def _call_tools(self, action: str) -> tuple[Tool, ToolResult] | None:
        first = None
        for tool in self.tools:
            call = tool.parse(action)
            if call is None:
                continue
            result = tool.execute(call)
            if result.ok:
                return tool, result
            first = first or (tool, result)  # keep trying: a later tool may handle this action
        return first

    def step(self, action: str) -> StepResult:
        if self.format.native:
            return self._native_step(action)
        used = None
        if self.max_tool_uses is None or self.tool_use_counter < self.max_tool_uses:
            used = self._call_tools(action)
        if used is None:
            obs, reward, terminated, truncated, info = self.env.step(action)
            info = dict(info)
            info["use_tool"] = False
        else:
            tool, result = used
            self.tool_use_counter += 1
            obs, reward = result.text, self.tool_reward
            if result.ok:
                self.tool_success_counter += 1
                reward += self.tool_success_reward
            if self.tool_use_counter == self.max_tool_uses:
                obs += LIMIT_MESSAGE
            terminated = truncated = False
            info = {"use_tool": True, "tool": tool.name, "tool_ok": result.ok}
        info["tool_use_counter"] = self.tool_use_counter
        info["tool_success_counter"] = self.tool_success_counter
        return obs, float(reward), terminated, truncated, info

    def _native_step(self, action: str) -> StepResult:
        calls = None
        if self.max_tool_uses is None or self.tool_use_counter < self.max_tool_uses:
            calls = self.format.parse(action)
        if not calls:
            obs, reward, terminated, truncated, info = self.env.step(action)
            info = dict(info)
            info["use_tool"] = False
        else:
            messages, names, reward, errors = [], [], 0.0, 0
            all_ok = True
            for call in calls:
                if self.max_tool_uses is not None and self.tool_use_counter >= self.max_tool_uses:
                    name = call.name
                    content, ok = f"Error: not run: the limit of {self.max_tool_uses} tool calls is reached", False
                else:
                    name, content, ok, readable = self._answer(call)
                    errors += not readable
                    self.tool_use_counter += 1
                    reward += self.tool_reward
                    if ok:
                        self.tool_success_counter += 1
                        reward += self.tool_success_reward
                all_ok &= ok
                names.append(name)
                messages.append(self.format.result_message(name, content))
            if self.tool_use_counter == self.max_tool_uses:
                messages[-1]["content"] += LIMIT_MESSAGE
            obs, terminated, truncated = self.format.results_text(messages), False, False
            info = {
                "use_tool": True,
                "tool": ",".join(names),
                "tool_ok": all_ok,
                "tool_calls": len(calls),
                "tool_call_errors": errors,
                "tool_messages": messages,
            }
        info["tool_use_counter"] = self.tool_use_counter
        info["tool_success_counter"] = self.tool_success_counter
        return obs, float(reward), terminated, truncated, info

    def _answer(self, call: Call) -> tuple[str, str, bool, bool]:
        """(function name, the result message's content, ok, whether the call could be made at all)."""
        if isinstance(call, BadCall):
            return call.name, f"Error: {call.reason}", False, False
        entry = self._functions.get(call.name)
        if entry is None:
            known = ", ".join(self._functions)
            return call.name, f"Error: unknown function {call.name!r}; the functions are {known}", False, False
        tool, schema = entry
        problem = argument_problem(call.name, call.arguments, schema.get("parameters") or {})
        if problem is not None:
            return call.name, f"Error: {problem}", False, False
        result = tool.invoke(call.name, call.arguments)
        return call.name, result.message, result.ok, True

    def close(self) -> None:
        if self.close_tools:
            for tool in self.tools:
                tool.close()
        self.env.close()


def _functions(tools: Sequence[Tool], format_name: str) -> dict[str, tuple[Tool, dict[str, Any]]]:
    """Function name -> (the tool that runs it, its schema's `function` part), for a native format."""
    try:
        import jsonschema  # noqa: F401  (arguments are checked against the schemas)
    except ImportError as e:
        raise ImportError(
            f"the {format_name} tool format checks arguments against the tools' JSON schemas with jsonschema, which "
            "is not installed: pip install 'jgem[tools]'"
        ) from e
    functions: dict[str, tuple[Tool, dict[str, Any]]] = {}
    for tool in tools:
        for schema in tool.functions():
            fn = schema.get("function", schema)
            name = fn.get("name")
            if not isinstance(name, str) or not name:
                raise ValueError(f"tool {tool.name!r} offers a function schema without a name: {schema!r}")
            if name in functions:
                raise ValueError(
                    f"tools {functions[name][0].name!r} and {tool.name!r} both offer a function named {name!r}; "
                    "a native tool format calls functions by name, so each name must be offered once"
                )
            functions[name] = (tool, fn)
    return functions
