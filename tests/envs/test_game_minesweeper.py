"""Minesweeper: GEM's rules and rewards on hand-built boards."""

import pytest

import jgem
from jgem.envs.games.minesweeper import MINE, _deduce, _risks, neighbours
from tests.envs.game_checks import rigged

M = MINE
# 4x4, mines at (0, 3) and (3, 0); 14 safe cells
BOARD = [
    [0, 0, 1, M],
    [0, 0, 1, 1],
    [1, 1, 0, 0],
    [M, 1, 0, 0],
]


def game(max_turns: int = 20) -> jgem.Env:
    return rigged(
        "game:Minesweeper-v0-easy",
        dict(rows=4, cols=4, num_mines=2, max_turns=max_turns),
        grid=[row[:] for row in BOARD],
        first_reveal=False,
    )


def test_rewards_and_win_by_flagging_the_last_mine() -> None:
    env = game()
    steps = [
        ("\\boxed{reveal 0 2}", 1 / 14, "revealed"),
        ("\\boxed{reveal 0 2}", 0.0, "already"),
        ("\\boxed{flag 0 2}", 0.0, "cannot be flagged"),
        ("\\boxed{flag 0 3}", 0.0, "flagged (0, 3)"),
        ("\\boxed{dig 1 1}", 0.0, "unknown command"),
        ("\\boxed{reveal 9 9}", 0.0, "off the board"),
        ("\\boxed{REVEAL 0 0}", 13 / 14, "revealed"),  # floods every other safe cell
    ]
    for action, reward, text in steps:
        obs, r, terminated, truncated, info = env.step(action)
        assert r == pytest.approx(reward) and (terminated, truncated) == (False, False), obs
        assert text in obs
    assert env.public_board() == ["001F", "0011", "1100", ".100"]
    assert "F" in info["suffix"]
    # All safe cells are revealed but a mine is unflagged: GEM's game could never end here; jgem's
    # win check also runs after flags.
    obs, r, terminated, truncated, info = env.step("\\boxed{flag 3 0}")
    assert (r, terminated, truncated, info["success"]) == (0.0, True, False, True)


def test_a_mine_ends_the_game_even_when_flagged() -> None:
    env = game()
    assert env.step("\\boxed{reveal 3 0}")[1:4] == (0.0, True, False)
    env = game()
    env.step("\\boxed{flag 0 3}")
    obs, r, terminated, truncated, info = env.step("\\boxed{reveal 0 3}")
    assert (r, terminated, truncated, info["success"]) == (0.0, True, False, False)


def test_flood_stops_at_flags_and_unflagging_works() -> None:
    env = game()
    env.step("\\boxed{flag 1 1}")
    _, r, *_ = env.step("\\boxed{reveal 0 0}")
    assert r == pytest.approx(7 / 14)  # the flagged zero at (1, 1) keeps the flood out of the lower right
    assert env.public_board() == ["001.", "0F1.", "11..", "...."]
    assert env.step("\\boxed{reveal 1 1}")[1] == 0.0  # flagged: invalid
    obs, r, *_ = env.step("\\boxed{flag 1 1}")
    assert "unflagged" in obs and r == 0.0
    assert env.step("\\boxed{reveal 1 1}")[1] == pytest.approx(7 / 14)


def test_turn_limit_keeps_the_last_reward_and_format_errors_end() -> None:
    env = game(max_turns=2)
    env.step("\\boxed{flag 0 3}")
    obs, r, terminated, truncated, info = env.step("\\boxed{reveal 0 2}")
    assert (r, terminated, truncated, info["success"]) == (pytest.approx(1 / 14), True, True, False)
    for bad in ["\\boxed{reveal 1,2}", "\\boxed{reveal  1 2}", "reveal 1 2", "\\boxed{reveal -1 2}"]:
        env = game()
        assert env.step(bad)[1:4] == (-0.1, True, False), bad


def test_first_reveal_is_safe_with_a_safe_block() -> None:
    for variant in ("easy", "hard", "random"):
        env = jgem.make(f"game:Minesweeper-v0-{variant}")
        for seed in range(25):
            env.reset(seed=seed)
            r, c = int(env.np_random.integers(env.rows)), int(env.np_random.integers(env.cols))
            obs, reward, terminated, *_ = env.step(f"\\boxed{{reveal {r} {c}}}")
            assert not terminated and reward > 0
            assert sum(cell == MINE for row in env.grid for cell in row) == env.num_mines
            assert all(env.grid[a][b] != MINE for a, b in neighbours(r, c, env.rows, env.cols))
            if variant == "random":
                assert env.rows == env.cols and env.num_mines == env.rows**2 // 5 and env.max_turns == env.rows**2


def test_solver_logic() -> None:
    # a '1' whose only hidden neighbours are {a, b} and a '1' over {a}: a is a mine, b is safe
    a, b = (0, 0), (0, 1)
    safe, mines = _deduce([(frozenset({a, b}), 1), (frozenset({a}), 1)], {a, b, (5, 5), (5, 6)}, 2)
    assert (safe, mines) == ({b}, {a})
    # two hidden cells, one mine, nothing else known: a coin flip; the cell outside holds the rest
    risk = _risks([(frozenset({a, b}), 1)], {a, b, (5, 5)}, 1, max_frontier=20)
    assert risk[a] == pytest.approx(0.5) and risk[(5, 5)] == pytest.approx(0.0)


def test_too_many_mines_is_rejected() -> None:
    with pytest.raises(ValueError, match="at most 7 mines"):
        jgem.make("game:Minesweeper-v0-easy", rows=4, cols=4, num_mines=8)
