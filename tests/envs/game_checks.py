"""Checks the per-game test files share: bad inputs, random play, cloning, reproducible resets."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

import jgem
from jgem.envs.games.solvers import play, solver_for


def check_bad_inputs(
    env_id: str,
    bad: Sequence[str],
    from_start_state: bool = False,
    obs_is_str: bool = False,
) -> jgem.Env:
    """Each of `bad`, sent as the first action after `reset(seed=1)` (or, with `from_start_state`, after
    restoring the state the env was made in), is a format error that ends the game."""
    env = jgem.make(env_id, seed=0)
    start = env.get_state() if from_start_state else None
    for action in bad:
        if from_start_state:
            env.set_state(start)
        else:
            env.reset(seed=1)
        obs, rew, term, trunc, info = env.step(action)
        assert (rew, term, info["success"]) == (-0.1, True, False) and "suffix" in info
        if obs_is_str:
            assert isinstance(obs, str)
    return env


def check_random_agent(
    env_id: str,
    episodes: int,
    max_steps: int,
    step_ok: Callable[[float], bool] = lambda rew: True,
    end_ok: Callable[[jgem.Env, float], bool] = lambda env, total: True,
) -> None:
    """Random actions end every episode within `max_steps`; `step_ok(rew)` and `end_ok(env, total)` hold."""
    env = jgem.make(env_id, seed=0)
    for episode in range(episodes):
        env.reset(seed=episode)
        total = 0.0
        for _ in range(max_steps):
            obs, rew, term, trunc, info = env.step(env.sample_random_action())
            total += rew
            assert step_ok(rew)
            if term:
                assert isinstance(info["success"], bool)
                break
        assert term and end_ok(env, total)


def check_clone(
    env_id: str,
    reset_seed: int,
    clone_seed: int,
    steps: int,
    warmup: Callable[[jgem.Env], object] | int = 0,
    before_reset: Callable[[jgem.Env, jgem.Env], object] | None = None,
) -> tuple[jgem.Env, jgem.Env]:
    """A clone made with get_state/set_state after `warmup` (a number of random steps, or a function)
    samples and steps identically for `steps` turns, and both reset identically afterwards."""
    a = jgem.make(env_id)
    a.reset(seed=reset_seed)
    if callable(warmup):
        warmup(a)
    else:
        for _ in range(warmup):
            a.step(a.sample_random_action())
    b = jgem.make(env_id, seed=clone_seed)
    b.set_state(a.get_state())
    for _ in range(steps):
        act = a.sample_random_action()
        assert act == b.sample_random_action()
        assert a.step(act) == b.step(act)
    if before_reset is not None:
        before_reset(a, b)
    assert a.reset() == b.reset()
    return a, b


def check_reset_reproducible(env_id: str, seeds: int, same: Callable[[jgem.Env, jgem.Env], bool]) -> None:
    """Two envs reset with the same seed agree (and `same(a, b)`); seeds 0 and 1 give different boards."""
    a, b = jgem.make(env_id), jgem.make(env_id)
    for seed in range(seeds):
        assert a.reset(seed=seed) == b.reset(seed=seed) and same(a, b)
    assert a.reset(seed=0)[1]["suffix"] != a.reset(seed=1)[1]["suffix"]


def rigged(env_id: str, make_kwargs: dict[str, Any] | None = None, **attrs: Any) -> jgem.Env:
    """`jgem.make(env_id, **make_kwargs)` reset with seed 0, then `attrs` set on it in order (a hand-picked
    secret, code or board)."""
    env = jgem.make(env_id, **(make_kwargs or {}))
    env.reset(seed=0)
    for name, value in attrs.items():
        setattr(env, name, value)
    return env


def play_steps(env: jgem.Env, steps: Sequence[tuple[str, float, str]], suffix: str | None = None) -> dict[str, Any]:
    """Each (action, reward, text) scores about `reward`, does not end the game and says `text`
    (and, given `suffix`, info["suffix"] is it). Returns the last step's info."""
    info: dict[str, Any] = {}
    for action, reward, text in steps:
        obs, r, terminated, truncated, info = env.step(action)
        assert r == pytest.approx(reward) and (terminated, truncated) == (False, False) and text in obs, obs
        if suffix is not None:
            assert info["suffix"] == suffix
    return info


def same_step(ours: jgem.Env, ref: Any, action: str) -> bool:
    """Step jgem's env and GEM's with `action`: same reward, terminated and truncated. True when it ended."""
    mine, theirs = ours.step(action), ref.step(action)
    assert mine[1] == pytest.approx(theirs[1]) and mine[2:4] == theirs[2:4], action
    return mine[2]


def check_solver_always_wins(
    env_id: str,
    seeds: int,
    turns_needed: Callable[[jgem.Env], int],
    exact_return: bool = False,
    each: Callable[[jgem.Env], object] | None = None,
) -> None:
    """The reference solver wins every seed with return 1 (exactly 1.0 with `exact_return`) in exactly
    `turns_needed(env)` turns, within the turn limit; `each(env)` then runs on the finished episode."""
    env = jgem.make(env_id)
    for seed in range(seeds):
        ret, turns, won = play(env, solver_for(env_id), seed=seed)
        full = ret == 1.0 if exact_return else ret == pytest.approx(1.0)
        assert won and full and turns == turns_needed(env) <= env.max_turns
        if each is not None:
            each(env)
