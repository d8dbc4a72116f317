"""Episodes -> a step's token arrays: exact layout, packing round trips, alignment, bucket bounds, and the turn index
arrays with which the device step puts each turn's advantage on its own action tokens."""

from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jgem.rollout.batch import PackedBatch, build_batch, choose_length, episode_segments, pack, unpack
from jgem.rollout.episode import Episode, Transition, turn_arrays


def two_episodes() -> list[Episode]:
    a = Episode(
        episode_id=0,
        group_id=7,
        env_id="game:GuessTheNumber-v0-easy",
        seed=1,
        transitions=[
            Transition(0, 0, 3, [10, 11], [-0.1, -0.2], reward=0.0),  # prompt [1, 2, 3]
            Transition(0, 1, 7, [12], [-0.3], reward=1.0),  # prompt [1, 2, 3, 10, 11, 4, 5]
        ],
        success=True,
        stream=[1, 2, 3, 10, 11, 4, 5, 12],
    )
    b = Episode(
        1, 7, "game:GuessTheNumber-v0-easy", 2, [Transition(1, 0, 2, [13, 14, 15], [-0.4, -0.5, -0.6])],
        stream=[6, 7, 13, 14, 15],
    )  # fmt: skip
    return [a, b]


def owning_prompts(ep: Episode) -> Episode:
    """The same episode with every transition holding its own prompt copy (as the per-turn view records it)."""
    trans = [dataclasses.replace(t, prompt_ids=ep.prompt_ids(k).copy()) for k, t in enumerate(ep.transitions)]
    return dataclasses.replace(ep, transitions=trans, stream=None)


ADV = np.array([[1.0, 2.0], [3.0, 0.0]], np.float32)


def on_tokens(table: np.ndarray, p: PackedBatch, where: str = "loss_mask") -> np.ndarray:
    """f32[B, T]: a per-turn `table[E, K]` at each `where` token's (episode, turn), 0 elsewhere: what the device step
    (`jgem.algos.step`) does with the batch's `token_episode` / `token_turn` (e.g. advantages on action tokens)."""
    mask = p.arrays[where]
    assert (p.token_episode[mask] >= 0).all() and (p.token_turn[mask] >= 0).all(), f"a {where} token has no turn"
    return np.where(mask, table[p.token_episode.clip(0), p.token_turn.clip(0)], 0.0).astype(np.float32)


def test_episode_records():
    a, b = two_episodes()
    assert a.num_turns == 2 and a.episode_return == 1.0 and a.num_action_tokens == 3
    np.testing.assert_array_equal(a.rewards, [0.0, 1.0])
    assert a.stream.dtype == np.int32 and a.prompt_ids(0).dtype == np.int32
    np.testing.assert_array_equal(a.prompt_ids(1), [1, 2, 3, 10, 11, 4, 5])
    with pytest.raises(ValueError, match="one log-prob per sampled token"):
        Transition(0, 0, 1, [2, 3], [-1.0])
    with pytest.raises(ValueError, match="empty prompt"):
        Transition(0, 0, 0, [2], [-1.0])
    with pytest.raises(ValueError, match="holds transition 0 of episode 5"):
        Episode(0, 0, "x", None, [Transition(5, 0, 1, [2], [-1.0], prompt_ids=[1])])


def test_chat_view_transitions_hold_offsets_not_prompt_copies():
    a, b = two_episodes()
    for ep in (a, b):
        for k, t in enumerate(ep.transitions):
            assert t.prompt_ids is None
            assert ep.prompt_ids(k).size == t.prompt_len and np.shares_memory(ep.prompt_ids(k), ep.stream)
    # the same episodes with owned prompt copies pack bit-identically in both views
    for view in ("chat", "per_turn"):
        want = build_batch([a, b], view=view, buckets=(16,))
        got = build_batch([owning_prompts(a), owning_prompts(b)], view=view, buckets=(16,))
        assert want.arrays.keys() == got.arrays.keys()
        for name in want.arrays:
            np.testing.assert_array_equal(got.arrays[name], want.arrays[name])
        np.testing.assert_array_equal(got.token_episode, want.token_episode)
        np.testing.assert_array_equal(got.token_turn, want.token_turn)


def test_episode_refuses_actions_off_its_stream():
    t0, t1 = two_episodes()[0].transitions
    stream = [1, 2, 3, 10, 11, 4, 5, 12]
    with pytest.raises(ValueError, match="episode 0 turn 1: the action does not match the stream"):
        Episode(0, 0, "x", None, [t0, t1], stream=[1, 2, 3, 10, 11, 4, 5, 13])
    with pytest.raises(ValueError, match="episode 0 turn 1: the action does not match the stream"):
        Episode(0, 0, "x", None, [t0, t1], stream=stream[:-1])  # the stream ends inside the action
    with pytest.raises(ValueError, match="episode 0 turn 1: prompt_len=4 ends before the previous turn's action"):
        Episode(0, 0, "x", None, [t0, dataclasses.replace(t1, prompt_len=4)], stream=[1, 2, 3, 10, 11, 12])
    with pytest.raises(ValueError, match="episode 0 turn 0 has no prompt_ids and the episode has no stream"):
        Episode(0, 0, "x", None, [t0, t1])
    with pytest.raises(ValueError, match="stream must be 1-D"):
        Episode(0, 0, "x", None, [t0, t1], stream=[stream])


def test_transition_prompt_len_is_its_own_prompts_size():
    assert Transition(0, 0, 3, [4], [-1.0], prompt_ids=[1, 2, 3]).prompt_ids.dtype == np.int32
    with pytest.raises(ValueError, match="prompt_len=2 but prompt_ids holds 3 tokens"):
        Transition(0, 0, 2, [4], [-1.0], prompt_ids=[1, 2, 3])
    with pytest.raises(ValueError, match="empty prompt"):
        Transition(0, 0, 0, [4], [-1.0], prompt_ids=[])


def test_turn_arrays_pad_and_mask():
    a, b = two_episodes()
    t = turn_arrays([a, b], num_turns=3, num_rows=4)
    np.testing.assert_array_equal(t["rewards"], [[0, 1, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0]])
    np.testing.assert_array_equal(t["turn_mask"], [[1, 1, 0], [1, 0, 0], [0, 0, 0], [0, 0, 0]])
    np.testing.assert_array_equal(t["group_ids"], [7, 7, -3, -4])
    assert set(t) == {"rewards", "turn_mask", "group_ids", "role_ids", "policy_ids"}
    with pytest.raises(ValueError, match="longest episode"):
        turn_arrays([a], num_turns=1)


def test_two_episodes_chat_view_exact_arrays():
    p = build_batch(two_episodes(), view="chat", buckets=(16, 32), pad_id=99)
    arr = p.arrays
    assert set(arr) == {"tokens", "positions", "segment_ids", "loss_mask", "old_logprobs", "value_mask", "adapter_ids"}
    assert not arr["adapter_ids"].any()  # both episodes are policy 0's
    assert arr["tokens"].shape == (1, 16)
    np.testing.assert_array_equal(arr["tokens"][0], [1, 2, 3, 10, 11, 4, 5, 12, 6, 7, 13, 14, 15, 99, 99, 99])
    np.testing.assert_array_equal(arr["positions"][0], [0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 0, 0, 0])
    np.testing.assert_array_equal(arr["segment_ids"][0], [1] * 8 + [2] * 5 + [0] * 3)
    np.testing.assert_array_equal(arr["loss_mask"][0], [0, 0, 0, 1, 1, 0, 0, 1, 0, 0, 1, 1, 1, 0, 0, 0])
    np.testing.assert_array_equal(arr["value_mask"][0], [0, 0, 1, 0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0])
    # the episode and turn of each action token and value position: where the device step puts turn-level values
    np.testing.assert_array_equal(p.token_episode[0], [-1, -1, 0, 0, 0, -1, 0, 0, -1, 1, 1, 1, 1, -1, -1, -1])
    np.testing.assert_array_equal(p.token_turn[0], [-1, -1, 0, 0, 0, -1, 1, 1, -1, 0, 0, 0, 0, -1, -1, -1])
    np.testing.assert_array_equal(on_tokens(ADV, p)[0], [0, 0, 0, 1, 1, 0, 0, 2, 0, 0, 3, 3, 3, 0, 0, 0])
    np.testing.assert_allclose(
        arr["old_logprobs"][0], [0, 0, 0, -0.1, -0.2, 0, 0, -0.3, 0, 0, -0.4, -0.5, -0.6, 0, 0, 0], rtol=1e-6
    )
    assert arr["loss_mask"].dtype == bool and arr["tokens"].dtype == np.int32
    assert p.metrics["batch/padding_frac"] == pytest.approx(3 / 16)
    assert p.metrics["batch/loss_tokens"] == 6
    np.testing.assert_array_equal(p.placement, [[0, 0, 8], [0, 8, 5]])


def test_two_episodes_per_turn_view_exact_arrays_with_critic():
    returns = np.array([[0.9, 1.0], [0.3, 0.0]], np.float32)
    p = build_batch(two_episodes(), view="per_turn", buckets=(8, 16), batch_divisor=2)
    arr = p.arrays
    # first-fit decreasing: the 8-token segment fills row 0; the two 5-token ones need a row each; 3 rows -> 4
    assert arr["tokens"].shape == (4, 8)
    np.testing.assert_array_equal(arr["tokens"][:, :], [
        [1, 2, 3, 10, 11, 4, 5, 12],
        [1, 2, 3, 10, 11, 0, 0, 0],
        [6, 7, 13, 14, 15, 0, 0, 0],
        [0] * 8,
    ])  # fmt: skip
    np.testing.assert_array_equal(arr["segment_ids"].max(axis=1), [1, 1, 1, 0])
    np.testing.assert_array_equal(arr["loss_mask"][0], [0, 0, 0, 0, 0, 0, 0, 1])  # earlier turns are context only
    np.testing.assert_array_equal(on_tokens(ADV, p)[1], [0, 0, 0, 1, 1, 0, 0, 0])
    np.testing.assert_array_equal(arr["value_mask"][0], [0, 0, 0, 0, 0, 0, 1, 0])
    np.testing.assert_array_equal(arr["value_mask"][1], [0, 0, 1, 0, 0, 0, 0, 0])
    # the critic's targets go to the value positions: the last prompt token of each turn
    targets = on_tokens(returns, p, "value_mask")
    np.testing.assert_allclose([targets[0, 6], targets[1, 2], targets[2, 1]], [1.0, 0.9, 0.3])
    assert np.count_nonzero(arr["value_mask"]) == np.count_nonzero(targets) == 3
    assert p.metrics["batch/padding_frac"] == pytest.approx(1 - 18 / 32)


def test_chat_view_packs_a_prompt_that_does_not_extend_as_a_new_segment():
    """A turn whose prompt does not extend the last prompt and action (a workflow's new segment: a summary, a fresh
    template) starts a row of its own, with its own ids; the turns before it keep theirs."""
    a = owning_prompts(two_episodes()[0])
    a.transitions[1] = dataclasses.replace(a.transitions[1], prompt_len=6, prompt_ids=[9, 9, 9, 9, 9, 9])
    b = build_batch([a], view="chat")
    assert [s.turns for s in b.segments] == [(0,), tuple(range(1, a.num_turns))]
    second = b.segments[1]
    assert second.tokens[:6].tolist() == [9] * 6 and not second.loss_mask[:6].any()


def test_errors():
    eps = two_episodes()
    with pytest.raises(ValueError, match="largest bucket 4"):
        build_batch(eps, buckets=(4,))
    with pytest.raises(ValueError, match="unknown view"):
        build_batch(eps, view="rows")  # type: ignore[arg-type]


def test_row_buckets():
    eps = two_episodes()
    p = build_batch(eps, view="per_turn", buckets=(8,), batch_divisor=2, row_buckets=(2, 8, 16))
    assert p.arrays["tokens"].shape == (8, 8)  # 3 rows -> 4 (divisor) -> 8 (row bucket)
    assert p.metrics["batch/padding_frac"] == pytest.approx(1 - 18 / 64)
    with pytest.raises(ValueError, match="largest row bucket 2"):
        build_batch(eps, view="per_turn", buckets=(8,), row_buckets=(2,))
    with pytest.raises(ValueError, match="multiples of batch_divisor 4"):
        build_batch(eps, batch_divisor=4, row_buckets=(4, 6))


def test_choose_length_and_pack():
    assert choose_length(100, (512, 128, 256)) == 128
    assert choose_length(128, (128, 256)) == 128
    where = pack([5, 3, 8, 2, 6], 8)
    assert where == [(2, 0), (2, 5), (0, 0), (1, 6), (1, 0)]  # 8 | 6+2 | 5+3


# -- properties -----------------------------------------------------------------------------------


@st.composite
def chat_episodes(draw):
    """Episodes whose prompts extend each other like ChatFormat's stream."""
    eps = []
    for e in range(draw(st.integers(1, 5))):
        stream = draw(st.lists(st.integers(1, 50), min_size=1, max_size=6))
        trans = []
        for k in range(draw(st.integers(1, 4))):
            if k:  # the observation after the previous action
                stream += draw(st.lists(st.integers(1, 50), min_size=1, max_size=4))
            action = draw(st.lists(st.integers(51, 99), min_size=1, max_size=5))
            lps = [-0.01 * (i + 1) - k for i in range(len(action))]
            trans.append(Transition(e, k, len(stream), action, lps, reward=float(k)))
            stream += action
        eps.append(Episode(e, e // 2, "x", e, trans, stream=stream))
    return eps


@settings(max_examples=60, deadline=None)
@given(eps=chat_episodes(), view=st.sampled_from(["chat", "per_turn"]), divisor=st.sampled_from([1, 2, 8]))
def test_packing_round_trip_and_invariants(eps, view, divisor):
    K = max(e.num_turns for e in eps)
    adv = np.arange(len(eps) * K, dtype=np.float32).reshape(len(eps), K) + 1.0
    buckets = (16, 32, 64)
    p = build_batch(eps, view=view, buckets=buckets, batch_divisor=divisor)
    arr = p.arrays
    B, T = arr["tokens"].shape
    segs = episode_segments(eps, view=view)
    lengths = [s.tokens.size for s in segs]
    assert B % divisor == 0 and min(b for b in buckets if b >= max(lengths)) == T
    assert divisor + len(segs) > B  # never more rows than one per segment, plus divisor padding
    # round trip: every segment comes back intact, in order
    for name in ("tokens", "loss_mask", "old_logprobs", "value_mask"):
        for got, seg in zip(unpack(arr, p.placement, name), segs, strict=True):
            np.testing.assert_array_equal(got, getattr(seg, name))
    for got, seg in zip(unpack({"turn": p.token_turn}, p.placement, "turn"), segs, strict=True):
        np.testing.assert_array_equal(got, seg.turn_of)
    for r, s, n in p.placement:
        np.testing.assert_array_equal(arr["positions"][r, s : s + n], np.arange(n))
        assert len(set(arr["segment_ids"][r, s : s + n])) == 1 and arr["segment_ids"][r, s] > 0
    assert (arr["segment_ids"] > 0).sum() == sum(lengths)
    assert p.metrics["batch/padding_frac"] == pytest.approx(1 - sum(lengths) / (B * T))
    # masks: only action tokens carry loss and old log-probs; only they and the value positions have a turn
    mask = arr["loss_mask"]
    assert not arr["old_logprobs"][~mask].any()
    assert mask.sum() == sum(e.num_action_tokens for e in eps)
    assert arr["value_mask"].sum() == sum(e.num_turns for e in eps) and not (mask & arr["value_mask"]).any()
    marked = mask | arr["value_mask"]
    assert ((p.token_episode >= 0) == marked).all() and ((p.token_turn >= 0) == marked).all()
    # every turn's advantage lands on exactly its own action tokens (as the device step spreads it)
    adv_tokens = on_tokens(adv, p)
    expect = sorted(float(adv[e, k]) for e, ep in enumerate(eps) for k, t in enumerate(ep.transitions)
                    for _ in t.action_ids)  # fmt: skip
    assert sorted(adv_tokens[mask].tolist()) == expect


def _action_contexts(p: PackedBatch, adv: np.ndarray) -> Counter:
    """(context before the token within its segment, token, advantage, old log-prob) for every loss token, its
    advantage `adv[E, K]` spread by the batch's turn index arrays."""
    arr, a = p.arrays, on_tokens(adv, p)
    out = Counter()
    for r, t in zip(*np.nonzero(arr["loss_mask"])):
        seg = arr["segment_ids"][r]
        ctx = arr["tokens"][r, :t][seg[:t] == seg[t]]
        out[(tuple(ctx), int(arr["tokens"][r, t]), float(a[r, t]), float(arr["old_logprobs"][r, t]))] += 1
    return out


@settings(max_examples=40, deadline=None)
@given(eps=chat_episodes())
def test_chat_view_conditions_each_action_token_like_per_turn(eps):
    """For a causal LM the loss of a token depends only on its segment's earlier tokens: the chat view
    presents every action token with the same context, advantage and log-prob as the per-turn view,
    so both views have the same loss and gradient."""
    K = max(e.num_turns for e in eps)
    adv = np.random.default_rng(0).normal(size=(len(eps), K)).astype(np.float32)
    chat = build_batch(eps, view="chat", buckets=(64,))
    per_turn = build_batch(eps, view="per_turn", buckets=(64,))
    assert _action_contexts(chat, adv) == _action_contexts(per_turn, adv)
    assert chat.metrics["batch/tokens"] <= per_turn.metrics["batch/tokens"]


@settings(max_examples=40, deadline=None)
@given(eps=chat_episodes(), data=st.data())
def test_the_per_turn_chat_view_conditions_each_action_token_on_its_own_prompt(eps, data):
    """The per-turn chat view's episodes own their prompts, some rewritten by the template (a token of an earlier
    turn changed): every action token keeps the context, advantage and log-prob it has alone (the per-turn view), a
    row runs on only while the prompts extend, and with nothing rewritten the rows are the chat view's."""
    K = max(e.num_turns for e in eps)
    adv = np.random.default_rng(0).normal(size=(len(eps), K)).astype(np.float32)
    owned = [owning_prompts(e) for e in eps]
    rows = lambda p: int(p.arrays["segment_ids"].max(axis=1).sum())
    same = build_batch(owned, view="chat_per_turn", buckets=(64,))
    assert rows(same) == len(eps) and _action_contexts(same, adv) == _action_contexts(
        build_batch(eps, view="chat", buckets=(64,)), adv
    )
    rewritten = 0
    for e, ep in enumerate(owned):
        for k in range(1, ep.num_turns):
            if data.draw(st.booleans(), label=f"rewrite episode {e} turn {k}"):
                # a token before turn k's observation changes from turn k on (a new value: no drawn token is >= 100)
                prev = ep.transitions[k - 1]
                at = data.draw(st.integers(0, prev.prompt_len + prev.action_ids.size - 1))
                rewritten += 1
                for j in range(k, ep.num_turns):
                    t = ep.transitions[j]
                    prompt = t.prompt_ids.copy()
                    prompt[at] = 99 + rewritten
                    ep.transitions[j] = dataclasses.replace(t, prompt_ids=prompt)
    p = build_batch(owned, view="chat_per_turn", buckets=(64,))
    assert _action_contexts(p, adv) == _action_contexts(build_batch(owned, view="per_turn", buckets=(64,)), adv)
    assert rows(p) == len(eps) + rewritten


def test_chatformat_episodes_pack_in_both_views():
    """Episodes recorded with ChatFormat on a real game pack in the chat view; loss tokens decode to the actions."""
    import jgem
    from jgem.models.tokenizer import ChatFormat, load_tokenizer

    tok = load_tokenizer()
    chat = ChatFormat(tok)
    env = jgem.make("game:GuessTheNumber-v0-easy")
    episodes, actions = [], []
    for e in range(3):
        obs, _ = env.reset(seed=e)
        stream = chat.start([{"role": "user", "content": obs}])
        trans, lo, hi = [], 1, 10
        for k in range(4):
            guess = (lo + hi) // 2
            text = f"My guess is \\boxed{{{guess}}}"
            ids = chat.action_ids(text)
            obs, reward, terminated, truncated, _ = env.step(chat.action_text(ids))
            trans.append(Transition(e, k, len(stream), ids, np.full(len(ids), -0.5), reward=reward))
            stream += ids
            actions.append(text)
            if terminated or truncated:
                break
            lo, hi = (lo, guess - 1) if "lower" in obs.lower() else (guess + 1, hi)
            stream += chat.observation_tokens(obs)
        episodes.append(Episode(e, 0, "game:GuessTheNumber-v0-easy", e, trans, stream=stream))
    for view in ("chat", "per_turn"):
        p = build_batch(episodes, view=view, pad_id=chat.pad_id, buckets=(512, 1024, 2048), batch_divisor=2)
        arr = p.arrays
        got = []
        for r in range(arr["tokens"].shape[0]):
            m = arr["loss_mask"][r]
            # split the row's loss tokens at stop tokens: one action each
            cur = []
            for t in arr["tokens"][r][m]:
                cur.append(int(t))
                if t in chat.stop_token_ids:
                    got.append(chat.action_text(cur))
                    cur = []
        assert sorted(got) == sorted(actions)
    assert p.arrays["tokens"].shape[0] % 2 == 0


@pytest.mark.slow
def test_chat_and_per_turn_views_give_the_same_loss_and_gradient():
    """DESIGN "Two multi-turn views": with the tiny model, sum(advantage * log p) over loss tokens and its
    gradient are the same whether an episode is one chat-history row or one row per transition."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from jgem.models.config import preset
    from jgem.models.head import token_logprobs
    from jgem.models.transformer import init_model

    model = init_model(preset("tiny", num_layers=1), seed=0)
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    rng = np.random.default_rng(0)
    eps = []
    for e in range(3):
        stream, trans = list(rng.integers(3, 1000, size=5)), []
        for k in range(e + 1):
            action = list(rng.integers(3, 1000, size=3 + k))
            trans.append(Transition(e, k, len(stream), action, np.zeros(len(action))))
            stream = stream + action + list(rng.integers(3, 1000, size=4))
        eps.append(Episode(e, 0, "x", e, trans, stream=stream[:-4]))  # the stream ends with the last action
    adv = rng.normal(size=(3, 3)).astype(np.float32)

    def objective(params, arrays):
        m = nnx.merge(graphdef, params, rest)
        logp, _ = token_logprobs(m, arrays["tokens"], arrays["positions"], arrays["segment_ids"])
        return jnp.sum(jnp.where(arrays["loss_mask"], arrays["advantages"] * logp, 0.0))

    grad_fn = jax.jit(jax.value_and_grad(objective))
    results = {}
    for view in ("chat", "per_turn"):
        # one shape for both views, so the objective compiles once
        packed = build_batch(eps, view=view, buckets=(64,), row_buckets=(4,))
        arrays = packed.arrays | {"advantages": on_tokens(adv, packed)}
        results[view] = grad_fn(params, {k: jnp.asarray(v) for k, v in arrays.items()})
    (lc, gc), (lp, gp) = results["chat"], results["per_turn"]
    np.testing.assert_allclose(float(lc), float(lp), rtol=1e-5)
    assert abs(float(lc)) > 1.0  # a real, non-trivial objective
    for a, b in zip(jax.tree.leaves(gc), jax.tree.leaves(gp), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-4, atol=2e-6)


@st.composite
def segmented_episode(draw):
    """A workflow's episode of 1-4 segments (each opening with its own marker token, so none extends the last
    segment's prompt and action), 1-3 turns each; the turns own their prompts (views of their segment's ids).
    Returns (episode, [(segment ids up to its last action, [(turn, action start, action end)])])."""
    pieces, k = [], 0
    for s in range(draw(st.integers(1, 4))):
        seg = [1000 + s] + draw(st.lists(st.integers(1, 50), min_size=0, max_size=4))
        turns = []
        for j in range(draw(st.integers(1, 3))):
            if j:  # an observation after the previous action
                seg += draw(st.lists(st.integers(1, 50), min_size=1, max_size=3))
            action = draw(st.lists(st.integers(51, 99), min_size=1, max_size=4))
            turns.append((k, len(seg), len(seg) + len(action)))
            seg += action
            k += 1
        pieces.append((np.asarray(seg, np.int32), turns))
    transitions = []
    for seg, turns in pieces:
        for t, start, end in turns:
            lps = [-0.1 * (t + 1)] * (end - start)
            transitions.append(Transition(0, t, start, seg[start:end], lps, prompt_ids=seg[:start]))
    return Episode(0, 0, "x", 0, transitions), [(seg, turns) for seg, turns in pieces]


@settings(max_examples=60, deadline=None)
@given(drawn=segmented_episode())
def test_every_segment_of_a_workflows_episode_is_its_own_row_with_its_exact_ids(drawn):
    """For any segments a workflow makes (chat view, no single stream): one packed segment per workflow segment, in
    order, holding exactly its ids, the loss on exactly its actions, each action marked with its own turn."""
    ep, pieces = drawn
    p = build_batch([ep], view="chat", buckets=(64,))
    assert len(p.segments) == len(pieces)
    for seg, (ids, turns) in zip(p.segments, pieces, strict=True):
        assert seg.turns == tuple(t for t, _, _ in turns)
        np.testing.assert_array_equal(seg.tokens, ids)
        mask = np.zeros(ids.size, bool)
        for t, a, b in turns:
            mask[a:b] = True
            assert (seg.turn_of[a:b] == t).all()
        np.testing.assert_array_equal(seg.loss_mask, mask)
