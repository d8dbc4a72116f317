"""FifteenPuzzle: GEM's moves and rewards, solvable scrambles, and the solver's searches."""

import pytest

import jgem
from jgem.envs.games.fifteen_puzzle import _bfs, apply_move, reachable_boards, solve, solved_board
from tests.envs.game_checks import rigged


def game(board: tuple[int, ...], max_turns: int = 10) -> jgem.Env:
    n = round(len(board) ** 0.5)
    return rigged("game:FifteenPuzzle-v0-easy", dict(num_rows=n, max_turns=max_turns), board=board)


def inversions(board: tuple[int, ...]) -> int:
    tiles = [t for t in board if t]
    return sum(a > b for i, a in enumerate(tiles) for b in tiles[i + 1 :])


def is_solvable(board: tuple[int, ...], n: int) -> bool:
    if n % 2:
        return inversions(board) % 2 == 0
    blank_row_from_bottom = n - board.index(0) // n
    return (inversions(board) + blank_row_from_bottom) % 2 == 1


def test_moves_slide_the_tile_into_the_blank() -> None:
    board = (1, 2, 3, 4, 0, 5, 6, 7, 8)  # blank in the middle
    assert apply_move(board, 3, "up") == (1, 2, 3, 4, 7, 5, 6, 0, 8)
    assert apply_move(board, 3, "down") == (1, 0, 3, 4, 2, 5, 6, 7, 8)
    assert apply_move(board, 3, "left") == (1, 2, 3, 4, 5, 0, 6, 7, 8)
    assert apply_move(board, 3, "right") == (1, 2, 3, 0, 4, 5, 6, 7, 8)
    assert apply_move(solved_board(3), 3, "up") is None and apply_move(solved_board(3), 3, "left") is None


def test_win_invalid_move_format_error() -> None:
    env = game((1, 2, 0, 3))
    obs, r, terminated, truncated, info = env.step("\\boxed{left}")
    assert (r, terminated, truncated, info["success"]) == (1.0, True, False, True)
    env = game((1, 2, 3, 4, 5, 0, 7, 8, 6))
    obs, r, terminated, truncated, info = env.step("\\boxed{left}")
    assert (r, terminated, truncated) == (0.0, False, False) and "no tile" in obs
    assert "__" in info["suffix"]
    for bad in ["\\boxed{UP}", "up", "\\boxed{north}", "\\boxed{ up}"]:
        env = game((1, 2, 3, 4, 5, 0, 7, 8, 6))
        assert env.step(bad)[1:4] == (-0.1, True, False), bad


def test_last_turn_adds_the_fraction_of_right_squares() -> None:
    env = game((1, 2, 3, 4, 5, 0, 7, 8, 6), max_turns=2)
    env.step("\\boxed{left}")  # invalid
    obs, r, terminated, truncated, info = env.step("\\boxed{down}")  # -> (1, 2, 0, 4, 5, 3, 7, 8, 6)
    assert r == pytest.approx(6 / 9)
    assert (terminated, truncated, info["success"]) == (True, True, False)
    env = game((1, 2, 3, 4, 5, 0, 7, 8, 6), max_turns=1)
    assert env.step("\\boxed{left}")[1] == pytest.approx(7 / 9)  # invalid move still gets the partial credit


def test_scrambles_are_solvable_unsolved_and_reproducible() -> None:
    for variant, n in (("easy", 2), ("hard", 4)):
        env = jgem.make(f"game:FifteenPuzzle-v0-{variant}")
        boards = set()
        for seed in range(40):
            env.reset(seed=seed)
            assert env.board != solved_board(n) and is_solvable(env.board, n)
            boards.add(env.board)
        assert len(boards) > 8
    assert len(reachable_boards(2)) == 12  # GEM's shuffle also draws the 12 unreachable 2x2 boards
    env = jgem.make("game:FifteenPuzzle-v0-random")
    assert {env.reset(seed=s) and (env.num_rows, env.max_turns) for s in range(30)} == {(2, 10), (3, 20), (4, 50)}


def test_ida_star_is_optimal_and_weighted_a_star_is_bounded() -> None:
    env = jgem.make("game:FifteenPuzzle-v0-hard", num_rows=3, max_turns=14)
    for seed in range(6):
        env.reset(seed=seed)
        shortest = _bfs(env.board, 3)  # plain BFS: the reference for the shortest length
        ida, weighted = solve(env.board, 3), solve(env.board, 3, weight=1.5)
        assert len(ida) == len(shortest) <= 14
        assert len(shortest) <= len(weighted) <= 1.5 * len(shortest)
        for plan in (ida, weighted):
            board = env.board
            for move in plan:
                board = apply_move(board, 3, move)
            assert board == solved_board(3)


def test_unsolvable_board_has_no_solution() -> None:
    assert _bfs((2, 1, 3, 0), 2) is None
    assert solve((1, 2, 3, 4, 5, 6, 8, 7, 0), 3, max_depth=6) is None
