"""The rollout engine: extend equals a fresh prefill, token exactness, determinism over slots and backends,
budgets, faults, shared group prefixes, and envs that answer at their own pace."""

from __future__ import annotations

import dataclasses
import threading
import time

import jax
import numpy as np
import pytest
from flax import nnx

from jgem.algos.learner import token_logprobs
from jgem.envs.pool import EnvPool
from jgem.models.kvcache import init_slots
from jgem.models.tokenizer import ChatFormat, load_tokenizer
from jgem.models.transformer import Transformer
from jgem.registry import register
from jgem.rollout.batch import build_batch
from jgem.rollout.config import RolloutConfig, Sampling
from jgem.rollout.engine import EpisodeSpec, RolloutEngine, wrappers_for_view
from jgem.rollout.scripted import scripted_episodes
from jgem.rollout.slots import SlotEngine
from jgem.rollout.views import common_prefix
from jgem.sharding.config import MeshConfig
from jgem.sharding.mesh import make_mesh
from tests.rollout import mp_engine_worker as worker
from tests.rollout.envs import FlakyGuessEnv, LongPromptTalkEnv, TalkEnv

GUESS = "game:GuessTheNumber-v0-easy"
ENV = "test:talk"
register(ENV, TalkEnv, overwrite=True)


@pytest.fixture(scope="module")
def setup():
    tok = load_tokenizer()
    chat = ChatFormat(tok)
    cfg, graphdef, state = worker.model()  # tiny: 2 layers of 64; the params of the sharded runs below
    return tok, chat, cfg, nnx.merge(graphdef, state)


def _collect(setup, view="chat", n=6, num_envs=4, seed=0, max_turns=4, backend="inline", env=ENV, **rollout):
    _, chat, cfg, model = setup
    rcfg = RolloutConfig(view=view, max_new_tokens=rollout.pop("max_new_tokens", 8), **rollout)
    with EnvPool(env, num_envs, backend=backend, wrappers=wrappers_for_view(view)) as pool:
        engine = RolloutEngine(cfg, pool, chat, rcfg, env_name=env)
        specs = [EpisodeSpec(i, i // 2, 100 + i // 2) for i in range(n)]
        eps = engine.collect(model, specs, jax.random.key(seed), max_turns=max_turns)
    return eps, engine.stats


@pytest.fixture(scope="module")
def played(setup):
    """`_collect(setup, view=view, temperature=1.0)` (6 episodes on 4 envs, seed 0), played once per view for the
    tests that read the same episodes."""
    runs = {}

    def get(view):
        if view not in runs:
            runs[view] = _collect(setup, view=view, temperature=1.0)
        return runs[view]

    return get


# The reference of the tests that compare engines: the episodes of `worker.one_process` (12 episodes, 6 groups, on 8
# envs, run key 3), played by one unsharded engine on the inline backend.
REFERENCE = dict(n=2 * worker.EPISODES_PER_PROCESS, num_envs=2 * worker.ENVS_PER_PROCESS, seed=3, temperature=1.0)


@pytest.fixture(scope="module")
def reference(setup):
    return _collect(setup, **REFERENCE)[0]


@nnx.jit
def _forward(model, tokens, positions, segment_ids, cache=None):
    return model(tokens, positions, segment_ids=segment_ids, cache=cache)


_logprobs = nnx.jit(token_logprobs)


def _padded(stream: np.ndarray, length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One row of `length` (tokens, positions, segment ids): `stream`, then padding (segment 0) that nothing before
    it attends, so a fixed shape serves streams of any length up to it."""
    n = stream.size
    tok, pos, seg = (np.zeros((1, length), np.int32) for _ in range(3))
    tok[0, :n], pos[0, :n], seg[0, :n] = stream, np.arange(n), 1
    return tok, pos, seg


def test_extensions_equal_one_fresh_prefill(setup):
    """Logits after a stream is prefilled in uneven pieces, rows at different lengths, equal one fresh forward; the
    decode chunk's sampled log-probs equal the teacher-forced log-probs of the whole stream."""
    _, _, cfg, model = setup
    rng = np.random.default_rng(0)
    streams = [rng.integers(3, cfg.vocab_size, n).astype(np.int32) for n in (45, 23, 60)]
    cache = init_slots(cfg, 3, 64)
    pieces = [[0, 5, 6, 30, 44], [0, 22], [0, 1, 2, 40, 59]]  # cut points: the last token is left to decode
    width = 40  # every call one shape (one compile); each row's piece is padded to it with segment 0
    got: list[list[np.ndarray]] = [[], [], []]
    for j in range(max(len(p) for p in pieces)):
        lens = [(p[j + 1] if j + 1 < len(p) else p[-1]) - (p[j] if j < len(p) else p[-1]) for p in pieces]
        tok = np.zeros((3, width), np.int32)
        pos = np.zeros((3, width), np.int32)
        seg = np.zeros((3, width), np.int32)
        for b, p in enumerate(pieces):
            start = p[min(j, len(p) - 1)]
            tok[b, : lens[b]] = streams[b][start : start + lens[b]]
            pos[b, : lens[b]] = start + np.arange(lens[b])
            seg[b, : lens[b]] = 1
        logits, cache = _forward(model, tok, pos, seg, cache)
        logits = np.asarray(logits)  # sliced on the host: a jax slice of each length would compile its own op
        for b in range(3):
            got[b].append(logits[b, : lens[b]])
    for b, s in enumerate(streams):
        fresh, _ = _forward(model, *_padded(s, 64))
        n = pieces[b][-1]
        np.testing.assert_allclose(np.concatenate(got[b]), np.asarray(fresh)[0, :n], atol=2e-5)

    # The engine: extend in pieces through several calls, then sample 6 tokens; their log-probs equal a fresh
    # teacher-forced pass over stream + sampled tokens.
    eng = SlotEngine(cfg, num_slots=4, max_len=96, eos_ids=[-5], chunk_steps=3, extend_chunk=16)
    split = nnx.split(model)
    slots = [2, 0, 3]
    for j in range(max(len(p) for p in pieces) - 1):
        items = [
            (s, streams[b][p[j] : p[j + 1]], p[j]) for b, (s, p) in enumerate(zip(slots, pieces)) if j + 1 < len(p)
        ]
        eng.extend(split, items)
    acts = [[] for _ in slots]
    lps = [[] for _ in slots]
    for _ in range(2):  # two chunks of 3 steps
        last = [int((np.concatenate([s[: p[-1] + 1], a]))[-1]) for s, p, a in zip(streams, pieces, acts)]
        pos = [p[-1] + len(a) for p, a in zip(pieces, acts)]
        handle, _ = eng.decode(
            split, slots, last, pos, [len(a) for a in acts], [6] * 3, [7, 8, 9], [0] * 3, jax.random.key(1), Sampling()
        )
        for b, (t, lp) in enumerate(eng.fetch(handle)):
            acts[b] += t.tolist()
            lps[b] += lp.tolist()
    for b, s in enumerate(streams):
        full = np.concatenate([s[: pieces[b][-1] + 1], acts[b]]).astype(np.int32)
        ref, _ = _logprobs(model, *_padded(full, 72))
        assert len(acts[b]) == 6
        np.testing.assert_allclose(lps[b], np.asarray(ref)[0, full.size - 6 : full.size], atol=2e-5)


@pytest.mark.parametrize("view", ["chat", "chat_per_turn", "per_turn"])
def test_learner_sees_exactly_the_sampled_tokens(setup, played, view):
    """Behaviour log-probs recomputed by the learner on the packed batch equal the sampler's: the batch holds
    exactly the sampled action tokens, in exactly the context the model was conditioned on."""
    _, chat, _, model = setup
    eps, stats = played(view)
    assert stats.turns == sum(e.num_turns for e in eps) > len(eps)
    packed = build_batch(eps, view=view, pad_id=chat.pad_id)
    a = packed.arrays
    lp, _ = _logprobs(model, a["tokens"], a["positions"], a["segment_ids"])
    m = a["loss_mask"]
    assert m.sum() == sum(e.num_action_tokens for e in eps)
    np.testing.assert_allclose(np.asarray(lp)[m], a["old_logprobs"][m], atol=2e-4)
    if view == "chat":  # every prompt token, and each action's last token, is prefilled (or fed) once
        prompt_tokens = stats.stream_tokens - stats.action_tokens
        assert stats.prefill_tokens + stats.shared_prefix_tokens == prompt_tokens + stats.turns - len(eps)
        assert all(t.prompt_ids is None for e in eps for t in e.transitions)
    if view == "chat_per_turn":  # a prompt of its own every turn (most random actions are cut, shown as "")
        assert all(t.prompt_ids is not None for e in eps for t in e.transitions)
        prompts = sum(e.prompt_ids(k).size for e in eps for k in range(e.num_turns))
        assert stats.prefill_tokens + stats.shared_prefix_tokens < prompts // 2  # the slots kept most of them


def test_the_per_turn_chat_view_trains_the_chat_views_rows_where_nothing_is_rewritten(setup):
    """The solver's actions (each ends with its stop token) under an append-only template: every prompt extends the
    last, so the per-turn chat view's batch is the chat view's, token for token."""
    _, chat, *_ = setup
    specs = [EpisodeSpec(i, i, 40 + i) for i in range(4)]
    batches = []
    for view in ("chat", "chat_per_turn"):
        eps = scripted_episodes(GUESS, specs, chat, view=view, max_turns=6)
        assert sum(e.num_turns for e in eps) > len(eps)
        p = build_batch(eps, view=view, pad_id=chat.pad_id)
        # the turn index arrays too: each action token carries its own turn's advantage on the device
        batches.append(p.arrays | {"token_episode": p.token_episode, "token_turn": p.token_turn})
    assert batches[0].keys() == batches[1].keys()
    for key in batches[0]:
        np.testing.assert_array_equal(batches[0][key], batches[1][key], err_msg=key)


def test_the_per_turn_chat_view_follows_a_template_that_rewrites_history(setup):
    """Qwen3's template with thinking off writes an empty think block in each generation prompt and drops it from the
    earlier turns: every prompt of the per-turn chat view is the template's rendering of the conversation so far,
    the slot keeps the keys and values up to the first changed token, and the learner's log-probs on the rows (a new
    row where a prompt was rewritten) equal the sampler's."""
    from tests.tools.native_tools import TEMPLATES

    _, _, cfg, model = setup
    tok = load_tokenizer()
    tok.chat_template = (TEMPLATES / "qwen3.jinja").read_text()
    chat = ChatFormat(tok, enable_thinking=False)
    assert chat.rewrites_history and not chat.append_only
    rcfg = RolloutConfig(view="chat_per_turn", max_new_tokens=8, temperature=1.0)
    with EnvPool(ENV, 3, backend="inline", wrappers=wrappers_for_view("chat_per_turn")) as pool:
        engine = RolloutEngine(cfg, pool, chat, rcfg, env_name=ENV)
        eps = engine.collect(model, [EpisodeSpec(i, i, 100 + i) for i in range(3)], jax.random.key(0), max_turns=4)
    stats = engine.stats
    env = wrappers_for_view("chat_per_turn")[0](TalkEnv())
    for e in eps:  # replay each episode's actions: every prompt is the template's rendering of the messages so far
        obs, _ = env.reset(seed=e.seed)
        for k, t in enumerate(e.transitions):
            assert e.prompt_ids(k).tolist() == chat.start(obs), f"episode {e.episode_id} turn {k}"
            ids = t.action_ids.tolist()
            obs, *_ = env.step(chat.action_text(ids) if chat.ends_with_stop(ids) else rcfg.invalid_action)
    turns = sum(e.num_turns for e in eps)
    # the template rewrote every later prompt (the empty think block); each turn prefills from its first change
    kept = 0
    for e in eps:
        for k in range(1, e.num_turns):
            before = np.concatenate([e.prompt_ids(k - 1), e.transitions[k - 1].action_ids]).tolist()
            now = e.prompt_ids(k).tolist()
            assert before[: len(now)] != now  # rewritten
            kept += min(common_prefix(before, now), len(before) - 1, len(now) - 1)
    prompts = sum(e.prompt_ids(k).size for e in eps for k in range(e.num_turns))
    assert stats.shared_prefix_tokens == 0 and turns > len(eps) and kept > prompts // 3
    assert (
        stats.prefill_tokens == prompts - kept
    )  # (the prefill count includes each prompt's last token, fed by decode)
    a = build_batch(eps, view="chat_per_turn", pad_id=chat.pad_id).arrays
    assert a["segment_ids"].max(axis=1).sum() == turns  # every turn a row of its own
    lp, _ = _logprobs(model, a["tokens"], a["positions"], a["segment_ids"])
    m = a["loss_mask"]
    np.testing.assert_allclose(np.asarray(lp)[m], a["old_logprobs"][m], atol=2e-4)


def test_chat_stream_grows_by_action_and_observation_tokens(setup, played):
    _, chat, *_ = setup
    eps, _ = played("chat")
    multi = [e for e in eps if e.num_turns > 1]
    assert multi
    for e in multi:
        for prev, nxt in zip(e.transitions, e.transitions[1:]):
            end = prev.prompt_len + prev.action_ids.size
            assert np.array_equal(e.stream[prev.prompt_len : end], prev.action_ids)
            closing = chat.close_action(prev.action_ids.tolist())
            assert e.stream[end : end + len(closing)].tolist() == closing
            assert nxt.prompt_len > end


def test_scripted_chat_stream_equals_chat_template(setup):
    """With canonical action tokens (the scripted teacher), the stream is the template of the messages."""
    tok, chat, *_ = setup
    from jgem.envs.wrappers import ChatWrapper
    from jgem.registry import make

    eps = scripted_episodes(GUESS, [EpisodeSpec(0, 0, 5), EpisodeSpec(1, 1, 6)], chat, view="chat")
    for e in eps:
        env = ChatWrapper(make(GUESS))
        msgs, _ = env.reset(seed=e.seed)
        for t in e.transitions[:-1]:
            msgs, *_ = env.step(chat.action_text(t.action_ids.tolist()))
        expected = tok.apply_chat_template(msgs, tokenize=True, add_generation_prompt=True, return_dict=False)
        assert e.prompt_ids(e.num_turns - 1).tolist() == list(expected)
        assert e.success


def test_scripted_teacher_sees_the_training_configs_tools(setup):
    """The warm start's prompts are RL's: the config's tools wrap the teacher's env as they wrap the pool's."""
    _, chat, *_ = setup
    from jgem.config import EnvConfig
    from jgem.envs.with_tools import tool_wrapper

    wrappers = tool_wrapper(EnvConfig(env_id=GUESS, tools=("python",)))
    plain, tooled = (
        scripted_episodes(GUESS, [EpisodeSpec(0, 0, 5)], chat, view="chat", wrappers=w)[0] for w in ((), wrappers)
    )
    assert "<python>" not in chat.tokenizer.decode(plain.prompt_ids(0).tolist())
    assert "<python>" in chat.tokenizer.decode(tooled.prompt_ids(0).tolist())
    assert tooled.success and tooled.num_turns == plain.num_turns  # the solver's moves reach the game unchanged


def test_turn_limit_and_token_budget(setup):
    eps, stats = _collect(setup, view="chat", max_turns=1)
    assert all(e.num_turns == 1 for e in eps)
    _, chat, *_ = setup
    first = len(chat.start([{"role": "user", "content": "x"}]))
    with pytest.raises(ValueError, match="max_episode_tokens"):
        _collect(setup, max_episode_tokens=first + 8 + 1)  # the first prompt alone is longer than that
    # 2 slots of 256 tokens, the cache of the tests below (their programs): 32-token actions outgrow them
    eps, stats = _collect(setup, n=8, num_envs=2, max_turns=50, max_new_tokens=32, max_episode_tokens=256)
    assert stats.budget_truncations > 0  # the stream outgrew its slot: the episode ends, truncated
    assert all(e.stream.size <= 256 for e in eps)
    assert sum(e.truncated for e in eps) >= stats.budget_truncations


@pytest.mark.parametrize("backend", ["inline", "thread"])
def test_a_collect_that_raises_leaves_the_engine_and_pool_ready_for_the_next(setup, backend):
    """A prompt the engine cannot play raises out of `collect` while other episodes are live and queued (and, on the
    thread backend, env commands are in flight): the next `collect` on the same engine starts afresh and plays what
    a fresh engine plays."""
    _, chat, cfg, model = setup
    rcfg = RolloutConfig(max_new_tokens=8, max_episode_tokens=256)
    specs = [EpisodeSpec(i, i, 100 + i) for i in range(4)]
    with EnvPool(LongPromptTalkEnv, 2, backend=backend, wrappers=wrappers_for_view("chat")) as pool:
        engine = RolloutEngine(cfg, pool, chat, rcfg)
        bad = [EpisodeSpec(0, 0, 100), EpisodeSpec(1, 1, 999), EpisodeSpec(2, 2, 102), EpisodeSpec(3, 3, 103)]
        with pytest.raises(ValueError, match="the first prompt of episode 1 has"):
            engine.collect(model, bad, jax.random.key(5), max_turns=3)
        assert not engine.busy and pool.num_in_flight == 0
        again = engine.collect(model, specs, jax.random.key(5), max_turns=3)
    with EnvPool(LongPromptTalkEnv, 2, backend=backend, wrappers=wrappers_for_view("chat")) as pool:
        fresh = RolloutEngine(cfg, pool, chat, rcfg).collect(model, specs, jax.random.key(5), max_turns=3)
    assert _tokens(again) == _tokens(fresh) and all(e.num_turns > 1 for e in again)


def test_cut_actions_are_sent_as_invalid(setup):
    eps, stats = _collect(setup, max_new_tokens=1, temperature=1.0, env=GUESS)
    assert stats.truncated_actions > 0
    cut = [t for e in eps for t in e.transitions if not t.stopped]
    assert cut and all(t.reward == pytest.approx(-0.1) for t in cut)  # GEM's format-error reward


def _tokens(eps):
    return [[t.action_ids.tolist() for t in e.transitions] for e in eps]


@pytest.mark.slow
@pytest.mark.xdist_group("rollout-engine-refs")  # one `reference` (and one `worker.one_process` run) per worker
def test_same_episodes_whatever_the_slots_backend_and_timing(setup, reference):
    """Tokens depend on (run key, episode, turn, index) only: not on the number of slots, the pool's backend, or
    the order in which envs answer. The reference plays 12 episodes on 8 slots inline; here 8 slots on threads, 4
    in worker processes, and 1 (each episode in turn)."""
    ref = reference
    assert sum(e.num_turns for e in ref) > len(ref)
    for backend, num_envs in (("thread", 8), ("process", 4), ("thread", 1)):
        env = TalkEnv if backend == "process" else ENV  # a process worker builds the env from an importable class
        eps, _ = _collect(setup, **{**REFERENCE, "num_envs": num_envs}, backend=backend, env=env)
        assert _tokens(eps) == _tokens(ref), (backend, num_envs)
        for x, y in zip(eps, ref):
            np.testing.assert_array_equal(x.stream, y.stream)
            for a, b in zip(x.transitions, y.transitions):
                np.testing.assert_allclose(a.action_logprobs, b.action_logprobs, atol=1e-5)
    other, _ = _collect(setup, **{**REFERENCE, "seed": 4})
    assert _tokens(other) != _tokens(ref)


@pytest.mark.slow
@pytest.mark.xdist_group("rollout-engine-refs")
@pytest.mark.parametrize("shape", [dict(data=2, fsdp=2), worker.MESH])
def test_slots_sharded_over_a_mesh_give_the_same_episodes(reference, shape):
    """Slots sharded over the mesh's batch axes, params sharded by the rules: programs gather rows shard by shard
    (buckets of rows per shard) and copy group prompts within a shard; the episodes equal the unsharded engine's.
    The (fsdp 2, tensor 2) run is the one-process reference of test_multiprocess_engine.py (one run for both)."""
    eps, stats, _, _ = worker.one_process(**shape)
    assert _tokens(eps) == _tokens(reference)
    for x, y in zip(eps, reference):
        np.testing.assert_array_equal(x.stream, y.stream)
        for a, b in zip(x.transitions, y.transitions):
            np.testing.assert_allclose(a.action_logprobs, b.action_logprobs, atol=1e-4)
    assert stats.shared_prefix_tokens > 0
    if shape.get("data", 1) * shape.get("fsdp", 1) == 2:  # 2 shards of 4 slots: the tail runs gathered buckets
        assert stats.decode_rows < stats.decode_chunks * 8 * 8


def test_a_remat_model_samples_like_the_plain_one(setup):
    """Remat policies shape the backward pass only: the engine's programs run the same with one set."""
    _, chat, cfg, plain = setup
    ref, _ = _collect(setup, n=2, num_envs=2, seed=1, max_turns=2, max_episode_tokens=256)  # the cache shape above
    remat_cfg = dataclasses.replace(cfg, remat="full")
    graphdef = nnx.graphdef(nnx.eval_shape(lambda: Transformer(remat_cfg, rngs=nnx.Rngs(0))))
    model = nnx.merge(graphdef, nnx.state(plain))  # the setup's params, with a remat policy
    assert model.cfg.remat == "full"
    with EnvPool(ENV, 2, wrappers=wrappers_for_view("chat")) as pool:
        rcfg = RolloutConfig(max_new_tokens=8, max_episode_tokens=256)
        engine = RolloutEngine(remat_cfg, pool, chat, rcfg, env_name=ENV)
        specs = [EpisodeSpec(i, i // 2, 100 + i // 2) for i in range(2)]
        eps = engine.collect(model, specs, jax.random.key(1), max_turns=2)
    assert _tokens(eps) == _tokens(ref)


def test_sharded_slot_programs_gather_within_each_shard(setup):
    """A bucket is rows per shard: slots 0 and 5 on 2 shards of 4 run as 1 row on each shard, and padding rows
    are distinct unused rows of their shard."""
    _, _, cfg, _ = setup
    mesh = make_mesh(MeshConfig(data=2), devices=jax.devices()[:2])
    eng = SlotEngine(cfg, num_slots=8, max_len=64, eos_ids=[1], mesh=mesh)
    assert (eng.shards, eng.per_shard, eng.local_shards, eng.num_local_slots) == (2, 4, [0, 1], 8)
    rows, where = eng._rows([5, 0], 1)
    assert rows.tolist() == [0, 1] and where.tolist() == [1, 0]
    rows, where = eng._rows([1, 2, 3], 4)
    assert rows.tolist() == [0, 1, 2, 3, 0, 1, 2, 3] and where.tolist() == [1, 2, 3]  # a whole shard: row order
    with pytest.raises(ValueError, match="different shards"):
        eng.copy([0], [4])


def test_groups_share_their_first_prompt(setup):
    """Episodes 2k and 2k+1 form a group with one seed: the same first prompt, prefilled once and copied; the copy
    gives the same log-probs as a slot's own prefill (token exactness holds for the copied slots)."""
    _, chat, _, model = setup
    eps, stats = _collect(setup, n=8, num_envs=8, temperature=1.0)
    assert eps[0].group_id == eps[1].group_id and eps[0].seed == eps[1].seed
    assert eps[0].prompt_ids(0).tolist() == eps[1].prompt_ids(0).tolist()
    first = eps[0].transitions[0].prompt_len
    assert stats.shared_prefix_tokens == 4 * (first - 1)  # 4 groups of 2: one prefill each, one copy each
    packed = build_batch(eps, view="chat", pad_id=chat.pad_id)
    a = packed.arrays
    lp, _ = _logprobs(model, a["tokens"], a["positions"], a["segment_ids"])
    np.testing.assert_allclose(np.asarray(lp)[a["loss_mask"]], a["old_logprobs"][a["loss_mask"]], atol=2e-4)


def test_faulting_env_is_counted_and_collection_goes_on(setup):
    register("test:flaky-guess", FlakyGuessEnv, overwrite=True)
    eps, stats = _collect(setup, n=12, num_envs=4, backend="thread", env="test:flaky-guess", temperature=1.0)
    assert len(eps) == 12
    faulted = [e for e in eps if e.fault]
    assert faulted and stats.faults == len(faulted)
    assert all("injected" in e.fault for e in faulted)
    assert any(e.fault is None and e.num_turns > 0 for e in eps)


class _SlowTalk(TalkEnv):
    """TalkEnv whose seed-1 episode takes 0.6 s a step; records when each step starts."""

    log: list[tuple[int, float]] = []
    lock = threading.Lock()

    def reset(self, seed=None):
        self._seed = seed
        return super().reset(seed=seed)

    def step(self, action):
        with self.lock:
            self.log.append((self._seed, time.monotonic()))
        if self._seed == 1:
            time.sleep(0.6)
        return super().step(action)


def test_a_slow_env_holds_up_only_its_own_episode(setup):
    _, chat, cfg, model = setup
    rcfg = RolloutConfig(max_new_tokens=4, temperature=1.0)
    with EnvPool(_SlowTalk, 4, backend="thread", wrappers=wrappers_for_view("chat")) as pool:
        engine = RolloutEngine(cfg, pool, chat, rcfg)
        specs = [EpisodeSpec(i, i, 1 + 4 * i) for i in range(4)]  # seeds 1, 5, 9, 13: three turns each
        engine.collect(model, specs, jax.random.key(0), max_turns=3)  # compiles every shape this run needs
        _SlowTalk.log = []
        eps = engine.collect(model, specs, jax.random.key(0), max_turns=3)
    assert all(e.num_turns == 3 for e in eps)
    slow = sorted(t for s, t in _SlowTalk.log if s == 1)
    fast = [t for s, t in _SlowTalk.log if s != 1]
    assert len(fast) == 9 and len(slow) == 3
    assert max(fast) < slow[1], "the fast episodes waited for the slow env"


def test_bad_specs(setup):
    _, chat, cfg, model = setup
    with EnvPool(ENV, 2, backend="inline", wrappers=wrappers_for_view("chat")) as pool:
        engine = RolloutEngine(cfg, pool, chat, RolloutConfig())
        with pytest.raises(ValueError, match="episode ids repeat"):
            engine.collect(model, [EpisodeSpec(0, 0, 0), EpisodeSpec(0, 1, 1)], jax.random.key(0), max_turns=2)
        with pytest.raises(ValueError, match="max_turns"):
            engine.collect(model, [EpisodeSpec(0, 0, 0)], jax.random.key(0), max_turns=0)
    with pytest.raises(ValueError, match="chunk_steps"):
        RolloutConfig(chunk_steps=0)


def test_a_cache_that_does_not_fit_is_refused_before_compiling(setup):
    _, chat, cfg, _ = setup
    with EnvPool(ENV, 2, backend="inline", wrappers=wrappers_for_view("chat")) as pool:
        big = RolloutConfig(max_episode_tokens=2**34)
        with pytest.raises(ValueError, match=r"cache does not fit: 2 slots x 17179869184 tokens"):
            RolloutEngine(cfg, pool, chat, big)


def test_slots_on_a_tensor_mesh_keep_their_layout_and_tokens(setup):
    """On a (fsdp 2, tensor 2) mesh the cache is split over slots and KV heads, every program returns it in that
    layout (so donation reuses it and nothing recompiles), and the sampled tokens equal a meshless engine's."""
    from jgem.sharding.config import MeshConfig
    from jgem.sharding.mesh import make_mesh
    from jgem.sharding.rules import shard_tree

    _, _, cfg, model = setup
    mesh = make_mesh(MeshConfig(fsdp=2, tensor=2), devices=jax.devices()[:4])
    graphdef, state = nnx.split(model)
    out = []
    for m, st in ((None, state), (mesh, shard_tree(state, mesh))):
        eng = SlotEngine(cfg, num_slots=4, max_len=64, eos_ids=[1], chunk_steps=4, mesh=m)
        eng.extend((graphdef, st), [(s, [5 + s, 6, 7, 8], 0) for s in range(4)])
        eng.copy([0], [1])
        toks = []
        for _ in range(2):
            h, _ = eng.decode(
                (graphdef, st),
                range(4),
                [8] * 4,
                [4] * 4,
                [0] * 4,
                [8] * 4,
                range(4),
                [0] * 4,
                jax.random.key(0),
                Sampling(),
            )
            toks.append([t.tolist() for t, _ in eng.fetch(h)])
        if m is not None:
            assert eng.cache.k[0].sharding.spec == jax.sharding.PartitionSpec(("fsdp",), "tensor")
            assert all(x.sharding.is_equivalent_to(eng.cache_sharding, x.ndim) for x in eng.cache.k + eng.cache.v)
            assert eng.num_compilations == 2  # one extend, one decode: the second chunk reused the first's program
        out.append(toks)
    assert out[0] == out[1]
