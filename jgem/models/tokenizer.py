"""Tokenizers: local HF loading, the shipped tiny tokenizer, and token-exact incremental chat.

`ChatFormat` keeps a conversation as a list of token ids that only ever grows: the prompt of turn 1
is the chat template's rendering, and each later turn appends the model's own sampled action tokens
followed by `observation_tokens(obs)`, the template's text between the end of that action and the
next generation prompt. Earlier tokens are never re-encoded, so the learner trains on exactly what
the sampler produced and conditioned on.

The per-template pieces (end-of-turn token, the text after an action, the text of a new observation)
are derived by rendering the template around sentinel strings, not hard-coded, so the same code serves
Qwen-style (`<|im_start|>`), Qwen3 (with and without thinking) and Llama 3 templates.

Where the stream equals `apply_chat_template(messages, add_generation_prompt=True)` of the same chat:
the template must be *append-only*, i.e. rendering a longer chat must extend the rendering of a
shorter one. `ChatFormat.append_only` probes this. Known exceptions:
- Qwen3 keeps an assistant turn's `<think>...</think>` block only while the turn is the latest, or while its
  reasoning is non-empty and no user message has followed it; with `enable_thinking=False` its generation
  prompt injects an empty think block that later renders drop too. The stream keeps what the model actually
  saw (strictly appending); it equals the template for actions without a think block, and for tool-role
  observations after actions with non-empty reasoning. `rewrites_history` probes for such a template, and
  `check_append` finds the turn where a conversation stops being the template's (the chat view refuses it
  there, naming the template's rule; the per-turn chat view renders every prompt afresh instead:
  jgem/rollout/views.py).
- Llama 3 trims message content, so actions or observations with surrounding whitespace render
  differently from what was sampled.
In every case, `start(messages)` (the per-turn-prompt view) equals the template exactly.

`tools` (JSON schemas, as `apply_chat_template(..., tools=...)` takes them) go to every render: the
template lists them (Qwen's `# Tools` system block, Llama 3.1's first user message), and a native
tool-call format's results arrive as `tool` / `ipython` messages (jgem/envs/tools/formats.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jinja2 import TemplateError

import jgem.models.hf_quiet  # noqa: F401  before transformers: its no-PyTorch notice is noise here

# isort: split
from transformers import PreTrainedTokenizerBase

TINY_TOKENIZER_DIR = Path(__file__).resolve().parent / "assets" / "tiny_tokenizer"

# Sentinels rendered through the template to locate its per-turn pieces; plain ASCII words so no
# template trims, escapes or splits them.
_S_USER = "JGEMSENTINELUSER"
_S_ASSISTANT = "JGEMSENTINELASSISTANT"
_S_OBS = "JGEMSENTINELOBSERVATION"
_S_THINK = "JGEMSENTINELTHINK"

Message = dict[str, Any]


def load_tokenizer(path: str | Path | None = None) -> PreTrainedTokenizerBase:
    """A fast HF tokenizer from a local directory; `None` gives the shipped tiny tokenizer."""
    directory = Path(path) if path is not None else TINY_TOKENIZER_DIR
    if not directory.is_dir():
        raise FileNotFoundError(
            f"tokenizer directory {directory} does not exist; pass a local HF model directory "
            "(jgem never downloads from a hub) or None for the tiny tokenizer "
            "(rebuild it with scripts/build_tiny_tokenizer.py if it is missing)"
        )
    if not (directory / "tokenizer.json").exists():
        raise FileNotFoundError(f"{directory} has no tokenizer.json; jgem needs a fast (tokenizers) tokenizer")
    # A directory whose config names the generic fast class (the shipped tokenizer, Llama 3's) loads as AutoTokenizer
    # would load it, without importing AutoTokenizer: that import pulls in transformers' model configs and with them
    # PyTorch where it is installed (about 5 s of every process's start-up).
    config = directory / "tokenizer_config.json"
    cls = json.loads(config.read_text()).get("tokenizer_class") if config.exists() else None
    if cls in ("PreTrainedTokenizerFast", "TokenizersBackend"):
        from transformers import PreTrainedTokenizerFast

        return PreTrainedTokenizerFast.from_pretrained(str(directory), local_files_only=True)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(directory), local_files_only=True)


class TemplateRewriteError(ValueError):
    """The chat template renders an earlier turn differently from what the append-only stream holds."""


class ChatFormat:
    """Builds a chat's token stream turn by turn, token-exact with the tokenizer's chat template.

    `system` is prepended to `start`'s messages when they have no system message of their own.
    `enable_thinking` (Qwen3) and `template_kwargs` (e.g. Llama's `date_string`) go to the template, and so do
    `tools` (the functions' JSON schemas of a native tool-call format); a template that does not list them is
    refused.
    """

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase,
        *,
        system: str | None = None,
        enable_thinking: bool | None = None,
        template_kwargs: dict[str, Any] | None = None,
        tools: Sequence[dict[str, Any]] | None = None,
    ) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError(
                f"{type(tokenizer).__name__} has no chat_template; load a chat/instruct tokenizer or set "
                "tokenizer.chat_template to a Jinja template"
            )
        self.tokenizer = tokenizer
        self.system = system
        self.tools: list[dict[str, Any]] | None = [dict(t) for t in tools] if tools else None
        self.template_kwargs = dict(template_kwargs or {})
        if enable_thinking is not None:
            self.template_kwargs["enable_thinking"] = enable_thinking
        if self.tools:
            self._check_lists_tools()
        self.end_of_turn_id, self._end_of_turn_text = self._derive_end_of_turn()
        eos = tokenizer.eos_token_id
        self.stop_token_ids: tuple[int, ...] = tuple(
            sorted({self.end_of_turn_id} | ({eos} if eos is not None else set()))
        )
        self.pad_id: int = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.end_of_turn_id
        self.append_only: bool = self._probe_append_only()
        self.rewrites_history: bool = self._probe_rewrites()

    # -- rendering ---------------------------------------------------------------------------------

    def render(self, messages: Sequence[Message], *, add_generation_prompt: bool) -> str:
        """The template's text for `messages` (the system message added as in `start`)."""
        return self.tokenizer.apply_chat_template(
            self._with_system(messages),
            tools=self.tools,
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
            **self.template_kwargs,
        )

    def encode(self, text: str) -> list[int]:
        # The chat template already wrote any BOS; apply_chat_template tokenises the same way.
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def _with_system(self, messages: Sequence[Message]) -> list[Message]:
        messages = list(messages)
        if self.system is not None and not (messages and messages[0].get("role") == "system"):
            messages.insert(0, {"role": "system", "content": self.system})
        return messages

    def _derive_end_of_turn(self) -> tuple[int, str]:
        """The special token the template writes right after an assistant message's content."""
        chat = [{"role": "user", "content": _S_USER}, {"role": "assistant", "content": _S_ASSISTANT}]
        text = self.render(chat, add_generation_prompt=False)
        tail = text[text.rfind(_S_ASSISTANT) + len(_S_ASSISTANT) :]
        ids = self.encode(tail)
        special = set(self.tokenizer.all_special_ids) | set(self.tokenizer.added_tokens_decoder)
        if not ids or ids[0] not in special:
            raise ValueError(
                f"the chat template ends an assistant turn with {tail[:40]!r}, which does not start with a special "
                "token; ChatFormat needs an end-of-turn special token (like <|im_end|> or <|eot_id|>) to stop on"
            )
        eot_text = self.tokenizer.convert_ids_to_tokens(ids[0])
        if not tail.startswith(eot_text):
            raise ValueError(f"cannot locate the end-of-turn token {eot_text!r} in the template's text {tail!r}")
        return ids[0], eot_text

    def _check_lists_tools(self) -> None:
        prompt = self.render([{"role": "user", "content": _S_USER}], add_generation_prompt=True)
        for schema in self.tools or ():
            name = schema.get("function", schema).get("name")
            if not isinstance(name, str) or name not in prompt:
                raise ValueError(
                    f"the chat template does not list the tools it is given (function {name!r} is not in its prompt), "
                    "so the model would never see them; native tool-call formats (hermes, llama3_json) need a "
                    "template that renders tools= (Qwen2.5, Qwen3, Llama 3.1 and later): load such a tokenizer "
                    "(--model.tokenizer-path), or use --env.tool-format gem_tags, whose instructions are part of the "
                    "observation"
                )

    def _probe_rewrites(self) -> bool:
        """Whether the template can render an earlier assistant turn differently once more messages follow (probed
        with a plain action and with `<think>` actions, an empty and a non-empty one, each followed by a user and by a
        tool message)."""
        first = [{"role": "user", "content": _S_USER}]
        prompt = self.render(first, add_generation_prompt=True)
        for action in (
            _S_ASSISTANT,
            f"<think>\n{_S_THINK}\n</think>\n\n{_S_ASSISTANT}",
            f"<think>\n\n</think>\n\n{_S_ASSISTANT}",
        ):
            for role in ("user", "tool"):
                chat = [*first, {"role": "assistant", "content": action}, {"role": role, "content": _S_OBS}]
                try:
                    text = self.render(chat, add_generation_prompt=True)
                except TemplateError:  # a template without this role: nothing to rewrite
                    continue
                if not text.startswith(prompt + action + self._end_of_turn_text):
                    return True
        return False

    def check_append(self, history: Sequence[Message], action_ids: Sequence[int], new: Sequence[Message]) -> None:
        """Raise `TemplateRewriteError` when the append-only stream stops being the template's rendering of the
        conversation: when the messages `new`, following the action, make the template render differently what the
        stream already holds (an earlier turn, the generation prompt, or the action as sampled).

        One difference is not a rewrite: an action the template would never write as it stands (a Llama action with
        surrounding whitespace, a think block laid out otherwise) renders in the template's own layout wherever it
        stands, as the latest turn as well as once messages follow; the stream keeps the tokens the policy sampled.
        An action the template does write as it stands (what a model trained on it writes) must stay so, or the chat
        view refuses here. Two to three renders of the chat: `observation_suffix` runs it only for a template that
        `rewrites_history`."""
        before = self.render(history, add_generation_prompt=True)
        action = self.action_text(action_ids)
        chat = [*history, {"role": "assistant", "content": action}]
        after = self.render([*chat, *new], add_generation_prompt=True)
        if not after.startswith(before):
            self._refuse(history, before, after, new, action)
        if after.startswith(action + self._end_of_turn_text, len(before)):
            return  # exact: the stream is the template's rendering so far
        # the action's turn renders otherwise: fine only where the template writes it so as the latest turn too
        latest = self.render(chat, add_generation_prompt=False)
        if latest.startswith(before):
            turn = latest[len(before) : latest.find(self._end_of_turn_text, len(before))]
            if after.startswith(turn + self._end_of_turn_text, len(before)) and turn != action:
                return
        self._refuse(history, before + action + self._end_of_turn_text, after, new, action)

    def _refuse(self, history: Sequence[Message], kept: str, after: str, new: Sequence[Message], action: str) -> None:
        """The refusal of `check_append`: where the template's rendering `after` leaves what the stream holds (`kept`
        is the stream's text up to there), which part of the conversation that is, and the template's rule."""
        at = next((i for i, (a, b) in enumerate(zip(kept, after)) if a != b), min(len(kept), len(after)))
        roles = " and ".join(dict.fromkeys(str(m.get("role")) for m in new)) or "new"
        prompt_starts = len(self.render(history, add_generation_prompt=False)) if history else 0
        if at < prompt_starts:
            part = "an earlier turn"
        elif at < len(self.render(history, add_generation_prompt=True)):
            part = "the generation prompt the action followed"
        else:
            part = "the action just played"
        dropped = _dropped_think(kept, after, at)
        if dropped is not None and part == "the generation prompt the action followed":
            rule = (
                "the generation prompt's empty <think></think> block (enable_thinking=False) is not kept in the "
                "earlier turns it rendered"
            )
        elif dropped == "":
            rule = "an assistant turn's empty <think></think> block is kept only while it is the latest turn"
        elif dropped is not None:
            rule = (
                "an assistant turn's <think> block is dropped once a later user message follows it (kept only between "
                "the latest user message and the end)"
            )
        else:
            rule = f"the template writes {part} otherwise once a {roles} message follows"
        raise TemplateRewriteError(
            f"the chat template rewrites {part} once a {roles} message follows: "
            f"{kept[max(0, at - 30) : at + 40]!r} becomes {after[max(0, at - 30) : at + 40]!r}. The template's rule: "
            f"{rule}. The chat view appends to one token stream and never re-renders it, so it would no longer be the "
            "template's rendering of the conversation (what a server shows the model). Use the per-turn chat view "
            "(--rollout.view chat_per_turn: the conversation's messages rendered afresh every turn, as a server "
            "does), the per-turn view (--rollout.view per_turn: GEM's history in one user message), or a template "
            "that keeps earlier turns"
        )

    def _probe_append_only(self) -> bool:
        """Whether rendering a longer chat extends a shorter one (then the stream equals the template)."""
        first = [{"role": "user", "content": _S_USER}]
        prompt = self.render(first, add_generation_prompt=True)
        longer = first + [{"role": "assistant", "content": _S_ASSISTANT}, {"role": "user", "content": _S_OBS}]
        expected = prompt + _S_ASSISTANT + self._end_of_turn_text
        return self.render(longer, add_generation_prompt=True).startswith(expected)

    # -- the incremental stream --------------------------------------------------------------------

    def start(self, messages: Sequence[Message]) -> list[int]:
        """Prompt token ids for `messages`, ending with the generation prompt (exactly the template's)."""
        if not messages:
            raise ValueError("start() needs at least one message, e.g. [{'role': 'user', 'content': obs}]")
        return self.encode(self.render(messages, add_generation_prompt=True))

    def observation_tokens(self, content: str | Sequence[Message], role: str = "user") -> list[int]:
        """Tokens to append after an action that ended with a stop token: the new message(s) and the
        next generation prompt. `content` is a string (one message of `role`) or a list of messages
        (e.g. several tool results)."""
        new = [{"role": role, "content": content}] if isinstance(content, str) else [dict(m) for m in content]
        if not new:
            raise ValueError("observation_tokens() needs at least one message")
        context = [{"role": "user", "content": _S_USER}, {"role": "assistant", "content": _S_ASSISTANT}]
        text = self.render(context + new, add_generation_prompt=True)
        tail = text[text.rfind(_S_ASSISTANT) + len(_S_ASSISTANT) :]
        if not tail.startswith(self._end_of_turn_text):
            raise ValueError(
                f"the template does not end the assistant turn with {self._end_of_turn_text!r} when a {role!r} "
                f"message follows (got {tail[:40]!r}); this template is not supported incrementally"
            )
        # The sampled action already ends with the end-of-turn token; the rest is ours to append.
        return self.encode(tail[len(self._end_of_turn_text) :])

    def close_action(self, action_ids: Sequence[int]) -> list[int]:
        """Tokens that end a truncated action (no stop token) so the stream stays well-formed; these are
        conditioning only, never trained on. Empty when the action already ends with a stop token."""
        if action_ids and action_ids[-1] in self.stop_token_ids:
            return []
        return [self.end_of_turn_id]

    def ends_with_stop(self, action_ids: Sequence[int]) -> bool:
        return bool(action_ids) and action_ids[-1] in self.stop_token_ids

    def action_text(self, action_ids: Sequence[int]) -> str:
        """The action as text for the env: decoded once, without its trailing stop token."""
        ids = list(action_ids)
        if ids and ids[-1] in self.stop_token_ids:
            ids = ids[:-1]
        return self.tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def action_ids(self, text: str) -> list[int]:
        """Canonical tokens of an action `text` plus the end-of-turn token (scripted agents, tests)."""
        return self.encode(text) + [self.end_of_turn_id]


_THINK = re.compile(r"<think>(.*?)</think>\s*", re.DOTALL)


def _dropped_think(kept: str, after: str, at: int) -> str | None:
    """The reasoning of the `<think>` block that `kept` holds at the first difference `at` and `after` leaves out
    (the template dropped it), or None when the difference is anything else."""
    m = _THINK.search(kept, max(0, at - len("<think>")))
    if m is None or m.start() > at:
        return None
    return m.group(1).strip() if after.startswith(kept[m.end() : m.end() + 40], m.start()) else None
