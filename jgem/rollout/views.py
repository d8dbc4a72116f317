"""The multi-turn views' token layouts: a turn's prompt from the env's observation.

Chat view (`chat`): an episode is one growing token stream: the first prompt from the chat template, then for every
turn the sampled action ids exactly as sampled, a closing token if the action was cut, and
`ChatFormat.observation_tokens` of the env's new messages. Nothing is decoded and re-encoded, so each turn's
prompt extends the previous one and the rollout engine's KV cache for the stream lives on.
Per-turn chat view (`chat_per_turn`): the same messages (the ChatWrapper's), but every turn's prompt is the
template's rendering of the whole conversation so far, as a server renders each request: exact for every template,
also one that rewrites earlier turns. Where a prompt extends the previous prompt and action (a template that
rewrites nothing), the engine keeps the KV cache and the batch trains the turns as one row, as in the chat view;
where the template rewrote an earlier turn, the engine prefills from the first token that changed and the turn
trains in a row of its own (its action was sampled after its own prompt, not after the stream's).
Per-turn view (`per_turn`, GEM style): every turn's prompt is a fresh template of the history wrapper's text (one
user message), not a prefix of the next one.
A template that re-renders earlier turns once more messages follow (Qwen3 drops an assistant turn's empty
`<think>` block once anything follows it, and a non-empty one once a user message does:
`ChatFormat.rewrites_history`) would make the chat view's stream differ from the template's rendering of the same
conversation; the chat view checks each observation of such a template and refuses the first that would
(`ChatFormat.check_append`, an error that names the template's rule and the per-turn chat view).

The rollout engine and the scripted teacher both build prompts here, so RL and the warm start see one layout.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from jgem.models.tokenizer import ChatFormat
from jgem.rollout.config import View


def first_prompt(chat: ChatFormat, view: View, obs: Any) -> tuple[list[int], int]:
    """(prompt ids, messages in the stream) for a reset observation."""
    if view in ("chat", "chat_per_turn"):  # obs: the ChatWrapper's messages
        return chat.start(obs), len(obs)
    return chat.start([{"role": "user", "content": obs}]), 0


def next_prompt(
    chat: ChatFormat, view: View, prompt: list[int], num_messages: int, action_ids: list[int], obs: Any
) -> tuple[list[int], int]:
    """The next turn's prompt after `action_ids` was played and `obs` came back.

    Chat view: the stream grows by the action exactly as sampled, a closing token if it was cut, and the new
    message(s) of the ChatWrapper (`obs[num_messages]` is the assistant action, already in the stream).
    Per-turn chat view: a fresh template of the messages. Per-turn view: a fresh template of the history text.
    """
    if view != "chat":
        return first_prompt(chat, view, obs)
    return prompt + list(action_ids) + observation_suffix(chat, num_messages, action_ids, obs), len(obs)


def observation_suffix(chat: ChatFormat, num_messages: int, action_ids: list[int], obs: Any) -> list[int]:
    """Chat view: what follows an action in the stream: its closing token if it was cut, then the new messages of
    the ChatWrapper's `obs` (`obs[num_messages]` is the action itself) and the next generation prompt."""
    new = obs[num_messages + 1 :]
    if chat.rewrites_history:
        chat.check_append(obs[:num_messages], action_ids, new)
    return chat.close_action(action_ids) + chat.observation_tokens(new)


def wrappers_for_view(view: View, system_prompt: str | None = None) -> list:
    """The pool wrappers a view needs (picklable, so process backends can build them)."""
    from jgem.envs.wrappers import ChatWrapper, HistoryWrapper

    if view in ("chat", "chat_per_turn"):
        return [partial(ChatWrapper, system_prompt=system_prompt)]
    return [partial(HistoryWrapper, mode="concat_with_action")]


def common_prefix(a: list[int], b: list[int]) -> int:
    """How many leading tokens `a` and `b` share (the per-turn chat view keeps the KV cache of those)."""
    n = min(len(a), len(b))
    x, y = np.asarray(a[:n]), np.asarray(b[:n])
    differ = np.flatnonzero(x != y)
    return int(differ[0]) if differ.size else n
