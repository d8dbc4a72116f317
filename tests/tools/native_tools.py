"""Shared by the native tool-format tests: tokenizers with the published chat templates, small deterministic tools,
a quiz env, and the text a template gives an assistant turn (what a model trained on it writes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jgem.core import Env
from jgem.envs.tools.base import Tool, ToolResult, function_schema
from jgem.models.tokenizer import ChatFormat, load_tokenizer

TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "chat_templates"
# Qwen2.5 / Qwen3 have these as added (not special) tokens; the model samples them as single ids.
QWEN_ADDED = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]
LLAMA_SPECIALS = ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>"]
LLAMA_SPECIALS += ["<|python_tag|>", "<|end_of_text|>"]
LLAMA_KW = {"date_string": "22 Nov 2026"}  # a fixed date: Llama's templates otherwise print today's


def template_tokenizer(name: str) -> Any:
    """The shipped tiny tokenizer with `tests/data/chat_templates/<name>.jinja` and that family's special tokens."""
    tok = load_tokenizer()
    text = (TEMPLATES / f"{name}.jinja").read_text()
    if "<|im_start|>" in text:
        tok.add_tokens(QWEN_ADDED)
    else:
        tok.add_special_tokens(
            {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "additional_special_tokens": LLAMA_SPECIALS}
        )
    tok.chat_template = text
    return tok


def written(chat: ChatFormat, message: dict[str, Any], follow: dict[str, Any] | None) -> str:
    """The text `chat`'s template gives the assistant `message` when `follow` comes after it (None: as the last
    message): what a model trained on the template writes after the generation prompt, up to its end-of-turn token."""
    first = [{"role": "user", "content": "q"}]
    prompt = chat.render(first, add_generation_prompt=True)
    full = chat.render([*first, message, *([follow] if follow else [])], add_generation_prompt=False)
    assert full.startswith(prompt), "the template is not append-only around an assistant turn"
    return full[len(prompt) : full.index(chat._end_of_turn_text, len(prompt))]


def tool_call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


class Calculator(Tool):
    """add and multiply, as functions with JSON schemas."""

    name = "calculator"

    def instruction(self) -> str:
        return "Call add or multiply."

    def parse(self, action: str) -> None:
        return None

    def execute(self, call: Any) -> ToolResult:
        raise AssertionError("native formats call invoke()")

    def functions(self) -> list[dict[str, Any]]:
        two = {
            "type": "object",
            "properties": {
                "a": {"type": "number", "description": "The first number."},
                "b": {"type": "number", "description": "The second number."},
            },
            "required": ["a", "b"],
        }
        return [function_schema("add", "Add two numbers.", two), function_schema("multiply", "Multiply them.", two)]

    def invoke(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        a, b = arguments["a"], arguments["b"]
        value = a + b if name == "add" else a * b
        text = str(int(value) if float(value).is_integer() else value)
        return ToolResult(f"<result>{text}</result>", ok=True, content=text)


class Notes(Tool):
    """lookup(key) over a few notes; a missing key is a failed call."""

    name = "notes"
    NOTES = {"pi": "3.14159", "greeting": "Grüße 日本 🎲"}

    def instruction(self) -> str:
        return "Call lookup."

    def parse(self, action: str) -> None:
        return None

    def execute(self, call: Any) -> ToolResult:
        raise AssertionError("native formats call invoke()")

    def functions(self) -> list[dict[str, Any]]:
        params = {
            "type": "object",
            "properties": {"key": {"type": "string", "description": "The note's key."}},
            "required": ["key"],
        }
        return [function_schema("lookup", "Read a note.", params)]

    def invoke(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        note = self.NOTES.get(arguments["key"])
        return ToolResult(note, ok=True) if note else ToolResult(f"no note {arguments['key']!r}", ok=False)


class Quiz(Env):
    """One question; `\\boxed{20}` ends it with reward 1, any other answer gets "Wrong, try again." (a user turn)."""

    QUESTION = "What is (2 + 3) * 4? Answer in \\boxed{}."

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed)
        return self.QUESTION, {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if "\\boxed{20}" in action:
            return "Correct.", 1.0, True, False, {"success": True}
        return "Wrong, try again.", 0.0, False, False, {}
