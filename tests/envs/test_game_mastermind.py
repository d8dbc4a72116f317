"""Mastermind: GEM's rules and dense rewards, move by move."""

import itertools
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

import jgem
from jgem.envs.games.mastermind import score
from tests.envs.game_checks import rigged


def game(code: tuple[int, ...], variant: str = "easy", **kwargs) -> jgem.Env:
    return rigged(f"game:Mastermind-v0-{variant}", kwargs, code=code)


def test_rewards_follow_the_black_peg_milestone() -> None:
    env = game((3, 5))  # 2 digits of 1..6, 10 turns
    expected = [
        ("\\boxed{1 2}", 0.0, "0 black, 0 white"),
        ("\\boxed{5 3}", 0.0, "0 black, 2 white"),
        ("\\boxed{3 1}", 0.5, "1 black, 0 white"),
        ("\\boxed{4 5}", 0.0, "1 black, 0 white"),  # no more black pegs than the best so far
        ("\\boxed{1 2 3}", 0.0, "has 3 digits"),
        ("\\boxed{7 1}", 0.0, "outside 1..6"),
        ("\\boxed{3 1}", 0.0, "already guessed"),
    ]
    for action, reward, text in expected:
        obs, r, terminated, truncated, info = env.step(action)
        assert (r, terminated, truncated) == (reward, False, False) and text in obs, obs
        assert info["suffix"] == "Enter your guess."
    obs, r, terminated, truncated, info = env.step("so: \\boxed{3   5}")
    assert (r, terminated, truncated, info["success"]) == (0.5, True, False, True)


def test_turn_limit_and_format_errors() -> None:
    env = game((3, 5), max_turns=2)
    env.step("\\boxed{3 4}")
    obs, r, terminated, truncated, info = env.step("\\boxed{3 6}")
    assert (r, terminated, truncated, info["success"]) == (0.0, True, True, False)
    env = game((3, 5))
    assert env.step("\\boxed{three five}")[1:4] == (-0.1, True, False)
    env = game((3, 5))
    assert env.step("\\boxed{3,5}")[1:4] == (-0.1, True, False)
    env = game((3, 5), max_turns=1)
    assert env.step("")[1:4] == (-0.1, True, True)


def test_score_examples() -> None:
    assert score((1, 2, 3, 4), (4, 3, 2, 1)) == (0, 4)
    assert score((1, 1, 2, 3), (1, 2, 1, 1)) == (1, 2)
    assert score((1, 2, 3, 4), (1, 2, 3, 4)) == (4, 0)
    assert score((5, 6), (1, 2)) == (0, 0)


@given(st.lists(st.integers(1, 6), min_size=4, max_size=4), st.lists(st.integers(1, 6), min_size=4, max_size=4))
def test_score_matches_the_textbook_definition(code: list[int], guess: list[int]) -> None:
    black = sum(a == b for a, b in zip(code, guess))
    total = sum(min(Counter(code)[d], Counter(guess)[d]) for d in range(1, 7))
    assert score(tuple(code), tuple(guess)) == (black, total - black)


def test_codes_follow_the_variant() -> None:
    for variant, (length, digits) in {"easy": (2, 6), "hard": (4, 8)}.items():
        env = jgem.make(f"game:Mastermind-v0-{variant}")
        for seed in range(30):
            env.reset(seed=seed)
            assert len(env.code) == length and len(set(env.code)) == length
            assert all(1 <= d <= digits for d in env.code)
    env = jgem.make("game:Mastermind-v0-random")
    seen = set()
    for seed in range(40):
        env.reset(seed=seed)
        seen.add((env.code_length, env.num_numbers, env.max_turns))
    assert seen == {(2, 4, 10), (4, 6, 20), (4, 8, 30)}


def test_duplicates_when_allowed() -> None:
    env = jgem.make("game:Mastermind-v0-hard", duplicate_numbers=True, num_numbers=3)
    codes = set()
    for seed in range(40):
        env.reset(seed=seed)
        codes.add(env.code)
    assert any(len(set(c)) < 4 for c in codes)
    assert codes <= set(itertools.product(range(1, 4), repeat=4))


def test_impossible_distinct_code_is_rejected() -> None:
    with pytest.raises(ValueError, match="duplicate_numbers=True"):
        jgem.make("game:Mastermind-v0-hard", num_numbers=3)
