"""Episodes -> the fixed-shape token arrays of a training step (numpy, host side), in the multi-turn views.

- `view="per_turn"`: one segment per transition: its prompt followed by its action.
- `view="chat"`: one segment per episode: the whole token stream (`Episode.stream`; each turn's prompt
  extends the previous prompt + action), every action token marked with its own turn (so it carries that turn's
  advantage on the device). For a causal LM this gives the per-turn view's gradient at a fraction of the tokens.
  An episode of several segments (a workflow's: a summary, a fresh template; its turns own their prompts) packs
  as the per-turn chat view does: one row per run of turns whose prompts extend each other.
- `view="chat_per_turn"`: one segment per run of turns whose prompts extend the previous prompt + action
  (`extending_runs`): the chat view's rows where the template rewrote nothing, a new row where it did.

Segments are packed into rows (first-fit decreasing); `segment_ids` number a row's segments from 1
(0 is padding) and `positions` restart at 0 in each segment. The row length comes from `buckets` and
the row count is padded to a multiple of `batch_divisor`, so XLA sees a bounded set of shapes.
Alignment follows `token_logprobs`: `old_logprobs[:, t] = log p(tokens[:, t] | tokens[:, <t])`, set on
action tokens (where `loss_mask` is True) and 0 elsewhere. Turn-level values (advantages, critic targets) are
not spread here: the device step (`jgem.algos.step`) puts them onto tokens by `token_episode` / `token_turn`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from jgem.rollout.config import VIEWS, View
from jgem.rollout.episode import Episode

DEFAULT_BUCKETS = (128, 256, 512, 1024, 2048, 4096)


@dataclass(frozen=True)
class Segment:
    """One unpacked training sequence (host arrays of equal length)."""

    tokens: np.ndarray  # i32[L]
    loss_mask: np.ndarray  # bool[L]
    old_logprobs: np.ndarray  # f32[L]
    value_mask: np.ndarray  # bool[L]: last prompt token of each turn
    turn_of: np.ndarray  # i32[L]: the turn of each action token and value position, -1 elsewhere
    episode: int  # index into the episodes list
    turns: tuple[int, ...]  # transition indices inside the episode
    # a mixture of experts' recorded routing of each token (int32[L, M, k], -1 where none); None: not recorded
    routes: np.ndarray | None = None


@dataclass(frozen=True)
class PackedBatch:
    """`arrays`: the token-level [B, T] inputs of the device step (`jgem.algos.step`): tokens, positions,
    segment_ids, loss_mask, old_logprobs, value_mask and adapter_ids (each token's episode's policy, 0 on padding);
    with `routing` (a mixture of experts) also expert_ids int32[B, T, M, k] (each token's recorded experts in every
    sparse layer; -1 on padding and on tokens without a record, which the learner's router then picks);
    `placement[s] = (row, start, length)` of segment s (in `segments` order); `metrics`: padding fraction, shape
    and token counts.
    `token_episode[B, T]` / `token_turn[B, T]` (i32, -1 elsewhere): the episode index and turn of every action
    token and value position, with which the device step (`jgem.algos.step`) puts turn-level `[E, K]` arrays onto
    tokens and sums tokens into them."""

    arrays: dict[str, np.ndarray]
    placement: np.ndarray
    segments: tuple[Segment, ...]
    metrics: dict[str, float]
    token_episode: np.ndarray
    token_turn: np.ndarray


def episode_segments(episodes: list[Episode], *, view: View = "chat") -> list[Segment]:
    """Unpacked segments of `episodes`, each action token and value position marked with its turn."""
    segments: list[Segment] = []
    for e, ep in enumerate(episodes):
        if view == "per_turn":
            for k in range(ep.num_turns):
                segments.append(_build(ep, e, [k]))
        elif view == "chat":
            if ep.stream is not None and ep.num_turns:
                segments.append(_build(ep, e, list(range(ep.num_turns))))
            else:  # a workflow's segments (its turns own their prompts): a row per run of extending turns
                for run in extending_runs(ep):
                    segments.append(_build(ep, e, run))
        elif view == "chat_per_turn":
            for run in extending_runs(ep):
                segments.append(_build(ep, e, run))
        else:
            raise ValueError(f"unknown view {view!r}; use one of {', '.join(VIEWS)}")
    return segments


def extending_runs(ep: Episode) -> list[list[int]]:
    """The per-turn chat view's rows of an episode: runs of consecutive turns whose prompt extends the previous
    turn's prompt and action (one row, as in the chat view); a turn whose prompt the template rewrote starts a new
    row, since its action was sampled after that prompt."""
    runs: list[list[int]] = []
    end = np.zeros(0, np.int32)  # the last turn's prompt and action
    for k, t in enumerate(ep.transitions):
        prompt = ep.prompt_ids(k)
        if runs and prompt.size >= end.size and np.array_equal(prompt[: end.size], end):
            runs[-1].append(k)
        else:
            runs.append([k])
        end = np.concatenate([prompt, t.action_ids])
    return runs


def _build(ep: Episode, e: int, turns: list[int]) -> Segment:
    """Segment for `turns` of one episode: the last turn's prompt + action, every listed turn's action
    (found at its prompt's end) marked for the loss."""
    last = ep.transitions[turns[-1]]
    marks: list[tuple[int, int]] = []  # (turn, prompt length = where its action starts)
    if ep.stream is not None and all(ep.transitions[k].prompt_ids is None for k in turns):
        # offsets into the stream (Episode checked that the actions sit there and each prompt extends the last)
        tok = ep.stream[: last.prompt_len + last.action_ids.size].astype(np.int32)  # a copy
        marks = [(k, ep.transitions[k].prompt_len) for k in turns]
        routes = None if ep.routes is None else ep.routes[: tok.size]
    else:  # transitions that own their prompts: chat view only if each prompt extends the previous one
        tokens: list[np.ndarray] = []
        pieces: list[tuple[np.ndarray | None, int]] = []  # each turn's routing of what it adds to the row, its size
        length = 0
        for k in turns:
            t, prompt = ep.transitions[k], ep.prompt_ids(k)
            if length:  # chat view: this prompt must extend everything so far
                prev = np.concatenate(tokens)
                if prompt.size < length or not np.array_equal(prompt[:length], prev):
                    raise ValueError(
                        f"episode {ep.episode_id} turn {k}: the prompt does not extend the previous turn's prompt "
                        "and action, so the episode cannot be one chat-history row; build the prompts with "
                        "ChatFormat (append-only) or use view='per_turn'"
                    )
            tokens.append(prompt[length:])
            marks.append((k, prompt.size))
            tokens.append(t.action_ids)
            end = prompt.size + t.action_ids.size
            pieces.append((None if t.routes is None else t.routes[length:end], end - length))
            length = end
        tok = np.concatenate(tokens).astype(np.int32)
        routes = None
        shape = next((p.shape[1:] for p, _ in pieces if p is not None), None)
        if shape is not None:  # a turn without a record (a teacher's): -1, its tokens' own routing
            routes = np.concatenate([np.full((n, *shape), -1, np.int32) if p is None else p for p, n in pieces])
            if last.routes is not None:  # a turn's last action token, fed only in the next turn's segment
                routes = np.where(routes < 0, last.routes[: routes.shape[0]], routes)
    L = tok.size
    loss_mask = np.zeros(L, bool)
    lp = np.zeros(L, np.float32)
    vmask = np.zeros(L, bool)
    turn_of = np.full(L, -1, np.int32)
    for k, start in marks:
        t = ep.transitions[k]
        end = start + t.action_ids.size
        loss_mask[start:end] = True
        lp[start:end] = t.action_logprobs
        vmask[start - 1] = True  # the critic scores the last prompt token of each turn
        turn_of[start - 1 : end] = k
    return Segment(tok, loss_mask, lp, vmask, turn_of, e, tuple(turns), routes)


def choose_length(longest: int, buckets: tuple[int, ...]) -> int:
    """The smallest bucket that holds the longest segment."""
    fits = [b for b in sorted(buckets) if b >= longest]
    if not fits:
        raise ValueError(
            f"a segment of {longest} tokens does not fit the largest bucket {max(buckets)}; add a larger bucket, "
            "lower the turn limit / max new tokens, or use view='per_turn'"
        )
    return fits[0]


def pack(lengths: list[int], row_len: int) -> list[tuple[int, int]]:
    """First-fit decreasing: (row, start) for each length, deterministic (ties keep input order)."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    free: list[int] = []  # free tokens per row
    where: list[tuple[int, int]] = [(0, 0)] * len(lengths)
    for i in order:
        n = lengths[i]
        if n > row_len:
            raise ValueError(f"segment of {n} tokens is longer than the row length {row_len}")
        row = next((r for r, f in enumerate(free) if f >= n), None)
        if row is None:
            free.append(row_len)
            row = len(free) - 1
        where[i] = (row, row_len - free[row])
        free[row] -= n
    return where


def build_batch(
    episodes: list[Episode],
    *,
    view: View = "chat",
    pad_id: int = 0,
    buckets: tuple[int, ...] = DEFAULT_BUCKETS,
    batch_divisor: int = 1,
    row_buckets: tuple[int, ...] | None = None,
    packing: bool = True,
    routing: tuple[int, int] | None = None,
) -> PackedBatch:
    """Pack `episodes` into fixed-shape token arrays; see the module docstring for the layout. `routing` (M, k): a
    mixture of experts' M sparse layers and k experts per token: the arrays then hold each token's recorded routing,
    `expert_ids` int32[B, T, M, k] (-1 where the episodes hold none).

    Rows are padded to a multiple of `batch_divisor` (e.g. the data-parallel device count times the
    micro-batch count), then up to the smallest of `row_buckets` that holds them, if given, so the
    number of distinct shapes is at most len(buckets) * len(row_buckets).
    """
    if batch_divisor < 1:
        raise ValueError(f"batch_divisor must be >= 1, got {batch_divisor}")
    bad = [r for r in row_buckets or () if r < 1 or r % batch_divisor]
    if bad:
        raise ValueError(f"row_buckets {bad} are not positive multiples of batch_divisor {batch_divisor}")
    segments = episode_segments(episodes, view=view)
    if not segments:
        raise ValueError("no transitions to train on: every episode is empty")
    lengths = [s.tokens.size for s in segments]
    T = choose_length(max(lengths), buckets)
    where = pack(lengths, T) if packing else [(i, 0) for i in range(len(segments))]
    rows = max(r for r, _ in where) + 1
    B = -(-rows // batch_divisor) * batch_divisor
    if row_buckets:
        fits = [b for b in sorted(row_buckets) if b >= B]
        if not fits:
            raise ValueError(
                f"{rows} packed rows exceed the largest row bucket {max(row_buckets)}; add a larger row bucket "
                "or collect fewer episodes per batch"
            )
        B = fits[0]

    tokens = np.full((B, T), pad_id, np.int32)
    positions = np.zeros((B, T), np.int32)
    segment_ids = np.zeros((B, T), np.int32)
    out = {
        "loss_mask": np.zeros((B, T), bool),
        "old_logprobs": np.zeros((B, T), np.float32),
        "value_mask": np.zeros((B, T), bool),
    }
    token_episode = np.full((B, T), -1, np.int32)
    token_turn = np.full((B, T), -1, np.int32)
    adapter_ids = np.zeros((B, T), np.int32)
    expert_ids = None if routing is None else np.full((B, T, *routing), -1, np.int32)
    next_id = np.ones(B, np.int32)
    # number segments left to right within each row
    for i in sorted(range(len(segments)), key=lambda i: where[i]):
        r, s = where[i]
        seg, n = segments[i], lengths[i]
        tokens[r, s : s + n] = seg.tokens
        positions[r, s : s + n] = np.arange(n)
        segment_ids[r, s : s + n] = next_id[r]
        next_id[r] += 1
        for name in out:
            out[name][r, s : s + n] = getattr(seg, name)
        token_turn[r, s : s + n] = seg.turn_of
        adapter_ids[r, s : s + n] = episodes[seg.episode].policy
        token_episode[r, s : s + n] = np.where(seg.turn_of >= 0, seg.episode, -1)
        if expert_ids is not None and seg.routes is not None:
            if seg.routes.shape[1:] != tuple(routing):
                raise ValueError(
                    f"episode {episodes[seg.episode].episode_id} records routes of shape {seg.routes.shape[1:]} per "
                    f"token; the model routes [M, k] = {tuple(routing)}"
                )
            expert_ids[r, s : s + n] = seg.routes

    arrays = {"tokens": tokens, "positions": positions, "segment_ids": segment_ids} | out
    arrays["adapter_ids"] = adapter_ids
    if expert_ids is not None:
        arrays["expert_ids"] = expert_ids
    real = int(sum(lengths))
    metrics = {
        "batch/rows": float(B),
        "batch/row_len": float(T),
        "batch/segments": float(len(segments)),
        "batch/tokens": float(real),
        "batch/loss_tokens": float(out["loss_mask"].sum()),
        "batch/padding_frac": 1.0 - real / float(B * T),
    }
    placement = np.array([(r, s, n) for (r, s), n in zip(where, lengths)], np.int32).reshape(-1, 3)
    return PackedBatch(arrays, placement, tuple(segments), metrics, token_episode, token_turn)


def unpack(arrays: dict[str, np.ndarray], placement: np.ndarray, name: str = "tokens") -> list[np.ndarray]:
    """Per-segment slices of `arrays[name]` (e.g. per-token outputs of the learner), in segment order."""
    x = arrays[name]
    return [x[r, s : s + n] for r, s, n in placement]


def pack_prompts(
    prompts: dict[int, np.ndarray],
    *,
    buckets: tuple[int, ...] = DEFAULT_BUCKETS,
    batch_divisor: int = 1,
    pad_id: int = 0,
) -> dict[str, np.ndarray]:
    """Prompts to score with a forward pass only (no loss), packed into rows like `build_batch`'s segments: tokens,
    positions, segment_ids and `key` i32[B, T], each prompt's dict key at its last token and -1 elsewhere (e.g. the
    states truncated episodes were cut in, keyed by episode: a critic's value there is the episode's bootstrap
    value). Rows are a multiple of `batch_divisor`; no prompts give `batch_divisor` rows of padding."""
    keys = sorted(prompts)
    seqs = [np.asarray(prompts[k], np.int32) for k in keys]
    if any(s.size == 0 for s in seqs):
        raise ValueError("an empty prompt cannot be scored")
    lengths = [s.size for s in seqs]
    T = choose_length(max(lengths, default=1), buckets)
    where = pack(lengths, T)
    rows = max((r for r, _ in where), default=-1) + 1
    B = max(1, -(-rows // batch_divisor)) * batch_divisor
    out = {
        "tokens": np.full((B, T), pad_id, np.int32),
        "positions": np.zeros((B, T), np.int32),
        "segment_ids": np.zeros((B, T), np.int32),
        "key": np.full((B, T), -1, np.int32),
    }
    next_id = np.ones(B, np.int32)
    for i in sorted(range(len(seqs)), key=lambda i: where[i]):
        (r, s), n = where[i], lengths[i]
        out["tokens"][r, s : s + n] = seqs[i]
        out["positions"][r, s : s + n] = np.arange(n)
        out["segment_ids"][r, s : s + n] = next_id[r]
        next_id[r] += 1
        out["key"][r, s + n - 1] = keys[i]
    return out
