"""Native tool calls are token-exact: the chat view's stream against the published chat templates.

Each case plays an env wrapped as in training (ToolEnv in the format, then the ChatWrapper) with actions written the way
the template writes tool calls, building the stream as the rollout does (`first_prompt`, the action's tokens,
`observation_suffix`). The stream must equal `apply_chat_template(conversation, tools=...)` of the same conversation,
the calls as structured `tool_calls` and the results as `tool` / `ipython` messages: after every observation (with the
generation prompt) and at the end. The turns hold several calls, failures, unreadable calls and a final answer.
"""

from __future__ import annotations

from typing import Any

import pytest

from jgem.envs.tools.tool_env import ToolEnv
from jgem.envs.wrappers import ChatWrapper, HistoryWrapper
from jgem.models.tokenizer import ChatFormat, TemplateRewriteError
from jgem.rollout.views import first_prompt, observation_suffix
from tests.tools.native_tools import LLAMA_KW, Calculator, Notes, Quiz, template_tokenizer, tool_call, written

FINAL = {"role": "assistant", "content": "So (2 + 3) * 4 = \\boxed{20}."}


def _env(tool_format: str, system: str | None = None) -> ChatWrapper:
    return ChatWrapper(
        ToolEnv(Quiz(), [Calculator(), Notes()], tool_format=tool_format, max_tool_uses=None), system_prompt=system
    )


def _ids(tok: Any, messages: list[dict], kw: dict, *, generation: bool) -> list[int]:
    return list(
        tok.apply_chat_template(
            messages,
            tools=kw["tools"],
            tokenize=True,
            add_generation_prompt=generation,
            return_dict=False,
            **kw["template"],
        )
    )


def _play(
    chat: ChatFormat, env: ChatWrapper, turns: list[dict], writer: ChatFormat | None = None
) -> tuple[list[int], list[list[int]], list[dict]]:
    """The rollout's stream for the assistant messages `turns` (each written as `writer`'s template writes it, by
    default `chat`'s): the stream at the end, the stream after each observation, and each step's info."""
    obs, _ = env.reset(seed=0)
    stream, n = first_prompt(chat, "chat", obs)
    after_obs, infos = [list(stream)], []
    follow = {"role": env.format.result_role, "name": "add", "content": "0"}
    for k, message in enumerate(turns):
        # the last turn is written as a last message (Qwen3 then opens it with a think block, even an empty one)
        action = written(writer or chat, message, follow if k < len(turns) - 1 else None)
        ids = chat.action_ids(action)
        assert chat.action_text(ids) == action
        obs, _, terminated, _, info = env.step(chat.action_text(ids))
        infos.append(info)
        stream += ids
        if terminated:
            break
        stream += observation_suffix(chat, n, ids, obs)
        n = len(obs)
        after_obs.append(list(stream))
    return stream, after_obs, infos


def _check_exact(tok: Any, chat: ChatFormat, env: ChatWrapper, turns: list[dict], kw: dict, results: list) -> None:
    """Plays `turns` and checks the stream against the template; `results[k]` are the contents turn k's tool messages
    must have (a string prefix for an error, whose full text is read from the env)."""
    stream, after_obs, infos = _play(chat, env, turns)
    assert len(infos) == len(turns) and infos[-1]["use_tool"] is False  # the final answer reached the env
    conversation = ([{"role": "system", "content": env.system_prompt}] if env.system_prompt else []) + [
        {"role": "user", "content": Quiz.QUESTION}
    ]
    assert after_obs[0] == _ids(tok, conversation, kw, generation=True)
    for k, (message, info) in enumerate(zip(turns[:-1], infos)):
        got = info["tool_messages"]
        assert [m["content"][: len(r)] for m, r in zip(got, results[k])] == results[k] and len(got) == len(results[k])
        conversation += [message, *got]
        assert after_obs[k + 1] == _ids(tok, conversation, kw, generation=True), f"differs after turn {k}"
    full = _ids(tok, [*conversation, turns[-1]], kw, generation=False)
    assert full[: len(stream)] == stream and tok.decode(full[len(stream) :]).strip() == ""


# Several calls a turn, a failing call, bad arguments, an unknown function, unreadable JSON, then the answer.
HERMES_TURNS = [
    {
        "role": "assistant",
        "content": "Let me compute both parts.",
        "tool_calls": [tool_call("add", {"a": 2, "b": 3}), tool_call("lookup", {"key": "greeting"})],
    },
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            tool_call("multiply", {"a": 5, "b": 4}),
            tool_call("lookup", {"key": "e"}),
            tool_call("add", {"a": "two", "b": 1}),
            tool_call("divide", {"a": 1, "b": 2}),
        ],
    },
    {"role": "assistant", "content": '<tool_call>\n{"name": "add", "arguments": {"a": 1,}}\n</tool_call>'},
    FINAL,
]
HERMES_RESULTS = [
    ["5", "Grüße 日本 🎲"],
    [
        "20",
        "no note 'e'",
        "Error: invalid arguments for 'add' at a: 'two' is not of type 'number'",
        "Error: unknown function 'divide'; the functions are add, multiply, lookup",
    ],
    ['Error: the <tool_call> \'{"name": "add", "arguments": {"a": 1,}}\' is not valid JSON'],
]


@pytest.mark.parametrize("system", [None, "You are a careful calculator."])
@pytest.mark.parametrize("template", ["qwen2.5", "qwen3", "vllm_hermes"])
def test_hermes_stream_equals_the_template(template, system):
    tok = template_tokenizer(template)
    env = _env("hermes", system)
    chat = ChatFormat(tok, tools=env.tool_schemas)
    assert chat.append_only and chat.rewrites_history == (template == "qwen3")
    _check_exact(tok, chat, env, HERMES_TURNS, {"tools": env.tool_schemas, "template": {}}, HERMES_RESULTS)


def _thinking(turns: list[dict]) -> list[dict]:
    return [{**m, "reasoning_content": f"Step {k}: what do I need next?"} for k, m in enumerate(turns)]


def test_qwen3_thinking_tool_turns_keep_their_think_blocks_and_stay_exact():
    """After the last user message Qwen3 keeps every think block, so an agentic tool episode is exact."""
    tok = template_tokenizer("qwen3")
    env = _env("hermes")
    chat = ChatFormat(tok, tools=env.tool_schemas)
    assert chat.rewrites_history
    turns = _thinking(HERMES_TURNS)
    assert written(chat, turns[0], {"role": "tool", "content": "0"}).startswith("<think>\nStep 0")
    _check_exact(tok, chat, env, turns, {"tools": env.tool_schemas, "template": {}}, HERMES_RESULTS)


def test_qwen3_user_turn_after_thinking_is_refused_with_the_per_turn_view_named():
    """A user message after thinking turns makes Qwen3 drop their think blocks: the chat view refuses it."""
    tok = template_tokenizer("qwen3")
    env = _env("hermes")
    chat = ChatFormat(tok, tools=env.tool_schemas)
    wrong = {"role": "assistant", "content": "\\boxed{19}", "reasoning_content": "2 + 3 is 5 and 5 * 4 is 19."}
    with pytest.raises(TemplateRewriteError, match=r"per-turn view \(--rollout.view per_turn") as e:
        _play(chat, env, [_thinking(HERMES_TURNS)[0], wrong, FINAL])
    assert "<think>" in str(e.value) and "user message follows" in str(e.value)
    # without reasoning nothing is rewritten: the same episode goes on and stays exact
    stream, after_obs, _ = _play(chat, _env("hermes"), [HERMES_TURNS[0], {**wrong, "reasoning_content": None}, FINAL])
    assert len(after_obs) == 3


def test_qwen3_without_thinking_is_refused_at_the_first_observation():
    """enable_thinking=False puts an empty think block in every generation prompt that later renders drop."""
    tok = template_tokenizer("qwen3")
    env = _env("hermes")
    chat = ChatFormat(tok, tools=env.tool_schemas, enable_thinking=False)
    assert chat.rewrites_history and not chat.append_only
    with pytest.raises(TemplateRewriteError, match="per-turn view"):
        _play(chat, env, HERMES_TURNS, writer=ChatFormat(tok, tools=env.tool_schemas))


def test_the_per_turn_view_lists_the_tools_and_shows_the_results():
    """Where the chat view refuses (Qwen3, a user turn after thinking), the per-turn view is a fresh template."""
    tok = template_tokenizer("qwen3")
    tools = ToolEnv(Quiz(), [Calculator(), Notes()], tool_format="hermes")
    env = HistoryWrapper(tools)
    chat = ChatFormat(tok, tools=tools.tool_schemas)
    obs, _ = env.reset(seed=0)
    prompt, _ = first_prompt(chat, "per_turn", obs)
    user = [{"role": "user", "content": obs}]
    assert prompt == _ids(tok, user, {"tools": tools.tool_schemas, "template": {}}, generation=True)
    assert '"name": "multiply"' in tok.decode(prompt)
    action = written(chat, _thinking(HERMES_TURNS)[0], {"role": "tool", "content": "0"})
    obs, *_ = env.step(action)
    assert obs.endswith("<tool_response>\n5\n</tool_response>\n<tool_response>\nGrüße 日本 🎲\n</tool_response>\n")
    obs, *_ = env.step("\\boxed{19}")  # a user turn: fine here, every prompt is the template's own
    prompt, _ = first_prompt(chat, "per_turn", obs)
    user = [{"role": "user", "content": obs}]
    assert prompt == _ids(tok, user, {"tools": tools.tool_schemas, "template": {}}, generation=True)


# Llama 3.1's templates render one structured call per message; two calls in a turn are the text the model writes.
LLAMA_TURNS = [
    {"role": "assistant", "content": "", "tool_calls": [tool_call("add", {"a": 2, "b": 3})]},
    {
        "role": "assistant",
        "content": '{"name": "multiply", "parameters": {"a": 5, "b": 4}}; '
        '{"name": "lookup", "parameters": {"key": "pi"}}',
    },
    {"role": "assistant", "content": "", "tool_calls": [tool_call("add", {"a": "two", "b": 1})]},
    {"role": "assistant", "content": '{"name": "add", "parameters": {"a": 1,}}'},
    {"role": "assistant", "content": "", "tool_calls": [tool_call("divide", {"a": 1, "b": 2})]},
    FINAL,
]
LLAMA_RESULTS = [
    ["5"],
    ["20", "3.14159"],
    ["Error: invalid arguments for 'add' at a: 'two' is not of type 'number'"],
    ['Error: the tool call \'{"name": "add", "parameters": {"a": 1,}}\' is not valid JSON'],
    ["Error: unknown function 'divide'"],
]


@pytest.mark.parametrize("system", [None, "You are a careful calculator."])
@pytest.mark.parametrize("template", ["llama3.3", "vllm_llama3.1_json"])
def test_llama3_json_stream_equals_the_template(template, system):
    tok = template_tokenizer(template)
    env = _env("llama3_json", system)
    chat = ChatFormat(tok, tools=env.tool_schemas, template_kwargs=LLAMA_KW)
    assert chat.append_only and not chat.rewrites_history
    _check_exact(tok, chat, env, LLAMA_TURNS, {"tools": env.tool_schemas, "template": LLAMA_KW}, LLAMA_RESULTS)
    text = tok.decode(chat.start([{"role": "user", "content": "q"}]))
    assert "Environment: ipython" in text and '"name": "lookup"' in text


def test_llama_results_are_ipython_messages():
    tok = template_tokenizer("llama3.3")
    env = _env("llama3_json")
    chat = ChatFormat(tok, tools=env.tool_schemas, template_kwargs=LLAMA_KW)
    _, after_obs, infos = _play(chat, env, LLAMA_TURNS[:2])
    assert [m["role"] for m in infos[1]["tool_messages"]] == ["ipython", "ipython"]
    assert tok.decode(after_obs[-1]).count("<|start_header_id|>ipython<|end_header_id|>") == 3
