"""Token exactness of ChatFormat against apply_chat_template: the tiny tokenizer, Qwen3 and Llama 3 templates."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from jgem.models.tokenizer import TINY_TOKENIZER_DIR, ChatFormat, TemplateRewriteError, load_tokenizer

DATA = Path(__file__).parent / "data"
QWEN_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
LLAMA_SPLIT = QWEN_SPLIT.replace(r"|\p{N}|", r"|\p{N}{1,3}|")  # Llama 3 groups up to three digits
CORPUS = [
    "You are playing Guess The Number. Your guess 7 is too high; try a lower number. \\boxed{3}",
    "The quick brown fox jumps over the lazy dog 0123456789 times.\n\nAnswer: <think>\nhmm\n</think>\n\n",
    "Héllo wörld, 日本語のテキスト, emoji 🎲 and symbols {}[]()<>|/\\ \t tabs\r\nnewlines",
] * 20
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _train(specials: list[str], split: str, vocab_size: int = 400) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(split), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer=trainer)
    return tok


@pytest.fixture(scope="module")
def tiny():
    return load_tokenizer()


@pytest.fixture(scope="module")
def qwen3():
    tok = _train(["<|endoftext|>", "<|im_start|>", "<|im_end|>"], QWEN_SPLIT)
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    hf.chat_template = (DATA / "qwen3_chat_template.jinja").read_text()
    return hf


@pytest.fixture(scope="module")
def llama3():
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    tok = _train(specials, LLAMA_SPLIT)
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|begin_of_text|>", eos_token="<|end_of_text|>")
    hf.chat_template = (DATA / "llama3_chat_template.jinja").read_text()
    return hf


# Text with non-ASCII and special-looking pieces. Actions must not start with a newline: a model
# sampling after the generation prompt's "\n" cannot merge with it, while re-tokenising the whole
# rendered string would (the one place where the sampled stream and the template may legitimately differ).
PIECES = st.sampled_from(
    [
        "<|im_start|>",
        "<|im_end|>",
        "<|eot_id|>",
        "<|endoftext|>",
        "\\boxed{42}",
        "日本語",
        "héllo",
        "🎲",
        " ",
        "\n",
        "12345",
        "user",
        "assistant",
        "<|notatoken|>",
        "\t",
    ]
)
TEXT = st.lists(st.one_of(st.text(max_size=12), PIECES), max_size=6).map("".join)
ACTION = TEXT.filter(lambda s: not s.startswith(("\n", "\r")))


def _chat(draw, role_choices=("user",), strip=False, forbid=()):
    def clean(s: str) -> str:
        for f in forbid:
            s = s.replace(f, "")
        return s.strip() if strip else s

    system = draw(st.one_of(st.none(), TEXT.map(clean)))
    first = draw(TEXT.map(clean))
    turns = []
    for _ in range(draw(st.integers(1, 4))):
        action = draw(ACTION.map(clean).filter(lambda s: not s.startswith(("\n", "\r"))))
        role = draw(st.sampled_from(role_choices))
        obs = draw(TEXT.map(clean))
        turns.append((action, role, obs))
    return system, first, turns


@st.composite
def chats(draw, **kw):
    return _chat(draw, **kw)


def _run(cf: ChatFormat, system, first, turns):
    """The incremental stream and the messages it stands for."""
    msgs = [{"role": "user", "content": first}]
    stream = cf.start(msgs)
    for action, role, obs in turns:
        ids = cf.action_ids(action)
        assert cf.ends_with_stop(ids) and cf.close_action(ids) == []
        assert cf.action_text(ids) == action  # decoded action text round-trips
        stream += ids + cf.observation_tokens(obs, role=role)
        msgs += [{"role": "assistant", "content": action}, {"role": role, "content": obs}]
    full = ([{"role": "system", "content": system}] if system is not None else []) + msgs
    return stream, full


def _template_ids(tok, messages, **kw) -> list[int]:
    return list(tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=True, return_dict=False, **kw))


def test_tiny_tokenizer_shape_and_specials(tiny):
    assert isinstance(tiny, PreTrainedTokenizerFast) and len(tiny) <= 1024
    assert tiny.eos_token == "<|im_end|>" and tiny.pad_token == "<|endoftext|>"
    cf = ChatFormat(tiny)
    assert cf.stop_token_ids == (tiny.convert_tokens_to_ids("<|im_end|>"),)
    assert cf.pad_id == tiny.convert_tokens_to_ids("<|endoftext|>") != cf.end_of_turn_id
    assert cf.append_only
    # digits are split one per token so numbers are learnable
    assert tiny.convert_ids_to_tokens(tiny.encode("guess 2048", add_special_tokens=False))[-4:] == ["2", "0", "4", "8"]
    config = json.loads((TINY_TOKENIZER_DIR / "tokenizer_config.json").read_text())
    assert "<|im_start|>" in config["chat_template"]


@SETTINGS
@given(chat=chats())
def test_tiny_stream_equals_template(tiny, chat):
    system, first, turns = chat
    cf = ChatFormat(tiny, system=system)
    stream, full = _run(cf, system, first, turns)
    assert stream == _template_ids(tiny, full)


def test_start_matches_template_and_adds_system(tiny):
    cf = ChatFormat(tiny, system="Be brief.")
    msgs = [{"role": "user", "content": "Guess 1-10"}]
    with_sys = [{"role": "system", "content": "Be brief."}, *msgs]
    assert cf.start(msgs) == _template_ids(tiny, with_sys)
    assert tiny.decode(cf.start(msgs)).endswith("<|im_start|>assistant\n")
    with pytest.raises(ValueError, match="at least one message"):
        cf.start([])


def test_truncated_action_is_closed(tiny):
    cf = ChatFormat(tiny)
    truncated = tiny.encode("I think the answ", add_special_tokens=False)
    assert not cf.ends_with_stop(truncated)
    assert cf.close_action(truncated) == [cf.end_of_turn_id]
    stream = cf.start([{"role": "user", "content": "q"}]) + truncated + cf.close_action(truncated)
    stream += cf.observation_tokens("Invalid action.")
    msgs = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "I think the answ"},
        {"role": "user", "content": "Invalid action."},
    ]
    assert stream == _template_ids(tiny, msgs)
    assert cf.action_text(truncated) == "I think the answ"


def test_load_tokenizer_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_tokenizer(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        load_tokenizer(tmp_path)


def test_template_without_special_end_of_turn_is_refused(tiny):
    tok = load_tokenizer()
    tok.chat_template = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
    with pytest.raises(ValueError, match="end-of-turn special token"):
        ChatFormat(tok)


# -- Qwen3 ----------------------------------------------------------------------------------------

QWEN_FORBID = ("<think>", "</think>", "<tool_response>", "</tool_response>")


@SETTINGS
@given(chat=chats(role_choices=("user", "tool"), forbid=QWEN_FORBID))
def test_qwen3_non_reasoning_stream_equals_template(qwen3, chat):
    system, first, turns = chat
    cf = ChatFormat(qwen3, system=system)
    assert cf.append_only
    assert cf.stop_token_ids == (qwen3.convert_tokens_to_ids("<|im_end|>"),)
    assert cf.pad_id == qwen3.convert_tokens_to_ids("<|endoftext|>")
    stream, full = _run(cf, system, first, turns)
    assert stream == _template_ids(qwen3, full)


@SETTINGS
@given(
    chat=chats(role_choices=("tool",), forbid=QWEN_FORBID),
    reasoning=st.lists(st.text(min_size=1, max_size=10), min_size=4, max_size=4),
)
def test_qwen3_thinking_with_tool_turns_equals_template(qwen3, chat, reasoning):
    """After the last user query Qwen3 keeps every think block, so agentic tool turns are exact."""
    system, first, turns = chat
    reasoning = [r.strip("\n").replace("<think>", "").replace("</think>", "") or "r" for r in reasoning]
    turns = [(f"<think>\n{r}\n</think>\n\n{a.lstrip(chr(10))}", role, o) for r, (a, role, o) in zip(reasoning, turns)]
    cf = ChatFormat(qwen3, system=system, enable_thinking=True)
    stream, full = _run(cf, system, first, turns)
    assert stream == _template_ids(qwen3, full, enable_thinking=True)


def test_qwen3_user_turns_drop_earlier_thinking(qwen3):
    """The documented exception: the stream keeps what the model saw; the template drops old think blocks."""
    cf = ChatFormat(qwen3, enable_thinking=True)
    action = "<think>\nlow or high\n</think>\n\n\\boxed{5}"
    stream, full = _run(cf, None, "Guess 1-10", [(action, "user", "Too high.")])
    template = _template_ids(qwen3, full, enable_thinking=True)
    assert stream != template
    assert qwen3.decode(stream).replace("<think>\nlow or high\n</think>\n\n", "") == qwen3.decode(template)


@SETTINGS
@given(chat=chats(forbid=QWEN_FORBID))
def test_qwen3_enable_thinking_false_keeps_empty_think_blocks(qwen3, chat):
    """With thinking off the generation prompt holds an empty think block that later renders drop;
    the stream keeps it (the model saw it), and differs from the template by exactly those blocks."""
    system, first, turns = chat
    cf = ChatFormat(qwen3, system=system, enable_thinking=False)
    assert not cf.append_only
    stream, full = _run(cf, system, first, turns)
    template = _template_ids(qwen3, full, enable_thinking=False)
    empty = "<think>\n\n</think>\n\n"
    text, ref = qwen3.decode(stream), qwen3.decode(template)
    assert text.count(empty) == ref.count(empty) + len(turns)
    # removing the blocks that open earlier assistant turns gives the template's text
    marker = "<|im_start|>assistant\n" + empty
    assert text.replace(marker, "<|im_start|>assistant\n", len(turns)) == ref
    # every per-turn prompt is still exactly the template's
    assert cf.start(full) == template


# -- Llama 3 --------------------------------------------------------------------------------------


@SETTINGS
@given(chat=chats(strip=True))
def test_llama3_stream_equals_template(llama3, chat):
    system, first, turns = chat
    kw = {"date_string": "22 Nov 2026"}
    cf = ChatFormat(llama3, system=system, template_kwargs=kw)
    assert cf.append_only
    eot, eos = llama3.convert_tokens_to_ids("<|eot_id|>"), llama3.convert_tokens_to_ids("<|end_of_text|>")
    assert cf.end_of_turn_id == eot and cf.stop_token_ids == tuple(sorted({eot, eos}))
    assert cf.pad_id == eot  # Llama 3 has no pad token
    stream, full = _run(cf, system, first, turns)
    assert stream == _template_ids(llama3, full, **kw)
    assert stream[0] == llama3.convert_tokens_to_ids("<|begin_of_text|>") and stream.count(stream[0]) >= 1


def test_llama3_tool_observation(llama3):
    kw = {"date_string": "22 Nov 2026"}
    cf = ChatFormat(llama3, template_kwargs=kw)
    stream, full = _run(cf, None, "What is 2+2?", [('{"name": "calc"}', "tool", "4")])
    assert stream == _template_ids(llama3, full, **kw)
    assert re.search(r"<\|start_header_id\|>ipython<\|end_header_id\|>", llama3.decode(stream))


def test_build_script_is_deterministic():
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "scripts" / "build_tiny_tokenizer.py"
    spec = importlib.util.spec_from_file_location("build_tiny_tokenizer", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    texts = mod.PHRASES + [mod.DIGITS] + CORPUS
    a, b = mod.build(texts), mod.build(list(texts))
    assert a.to_str() == b.to_str()
    assert a.get_vocab_size() <= 1024 and a.token_to_id("<|endoftext|>") == 0
    assert a.encode("guess 123").tokens[-3:] == ["1", "2", "3"]


def test_load_tokenizer_from_saved_hf_directory(qwen3, tmp_path):
    """A local HF directory (as save_pretrained writes it) loads with its chat template and specials."""
    qwen3.save_pretrained(tmp_path)
    tok = load_tokenizer(tmp_path)
    msgs = [{"role": "user", "content": "Guess 1-10 日本"}]
    assert _template_ids(tok, msgs, enable_thinking=False) == _template_ids(qwen3, msgs, enable_thinking=False)
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    assert ChatFormat(tok).stop_token_ids == ChatFormat(qwen3).stop_token_ids


# -- tools and templates that rewrite earlier turns -----------------------------------------------

LOOKUP = [{"type": "function", "function": {"name": "lookup", "description": "d", "parameters": {"type": "object"}}}]


def test_tools_go_to_the_template_and_one_that_ignores_them_is_refused(tiny, qwen3):
    cf = ChatFormat(qwen3, tools=LOOKUP)
    msgs = [{"role": "user", "content": "q"}]
    assert cf.start(msgs) == _template_ids(qwen3, msgs, tools=LOOKUP) != _template_ids(qwen3, msgs)
    with pytest.raises(ValueError, match=r"does not list the tools .*'lookup'.*--env.tool-format gem_tags"):
        ChatFormat(tiny, tools=LOOKUP)  # the tiny template has no tool section


def test_rewrites_history_is_probed(tiny, qwen3, llama3):
    kw = {"date_string": "22 Nov 2026"}
    assert not ChatFormat(tiny).rewrites_history and not ChatFormat(llama3, template_kwargs=kw).rewrites_history
    assert ChatFormat(qwen3).rewrites_history  # drops think blocks before a new user message
    assert ChatFormat(qwen3, enable_thinking=False).rewrites_history
    # a template that refuses the tool role is probed with what it takes
    tok = load_tokenizer()
    tok.chat_template = (
        "{% for m in messages %}{% if m.role == 'tool' %}{{ raise_exception('no tool role') }}{% endif %}"
        "{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
    )
    assert not ChatFormat(tok).rewrites_history


def test_check_append_names_the_rewritten_turn(qwen3):
    cf = ChatFormat(qwen3)
    history = [{"role": "user", "content": "Guess 1-10"}]
    tool, user = [{"role": "tool", "content": "5 is too high"}], [{"role": "user", "content": "Too high."}]
    action = cf.action_ids("<think>\nlow or high\n</think>\n\n\\boxed{5}")
    cf.check_append(history, action, tool)  # kept after the last query
    with pytest.raises(TemplateRewriteError, match=r"once a user message follows: '.*low or high.*' becomes"):
        cf.check_append(history, action, user)
    cf.check_append(history, cf.action_ids("\\boxed{5}"), user)  # no reasoning: nothing to drop
    # an action the template would lay out otherwise (blank lines in its think block) is not a rewrite
    loose = cf.action_ids("<think>\n\nlow or high\n\n</think>\n\n\n\\boxed{5}")
    cf.check_append(history, loose, tool)
    with pytest.raises(TemplateRewriteError):
        cf.check_append(history, loose, user)
    # an earlier turn's think block, kept while tool messages followed, goes once a user message follows
    history += [{"role": "assistant", "content": cf.action_text(action)}, *tool]
    cf.check_append(history, cf.action_ids("\\boxed{4}"), tool)
    with pytest.raises(TemplateRewriteError, match="low or high"):
        cf.check_append(history, cf.action_ids("\\boxed{4}"), user)
