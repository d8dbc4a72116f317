"""The collector: token exactness, budgets, faults, group seeds, determinism."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import nnx

from jgem.algos.learner import token_logprobs
from jgem.envs.pool import EnvPool
from jgem.models.config import preset
from jgem.models.sampler import Sampler
from jgem.models.tokenizer import ChatFormat, load_tokenizer
from jgem.models.transformer import Transformer
from jgem.registry import register
from jgem.rollout.batch import build_batch
from jgem.rollout.collector import Collector, EpisodeSpec, RolloutConfig, SamplerPolicy, wrappers_for_view
from jgem.rollout.scripted import scripted_episodes
from tests.rollout.envs import FlakyGuessEnv

ENV = "game:GuessTheNumber-v0-easy"


@pytest.fixture(scope="module")
def setup():
    tok = load_tokenizer()
    chat = ChatFormat(tok)
    cfg = preset("tiny", num_layers=1, hidden_size=64, intermediate_size=128, num_heads=2, num_kv_heads=1)
    model = Transformer(cfg, rngs=nnx.Rngs(0))
    sampler = Sampler(cfg, eos_ids=chat.stop_token_ids, pad_id=chat.pad_id)
    return tok, chat, cfg, model, sampler


def _collect(setup, view="chat", n=6, num_envs=4, seed=0, max_turns=4, **rollout):
    _, chat, _, model, sampler = setup
    rcfg = RolloutConfig(view=view, max_new_tokens=rollout.pop("max_new_tokens", 8), **rollout)
    with EnvPool(ENV, num_envs, backend="inline", wrappers=wrappers_for_view(view)) as pool:
        col = Collector(pool, chat, rcfg, env_name=ENV)
        specs = [EpisodeSpec(i, i // 2, 100 + i // 2) for i in range(n)]
        eps = col.collect(SamplerPolicy(sampler, model, rcfg), specs, jax.random.key(seed), max_turns=max_turns)
    return eps, col.stats


@pytest.mark.parametrize("view", ["chat", "per_turn"])
def test_learner_sees_exactly_the_sampled_tokens(setup, view):
    """Behaviour log-probs recomputed by the learner on the packed batch equal the sampler's: the batch holds
    exactly the sampled action tokens, in exactly the context the model was conditioned on."""
    _, chat, _, model, _ = setup
    eps, stats = _collect(setup, view=view, temperature=1.0)
    assert stats.turns == sum(e.num_turns for e in eps) > 0
    adv = np.zeros((len(eps), max(e.num_turns for e in eps)), np.float32)
    packed = build_batch(eps, adv, view=view, pad_id=chat.pad_id)
    a = packed.arrays
    lp, _ = token_logprobs(model, a["tokens"], a["positions"], a["segment_ids"])
    m = a["loss_mask"]
    assert m.sum() == sum(e.num_action_tokens for e in eps)
    np.testing.assert_allclose(np.asarray(lp)[m], a["old_logprobs"][m], atol=2e-4)


def test_chat_stream_grows_by_action_and_observation_tokens(setup):
    _, chat, *_ = setup
    eps, _ = _collect(setup, view="chat", temperature=1.0, max_new_tokens=6)
    multi = [e for e in eps if e.num_turns > 1]
    for e in multi:
        for prev, nxt in zip(e.transitions, e.transitions[1:]):
            head = np.concatenate([prev.prompt_ids, prev.action_ids])
            assert np.array_equal(nxt.prompt_ids[: head.size], head), "earlier tokens were re-encoded"
            tail = nxt.prompt_ids[head.size :].tolist()
            closing = chat.close_action(prev.action_ids.tolist())
            assert tail[: len(closing)] == closing


def test_scripted_chat_stream_equals_chat_template(setup):
    """With canonical action tokens (the scripted teacher), the stream is the template of the messages."""
    tok, chat, *_ = setup
    eps = scripted_episodes(ENV, [EpisodeSpec(0, 0, 5), EpisodeSpec(1, 1, 6)], chat, view="chat")
    for e in eps:
        last = e.transitions[-1]
        # rebuild the messages the ChatWrapper produced and template them from scratch
        from jgem.envs.wrappers import ChatWrapper
        from jgem.registry import make

        env = ChatWrapper(make(ENV))
        msgs, _ = env.reset(seed=e.seed)
        for t in e.transitions[:-1]:
            msgs, *_ = env.step(chat.action_text(t.action_ids.tolist()))
        expected = tok.apply_chat_template(msgs, tokenize=True, add_generation_prompt=True, return_dict=False)
        assert last.prompt_ids.tolist() == list(expected)
        assert e.success


def test_turn_limit_and_token_budget(setup):
    eps, stats = _collect(setup, view="chat", max_turns=1)
    assert all(e.num_turns == 1 for e in eps)
    assert all(e.truncated or e.transitions[-1].reward != 0.0 or e.success for e in eps)
    _, chat, *_ = setup
    first = len(chat.start([{"role": "user", "content": "x"}]))
    with pytest.raises(ValueError, match="max_episode_tokens"):
        _collect(setup, max_episode_tokens=first + 8 + 1)  # the first prompt alone is longer than that


def test_cut_actions_are_sent_as_invalid(setup):
    eps, stats = _collect(setup, max_new_tokens=1, temperature=1.0)
    assert stats.truncated_actions > 0
    cut = [t for e in eps for t in e.transitions if not t.stopped]
    assert cut and all(t.reward == pytest.approx(-0.1) for t in cut)  # GEM's format-error reward


def test_same_seed_same_episodes_and_groups_share_start(setup):
    a, _ = _collect(setup, seed=3)
    b, _ = _collect(setup, seed=3)
    for x, y in zip(a, b):
        assert [t.action_ids.tolist() for t in x.transitions] == [t.action_ids.tolist() for t in y.transitions]
        assert x.transitions[0].prompt_ids.tolist() == y.transitions[0].prompt_ids.tolist()
    # episodes 0 and 1 form group 0 with one seed: identical first prompts (same start state)
    assert a[0].group_id == a[1].group_id and a[0].seed == a[1].seed
    assert a[0].transitions[0].prompt_ids.tolist() == a[1].transitions[0].prompt_ids.tolist()


def test_faulting_env_is_counted_and_collection_goes_on(setup):
    register("test:flaky-guess", FlakyGuessEnv, overwrite=True)
    _, chat, _, model, sampler = setup
    rcfg = RolloutConfig(max_new_tokens=8, temperature=1.0)
    with EnvPool("test:flaky-guess", 4, backend="thread", wrappers=wrappers_for_view("chat")) as pool:
        col = Collector(pool, chat, rcfg, env_name="test:flaky-guess")
        specs = [EpisodeSpec(i, i, i) for i in range(12)]
        eps = col.collect(SamplerPolicy(sampler, model, rcfg), specs, jax.random.key(0), max_turns=4)
    assert len(eps) == 12
    faulted = [e for e in eps if e.fault]
    assert faulted and col.stats.faults == len(faulted)
    assert all("RuntimeError" in e.fault or "injected" in e.fault for e in faulted)
