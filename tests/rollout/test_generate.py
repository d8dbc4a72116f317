"""`jgem.rollout.generate`: one turn for a batch of prompts on the engine's slots (what parity tests, benchmarks and
scripts generate with)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jgem.models.head import token_logprobs
from jgem.models.transformer import init_model
from jgem.rollout.config import Sampling
from jgem.rollout.generate import generate
from jgem.rollout.slots import SlotEngine
from tests.models.helpers import tiny_cfg

CFG = tiny_cfg("qwen3")
PROMPTS = [[5, 6, 7], list(range(10, 23)), [1], [1, 2, 3, 4, 5, 6]]
NEW = 10


@pytest.fixture(scope="module")
def model():
    m = init_model(CFG, seed=0)
    m.embed[...] = m.embed[...] * 25.0  # sharper distributions than the 0.02-std init: well separated argmaxes
    return m


def _teacher_forced(model, prompts, outs, temperature):
    """Per prompt: (argmax of the logits before each generated token, their log-probs at `temperature`)."""
    seqs = [p + t.tolist() for p, (t, _) in zip(prompts, outs)]
    width = max(map(len, seqs))
    toks = np.zeros((len(seqs), width), np.int32)
    segs = np.zeros((len(seqs), width), np.int32)
    for i, s in enumerate(seqs):
        toks[i, : len(s)], segs[i, : len(s)] = s, 1
    pos = np.broadcast_to(np.arange(width, dtype=np.int32), toks.shape)
    fwd = nnx.jit(lambda m, t, p, s: (m(t, p, segment_ids=s)[0], token_logprobs(m, t, p, s, temperature=temperature)))
    logits, (lp, _) = fwd(model, jnp.asarray(toks), jnp.asarray(pos), jnp.asarray(segs))
    argmax, lps = np.asarray(jnp.argmax(logits, -1)), np.asarray(lp)
    spans = [(len(p), len(s)) for p, s in zip(prompts, seqs)]
    return [(argmax[i, a - 1 : b - 1], lps[i, a:b]) for i, (a, b) in enumerate(spans)]


def test_greedy_is_the_argmax_and_sampled_logprobs_are_the_learners(model):
    engine = SlotEngine(CFG, num_slots=4, max_len=64, eos_ids=[], chunk_steps=4)
    greedy = generate(engine, model, PROMPTS, jax.random.key(0), max_new_tokens=NEW, sampling=Sampling(greedy=True))
    ref = _teacher_forced(model, PROMPTS, greedy, 1.0)
    for (t, lp), (am, ref_lp) in zip(greedy, ref):
        assert t.dtype == np.int32 and t.size == NEW
        np.testing.assert_array_equal(t, am)
        np.testing.assert_allclose(lp, ref_lp, atol=2e-5)
    sampled = generate(engine, model, PROMPTS, jax.random.key(1), max_new_tokens=NEW, sampling=Sampling(0.7, 0.9))
    for (t, lp), (_, ref_lp) in zip(sampled, _teacher_forced(model, PROMPTS, sampled, 0.7)):
        assert t.size == NEW and (lp < 0).all()
        np.testing.assert_allclose(lp, ref_lp, atol=2e-5)
    assert any(not np.array_equal(a[0], b[0]) for a, b in zip(greedy, sampled))


def test_a_stop_token_ends_only_its_row(model):
    free = SlotEngine(CFG, num_slots=4, max_len=64, eos_ids=[], chunk_steps=3)
    greedy = generate(free, model, PROMPTS, jax.random.key(0), max_new_tokens=NEW, sampling=Sampling(greedy=True))
    eos = int(greedy[3][0][4])
    stopping = SlotEngine(CFG, num_slots=4, max_len=64, eos_ids=[eos], chunk_steps=3)
    out = generate(stopping, model, PROMPTS, jax.random.key(0), max_new_tokens=NEW, sampling=Sampling(greedy=True))
    for (g, _), (t, lp) in zip(greedy, out):
        hits = np.flatnonzero(g == eos)
        n = int(hits[0]) + 1 if hits.size else NEW
        np.testing.assert_array_equal(t, g[:n])
        assert lp.size == n
    assert out[3][0].size <= 5 and max(t.size for t, _ in out) == NEW


def test_refuses_what_does_not_fit(model):
    engine = SlotEngine(CFG, num_slots=2, max_len=32, eos_ids=[])
    with pytest.raises(ValueError, match="3 prompts for an engine of 2 slots"):
        generate(engine, model, PROMPTS[:3], jax.random.key(0), max_new_tokens=4)
    with pytest.raises(ValueError, match="prompt 1 has 13 tokens"):
        generate(engine, model, PROMPTS[:2], jax.random.key(0), max_new_tokens=20)
    with pytest.raises(ValueError, match="prompt 0 has 0 tokens"):
        generate(engine, model, [[]], jax.random.key(0), max_new_tokens=4)
