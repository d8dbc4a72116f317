"""Every algorithm, proven at the trainer level: the trainer's real path (collect on a small deterministic env,
`make_batch`, the step `learn` runs) against plain numpy computed from the raw episodes.

For each algorithm the advantage on every action token of the packed batch, the critic targets (PPO) and the
learner's loss equal a numpy reference built from the episodes' per-turn rewards, gamma, groups, truncation
(GAE bootstraps a truncated episode from the critic's value of the state it was cut in) and the KL to the
reference policy (REINFORCE++ folds it into the rewards). Log-probs and values for the reference are computed
per episode, on its own unpacked stream, so the packing is checked too. The trainers (one per algorithm, with the
setup, the env and step 0's episodes) are tests/algo_step_trainers.py's, shared with test_step_transfers.py and
algos/test_gspo_cispo.py.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jgem.models.head import token_logprobs
from jgem.train import Trainer
from tests.algo_step_trainers import GAMMA, KL_COEF, LAM, XDIST_GROUP, guarded_learn, shared

EPS = 1e-6


def np_returns(r: np.ndarray, gamma: float) -> np.ndarray:
    g, acc = np.zeros_like(r), 0.0
    for t in reversed(range(r.size)):
        acc = r[t] + gamma * acc
        g[t] = acc
    return g


STREAM = 320  # small_config's rollout.max_episode_tokens


def _forward(tokens: np.ndarray):
    """One episode's stream as its own row [1, T]: segment 1, then padding (segment 0) that it cannot see, up to a
    multiple T of STREAM, so the streams run one compiled program (not one per stream length)."""
    n = tokens.size
    T = -(-n // STREAM) * STREAM
    t = np.zeros((1, T), np.int32)
    t[0, :n] = tokens
    seg = (np.arange(T) < n)[None].astype(np.int32)
    return jnp.asarray(t), jnp.arange(T)[None], jnp.asarray(seg)


@nnx.jit(static_argnames="temperature")
def _logprobs_program(module, t, pos, seg, temperature):
    return token_logprobs(module, t, pos, seg, temperature=temperature)[0][0]


@nnx.jit
def _values_program(critic, t, pos, seg):
    h, _ = critic.hidden(t, pos, segment_ids=seg)
    return critic.value(h)[0]


def _logprobs(module, tokens: np.ndarray, temperature: float) -> np.ndarray:
    lp = _logprobs_program(module, *_forward(tokens), temperature=temperature)
    return np.asarray(lp, np.float64)[: tokens.size]


def _values(critic, tokens: np.ndarray) -> np.ndarray:
    return np.asarray(_values_program(critic, *_forward(tokens)), np.float64)[: tokens.size]


def _turn_spans(ep) -> list[tuple[int, int]]:
    return [(t.prompt_len, t.prompt_len + t.action_ids.size) for t in ep.transitions]


def reference_advantages(algorithm: str, episodes, tr: Trainer) -> tuple[list[np.ndarray], list[np.ndarray] | None]:
    """Per episode: f64[K_e] advantages of its turns (and critic targets for ppo), from the raw episodes."""
    state, temp = tr.state, tr.cfg.learner.temperature
    rewards = [ep.rewards.astype(np.float64) for ep in episodes]
    if algorithm == "reinforce_pp":
        ref = nnx.merge(state.graphdef, state.ref_params, state.model_state)
        shaped = []
        for ep, r in zip(episodes, rewards):
            lp = _logprobs(ref, ep.stream, temp)
            spans = zip(ep.transitions, _turn_spans(ep))
            kl = [t.action_logprobs.astype(np.float64).sum() - lp[s:e].sum() for t, (s, e) in spans]
            shaped.append(r - KL_COEF * np.array(kl))
        rewards = shaped
    if algorithm == "ppo":
        critic = nnx.merge(state.critic_graphdef, state.critic_params, state.critic_state)
        advs, targets = [], []
        for ep, r in zip(episodes, rewards):
            v_all = _values(critic, ep.stream)
            v = np.array([v_all[s - 1] for s, _ in _turn_spans(ep)])
            boot = 0.0
            if ep.truncated:
                assert ep.next_prompt is not None, "a truncated episode must record the state it was cut in"
                boot = _values(critic, ep.next_prompt)[-1]
            v_next = np.append(v[1:], boot)
            delta = r + GAMMA * v_next - v
            a, acc = np.zeros_like(r), 0.0
            for t in reversed(range(r.size)):
                acc = delta[t] + GAMMA * LAM * acc
                a[t] = acc
            advs.append(a)
            targets.append(a + v)
        return advs, targets
    G = [np_returns(r, GAMMA) for r in rewards]
    if algorithm == "reinforce":
        return G, None
    if algorithm in ("rebn", "reinforce_pp"):
        allg = np.concatenate(G)
        mean, std = allg.mean(), allg.std()
        return [(g - mean) / (std + EPS) for g in G], None
    R = np.array([g[0] for g in G])
    groups = np.array([ep.group_id for ep in episodes])
    out = []
    for i, ep in enumerate(episodes):
        vals = R[groups == groups[i]]
        n = vals.size
        if algorithm == "grpo":
            a = (R[i] - vals.mean()) / ((np.std(vals, ddof=1) if n > 1 else 0.0) + EPS)
        elif algorithm == "drgrpo":
            a = R[i] - vals.mean()
        else:  # rloo
            a = 0.0 if n == 1 else R[i] - (vals.sum() - R[i]) / (n - 1)
        out.append(np.full(ep.num_turns, a))
    return out, None


def _locate(batch, episodes) -> list[tuple[int, int]]:
    """(row, start) of each episode's stream in the packed batch, found by content (segment by segment)."""
    tokens, seg = np.asarray(batch.tokens), np.asarray(batch.segment_ids)
    found: dict[int, tuple[int, int]] = {}
    used = set()
    for i, ep in enumerate(episodes):
        for r in range(tokens.shape[0]):
            for s in np.unique(seg[r][seg[r] > 0]):
                idx = np.flatnonzero(seg[r] == s)
                if (r, s) not in used and idx.size == ep.stream.size and np.array_equal(tokens[r, idx], ep.stream):
                    found[i] = (r, int(idx[0]))
                    used.add((r, s))
                    break
            if i in found:
                break
        assert i in found, f"episode {i}'s stream is not a segment of the batch"
    return [found[i] for i in range(len(episodes))]


ALGORITHMS = ["rebn", "reinforce", "grpo", "drgrpo", "rloo", "reinforce_pp", "ppo"]


@pytest.mark.xdist_group(XDIST_GROUP)  # the trainers are shared with test_step_transfers and test_gspo_cispo
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_trainer_advantages_and_loss_equal_a_numpy_reference(algorithm):
    grouped = algorithm in ("grpo", "drgrpo", "rloo")
    # 8 episodes cut at 3 turns (some truncated), groups of 4 when grouped, and for REINFORCE++ a KL_COEF penalty
    # to a reference policy apart from the sampler (so the KL term is not ~0): tests/algo_step_trainers.py
    tr, played = shared(algorithm)
    assert (tr.cfg.gamma, tr.cfg.lam, tr.cfg.group_size) == (GAMMA, LAM, 4 if grouped else 1)
    assert tr.cfg.learner.kl_coef == (KL_COEF if algorithm == "reinforce_pp" else 0.0)
    episodes = [e for e in played if e.fault is None and e.num_turns > 0]
    rewards = np.concatenate([e.rewards for e in episodes])
    assert np.ptp(rewards) > 0, "the reference needs varied rewards"
    if grouped:
        R = {}
        for e in episodes:
            R.setdefault(e.group_id, set()).add(round(e.episode_return, 4))
        assert any(len(v) > 1 for v in R.values()), "some group must have returns that differ"
    if algorithm in ("ppo", "rebn"):
        assert any(e.truncated for e in episodes) and not all(e.truncated for e in episodes), [
            e.truncated for e in episodes
        ]
    batch, _ = tr.learner.make_batch(episodes)
    ref_adv, ref_targets = reference_advantages(algorithm, episodes, tr)

    adv, lmask = np.asarray(batch.advantages), np.asarray(batch.loss_mask)
    expect_adv = np.zeros_like(adv, np.float64)
    expect_mask = np.zeros_like(lmask)
    for i, (ep, (r, start)) in enumerate(zip(episodes, _locate(batch, episodes))):
        for k, (s, e) in enumerate(_turn_spans(ep)):
            expect_adv[r, start + s : start + e] = ref_adv[i][k]
            expect_mask[r, start + s : start + e] = True
            if algorithm == "ppo":
                assert bool(batch.value_mask[r, start + s - 1])
                np.testing.assert_allclose(batch.returns[r, start + s - 1], ref_targets[i][k], rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(lmask, expect_mask)
    np.testing.assert_allclose(adv, expect_adv, rtol=1e-4, atol=1e-5)
    if algorithm == "reinforce_pp":  # the KL term is really there: without it the advantages differ
        plain, _ = reference_advantages("rebn", episodes, tr)
        assert max(np.abs(a - b).max() for a, b in zip(plain, ref_adv)) > 1e-2

    # the loss: PPO's clipped ratio on every action token, token mean (one epoch, one minibatch: on-policy)
    policy = tr.state.model()
    num = den = 0.0
    clip = tr.cfg.learner.clip_low
    for i, ep in enumerate(episodes):
        lp = _logprobs(policy, ep.stream, tr.cfg.learner.temperature)
        for k, ((s, e), t) in enumerate(zip(_turn_spans(ep), ep.transitions)):
            rho = np.exp(lp[s:e] - t.action_logprobs)
            a = ref_adv[i][k]
            num += np.maximum(-a * rho, -a * np.clip(rho, 1 - clip, 1 + clip)).sum()
            den += e - s
    metrics, _ = guarded_learn(tr, episodes)  # the trainer's step on the episodes (the batch `make_batch` gave)
    np.testing.assert_allclose(float(metrics["loss"]), num / den, rtol=1e-4, atol=1e-6)


def _segmented(ep) -> tuple:
    """`ep` (>= 2 turns) as a workflow's trajectory of two segments: turn 0 on the original stream, then the other
    turns on a segment that does not extend it (8 'summary' tokens, then the stream from 4 tokens before turn 1's
    prompt ends), as a compacting agent's. Returns (episode, [(segment tokens, [(turn, start, end)])])."""
    S, t = ep.stream, ep.transitions
    cut = t[1].prompt_len - 4
    summary = (S[:8][::-1] + 1).astype(np.int32)  # differs from the stream's first tokens: a new segment
    B = np.concatenate([summary, S[cut:]])
    shift = summary.size - cut
    trans = [dataclasses.replace(t[0], prompt_ids=S[: t[0].prompt_len].copy())]
    trans += [
        dataclasses.replace(x, prompt_len=x.prompt_len + shift, prompt_ids=B[: x.prompt_len + shift]) for x in t[1:]
    ]
    new = dataclasses.replace(ep, transitions=trans, stream=None, next_prompt=None)
    end = t[-1].prompt_len + t[-1].action_ids.size + shift
    spans = [
        (S[: t[0].prompt_len + t[0].action_ids.size], [(0, t[0].prompt_len, t[0].prompt_len + t[0].action_ids.size)])
    ]
    spans.append((B[:end], [(k, x.prompt_len, x.prompt_len + x.action_ids.size) for k, x in enumerate(trans) if k]))
    return new, spans


@pytest.mark.xdist_group(XDIST_GROUP)
def test_segments_train_as_their_own_rows_and_equal_a_numpy_reference():
    """A trajectory of several segments (streams that are not prefixes of each other) packs each segment as its own
    row with its exact ids; returns run over the turns across segments (gamma per turn, as in one stream); the
    advantages and the loss equal numpy computed on each segment's own tokens."""
    tr, played = shared("rebn")
    multi = [e for e in played if e.fault is None and e.num_turns >= 2]
    single = [e for e in played if e.fault is None and e.num_turns == 1]
    assert len(multi) >= 2, [e.num_turns for e in played]
    built = [_segmented(e) for e in multi]
    episodes = [b[0] for b in built] + single
    segs = [b[1] for b in built] + [[(e.stream, [(0, e.transitions[0].prompt_len, e.stream.size)])] for e in single]
    batch, _ = tr.learner.make_batch(episodes)
    tokens, seg_ids = np.asarray(batch.tokens), np.asarray(batch.segment_ids)
    assert int(sum(len(s) for s in segs)) == len(
        {(r, s) for r in range(seg_ids.shape[0]) for s in np.unique(seg_ids[r]) if s}
    )
    ref_adv, _ = reference_advantages("rebn", episodes, tr)  # ReBN over the per-turn returns, gamma across segments
    adv, lmask = np.asarray(batch.advantages), np.asarray(batch.loss_mask)
    expect_adv, expect_mask = np.zeros_like(adv, np.float64), np.zeros_like(lmask)
    used: set = set()
    for i, pieces in enumerate(segs):
        for toks, turns in pieces:  # find the segment's row by content: its exact ids
            at = [
                (r, s)
                for r in range(tokens.shape[0])
                for s in np.unique(seg_ids[r][seg_ids[r] > 0])
                if (r, s) not in used and np.array_equal(tokens[r, seg_ids[r] == s], toks)
            ]
            assert at, f"episode {i}: a segment of {toks.size} tokens is not a row segment of the batch"
            r, s = at[0]
            used.add((r, s))
            start = int(np.flatnonzero(seg_ids[r] == s)[0])
            for k, a, b in turns:
                expect_adv[r, start + a : start + b] = ref_adv[i][k]
                expect_mask[r, start + a : start + b] = True
    np.testing.assert_array_equal(lmask, expect_mask)
    np.testing.assert_allclose(adv, expect_adv, rtol=1e-4, atol=1e-5)
    policy, clip = tr.state.model(), tr.cfg.learner.clip_low
    num = den = 0.0
    for i, (ep, pieces) in enumerate(zip(episodes, segs)):
        for toks, turns in pieces:
            lp = _logprobs(policy, toks, tr.cfg.learner.temperature)  # each segment conditioned on its own ids only
            for k, a, b in turns:
                rho = np.exp(lp[a:b] - ep.transitions[k].action_logprobs)
                adv_k = ref_adv[i][k]
                num += np.maximum(-adv_k * rho, -adv_k * np.clip(rho, 1 - clip, 1 + clip)).sum()
                den += b - a
    metrics, _ = guarded_learn(tr, episodes)
    np.testing.assert_allclose(float(metrics["loss"]), num / den, rtol=1e-4, atol=1e-6)
