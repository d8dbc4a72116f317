"""Wordle: GEM's rules, marks and partial rewards, move by move."""

import pytest

import jgem
from jgem.envs.games.wordle import feedback
from jgem.envs.games.words import load_words
from tests.envs.game_checks import play_steps, rigged


def game(secret: str, variant: str = "easy", **kwargs) -> jgem.Env:
    return rigged(f"game:Wordle-v0-{variant}", kwargs, secret=secret)


def test_green_milestones_and_win_bonus() -> None:
    env = game("CAT")  # 3 letters, 15 turns
    steps = [
        ("\\boxed{dog}", 0.0, "X X X"),
        ("\\boxed{COT}", 2 * 0.5 / 3, "G X G"),
        ("\\boxed{cut}", 0.0, "G X G"),  # greens already earned
        ("\\boxed{act}", 0.0, "Y Y G"),
        ("\\boxed{DOG}", 0.0, "already guessed"),
        ("\\boxed{cats}", 0.0, "has 4 letters"),
    ]
    play_steps(env, steps, suffix="Enter your guess.")
    obs, r, terminated, truncated, info = env.step("it must be \\boxed{c a t}")  # GEM joins spaced letters
    assert r == pytest.approx(0.5 / 3 + 0.5)
    assert (terminated, truncated, info["success"]) == (True, False, True)


def test_turn_limit_and_format_errors() -> None:
    env = game("CAT", max_turns=2)
    env.step("\\boxed{cot}")
    obs, r, terminated, truncated, info = env.step("\\boxed{hat}")
    assert (r, terminated, truncated, info["success"]) == (pytest.approx(0.5 / 3), True, True, False)
    for bad in ["\\boxed{c4t}", "cat", "\\boxed{}", "\\boxed{chat-bot}"]:
        env = game("CAT")
        assert env.step(bad)[1:4] == (-0.1, True, False), bad


@pytest.mark.parametrize(
    ("secret", "guess", "marks"),
    [("ABBEY", "KEBAB", "XYGYY"), ("CRANE", "EERIE", "XXYXG"), ("SPEED", "EERIE", "YYXXX"), ("AAB", "BAA", "YGY")],
)
def test_feedback_with_repeated_letters(secret: str, guess: str, marks: str) -> None:
    assert feedback(secret, guess) == marks


def test_secrets_come_from_the_common_word_list() -> None:
    for variant, length in (("easy", 3), ("hard", 5)):
        env = jgem.make(f"game:Wordle-v0-{variant}")
        common = set(load_words(length, common=True))
        for seed in range(20):
            env.reset(seed=seed)
            assert env.secret.lower() in common
    env = jgem.make("game:Wordle-v0-random")
    seen = set()
    for seed in range(30):
        env.reset(seed=seed)
        assert len(env.secret) == env.word_length and env.max_turns == 5 * env.word_length
        seen.add(env.word_length)
    assert seen == {3, 4, 5}


def test_bad_length_is_rejected() -> None:
    with pytest.raises(ValueError, match="no secret words of length 1"):
        jgem.make("game:Wordle-v0-easy", word_length=1)
