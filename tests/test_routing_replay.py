"""Routing replay (R3) for a mixture of experts: the rollout engine records every fed token's experts, the record
rides with the episode into the learner's batch, and the learner's forward replays it (`--learner.routing replay`).

On a router built to nearly tie (every expert's router column one shared vector plus noise of 1e-7 of it), the
sampler's decode forward and the learner's teacher-forced forward, different programs whose float32 roundings differ
in the last bits, route ~18% of the recorded (token, layer, slot) choices differently. Without replay the learner's
log-probs of the sampled tokens are then off by up to ~2e-2; with replay they equal the sampler's up to float32
rounding (~1e-6, what a dense model shows too: the two forwards are different programs, so replay makes the routing
exact, not the last bit), while the learner's router still disagrees with the record (`routing_mismatch_frac` > 0):
the equality comes from the replay, so the replay test fails if replay is switched off."""

from __future__ import annotations

import dataclasses
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jgem.models.config import PRESETS, preset
from jgem.rollout.batch import build_batch
from jgem.rollout.episode import Episode, Transition
from tests.train_utils import small_config

pytestmark = pytest.mark.xdist_group("routing-replay")

MOE = "test-moe-micro"
PRESETS.setdefault(
    MOE,
    preset(
        "tiny-moe",
        num_layers=1,
        hidden_size=64,
        intermediate_size=128,
        num_heads=2,
        num_kv_heads=1,
        num_experts=4,
        moe_intermediate_size=32,
    ),
)
REPLAY_TOL = 2e-6  # float32 rounding between the decode and the teacher-forced forward (~1e-6, as dense)


def tied_routers(params, *, seed: int = 0, common: float = 1.0, spread: float = 1e-7):
    """`params` with every router's columns one random vector (scale `common`) plus noise (scale `spread`): the
    experts' logits tie up to a few float32 ulps, so which wins depends on the last bits of the hidden state."""
    rng = np.random.default_rng(seed)

    def tie(path, x):
        if "router" not in jax.tree_util.keystr(path):
            return x
        d, e = x.shape
        w = common * rng.standard_normal((d, 1)) + spread * rng.standard_normal((d, e))
        return jax.device_put(w.astype(np.float32), x.sharding)

    return jax.tree_util.tree_map_with_path(tie, params)


@pytest.fixture(scope="module")
def played(tmp_path_factory):
    """A trainer of the micro MoE with near-tied routers, its state then, and step 0's episodes (played by it:
    several turns each)."""
    import tests.algo_step_trainers  # noqa: F401 (registers test:scored-talk)
    from jgem.train import Trainer

    cfg = small_config(
        str(tmp_path_factory.mktemp("replay")),
        model={"preset": MOE},
        learner={"epochs": 1, "minibatches": 1},
        env={"env_id": "test:scored-talk", "num_envs": 4},  # 2-5 turns whatever is said: observations appended
        curriculum={"horizons": (3,), "stage_steps": 100},
    )
    tr = Trainer(cfg)
    tr.state = tr.state.replace(params=tied_routers(tr.state.params))
    tied = jax.tree.map(jnp.copy, tr.state)
    episodes = tr.collect(0)
    tr.pool.close()
    return tr, tied, episodes


def learn(played, routing: str) -> dict[str, float]:
    """One update on the episodes from the sampling params, with the learner's routing `routing`: still the step's
    one upload (the record rides in it) and one download (a transfer guard fails any other copy)."""
    from tests.algo_step_trainers import guarded_learn

    tr, tied, episodes = played
    tr.state = jax.tree.map(jnp.copy, tied).replace(cfg=dataclasses.replace(tied.cfg, routing=routing))
    metrics, counts = guarded_learn(tr, episodes)
    assert counts == {"upload": 1, "download": 1}
    return metrics


def test_engine_records_every_fed_token(played):
    """Every token of every stream has its experts recorded (ids in range, k distinct), except the last, which
    nothing fed."""
    tr, _, episodes = played
    cfg = tr.state.model().cfg
    assert max(e.num_turns for e in episodes) >= 2  # an action's last token is fed with the next observation
    for e in episodes:
        assert e.routes.shape == (e.stream.size, len(cfg.sparse_layers), cfg.num_experts_per_tok)
        fed, last = e.routes[:-1], e.routes[-1]
        assert (last == -1).all()
        assert ((fed >= 0) & (fed < cfg.num_experts)).all()
        assert (np.sort(fed, axis=-1)[..., 1:] != np.sort(fed, axis=-1)[..., :-1]).all()


def test_replay_gives_the_samplers_logprobs(played):
    """With replay the learner's log-probs of the sampled tokens equal the sampler's (float32 rounding), though its
    own router disagrees with the record on many choices."""
    m = learn(played, "replay")
    assert m["routing_mismatch_frac"] > 0.02, m  # the config flips routes: the record is what makes them equal
    assert m["logprob_diff_max"] <= REPLAY_TOL, m
    assert np.isfinite(m["aux_loss"]) and m["aux_loss"] > 0


def test_recompute_differs(played):
    """Without replay the learner routes the flipped tokens its own way: its log-probs differ from the sampler's."""
    m = learn(played, "recompute")
    assert m["routing_mismatch_frac"] > 0.02, m
    assert m["logprob_diff_max"] > 1e-3, m


# ---------------------------------------------------------------------- the record through packing


def _routes(n: int, seed: int, m: int = 2, k: int = 2) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 8, (n, m, k)).astype(np.int32)


def test_routes_survive_packing():
    """A stream's and per-turn transitions' routes land at their tokens in the batch's `expert_ids` [B, T, M, k]
    (a stream's row; the per-turn chat view's row of extending turns, each turn's record for its own tokens and the
    next's for its last action token); padding and unrecorded tokens are -1; the record survives a pickle (episodes
    cross processes as one: the role split's transport, the pipeline's files)."""
    stream = np.arange(1, 13, dtype=np.int32)
    chat = Episode(
        0,
        0,
        "env",
        0,
        [Transition(0, 0, 4, stream[4:6], np.zeros(2)), Transition(0, 1, 9, stream[9:12], np.zeros(3))],
        stream=stream,
        routes=_routes(12, 0),
    )
    # per-turn prompts: turn 1's extends turn 0's prompt and action (one row), turn 2's is a new template
    p0, a0 = np.arange(20, 25, dtype=np.int32), np.array([7, 8], np.int32)
    p1, a1 = np.concatenate([p0, a0, [40, 41]]).astype(np.int32), np.array([9], np.int32)
    p2, a2 = np.arange(30, 33, dtype=np.int32), np.array([6], np.int32)
    r0, r1 = _routes(7, 1), _routes(10, 2)
    r0[-1] = -1  # turn 0's last action token was fed only in turn 1's segment: its record is turn 1's
    own = Episode(
        1,
        1,
        "env",
        0,
        [
            Transition(1, 0, 5, a0, np.zeros(2), prompt_ids=p0, routes=r0),
            Transition(1, 1, 9, a1, np.zeros(1), prompt_ids=p1, routes=r1),
            Transition(1, 2, 3, a2, np.zeros(1), prompt_ids=p2),  # no record (a teacher's turn, say)
        ],
    )
    first = np.concatenate([r0[:6], r1[6:]])
    chat, own = pickle.loads(pickle.dumps([chat, own]))
    packed = build_batch([chat, own], view="chat_per_turn", buckets=(16,), routing=(2, 2))
    ids = packed.arrays["expert_ids"]
    assert ids.shape == (*packed.arrays["tokens"].shape, 2, 2)
    seen = np.zeros(ids.shape[:2], bool)
    want = [chat.routes, first, np.full((4, 2, 2), -1)]
    for (r, s, n), w in zip(packed.placement, want, strict=True):
        np.testing.assert_array_equal(ids[r, s : s + n], w)
        seen[r, s : s + n] = True
    assert (ids[~seen] == -1).all()
    # a dense model's batch carries none
    assert "expert_ids" not in build_batch([chat, own], view="chat", buckets=(16,)).arrays


def test_routes_checked():
    """A record of the wrong length is refused, naming what it must cover."""
    with pytest.raises(ValueError, match=r"\[3, M, k\] for its stream"):
        Episode(0, 0, "env", 0, [Transition(0, 0, 1, [2], [0.0])], stream=np.array([1, 2, 3]), routes=_routes(2, 0))
