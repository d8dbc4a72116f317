"""GuessTheNumber: GEM's rules and rewards, move by move."""

import math

import pytest

import jgem
from jgem.envs.games.guess_the_number import GuessTheNumberSolver
from tests.envs.game_checks import rigged


def game(target: int, variant: str = "easy", **kwargs) -> jgem.Env:
    return rigged(f"game:GuessTheNumber-v0-{variant}", kwargs, target=target)


def test_hints_invalid_moves_and_last_turn_score() -> None:
    env = game(7)  # 1..10, 4 turns
    obs, reward, terminated, truncated, info = env.step("my guess: \\boxed{5}")
    assert (reward, terminated, truncated) == (0.0, False, False) and "higher than 5" in obs
    assert info["suffix"] == "Enter your next guess."
    # GEM calls a guess of 0 a format error and ends the game; jgem treats it as out of range.
    obs, reward, terminated, truncated, _ = env.step("\\boxed{0}")
    assert (reward, terminated, truncated) == (0.0, False, False) and "outside" in obs
    obs, reward, terminated, truncated, _ = env.step("\\boxed{5}")
    assert (reward, terminated, truncated) == (0.0, False, False) and "already" in obs
    # last turn, wrong but in range: 1 - |9 - 7| / (10 - 1)
    obs, reward, terminated, truncated, info = env.step("\\boxed{9}")
    assert reward == pytest.approx(1 - 2 / 9)
    assert (terminated, truncated, info["success"]) == (True, True, False)


def test_last_turn_repeat_scores_distance_and_out_of_range_scores_zero() -> None:
    env = game(2, max_turns=2)
    env.step("\\boxed{10}")
    _, reward, terminated, truncated, _ = env.step("\\boxed{10}")
    assert (reward, terminated, truncated) == (pytest.approx(1 - 8 / 9), True, True)
    env = game(2, max_turns=1)
    assert env.step("\\boxed{11}")[1:4] == (0.0, True, True)


def test_win_reads_the_last_boxed_number() -> None:
    env = game(7)
    obs, reward, terminated, truncated, info = env.step("\\boxed{3}... no, \\boxed{7}")
    assert (reward, terminated, truncated, info["success"]) == (1.0, True, False, True)
    assert "7" in obs


@pytest.mark.parametrize("action", ["\\boxed{seven}", "7", "\\boxed{-3}", "\\boxed{ 7}", ""])
def test_format_errors_end_the_game(action: str) -> None:
    env = game(7)
    _, reward, terminated, truncated, info = env.step(action)
    assert (reward, terminated, truncated, info["success"]) == (-0.1, True, False, False)


def test_format_error_on_the_last_turn_is_also_truncated() -> None:
    env = game(7, max_turns=1)
    assert env.step("no guess")[1:4] == (-0.1, True, True)


def test_random_variant_draws_parameters_like_gem() -> None:
    env = jgem.make("game:GuessTheNumber-v0-random")
    seen = set()
    for seed in range(60):
        obs, _ = env.reset(seed=seed)
        lo, hi = env.min_number, env.max_number
        assert 1 <= lo <= 10 and lo + 5 <= hi <= lo + 50 and lo <= env.target <= hi
        assert env.max_turns == math.ceil(math.sqrt(hi - lo)) + 1
        assert f"from {lo} to {hi}" in obs and f"{env.max_turns} guesses" in obs
        seen.add((lo, hi))
    assert len(seen) > 30


def test_solver_halves_the_range() -> None:
    env = game(1, "hard")  # 1..50
    solver = GuessTheNumberSolver()
    obs, info = "", {}
    solver.reset(obs, info, env)
    guesses = []
    for _ in range(6):
        action = solver.act(obs, info, env)
        guesses.append(int(action[7:-1]))
        obs, _, terminated, _, info = env.step(action)
        if terminated:
            break
    assert guesses == [25, 12, 6, 3, 1]


def test_bad_parameters_are_rejected() -> None:
    with pytest.raises(ValueError, match="greater than"):
        jgem.make("game:GuessTheNumber-v0-easy", min_number=5, max_number=5)


def test_the_uniform_teacher_guesses_only_what_the_hints_allow_and_needs_more_turns_than_binary_search() -> None:
    """The weak teacher of the discount-factor experiment (preset tiny-gamma): every guess is one of the numbers
    the hints leave possible (so it never repeats or wastes a turn), its guesses are the rng's (the same rng, the
    same game), and over the preset's game (1-50, 12 turns) it wins nearly always but in more turns than binary
    search: the room a discount factor below 1 has to teach."""
    import numpy as np

    from jgem.envs.games.solvers import play, solver_for, teachers

    env_id = "game:GuessTheNumber-v0-hard"
    assert teachers(env_id) == ["solver", "uniform"]
    with pytest.raises(KeyError, match="its teachers: solver, uniform"):
        solver_for(env_id, "scan")
    with pytest.raises(ValueError, match="draws its moves: pass its rng"):
        solver_for(env_id, "uniform")  # unseeded, a warm start would differ from run to run

    def game(seed: int, teacher: str) -> tuple[list[int], bool]:
        env = jgem.make(env_id, max_turns=12)
        player = solver_for(env_id, teacher, np.random.default_rng([seed, 99]))
        obs, info = env.reset(seed=seed)
        player.reset(obs, info, env.unwrapped)
        lo, hi, guesses = 1, 50, []
        while True:
            guess = int(player.act(obs, info, env.unwrapped).removeprefix("\\boxed{").removesuffix("}"))
            assert lo <= guess <= hi, (guess, lo, hi)
            guesses.append(guess)
            obs, _, done, _, info = env.step(f"\\boxed{{{guess}}}")
            target = env.unwrapped.target
            lo, hi = (guess + 1, hi) if guess < target else (lo, guess - 1) if guess > target else (lo, hi)
            if done:
                return guesses, info["success"]

    assert game(3, "uniform") == game(3, "uniform")
    uniform = [game(seed, "uniform") for seed in range(200)]
    binary = [game(seed, "solver") for seed in range(200)]
    assert sum(won for _, won in uniform) >= 195 and all(won for _, won in binary)
    mean_turns = lambda games: np.mean([len(g) for g, _ in games])  # noqa: E731
    assert mean_turns(uniform) > mean_turns(binary) + 0.8, (mean_turns(uniform), mean_turns(binary))
    assert play(jgem.make(env_id), solver_for(env_id, "uniform", np.random.default_rng(0)), seed=1)[1] <= 7
