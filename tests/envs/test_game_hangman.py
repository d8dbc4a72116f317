"""Hangman: GEM's rules and partial rewards, move by move."""

import pytest

import jgem
from jgem.envs.games.words import load_words
from tests.envs.game_checks import play_steps, rigged


def game(secret: str, variant: str = "easy", **kwargs) -> jgem.Env:
    return rigged(f"game:Hangman-v0-{variant}", kwargs, secret=secret, board=["_"] * len(secret))


def test_letters_words_and_the_win_reward() -> None:
    env = game("BEE")
    steps = [
        ("\\boxed{e}", 0.5 * 2 / 3, "in the word"),
        ("\\boxed{E}", 0.0, "already"),
        ("\\boxed{z}", 0.0, "not in the word"),
        ("\\boxed{BEES}", 0.0, "has 4 letters"),
        ("\\boxed{bye}", 0.0, "not the word"),
        ("\\boxed{bye}", 0.0, "not the word"),  # GEM does not track repeated word guesses
    ]
    info = play_steps(env, steps)
    assert "  _   E   E" in info["suffix"]
    obs, r, terminated, truncated, info = env.step("\\boxed{Bee}")
    assert r == pytest.approx(0.5 * 1 / 3 + 0.5)  # half the hidden fraction, plus half for the win
    assert (terminated, truncated, info["success"]) == (True, False, True)


def test_revealing_every_letter_does_not_end_the_game() -> None:
    env = game("BEE")
    assert env.step("\\boxed{b}")[1:4] == (pytest.approx(1 / 6), False, False)
    assert env.step("\\boxed{e}")[1:4] == (pytest.approx(1 / 3), False, False)
    obs, r, terminated, truncated, info = env.step("\\boxed{BEE}")
    assert (r, terminated, truncated, info["success"]) == (0.5, True, False, True)


def test_turn_limit_and_format_errors() -> None:
    env = game("BEE", max_turns=2)
    env.step("\\boxed{z}")
    obs, r, terminated, truncated, info = env.step("\\boxed{b}")
    assert (r, terminated, truncated, info["success"]) == (pytest.approx(1 / 6), True, True, False)
    for bad in ["\\boxed{a-b}", "\\boxed{}", "b", "\\boxed{b e}", "\\boxed{é}"]:
        env = game("BEE")
        assert env.step(bad)[1:4] == (-0.1, True, False), bad


def test_prompt_examples_match_their_labels() -> None:
    env = jgem.make("game:Hangman-v0-hard")
    obs, _ = env.reset(seed=0)
    assert "one letter, for example \\boxed{E}" in obs  # GEM's prompt swaps the two examples
    assert "the whole word, for example \\boxed{BECAUSE}" in obs


def test_secret_lists_and_random_variant() -> None:
    common7, all7 = set(load_words(7, common=True)), set(load_words(7))
    env, hardcore = jgem.make("game:Hangman-v0-hard"), jgem.make("game:Hangman-v0-hard", hardcore=True)
    rare = 0
    for seed in range(30):
        env.reset(seed=seed)
        hardcore.reset(seed=seed)
        assert env.secret.lower() in common7 and hardcore.secret.lower() in all7
        rare += hardcore.secret.lower() not in common7
    assert rare > 15
    env = jgem.make("game:Hangman-v0-random")
    seen = set()
    for seed in range(30):
        env.reset(seed=seed)
        assert len(env.secret) == env.word_length
        seen.add((env.word_length, env.max_turns))
    assert seen == {(3, 10), (5, 15), (7, 20)}
