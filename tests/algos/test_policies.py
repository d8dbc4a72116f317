"""Several policies as LoRA adapters on one base, in the learner: one step over a batch that mixes their episodes
updates each adapter exactly as a run of that policy alone on its own episodes would (its advantages from its own
episodes' statistics, its loss normalised by its own tokens, its gradient clipped by its own norm, its own Adam
moments and step count), and leaves a policy without episodes untouched (params, moments, step count): its first
update later is a policy's first update."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jgem.algos.config import LearnerConfig
from jgem.algos.learner import init_train_state
from jgem.algos.step import StepInputs, StepSpec, train_step
from jgem.models.config import LoraConfig, preset
from jgem.models.transformer import Transformer
from jgem.rollout.batch import build_batch
from jgem.rollout.episode import Episode, Transition, turn_arrays

BASE = preset("tiny", num_layers=1, vocab_size=256)
POLICIES = 3  # policy 2 plays no episode in the batch
# a small clip, so every policy's gradient is clipped (each by its own norm); 2 epochs: the second sees moved params
CFG = LearnerConfig(lr=1e-2, max_grad_norm=0.002, epochs=2, minibatches=1, weight_decay=0.01)
SPEC = StepSpec("rebn", gamma=0.9)


def _episodes(seed: int = 0) -> list[Episode]:
    """Eight two-turn episodes, alternately policy 0's and 1's, with different rewards and lengths."""
    rng = np.random.default_rng(seed)
    out = []
    for e in range(8):
        n1, a1, n2, a2 = (int(x) for x in rng.integers(3, 7, 4))
        stream = rng.integers(3, BASE.vocab_size, n1 + a1 + n2 + a2).astype(np.int32)
        turns = [
            Transition(e, 0, n1, stream[n1 : n1 + a1], -rng.random(a1).astype(np.float32), float(rng.normal())),
            Transition(e, 1, n1 + a1 + n2, stream[n1 + a1 + n2 :], -rng.random(a2).astype(np.float32), float(e % 3)),
        ]
        out.append(Episode(e, e, "test", e, turns, stream=stream, policy=e % 2))
    return out


def _inputs(episodes: list[Episode], *, several: bool) -> StepInputs:
    packed = build_batch(episodes, buckets=(64,))
    names = ["tokens", "positions", "segment_ids", "loss_mask", "old_logprobs"] + ["adapter_ids"] * several
    host = {k: packed.arrays[k] for k in names} | turn_arrays(episodes)
    if not several:
        del host["policy_ids"]
    host |= {"token_episode": packed.token_episode, "token_turn": packed.token_turn}
    return StepInputs(**jax.tree.map(jnp.asarray, host))


def _adapters(state) -> dict:
    return {k: np.asarray(v) for k, v in nnx.to_flat_state(state.params)}


def _alone(multi: Transformer, p: int) -> Transformer:
    """A one-adapter model with `multi`'s base weights and its adapter p."""
    one = Transformer(BASE.replace(lora=LoraConfig(rank=4, alpha=8.0)), rngs=nnx.Rngs(0))
    source = dict(nnx.to_flat_state(nnx.state(multi)))
    flat = [
        (k, v.replace(source[k][...][p] if k[-1] in ("lora_a", "lora_b") else source[k][...]))
        for k, v in nnx.to_flat_state(nnx.state(one))
    ]
    nnx.update(one, nnx.from_flat_state(flat))
    return one


@pytest.fixture(scope="module")
def multi() -> Transformer:
    model = Transformer(BASE.replace(lora=LoraConfig(rank=4, alpha=8.0, adapters=POLICIES)), rngs=nnx.Rngs(0))
    state = nnx.state(model, nnx.LoRAParam)  # adapters off their init (B nonzero), each policy's different
    keys = iter(jax.random.split(jax.random.key(1), len(jax.tree.leaves(state))))
    nnx.update(model, jax.tree.map(lambda x: x + 0.05 * jax.random.normal(next(keys), x.shape, x.dtype), state))
    return model


def test_one_step_updates_each_policy_as_its_own_episodes_alone_would(multi):
    episodes = _episodes()
    state = init_train_state(multi, CFG)
    before = _adapters(state)
    state, metrics = train_step(state, _inputs(episodes, several=True), SPEC)
    after = _adapters(state)
    for p in (0, 1):
        alone = init_train_state(_alone(multi, p), CFG)
        mine = [e for e in episodes if e.policy == p]
        for e in mine:
            e.policy = 0  # the one-adapter model's
        alone, m = train_step(alone, _inputs(mine, several=False), SPEC)
        for e in mine:
            e.policy = p
        assert float(m["grad_norm"]) > CFG.max_grad_norm  # the clip is active: its norm must be its own
        np.testing.assert_allclose(float(metrics[f"policy{p}/grad_norm"]), float(m["grad_norm"]), rtol=1e-5)
        np.testing.assert_allclose(float(metrics[f"policy{p}/loss"]), float(m["loss"]), rtol=1e-5, atol=1e-7)
        for k, v in _adapters(alone).items():
            assert not np.allclose(v, before[k][p])  # it moved
            np.testing.assert_allclose(after[k][p], v, rtol=2e-5, atol=1e-7, err_msg=f"policy {p} {k}")
    for k, v in before.items():  # policy 2 played nothing: its adapter, moments and step count stay as they were
        np.testing.assert_array_equal(after[k][2], v[2])
    counts = [np.asarray(x) for x in jax.tree.leaves(state.opt_state) if np.issubdtype(x.dtype, np.integer)]
    assert counts and all(c.shape == (POLICIES,) and c[2] == 0 and c[0] == c[1] == CFG.epochs for c in counts)
    assert float(metrics["policy2/tokens"]) == 0.0 and float(metrics["skipped"]) == 0.0
    assert np.isnan(float(metrics["policy2/loss"])) and float(metrics["policy0/tokens"]) > 0

    # the next step, policy 1's episodes played by policy 2 instead: policy 2's first update is that of a policy
    # alone on them (its own step count: Adam's bias correction and the schedule start at its first step)
    # (float32 noise on near-zero updates: ~3e-7; a shared step count would be off by ~1e-3)
    for e in episodes:
        e.policy = 2 if e.policy == 1 else e.policy
    state, _ = train_step(state, _inputs(episodes, several=True), SPEC)
    mine = [e for e in episodes if e.policy == 2]
    for e in mine:
        e.policy = 0
    alone, _ = train_step(init_train_state(_alone(multi, 2), CFG), _inputs(mine, several=False), SPEC)
    final = _adapters(state)
    for k, v in _adapters(alone).items():
        np.testing.assert_allclose(final[k][2], v, rtol=2e-5, atol=2e-6, err_msg=f"policy 2 {k}")


def test_a_policy_state_refuses_a_critic_and_a_batch_without_adapter_ids(multi):
    with pytest.raises(ValueError, match="critic with 3 policies"):
        init_train_state(multi, CFG, critic=Transformer(BASE, rngs=nnx.Rngs(0), value_head=True))
    with pytest.raises(ValueError, match="adapter_ids"):
        train_step(init_train_state(multi, CFG), _inputs(_episodes(), several=False), SPEC)
