"""`jgem.train.run`: the env's turn limit read from its registered spec, without building the env."""

from __future__ import annotations

import pytest

from jgem.registry import list_envs, make, register, spec
from jgem.train.run import env_turn_limit

BUILT_IN = {"game", "logic", "rg", "math", "code", "qa", "eval", "agentgym", "web"}  # jgem.envs' suites (not tests')


def _built_limit(env_id: str) -> int | None:
    env = make(env_id)
    try:
        limit = getattr(env, "max_turns", None)
    finally:
        if hasattr(env, "close"):
            env.close()
    return limit if isinstance(limit, int) and limit > 0 else None


def test_the_spec_gives_every_fixed_env_its_built_turn_limit():
    """Every registered id whose env builds here without data, a browser or Java: the limit read from the spec is
    the built env's `max_turns`. A `-random` variant draws its limit per episode: the spec says None (the built
    env's is whatever its first draw was, which is no limit for the run's other episodes)."""
    checked = 0
    for env_id in list_envs():
        if env_id.split(":")[0] not in BUILT_IN or env_id.startswith("web:") or "SciWorld" in env_id:
            continue
        try:
            built = _built_limit(env_id)
        except (ValueError, FileNotFoundError, ImportError):  # needs a local dataset (eval:, code:, ...)
            continue
        expected = None if env_id.endswith("-random") else built
        assert env_turn_limit(env_id, {}) == expected, env_id
        checked += 1
    assert checked > 150


def test_the_turn_limit_takes_the_runs_env_kwargs_and_never_builds_the_env(monkeypatch):
    class Unbuildable:
        def __init__(self, max_turns: int = 7, size: int = 3) -> None:
            raise AssertionError("reading the turn limit built the env")

    import jgem.registry

    list_envs()  # the built-in ids are loaded; the test's own go into a copy of the registry, dropped after
    monkeypatch.setattr(jgem.registry, "_REGISTRY", dict(jgem.registry._REGISTRY))
    register("test:unbuildable-v0", Unbuildable, overwrite=True)
    register("test:unbuildable-v0-long", Unbuildable, overwrite=True, max_turns=20)
    register("test:unbuildable-v0-none", lambda size=3: None, overwrite=True)
    assert env_turn_limit("test:unbuildable-v0", {}) == 7  # the entry point's default
    assert env_turn_limit("test:unbuildable-v0-long", {}) == 20  # the registered kwargs over it
    assert env_turn_limit("test:unbuildable-v0-long", {"max_turns": 5}) == 5  # the run's env_kwargs over those
    assert env_turn_limit("test:unbuildable-v0-none", {}) is None  # no max_turns at all
    with pytest.raises(KeyError, match="unknown env id"):
        env_turn_limit("test:no-such-env-v0", {})
    assert spec("game:GuessTheNumber-v0-easy").kwargs["max_turns"] == env_turn_limit("game:GuessTheNumber-v0-easy", {})


def test_a_policy_restores_alone_from_a_checkpoint_with_a_critic_a_reference_and_lora(tmp_path):
    """`Run(optimizer=False).restore_policy` reads `step`, `params` (here LoRA's adapters) and `model_state` (the
    frozen base) of a PPO checkpoint with a KL reference: the fields it skips (optimizer moments, critic, reference)
    are in the checkpoint, and what it reads equals what was saved, bit for bit."""
    import jax

    from jgem.checkpoint import CheckpointConfig, Checkpointer
    from jgem.models.config import LoraConfig
    from jgem.train.loop import params_digest
    from jgem.train.run import Run
    from tests.train_utils import small_config

    cfg = small_config(
        str(tmp_path), algorithm="ppo", model={"lora": LoraConfig(rank=4, alpha=8.0)}, learner={"kl_coef": 0.1}
    )
    trained = Run(cfg)
    trained.close()
    state = trained.state
    assert state.critic_params is not None and state.ref_params is not None and state.opt_state is not None
    # a policy that differs from a fresh init's: adapters moved off zero, a non-zero update count
    moved = jax.tree.map(lambda x: x + 0.25, state.params)
    state = state.replace(params=moved, step=state.step + 3)
    with Checkpointer(CheckpointConfig(str(tmp_path / "checkpoints"))) as ckpt:
        ckpt.save(3, state, {"step": 3})
    run = Run(cfg, optimizer=False)
    try:
        assert run.state.opt_state is None and run.state.critic_params is None and run.state.ref_params is None
        assert params_digest(run.state.params) != params_digest(moved)
        run.restore_policy(tmp_path / "checkpoints", 3)
        assert params_digest(run.state.params) == params_digest(moved)
        assert params_digest(run.state.model_state) == params_digest(state.model_state)
        assert int(run.state.step) == int(state.step)
        assert run.state.opt_state is None and run.state.critic_params is None
        with pytest.raises(FileNotFoundError, match="has no step 4; it has \\[3\\]"):
            run.restore_policy(tmp_path / "checkpoints", 4)
    finally:
        run.close()
