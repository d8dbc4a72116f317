"""Sudoku: GEM rules and rewards, unique puzzles, solver, robustness and cloning."""

import random

import numpy as np
import pytest

import jgem
from jgem.envs.games.sudoku import count_solutions, solve
from tests.envs.game_checks import (
    check_bad_inputs,
    check_clone,
    check_random_agent,
    check_solver_always_wins,
    same_step,
)

IDS = ["game:Sudoku-v0-easy", "game:Sudoku-v0-hard", "game:Sudoku-v0-random"]
BAD = [
    "",
    "x" * 1_000_000,
    "数独 \\boxed{①②③} ✓ \\boxed{一 二 三}",
    "\\boxed{1 2",
    "\\boxed{{{}",
    "}}\\boxed{",
    "\\boxed{}",
    "\\boxed{1,1,1}",
]


def _empty_cells(env):
    return [(r, c) for r, row in enumerate(env.board) for c, v in enumerate(row) if v == 0]


def _valid_grid(grid):
    n = len(grid)
    b = int(n**0.5)
    units = [row for row in grid] + [list(col) for col in zip(*grid)]
    units += [
        [grid[r][c] for r in range(i, i + b) for c in range(j, j + b)] for i in range(0, n, b) for j in range(0, n, b)
    ]
    return all(sorted(u) == list(range(1, n + 1)) for u in units)


def test_count_solutions_reference_numbers():
    assert count_solutions([[0] * 4 for _ in range(4)], limit=1000) == 288  # all 4x4 Sudokus
    assert count_solutions([[1, 1, 0, 0]] + [[0] * 4 for _ in range(3)]) == 0  # clashing givens
    full = solve([[0] * 9 for _ in range(9)])
    assert _valid_grid(full) and count_solutions(full) == 1


@pytest.mark.parametrize("env_id,seeds", [(IDS[0], 30), (IDS[1], 6), (IDS[2], 8)])
def test_puzzles_are_unique_and_match_gem_difficulty(env_id, seeds):
    env = jgem.make(env_id)
    for seed in range(seeds):
        env.reset(seed=seed)
        assert _valid_grid(env.solution)
        assert all(v in (0, s) for row, srow in zip(env.board, env.solution) for v, s in zip(row, srow))
        assert count_solutions(env.board, limit=2) == 1
        # GEM's `clues` is the number of cells the generator tries to empty: ~9-10 at 4x4, ~45-50 at 9x9.
        lo, hi = (7, 10) if env.scale == 4 else (40, 50)
        assert lo <= env.init_num_empty <= hi == env.clues and env.max_turns == (15 if env.scale == 4 else 50)


def test_reset_is_reproducible_and_leaves_global_rng_alone():
    random.seed(1)
    np.random.seed(1)
    before = (random.getstate(), np.random.get_state()[1].copy())
    a, b = jgem.make(IDS[2]), jgem.make(IDS[2])
    boards = set()
    for seed in range(6):
        oa, ia = a.reset(seed=seed)
        ob, ib = b.reset(seed=seed)
        assert (oa, ia, a.board) == (ob, ib, b.board)
        boards.add((a.scale, str(a.board)))
    assert len(boards) == 6 and {s for s, _ in boards} == {4, 9}
    assert random.getstate() == before[0] and (np.random.get_state()[1] == before[1]).all()


def test_prompt_states_the_right_boxes():
    obs, info = jgem.make(IDS[0], seed=0).reset(seed=0)
    assert "nine" not in obs and "4 2x2 boxes" in obs and "\\boxed{" in obs
    obs, _ = jgem.make(IDS[1], seed=0).reset(seed=0)
    assert "9 3x3 boxes" in obs and "50 turns" in obs
    assert info["suffix"].count("\n") >= 5 and "R4" in info["suffix"]


def test_scripted_moves_exact_rewards():
    env = jgem.make(IDS[0])
    env.reset(seed=3)
    empty = _empty_cells(env)
    n_empty = env.init_num_empty
    assert n_empty == len(empty)
    r, c = empty[0]
    good = env.solution[r][c]
    bad = good % 4 + 1
    filled = next((r2, c2) for r2 in range(4) for c2 in range(4) if env.board[r2][c2])

    def step(a):
        return env.step(a)[1:4]

    assert step(f"\\boxed{{{r + 1} {c + 1} {bad}}}") == (0.0, False, False)  # wrong digit
    assert step(f"\\boxed{{{filled[0] + 1} {filled[1] + 1} 1}}") == (0.0, False, False)  # given cell
    assert step("\\boxed{5 1 1}") == (0.0, False, False)  # off the board
    assert step("\\boxed{1 1 0}") == (0.0, False, False)  # digit out of range
    assert step("I think \\boxed{" + "9" * 5000 + " 1 1} is fine") == (0.0, False, False)
    assert step(f"first \\boxed{{9 9 9}} then \\boxed{{{r + 1} {c + 1} {good}}}") == (1 / n_empty, False, False)
    assert step(f"\\boxed{{{r + 1} {c + 1} {good}}}") == (0.0, False, False)  # now filled
    assert env.turn_count == 7
    # Win: fill the rest; the last fill ends the episode with success.
    env2 = jgem.make(IDS[0], max_turns=100)
    env2.reset(seed=3)
    total = 0.0
    for i, (r, c) in enumerate(empty):
        obs, rew, term, trunc, info = env2.step(f"\\boxed{{{r + 1} {c + 1} {env2.solution[r][c]}}}")
        total += rew
        assert rew == pytest.approx(1 / n_empty) and term == (i == len(empty) - 1) and not trunc
    assert info["success"] is True and total == pytest.approx(1.0)


def test_format_error_and_turn_limit():
    env = jgem.make(IDS[0], max_turns=2)
    env.reset(seed=0)
    obs, rew, term, trunc, info = env.step("no box here")
    assert (rew, term, trunc, info["success"]) == (-0.1, True, False, False)
    env.reset(seed=0)
    assert env.step("\\boxed{9 9 9}")[1:4] == (0.0, False, False)
    obs, rew, term, trunc, info = env.step("\\boxed{9 9 9}")
    assert (rew, term, trunc, info["success"]) == (0.0, True, True, False)
    env.reset(seed=0)
    env.step("\\boxed{9 9 9}")
    assert env.step("oops")[1:4] == (-0.1, True, True)  # format error on the last turn is also truncated


@pytest.mark.parametrize("env_id,seeds", [(IDS[0], 30), (IDS[1], 5), (IDS[2], 10)])
def test_solver_always_wins(env_id, seeds):
    check_solver_always_wins(env_id, seeds, lambda env: env.init_num_empty)


@pytest.mark.parametrize("env_id", IDS)
def test_bad_inputs_never_raise(env_id):
    check_bad_inputs(env_id, BAD, obs_is_str=True)


def test_random_agent_and_clone():
    check_random_agent(IDS[2], episodes=12, max_steps=200, step_ok=lambda rew: rew >= 0.0)

    def warmup(a):
        r, c = _empty_cells(a)[0]
        a.step(f"\\boxed{{{r + 1} {c + 1} {a.solution[r][c]}}}")
        a.step(a.sample_random_action())

    def no_aliasing(a, b):
        a.board[0][0] = -1  # no aliasing between clones
        assert b.board[0][0] != -1

    check_clone(IDS[1], reset_seed=7, clone_seed=123, steps=20, warmup=warmup, before_reset=no_aliasing)


@pytest.mark.slow  # imports GEM (seconds), once per process
def test_matches_gem_step_for_step():
    gem_sudoku = pytest.importorskip("gem.envs.game_env.sudoku")
    state = random.getstate()
    try:
        for seed in range(4):
            ours = jgem.make(IDS[seed % 2])
            ours.reset(seed=seed)
            ref = gem_sudoku.SudokuEnv(clues=10, max_turns=15, scale=4)  # a cheap puzzle, then ours
            ref.clues, ref.max_turns, ref.scale = ours.clues, ours.max_turns, ours.scale
            ref.board, ref.full_grid = [r[:] for r in ours.board], [r[:] for r in ours.solution]
            ref.init_num_empty, ref.turn_count = ours.init_num_empty, 0
            rng = np.random.default_rng(seed)
            for turn in range(ours.max_turns):
                empty = _empty_cells(ours)
                if rng.random() < 0.5 and empty:
                    r, c = empty[int(rng.integers(len(empty)))]
                    action = f"\\boxed{{{r + 1} {c + 1} {ours.solution[r][c]}}}"
                elif turn == 30:
                    action = "\\boxed{1, 2, 3}"  # a format error
                else:
                    action = ours.sample_random_action().replace("\\boxed{1 ", "\\boxed{0 ")
                if same_step(ours, ref, action):
                    break
            assert ours.board == ref.board
    finally:
        random.setstate(state)
