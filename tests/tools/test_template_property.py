"""Never a silent difference: the chat view's stream against every shipped chat template, on drawn conversations.

Hypothesis draws tool-calling episodes (0-3 calls a turn, empty and non-empty reasoning, failing and unreadable calls,
wrong and final answers, with and without a system prompt, non-ASCII text). Each action is the text the template
writes for that assistant message as the latest turn: what a model trained on the template writes after the
generation prompt (Qwen3's `<think>\\n\\n</think>\\n\\n` before a call included). After every observation the chat
view's stream must either equal `apply_chat_template` of the conversation so far (the calls as structured
`tool_calls`, the results as the env's messages), or be refused (`TemplateRewriteError`, naming the per-turn chat view)
at the observation where the template rewrites history, and refused only where the stream would have differed.
The per-turn chat view, which renders the conversation afresh every turn, must be exact after every observation.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jgem.envs.tools.tool_env import ToolEnv
from jgem.envs.wrappers import ChatWrapper
from jgem.models.tokenizer import ChatFormat, TemplateRewriteError
from jgem.rollout.views import first_prompt, next_prompt, observation_suffix
from tests.tools.native_tools import LLAMA_KW, Calculator, Notes, Quiz, template_tokenizer, tool_call, written

# (template file, the format its models call tools in, template kwargs)
TEMPLATES = {
    "qwen2.5": ("hermes", {}),
    "qwen3": ("hermes", {}),
    "qwen3-no-thinking": ("hermes", {"enable_thinking": False}),
    "vllm_hermes": ("hermes", {}),
    "llama3.3": ("llama3_json", LLAMA_KW),
    "vllm_llama3.1_json": ("llama3_json", LLAMA_KW),
}
_TOKENIZERS: dict[str, Any] = {}

TEXT = st.sampled_from(["", "Let me check.", "Grüße, 日本 🎲: prüfe das.", "Two steps:\n1. add\n2. multiply"])
REASONING = st.sampled_from([None, "", "I need 2 + 3 first.", "Denke nach: 日本 🎲 zuerst."])
CALL = st.sampled_from(
    [
        ("add", {"a": 2, "b": 3}),
        ("multiply", {"a": 5, "b": 4}),
        ("lookup", {"key": "greeting"}),
        ("lookup", {"key": "missing"}),  # a failing call
        ("add", {"a": "two", "b": 1}),  # arguments against the schema
        ("divide", {"a": 1, "b": 2}),  # an unknown function
    ]
)


def _tokenizer(template: str) -> Any:
    if template not in _TOKENIZERS:
        _TOKENIZERS[template] = template_tokenizer(template.removesuffix("-no-thinking"))
    return _TOKENIZERS[template]


@st.composite
def turns(draw: Any, tool_format: str, thinking: bool) -> list[dict[str, Any]]:
    """Assistant messages of one episode: tool turns, wrong answers, an unreadable call, maybe a final answer."""
    out = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["calls", "calls", "wrong", "unreadable"]))
        message: dict[str, Any] = {"role": "assistant", "content": draw(TEXT)}
        if kind == "calls":
            calls = draw(st.lists(CALL, min_size=1, max_size=3))
            if tool_format == "llama3_json" and len(calls) > 1:  # Llama's templates render one structured call
                message["content"] = "; ".join(json.dumps({"name": n, "parameters": a}) for n, a in calls)
            else:
                message["tool_calls"] = [tool_call(n, a) for n, a in calls]
                if tool_format == "llama3_json":
                    message["content"] = ""
        elif kind == "wrong":
            message["content"] = (message["content"] + " \\boxed{19}").strip()
        elif tool_format == "hermes":
            message["content"] = '<tool_call>\n{"name": "add", "arguments": {"a": 1,}}\n</tool_call>'
        else:
            message["content"] = '{"name": "add", "parameters": {"a": 1,}}'
        out.append(message)
    if draw(st.booleans()):
        out.append({"role": "assistant", "content": "So (2 + 3) * 4 = \\boxed{20}."})
    if thinking:  # a reasoning model reasons (or leaves its think block empty) every turn
        out = [{**m, "reasoning_content": draw(REASONING)} for m in out]
    return out


def _ids(tok: Any, messages: list[dict], tools: list, kw: dict, *, generation: bool) -> list[int]:
    return list(
        tok.apply_chat_template(
            messages, tools=tools, tokenize=True, add_generation_prompt=generation, return_dict=False, **kw
        )
    )


def _reference(obs: list[dict], played: list[dict]) -> list[dict]:
    """The conversation a server holds: the ChatWrapper's messages with each assistant action as its structured
    message (reasoning, calls)."""
    it = iter(played)
    return [next(it) if m["role"] == "assistant" else m for m in obs]


def play_checked(template: str, system: str | None, episode: list[dict]) -> str:
    """Plays `episode` in the chat view and checks the stream after every observation (module docstring); returns
    how it ended: "exact" or "refused"."""
    tool_format, kw = TEMPLATES[template]
    tok = _tokenizer(template)
    env = ChatWrapper(
        ToolEnv(Quiz(), [Calculator(), Notes()], tool_format=tool_format, max_tool_uses=None), system_prompt=system
    )
    tools = env.tool_schemas
    chat = ChatFormat(tok, tools=tools, template_kwargs=kw)
    obs, _ = env.reset(seed=0)
    stream, n = first_prompt(chat, "chat", obs)
    assert stream == _ids(tok, obs, tools, kw, generation=True)
    played: list[dict] = []
    for message in episode:
        action = written(chat, message, None)  # the model writes the latest turn as the template does
        ids = chat.action_ids(action)
        assert chat.action_text(ids) == action
        obs, _, terminated, _, _ = env.step(action)
        played.append(message)
        stream += ids
        if terminated:
            # the episode's stream ends with the final answer (the env's closing message is never shown)
            full = _ids(tok, _reference(obs[: n + 1], played), tools, kw, generation=False)
            assert full[: len(stream)] == stream
            return "exact"
        expected = _ids(tok, _reference(obs, played), tools, kw, generation=True)
        # the per-turn chat view is exact after every observation, whatever the template rewrites
        assert next_prompt(chat, "chat_per_turn", [], n, ids, obs)[0] == expected
        try:
            suffix = observation_suffix(chat, n, ids, obs)
        except TemplateRewriteError as e:
            assert "--rollout.view chat_per_turn" in str(e) and "The template's rule: " in str(e)
            # refused only where appending would have left the template
            assert stream + chat.close_action(ids) + chat.observation_tokens(obs[n + 1 :]) != expected
            return "refused"
        stream += suffix
        n = len(obs)
        assert stream == expected, f"the stream left the template silently after turn {len(played)}"
    return "exact"


@pytest.mark.parametrize("template", list(TEMPLATES))
def test_the_chat_view_is_exact_or_refuses(template):
    tool_format, kw = TEMPLATES[template]
    thinking = template.startswith("qwen3") and kw.get("enable_thinking") is not False

    @settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(system=st.sampled_from([None, "Du bist ein sorgfältiger Rechner."]), episode=turns(tool_format, thinking))
    def check(system, episode):
        play_checked(template, system, episode)

    check()


# Known outcomes, one per template rule (the drawn cases above cover the rest).
CALL_TURN = {"role": "assistant", "content": "", "tool_calls": [tool_call("add", {"a": 2, "b": 3})]}
FINAL = {"role": "assistant", "content": "So (2 + 3) * 4 = \\boxed{20}."}


@pytest.mark.parametrize(
    ("template", "episode", "outcome"),
    [
        # Qwen3 keeps a non-empty think block while no user message follows it: a thinking tool agent is exact
        ("qwen3", [{**CALL_TURN, "reasoning_content": "Add first."}, FINAL], "exact"),
        # an empty think block (a Qwen3 tool agent under /no_think) is dropped once anything follows: refused
        ("qwen3", [{**CALL_TURN, "reasoning_content": ""}, FINAL], "refused"),
        # enable_thinking=False: the generation prompt's empty block is dropped from earlier turns: refused
        ("qwen3-no-thinking", [CALL_TURN, FINAL], "refused"),
        ("qwen2.5", [CALL_TURN, CALL_TURN, FINAL], "exact"),
        ("llama3.3", [CALL_TURN, FINAL], "exact"),
    ],
)
def test_known_template_rules(template, episode, outcome):
    assert play_checked(template, None, episode) == outcome


def test_the_refusal_names_the_rule():
    with pytest.raises(TemplateRewriteError, match="empty <think></think> block is kept only while it is the latest"):
        _raise("qwen3", {})
    with pytest.raises(TemplateRewriteError, match=r"generation prompt's empty <think></think> block \(enable_thi"):
        _raise("qwen3", {"enable_thinking": False})


def _raise(template: str, kw: dict) -> None:
    tok = _tokenizer(template)
    env = ChatWrapper(ToolEnv(Quiz(), [Calculator()], tool_format="hermes"))
    chat = ChatFormat(tok, tools=env.tool_schemas, template_kwargs=kw)
    obs, _ = env.reset(seed=0)
    _, n = first_prompt(chat, "chat", obs)
    ids = chat.action_ids(written(chat, {**CALL_TURN, "reasoning_content": ""}, None))
    obs, *_ = env.step(chat.action_text(ids))
    observation_suffix(chat, n, ids, obs)
