from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import Mesh

from jgem.models.config import preset
from jgem.models.sampler import Sampler, cpu_decode_mesh, sample_logits, token_logprobs
from jgem.models.transformer import Transformer
from tests.models.helpers import VOCAB, tiny_cfg

CFG = tiny_cfg("qwen3")
PROMPTS = [[5, 6, 7], list(range(10, 23)), [1, 2, 3, 4, 5, 6]]


@pytest.fixture(scope="module")
def model():
    m = Transformer(CFG, rngs=nnx.Rngs(0))
    # Sharper distributions than the 0.02-std init, so greedy / top-k choices are well separated.
    m.embed[...] = m.embed[...] * 25.0
    return m


@pytest.fixture(scope="module")
def sampler():
    return Sampler(CFG, eos_ids=[], max_prompt_buckets=(16, 32))


@nnx.jit(static_argnames=("chunk_size",))
def tlp(model, tokens, positions, segment_ids=None, chunk_size=1024, temperature=1.0):
    return token_logprobs(model, tokens, positions, segment_ids, chunk_size=chunk_size, temperature=temperature)


def _sequences(prompts, out):
    toks, lens = np.asarray(out.tokens), np.asarray(out.lengths)
    return [p + toks[i, : lens[i]].tolist() for i, p in enumerate(prompts)]


def test_sampler_logprobs_equal_token_logprobs(model, sampler):
    out = sampler.generate(model, PROMPTS, jax.random.key(1), max_new_tokens=10, temperature=0.7, top_p=0.9)
    assert isinstance(out.tokens, jax.Array) and out.tokens.shape == (3, 10) and out.tokens.dtype == jnp.int32
    for seq, p, lp in zip(_sequences(PROMPTS, out), PROMPTS, np.asarray(out.logprobs)):
        t = jnp.asarray([seq], jnp.int32)
        ref, _ = tlp(model, t, jnp.arange(len(seq))[None], temperature=0.7)
        np.testing.assert_allclose(lp, np.asarray(ref)[0, len(p) :], atol=2e-5)
        assert (lp < 0).all()


def _naive(model, tokens, positions, segs):
    logits, _ = model(tokens, positions, segment_ids=segs)
    logp = jax.nn.log_softmax(logits[:, :-1], -1)
    lp = jnp.take_along_axis(logp, tokens[:, 1:, None], -1)[..., 0]
    ent = -jnp.sum(jnp.exp(logp) * logp, -1)
    valid = (segs[:, 1:] == segs[:, :-1]) & (segs[:, 1:] != 0)
    pad = lambda x: jnp.pad(jnp.where(valid, x, 0.0), ((0, 0), (1, 0)))
    return pad(lp), pad(ent)


def test_token_logprobs_reference_chunks_and_grads(model):
    rs = np.random.RandomState(0)
    tokens = jnp.asarray(rs.randint(0, VOCAB, (2, 9)), jnp.int32)
    segs = jnp.asarray([[1, 1, 1, 1, 2, 2, 2, 0, 0], [1] * 9], jnp.int32)
    positions = jnp.asarray([[0, 1, 2, 3, 0, 1, 2, 0, 0], list(range(9))], jnp.int32)
    ref_lp, ref_ent = nnx.jit(_naive)(model, tokens, positions, segs)
    for chunk in (1024, 7, 1):
        lp, ent = tlp(model, tokens, positions, segs, chunk_size=chunk)
        np.testing.assert_allclose(lp, ref_lp, atol=1e-5)
        np.testing.assert_allclose(ent, ref_ent, atol=1e-5)
    lp = np.asarray(lp)
    assert lp[0, 0] == lp[0, 4] == lp[0, 7] == lp[0, 8] == 0 and (lp[0, [1, 2, 3, 5, 6]] < 0).all()
    assert float(ent[1, 3]) > 0

    def chunked(m, keep_mb):
        lp = token_logprobs(m, tokens, positions, segs, chunk_size=5, keep_logits_mb=keep_mb)[0]
        return jnp.sum(lp * jnp.arange(9.0))

    def naive(m):
        return jnp.sum(_naive(m, tokens, positions, segs)[0] * jnp.arange(9.0))

    g2 = nnx.jit(nnx.grad(naive))(model)
    for keep_mb in (0.0, 1.0):  # recomputed logits, kept logits (2 x 10 x VOCAB floats fit in 1 MB)
        g1 = nnx.jit(nnx.grad(chunked), static_argnums=1)(model, keep_mb)
        for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g2)):
            np.testing.assert_allclose(a, b, atol=1e-5)
        assert float(jnp.abs(g1["embed"][...]).sum()) > 0


def _expected_length(row, eos, stops, n):
    for i in range(n):
        if row[i] in eos or any(i + 1 >= len(q) and row[i + 1 - len(q) : i + 1] == q for q in stops):
            return i + 1
    return n


def test_eos_and_stop_sequences_stop_each_row(model, sampler):
    greedy = np.asarray(sampler.generate(model, PROMPTS, jax.random.key(0), max_new_tokens=12, greedy=True).tokens)
    eos = int(greedy[0, 4])
    stop = greedy[1, 6:8].tolist()
    s = Sampler(CFG, eos_ids=[eos], pad_id=0, max_prompt_buckets=(16, 32))
    out = s.generate(model, PROMPTS, jax.random.key(0), max_new_tokens=12, greedy=True, stop_sequences=[stop, [99]])
    toks, lens, lps = np.asarray(out.tokens), np.asarray(out.lengths), np.asarray(out.logprobs)
    for i in range(3):
        n = _expected_length(greedy[i].tolist(), {eos}, [stop, [99]], 12)
        assert lens[i] == n, (i, greedy[i], eos, stop)
        assert toks[i, :n].tolist() == greedy[i, :n].tolist()
        assert (toks[i, n:] == 0).all() and (lps[i, n:] == 0).all() and (lps[i, :n] < 0).all()
    assert lens[0] <= 5 and lens[1] <= 8
    # Without EOS ids, only the stop sequence ends row 1.
    s2 = Sampler(CFG, eos_ids=[], max_prompt_buckets=(16, 32))
    out2 = s2.generate(model, PROMPTS, jax.random.key(0), max_new_tokens=12, greedy=True, stop_sequences=[stop])
    assert np.asarray(out2.lengths)[1] == _expected_length(greedy[1].tolist(), set(), [stop], 12)


def test_top_k_and_top_p(model, sampler):
    greedy = sampler.generate(model, PROMPTS, jax.random.key(0), max_new_tokens=8, greedy=True)
    k1 = sampler.generate(model, PROMPTS, jax.random.key(7), max_new_tokens=8, top_k=1)
    p0 = sampler.generate(model, PROMPTS, jax.random.key(8), max_new_tokens=8, top_p=1e-6)
    np.testing.assert_array_equal(k1.tokens, greedy.tokens)
    np.testing.assert_array_equal(p0.tokens, greedy.tokens)
    # top-k=3 over 64 rows of one prompt: first tokens are all among the 3 most likely, and not all equal.
    prompt = [[4, 8, 15, 16]]
    logits, _ = nnx.jit(lambda m, t, p: m(t, p))(model, jnp.asarray(prompt), jnp.arange(4)[None])
    top3 = set(np.argsort(-np.asarray(logits[0, -1]))[:3].tolist())
    out = sampler.generate(model, prompt * 64, jax.random.key(3), max_new_tokens=1, top_k=3, temperature=2.0)
    first = set(np.asarray(out.tokens)[:, 0].tolist())
    assert first <= top3 and len(first) > 1
    free = sampler.generate(model, prompt * 64, jax.random.key(3), max_new_tokens=1, temperature=2.0)
    assert not set(np.asarray(free.tokens)[:, 0].tolist()) <= top3


def test_bucketing_bounds_compilations(model):
    s = Sampler(CFG, eos_ids=[1], max_prompt_buckets=(16, 32))
    for prompts in ([[1, 2, 3]] * 3, [[4] * 7] * 4, [[5] * 16, [6]]):  # batch bucket 4 or 2, prompt bucket 16
        s.generate(model, prompts, jax.random.key(0), max_new_tokens=4, top_p=0.8, temperature=0.5)
    assert s.num_compilations == 2  # batch buckets 4 and 2; sampling params are traced, not static
    s.generate(model, [[1] * 17] * 3, jax.random.key(0), max_new_tokens=4, stop_sequences=[[1, 2]])
    assert s.num_compilations == 3
    with pytest.raises(ValueError, match="largest prompt bucket 32"):
        s.generate(model, [[1] * 33], jax.random.key(0), max_new_tokens=4)
    with pytest.raises(ValueError, match="empty"):
        s.generate(model, [[1], []], jax.random.key(0), max_new_tokens=4)


def test_mesh_over_data_equals_one_device(model):
    prompts = PROMPTS + [[9, 9], [3] * 11, [7, 1, 7]]
    one = Sampler(CFG, eos_ids=[3], max_prompt_buckets=(16,))
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("data", "tensor"))
    # The 8-device sampler also decodes on [out, in] copies (made from the placed params, then sharded like them).
    eight = Sampler(CFG, eos_ids=[3], max_prompt_buckets=(16,), mesh=mesh, out_in_decode=True)
    params = jax.device_put(nnx.state(model), jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()))
    gs = (nnx.graphdef(model), params)
    for kw in (dict(greedy=True), dict(temperature=0.8, top_k=20)):
        a = one.generate(model, prompts, jax.random.key(5), max_new_tokens=9, **kw)
        b = eight.generate(gs, prompts, jax.random.key(5), max_new_tokens=9, **kw)
        assert len(b.tokens.sharding.device_set) == 8
        np.testing.assert_array_equal(a.tokens, b.tokens)
        np.testing.assert_array_equal(a.lengths, b.lengths)
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-5)


def test_per_device_loops_equal_one_device(model, monkeypatch):
    """A pure data mesh decodes each device's rows in a loop of its own (no per-step collective; a device stops
    when its rows are done): the same tokens, lengths and log-probs as one device, sampled ones included, since
    every row draws with a key of its own. Params not replicated over the mesh take the GSPMD path."""
    traced = []
    per_device = Sampler._generate_per_device
    monkeypatch.setattr(Sampler, "_generate_per_device", lambda self, *a: traced.append(1) or per_device(self, *a))
    rs = np.random.RandomState(1)
    prompts = [rs.randint(4, VOCAB, rs.randint(1, 15)).tolist() for _ in range(12)]  # 16 rows: 2 per device
    one = Sampler(CFG, eos_ids=[3], max_prompt_buckets=(16,))
    mesh = Mesh(np.array(jax.devices()[:8]), ("data",))
    eight = Sampler(CFG, eos_ids=[3], max_prompt_buckets=(16,), mesh=mesh)
    rep = jax.device_put(nnx.state(model), jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()))
    for kw in (dict(greedy=True), dict(temperature=1.3), dict(temperature=0.8, top_k=20, top_p=0.9)):
        a = one.generate(model, prompts, jax.random.key(7), max_new_tokens=12, **kw)
        b = eight.generate((nnx.graphdef(model), rep), prompts, jax.random.key(7), max_new_tokens=12, **kw)
        assert len(b.tokens.sharding.device_set) == 8
        np.testing.assert_array_equal(a.tokens, b.tokens)
        np.testing.assert_array_equal(a.lengths, b.lengths)
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-5)
    lens = np.asarray(a.lengths)
    assert lens.min() < 12 and lens.max() == 12, lens  # rows stop at EOS at different steps
    assert traced == [1] and eight.num_compilations == 1
    # The embedding sharded over `data`: not replicated, so the loop runs once over all rows (GSPMD).
    rows = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
    rep["embed"] = rep["embed"].replace(jax.device_put(rep["embed"][...], rows))
    b = eight.generate((nnx.graphdef(model), rep), prompts, jax.random.key(7), max_new_tokens=12, **kw)
    np.testing.assert_array_equal(a.tokens, b.tokens)
    assert traced == [1] and eight.num_compilations == 2


@pytest.mark.parametrize(
    "cfg", [tiny_cfg("qwen3", tie_word_embeddings=True), tiny_cfg("qwen2"), tiny_cfg("llama")], ids=lambda c: c.family
)
def test_out_in_decode_equals_stored_layout(cfg):
    """Decoding on [out, in] copies of the projections (the CPU default) gives the same tokens and log-probs as the
    stored layout, tied or untied head, with or without qkv biases; the copies are reused while the params are the
    same arrays and remade when they change."""
    m = Transformer(cfg, rngs=nnx.Rngs(3))
    m.embed[...] = m.embed[...] * 25.0
    stored = Sampler(cfg, eos_ids=[], max_prompt_buckets=(16,), out_in_decode=False)
    out_in = Sampler(cfg, eos_ids=[], max_prompt_buckets=(16,), out_in_decode=True)
    assert out_in.out_in_decode and not stored.out_in_decode
    assert not Sampler(cfg, eos_ids=[]).out_in_decode  # auto: off for weights that fit in cache
    graphdef, state = nnx.split(m)
    for kw in (dict(greedy=True), dict(temperature=0.9, top_k=30)):
        a = stored.generate((graphdef, state), PROMPTS, jax.random.key(2), max_new_tokens=8, **kw)
        b = out_in.generate((graphdef, state), PROMPTS, jax.random.key(2), max_new_tokens=8, **kw)
        np.testing.assert_array_equal(a.tokens, b.tokens)
        np.testing.assert_array_equal(a.lengths, b.lengths)
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=2e-5)
    copies = out_in._out_in[1]
    n_proj = 7 * cfg.num_layers + (0 if cfg.tie_word_embeddings else 1)
    assert len(copies) == n_proj
    out_in.generate((graphdef, state), PROMPTS, jax.random.key(2), max_new_tokens=2)
    assert out_in._out_in[1] is copies  # same params: the copies are reused
    # New param arrays (a trainer's update): new copies, and the tokens follow the new weights.
    state2 = jax.tree.map(lambda x: x * 1.5 if x.ndim >= 2 else x, state)
    a = stored.generate((graphdef, state2), PROMPTS, jax.random.key(2), max_new_tokens=8, greedy=True)
    b = out_in.generate((graphdef, state2), PROMPTS, jax.random.key(2), max_new_tokens=8, greedy=True)
    assert out_in._out_in[1] is not copies
    np.testing.assert_array_equal(a.tokens, b.tokens)
    np.testing.assert_allclose(a.logprobs, b.logprobs, atol=2e-5)


def test_out_in_decode_default_follows_weight_size_and_batch():
    from jgem.models.config import preset

    big = Sampler(preset("100m"), eos_ids=[])  # 25 MB of projections per layer
    assert big.out_in_decode == (jax.default_backend() == "cpu")
    assert big._use_out_in(128) == big.out_in_decode and not big._use_out_in(256)
    assert not Sampler(preset("tiny"), eos_ids=[])._use_out_in(32)  # 0.8 MB per layer: the copies cost more
    assert Sampler(preset("tiny"), eos_ids=[], out_in_decode=True)._use_out_in(1024)  # forced: any batch


def test_first_argmax_equals_argmax():
    from jgem.models.sampler import first_argmax

    rs = np.random.RandomState(0)
    x = rs.normal(size=(6, 1000)).astype(np.float32)
    x[1, [3, 700]] = 9.0  # a tie: the first index wins, as in jnp.argmax
    x[2] = -np.inf
    x[3, 999] = np.inf
    x[4, :] = 0.0
    np.testing.assert_array_equal(first_argmax(jnp.asarray(x)), np.argmax(x, -1))
    assert first_argmax(jnp.asarray(x))[1] == 3
    np.testing.assert_array_equal(first_argmax(jnp.asarray(x.T), axis=0), np.argmax(x, -1))  # vocab-first layout


def test_cpu_decode_mesh_only_where_it_pays():
    devices = jax.devices()[:8]
    mesh = cpu_decode_mesh(CFG, 32, devices)
    assert mesh is not None and mesh.shape["data"] == 8 and mesh.size == 8
    assert Sampler(CFG, eos_ids=[], mesh=mesh)._data_only
    assert cpu_decode_mesh(CFG, 31, devices) is None  # fewer than CPU_MESH_MIN_ROWS rows per device
    assert cpu_decode_mesh(CFG, 1024, devices[:1]) is None
    assert cpu_decode_mesh(preset("100m"), 1024, devices) is None  # its dots already use the cores


def test_sample_logits_draws_like_categorical():
    """One key, or a key per row: the draw equals jax.random.categorical's (masked entries never drawn)."""
    x = jax.random.normal(jax.random.key(0), (16, 300)) * 3
    x = x.at[:, :50].set(-jnp.inf)
    args = (jnp.float32(1.0), jnp.float32(1.0), jnp.int32(0), jnp.bool_(False))
    for seed in range(3):
        key = jax.random.key(seed)
        tok, _ = sample_logits(x, key, *args)
        np.testing.assert_array_equal(tok, jax.random.categorical(key, x, axis=-1))
        keys = jax.random.split(key, 16)
        tok, _ = sample_logits(x, keys, *args)
        np.testing.assert_array_equal(tok, jax.vmap(jax.random.categorical)(keys, x))
        assert (np.asarray(tok) >= 50).all()
        # The decode's vocab-first layout ([V,B]) draws the same tokens with the same log-probs.
        for greedy in (False, True):
            a = sample_logits(x, keys, *args[:3], jnp.bool_(greedy))
            b = jax.jit(partial(sample_logits, vocab_first=True))(x.T, keys, *args[:3], jnp.bool_(greedy))
            np.testing.assert_array_equal(a[0], b[0])
            np.testing.assert_allclose(a[1], b[1], atol=1e-6)


def test_decode_phase_ends():
    from jgem.models.sampler import decode_phase_ends

    assert decode_phase_ends(128, 4) == [32, 64, 96, 128]
    assert decode_phase_ends(128, 1) == [128]
    assert decode_phase_ends(1000, 4) == [256, 512, 768, 1000]  # runs of whole multiples of 8
    assert decode_phase_ends(100, 4) == [32, 64, 96, 100]
    assert decode_phase_ends(48, 4) == [32, 48] and decode_phase_ends(32, 4) == [32]  # runs of >= 32 steps
    assert decode_phase_ends(12, 4, min_steps=8) == [8, 12]
    assert decode_phase_ends(1, 4) == [1]
    with pytest.raises(ValueError, match="decode_phases must be >= 1"):
        Sampler(CFG, eos_ids=[], decode_phases=0)


def test_decode_phases_equal_one_loop(model, monkeypatch):
    """Decoding in phases, each over a cache only as long as the slots filled by its end, gives the tokens,
    log-probs and lengths of one loop over the whole cache: greedy and sampled, with and without a row that stops
    on EOS in a later phase."""
    monkeypatch.setattr("jgem.models.sampler.MIN_PHASE_STEPS", 8)  # phases of 8 steps: 5 phases in 40 steps
    one = Sampler(CFG, eos_ids=[], max_prompt_buckets=(16, 32), decode_phases=1)
    greedy = np.asarray(one.generate(model, PROMPTS, jax.random.key(0), max_new_tokens=40, greedy=True).tokens)
    eos = int(greedy[2, 11])  # row 2 stops after its first phase boundary (step 8 with 5 phases)
    expected = [_expected_length(row.tolist(), {eos}, [], 40) for row in greedy]
    assert 8 < expected[2] < 40 and max(expected) == 40, expected
    kw_all = (dict(greedy=True), dict(temperature=0.8, top_p=0.9, top_k=20))
    for eos_ids in ([], [eos]):
        a_s = Sampler(CFG, eos_ids=eos_ids, max_prompt_buckets=(16, 32), decode_phases=1) if eos_ids else one
        b_s = Sampler(CFG, eos_ids=eos_ids, max_prompt_buckets=(16, 32), decode_phases=5)
        for kw in kw_all:
            a = a_s.generate(model, PROMPTS, jax.random.key(4), max_new_tokens=40, **kw)
            b = b_s.generate(model, PROMPTS, jax.random.key(4), max_new_tokens=40, **kw)
            np.testing.assert_array_equal(a.tokens, b.tokens)
            np.testing.assert_array_equal(a.lengths, b.lengths)
            np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-5)
            if eos_ids and kw.get("greedy"):
                assert np.asarray(b.lengths).tolist() == expected
