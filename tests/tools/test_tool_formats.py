"""Tool-call formats: the parsers, ToolEnv in a native format, the ChatWrapper's tool messages, the config."""

from __future__ import annotations

import dataclasses
import json

import pytest

from jgem.envs.tools.base import Tool, ToolResult
from jgem.envs.tools.formats import FORMATS, BadCall, Hermes, Llama3Json, ToolCall, ToolFormat, get_format
from jgem.envs.tools.python import PythonTool
from jgem.envs.tools.search import SearchTool
from jgem.envs.tools.tool_env import LIMIT_MESSAGE, ToolEnv
from jgem.envs.wrappers import ChatWrapper
from tests.tools.native_tools import Calculator, Notes, Quiz

HERMES, LLAMA = Hermes(), Llama3Json()


def _hermes(*calls: dict) -> str:
    return "".join(f"<tool_call>\n{json.dumps(c)}\n</tool_call>\n" for c in calls)


# -- parsing -------------------------------------------------------------------------------------


def test_hermes_reads_every_call_in_order():
    action = "Two lookups.\n" + _hermes(
        {"name": "add", "arguments": {"a": 1, "b": 2}}, {"arguments": {"key": "pi"}, "name": "lookup"}
    )
    assert HERMES.parse(action) == [ToolCall("add", {"a": 1, "b": 2}), ToolCall("lookup", {"key": "pi"})]
    # arguments as a JSON string (the OpenAI layout), or absent
    assert HERMES.parse('<tool_call>{"name": "add", "arguments": "{\\"a\\": 1}"}</tool_call>') == [
        ToolCall("add", {"a": 1})
    ]
    assert HERMES.parse('<tool_call>{"name": "now"}</tool_call>') == [ToolCall("now", {})]


def test_hermes_no_call_goes_to_the_env_and_calls_while_thinking_are_not_calls():
    assert HERMES.parse("The answer is \\boxed{3}.") is None
    thinking = '<think>\nI could write <tool_call>{"name": "add"}</tool_call> here.\n</think>\n\n\\boxed{3}'
    assert HERMES.parse(thinking) is None
    assert HERMES.parse(thinking.replace("\\boxed{3}", _hermes({"name": "add", "arguments": {}}))) == [
        ToolCall("add", {})
    ]


@pytest.mark.parametrize(
    "action, reason",
    [
        ('<tool_call>\n{"name": "add", "arguments": {"a": 1,}}\n</tool_call>', "is not valid JSON"),
        ("<tool_call>[1, 2]</tool_call>", "must be a JSON object with a function name"),
        ('<tool_call>{"arguments": {}}</tool_call>', "must be a JSON object with a function name"),
        ('<tool_call>{"name": "add", "arguments": [1, 2]}</tool_call>', "arguments of 'add' must be a JSON object"),
        ('<tool_call>{"name": "add", "arguments": "{oops"}</tool_call>', "arguments of 'add' are not valid JSON"),
        ('<tool_call>{"name": "add", "arguments": {}}', "is not closed with </tool_call>"),
    ],
)
def test_hermes_bad_calls_are_reasons_not_exceptions(action, reason):
    (call,) = HERMES.parse(action)
    assert isinstance(call, BadCall) and reason in call.reason
    if "must be a JSON object with" in reason:
        assert "<tool_call>" in call.reason  # shows how to write one


def test_llama3_json_reads_one_or_several_calls():
    one = '{"name": "add", "parameters": {"a": 1, "b": 2}}'
    assert LLAMA.parse(one) == [ToolCall("add", {"a": 1, "b": 2})]
    assert LLAMA.parse(f"<|python_tag|>{one}") == [ToolCall("add", {"a": 1, "b": 2})]
    two = f'  {one} ;\n{{"name": "lookup", "arguments": {{"key": "pi"}}}};'
    assert LLAMA.parse(two) == [ToolCall("add", {"a": 1, "b": 2}), ToolCall("lookup", {"key": "pi"})]
    assert LLAMA.parse("The answer is \\boxed{3}.") is None


def test_llama3_json_bad_calls():
    (bad,) = LLAMA.parse('{"name": "add", "parameters": {"a": 1,}}')
    assert isinstance(bad, BadCall) and "is not valid JSON" in bad.reason and '"parameters"' in bad.reason
    ok, trailing = LLAMA.parse('{"name": "add", "parameters": {}} so that is my call')
    assert ok == ToolCall("add", {}) and "separated by ';'" in trailing.reason
    (no_name,) = LLAMA.parse('{"answer": 3}')
    assert isinstance(no_name, BadCall) and "function name" in no_name.reason


def test_the_registry_names_the_formats_and_rejects_unknown_ones():
    assert FORMATS.names() == ("gem_tags", "hermes", "llama3_json")
    assert get_format("hermes").result_role == "tool" and get_format("llama3_json").result_role == "ipython"
    assert not get_format("gem_tags").native and get_format("gem_tags").schemas([Calculator()]) is None
    with pytest.raises(ValueError, match="unknown tool format 'mistral'; choose one of gem_tags, hermes, llama3_json"):
        get_format("mistral")
    fmt = Hermes()
    assert get_format(fmt) is fmt


# -- ToolEnv in a native format --------------------------------------------------------------------


def _env(**kw) -> ToolEnv:
    return ToolEnv(Quiz(), [Calculator(), Notes()], tool_format="hermes", **kw)


def test_native_reset_leaves_the_tools_to_the_template():
    env = _env()
    obs, info = env.reset(seed=0)
    assert obs == Quiz.QUESTION and info["use_tool"] is False  # no instructions appended
    assert [s["function"]["name"] for s in env.tool_schemas] == ["add", "multiply", "lookup"]
    assert env.tool_schemas[0]["function"]["parameters"]["required"] == ["a", "b"]
    assert ToolEnv(Quiz(), [Calculator()]).tool_schemas is None  # gem_tags: the instructions are in the observation


def test_native_step_answers_every_call_with_a_message_and_counts_each():
    env = _env(tool_reward=0.1, tool_success_reward=0.5)
    env.reset(seed=0)
    action = (
        _hermes(
            {"name": "add", "arguments": {"a": 2, "b": 3}},
            {"name": "lookup", "arguments": {"key": "nope"}},
            {"name": "add", "arguments": {"a": "2"}},
            {"name": "divide", "arguments": {}},
        )
        + '<tool_call>{"name": "add", "arguments": {"a": 1,}}</tool_call>'
    )
    obs, reward, term, trunc, info = env.step(action)
    msgs = info["tool_messages"]
    assert [m["role"] for m in msgs] == ["tool"] * 5
    assert [m["name"] for m in msgs] == ["add", "lookup", "add", "divide", ""]
    assert msgs[0]["content"] == "5" and msgs[1]["content"] == "no note 'nope'"
    assert msgs[2]["content"] == "Error: invalid arguments for 'add' at arguments: 'b' is a required property"
    assert msgs[3]["content"] == "Error: unknown function 'divide'; the functions are add, multiply, lookup"
    assert msgs[4]["content"].startswith("Error: the <tool_call> ") and "is not valid JSON" in msgs[4]["content"]
    assert obs == "\n".join(f"<tool_response>\n{m['content']}\n</tool_response>" for m in msgs)
    assert (term, trunc) == (False, False) and reward == pytest.approx(5 * 0.1 + 0.5)
    assert info["use_tool"] and info["tool_ok"] is False and info["tool"] == "add,lookup,add,divide,"
    assert info["tool_calls"] == 5 and info["tool_call_errors"] == 3  # unknown, bad arguments, unreadable
    assert info["tool_use_counter"] == 5 and info["tool_success_counter"] == 1
    obs, reward, term, *_ = env.step("\\boxed{20}")  # no call: the env answers
    assert (obs, reward, term) == ("Correct.", 1.0, True)


def test_native_limit_cuts_a_turn_and_later_calls_go_to_the_env():
    env = _env(max_tool_uses=2)
    env.reset(seed=0)
    call = {"name": "add", "arguments": {"a": 1, "b": 1}}
    _, _, _, _, info = env.step(_hermes(call, call, call))
    contents = [m["content"] for m in info["tool_messages"]]
    assert contents[:2] == ["2", "2"]
    assert contents[2] == "Error: not run: the limit of 2 tool calls is reached" + LIMIT_MESSAGE
    assert info["tool_use_counter"] == 2 and info["tool_ok"] is False
    obs, _, _, _, info = env.step(_hermes(call))
    assert obs == "Wrong, try again." and info["use_tool"] is False


def test_native_format_needs_schemas_and_unique_names():
    class Tagged(Tool):
        name = "tagged"

        def instruction(self):
            return ""

        def parse(self, action):
            return None

        def execute(self, call):
            return ToolResult("", True)

    with pytest.raises(NotImplementedError, match="tool 'tagged' .* has no JSON schema"):
        ToolEnv(Quiz(), [Tagged()], tool_format="hermes")
    ToolEnv(Quiz(), [Tagged()])  # gem_tags needs none
    with pytest.raises(ValueError, match="both offer a function named 'add'"):
        ToolEnv(Quiz(), [Calculator(), Calculator()], tool_format="llama3_json")


def test_the_shipped_tools_offer_schemas_and_bare_results(sandbox):
    python = PythonTool(sandbox=sandbox)
    env = ToolEnv(Quiz(), [python, SearchTool(topk=2)], tool_format="hermes", max_tool_uses=None)
    assert [s["function"]["name"] for s in env.tool_schemas] == ["python", "search"]
    env.reset(seed=0)
    _, _, _, _, info = env.step(
        _hermes(
            {"name": "python", "arguments": {"code": "print(6 * 7)"}},
            {"name": "search", "arguments": {"query": "capital of Ulzopelia"}},
            {"name": "python", "arguments": {"code": "1/0"}},
        )
    )
    py, search, error = (m["content"] for m in info["tool_messages"])
    assert py == "42"  # the output alone: no "Code execution result:" in a tool message
    assert search.startswith("Doc 1(Title: ") and "<information>" not in search and search.count("\nDoc ") == 1
    assert "ZeroDivisionError" in error and info["tool_success_counter"] == 2
    # the tag format is unchanged
    assert python.execute("print(1)").text == "Code execution result: 1\n\n"


def test_chat_wrapper_appends_the_tool_messages_as_they_are():
    env = ChatWrapper(_env(), system_prompt="Be exact.")
    msgs, _ = env.reset(seed=0)
    assert msgs == [{"role": "system", "content": "Be exact."}, {"role": "user", "content": Quiz.QUESTION}]
    action = _hermes({"name": "add", "arguments": {"a": 2, "b": 3}}, {"name": "lookup", "arguments": {"key": "pi"}})
    msgs, *_ = env.step(action)
    assert msgs[2:] == [
        {"role": "assistant", "content": action},
        {"role": "tool", "name": "add", "content": "5"},
        {"role": "tool", "name": "lookup", "content": "3.14159"},
    ]
    msgs, *_ = env.step("\\boxed{19}")
    assert msgs[-1] == {"role": "user", "content": "Wrong, try again."}


def test_a_custom_format_registers_and_runs():
    class Bracket(ToolFormat):
        """[[name {json args}]]"""

        name = "bracket"
        example = "[[name {...}]]"

        def parse(self, action):
            if not action.startswith("[["):
                return None
            name, _, args = action[2:].removesuffix("]]").partition(" ")
            return [self.call_from({"name": name, "arguments": args}, ("arguments",))]

    FORMATS.register("bracket", Bracket())
    try:
        env = ToolEnv(Quiz(), [Calculator()], tool_format="bracket")
        env.reset(seed=0)
        _, _, _, _, info = env.step('[[multiply {"a": 6, "b": 7}]]')
        assert info["tool_messages"] == [{"role": "tool", "name": "multiply", "content": "42"}]
    finally:
        FORMATS._entries.pop("bracket")


# -- the config and the pool wrapper ---------------------------------------------------------------


def test_config_flag_validation_and_wrapper():
    import tyro

    from experiments.configs import PRESETS
    from jgem.config import ConfigError, validate
    from jgem.envs.with_tools import tool_schemas, tool_wrapper

    argv = ["tiny", "--env.env-id", "math:arithmetic", "--env.tools", "python", "--env.tool-format", "hermes"]
    cfg = tyro.extras.overridable_config_cli(PRESETS, args=[*argv, "--warm-start.steps", "0"], console_outputs=False)
    assert cfg.env.tool_format == "hermes"
    validate(cfg, 1)
    (wrap,) = tool_wrapper(cfg.env)
    import jgem

    env = wrap(jgem.make("math:arithmetic"))
    obs, _ = env.reset(seed=0)
    assert "<python>" not in obs and env.format.name == "hermes"
    assert [s["function"]["name"] for s in tool_schemas(cfg.env)] == ["python"]
    assert tool_schemas(dataclasses.replace(cfg.env, tool_format="gem_tags")) is None
    with pytest.raises(ConfigError, match="env.tool-format 'json' is unknown; choose from gem_tags, hermes, llama3"):
        validate(dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, tool_format="json")), 1)
    with pytest.raises(ConfigError, match="env.tool-format hermes formats tool calls, but env.tools names no tool"):
        validate(dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, tools=())), 1)
