"""Tool-call formats: how the model calls tools and reads their results (`--env.tool-format`, docs/tools.md).

- `gem_tags`: GEM's protocol. Each tool parses its own tags (`<python>...</python>`, `<search>...</search>`) and
  its instructions are part of the first observation; `ToolEnv` tries the tools in order (one call a turn).
- `hermes`: Qwen2.5 / Qwen3's convention (Hermes 2 Pro's before them). The tools' JSON schemas go to the chat
  template's `tools=`, which lists them in the system prompt; the model writes one or several
  `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks a turn; each result goes back as a `tool`
  message, which the templates render inside `<tool_response>`.
- `llama3_json`: Llama 3.1's JSON tool calls. The template lists the tools' schemas (in the first user message);
  a turn that calls tools is the JSON object `{"name": ..., "parameters": {...}}`, several separated by `;`; each
  result goes back as an `ipython` message.

A native format gives the schemas for the template (`schemas`), the parse of an action into calls (`parse`: None
when the action calls no tool, so it goes to the env) and the result of each call as a message (`result_message`).
A call that cannot be read is a `BadCall`, whose reason is what the model reads back, never an exception.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from jgem.envs.tools.base import Tool
from jgem.registry import Registry


@dataclass(frozen=True)
class ToolCall:
    """A call of function `name` with `arguments` (a JSON object), read from the model's action."""

    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class BadCall:
    """A call the action tried to make but that cannot be read; `reason` goes back to the model."""

    reason: str
    name: str = ""


Call = ToolCall | BadCall


class ToolFormat:
    """How tools are offered, called and answered. `native`: calls are parsed here and the schemas go to the chat
    template; otherwise (gem_tags) each tool parses its own tags and instructs the model in the observation."""

    name: str = "format"
    native: bool = True
    result_role: str = "tool"
    """the role of result messages"""
    example: str = ""
    """one call written the format's way, quoted in the feedback on a call that cannot be read"""

    def schemas(self, tools: Sequence[Tool]) -> list[dict[str, Any]] | None:
        """What goes to the chat template's `tools=`: every function of every tool; None when nothing does."""
        return [f for tool in tools for f in tool.functions()]

    def parse(self, action: str) -> list[Call] | None:
        """The calls of `action` in order, or None when it calls no tool."""
        raise NotImplementedError

    def result_message(self, name: str, content: str) -> dict[str, Any]:
        """The message that answers one call of function `name`."""
        return {"role": self.result_role, "name": name, "content": content}

    def results_text(self, messages: Sequence[dict[str, Any]]) -> str:
        """A turn's results as one text (the observation string; the per-turn view's history shows it)."""
        return "\n".join(m["content"] for m in messages)

    def call_from(self, obj: Any, argument_keys: tuple[str, ...]) -> Call:
        """A call from a decoded JSON value: an object with a string `name` and its arguments (an object, or a JSON
        string of one, under the first of `argument_keys` present; absent means none)."""
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"].strip():
            return BadCall(f"a tool call must be a JSON object with a function name, written {self.example}")
        name = obj["name"].strip()
        key = next((k for k in argument_keys if k in obj), None)
        arguments = obj[key] if key is not None else {}
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError as e:
                return BadCall(f"the arguments of {name!r} are not valid JSON ({e.msg})", name)
        if not isinstance(arguments, dict):
            return BadCall(
                f"the arguments of {name!r} must be a JSON object, got {type(arguments).__name__}: {self.example}", name
            )
        return ToolCall(name, arguments)


class GemTags(ToolFormat):
    """GEM's tags: each tool parses its own (ToolEnv's tag path); nothing goes to the template."""

    name = "gem_tags"
    native = False

    def schemas(self, tools: Sequence[Tool]) -> None:
        return None

    def parse(self, action: str) -> list[Call] | None:
        raise TypeError("gem_tags calls are parsed by each tool (Tool.parse), not by the format")


def _excerpt(text: str, limit: int = 60) -> str:
    text = text.strip()
    return repr(text if len(text) <= limit else text[:limit] + "...")


_TOOL_CALL = re.compile(r"<tool_call>(.*?)(</tool_call>|\Z)", re.DOTALL)


class Hermes(ToolFormat):
    """`<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks (Qwen2.5, Qwen3, Hermes 2 Pro).

    Only the text after the last `</think>` is read: a call written while reasoning is not a call (the Qwen3
    template splits the reasoning off the same way). The keys may come in any order; `arguments` may be a JSON
    string of the object, as in the OpenAI API. An unclosed block at the end is a bad call.
    """

    name = "hermes"
    example = '<tool_call>\n{"name": <function name>, "arguments": {<argument>: <value>}}\n</tool_call>'

    def parse(self, action: str) -> list[Call] | None:
        text = action.rsplit("</think>", 1)[-1]
        if "<tool_call>" not in text:
            return None
        calls: list[Call] = []
        for m in _TOOL_CALL.finditer(text):
            body, closed = m.group(1), bool(m.group(2))
            if not closed:
                calls.append(BadCall(f"the <tool_call> {_excerpt(body)} is not closed with </tool_call>"))
                continue
            try:
                obj = json.loads(body)
            except json.JSONDecodeError as e:
                calls.append(
                    BadCall(
                        f"the <tool_call> {_excerpt(body)} is not valid JSON ({e.msg} at char {e.pos}); write it "
                        f"as {self.example}"
                    )
                )
                continue
            calls.append(self.call_from(obj, ("arguments", "parameters")))
        return calls

    def results_text(self, messages: Sequence[dict[str, Any]]) -> str:
        return "\n".join(f"<tool_response>\n{m['content']}\n</tool_response>" for m in messages)


class Llama3Json(ToolFormat):
    """Llama 3.1's JSON calls: a turn whose text (after an optional `<|python_tag|>`) starts with `{` is a tool
    call, `{"name": ..., "parameters": {...}}` (`arguments` is read too); several are separated by `;`. Results go
    back as `ipython` messages."""

    name = "llama3_json"
    result_role = "ipython"
    example = '{"name": <function name>, "parameters": {<argument>: <value>}}'

    def parse(self, action: str) -> list[Call] | None:
        text = action.strip()
        if text.startswith("<|python_tag|>"):
            text = text[len("<|python_tag|>") :].lstrip()
        if not text.startswith("{"):
            return None
        decoder, calls, i = json.JSONDecoder(), [], 0
        while i < len(text):
            try:
                obj, i = decoder.raw_decode(text, i)
            except json.JSONDecodeError as e:
                calls.append(
                    BadCall(
                        f"the tool call {_excerpt(text[i:])} is not valid JSON ({e.msg} at char {e.pos - i}); "
                        f"write it as {self.example}"
                    )
                )
                break
            calls.append(self.call_from(obj, ("parameters", "arguments")))
            rest = text[i:].lstrip()
            if not rest:
                break
            if not rest.startswith(";"):
                calls.append(
                    BadCall(
                        f"text after a tool call ({_excerpt(rest)}): a turn that calls tools holds only the calls, "
                        "separated by ';'"
                    )
                )
                break
            i = len(text) - len(rest[1:].lstrip())
        return calls


FORMATS: Registry[ToolFormat] = Registry("tool format")
FORMATS.register("gem_tags", GemTags())
FORMATS.register("hermes", Hermes())
FORMATS.register("llama3_json", Llama3Json())


def get_format(tool_format: str | ToolFormat) -> ToolFormat:
    """A registered format by name (`FORMATS.register(name, MyFormat())` adds one), or `tool_format` itself."""
    return tool_format if isinstance(tool_format, ToolFormat) else FORMATS.get(tool_format)
