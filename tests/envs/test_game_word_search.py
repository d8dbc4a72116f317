"""Word Search: GEM layout, rules and rewards, reference solver, robustness, cloning."""

import numpy as np
import pytest

import jgem
from jgem.envs.games.word_search import place_words, word_cells
from jgem.envs.games.words import load_words
from tests.envs.game_checks import (
    check_bad_inputs,
    check_clone,
    check_random_agent,
    check_reset_reproducible,
    check_solver_always_wins,
    same_step,
)

IDS = ["game:WordSearch-v0-easy", "game:WordSearch-v0-hard", "game:WordSearch-v0-random"]
BAD = [
    "",
    "x" * 1_000_000,
    "単語 \\boxed{一 二 三 四} ✓",
    "\\boxed{1 2 3",
    "\\boxed{{{}",
    "}}\\boxed{",
    "\\boxed{1 2 3}",
    "1 2 3 4",
]


def _ends(env, word):
    cells = word_cells(word, *env.placed_words[word])
    return cells[0], cells[-1]


def _guess(a, b):
    return f"\\boxed{{{a[0]} {a[1]} {b[0]} {b[1]}}}"


def test_place_words_follows_gem_layout():
    rng = np.random.default_rng(0)
    for _ in range(30):
        words = [w.upper() for w in rng.choice(load_words(common=True)[:2000], size=5, replace=False)]
        grid, placed = place_words(words, rng)
        longest = max(words, key=len)
        assert len(grid) == round(1.5 * len(longest)) and longest in placed
        for word, place in placed.items():
            assert [grid[r][c] for r, c in word_cells(word, *place)] == list(word)
        first_row, first_col, first_dir = placed[sorted(words, key=len, reverse=True)[0]]
        n = len(grid)
        assert (first_row, first_col) in {(n // 2, (n - len(longest)) // 2), ((n - len(longest)) // 2, n // 2)}


def test_scripted_moves_exact_rewards():
    env = jgem.make(IDS[0])
    env.reset(seed=0)
    words = list(env.placed_words)
    assert len(words) == 5
    a, b = _ends(env, words[0])

    def step(action):
        return env.step(action)[1:4]

    assert step(_guess(a, b)) == (0.2, False, False)
    assert words[0] in env.found and "[" in env.suffix()
    assert step(_guess(a, b)) == (0.0, False, False)  # repeated guess
    assert step(_guess(b, a)) == (0.0, False, False)  # same word backwards: GEM paid again, jgem does not
    n = len(env.grid)
    assert step(f"\\boxed{{0 0 {n} 0}}") == (0.0, False, False)  # off the grid
    assert step("\\boxed{0 0 1 1}") == (0.0, False, False)  # diagonal
    wrong = next(
        f"\\boxed{{{r} 0 {r} 1}}" for r in range(n) if all((r, 0) != _ends(env, w)[i] for w in words for i in (0, 1))
    )
    assert step(wrong) == (0.0, False, False)
    for i, w in enumerate(words[1:]):
        a, b = _ends(env, w)
        obs, rew, term, trunc, info = env.step(_guess(b, a) if i % 2 else _guess(a, b))  # either direction counts
        assert rew == 0.2 and term == (i == 3) and not trunc
    assert info["success"] is True and env.turn_count == 10


def test_turn_limit_and_format_error():
    env = jgem.make(IDS[0], max_turns=2)
    env.reset(seed=0)
    assert env.step("\\boxed{0 0 0 1}")[1:4][1:] == (False, False)
    obs, rew, term, trunc, info = env.step("\\boxed{1 0 1 1}")  # two letters: never a word
    assert (term, trunc, info["success"]) == (True, True, False)
    env.reset(seed=0)
    assert env.step("\\boxed{[0 0 0 1]}")[1:4] == (-0.1, True, False)


def test_word_pools():
    common = set(load_words(common=True))
    env = jgem.make(IDS[1])
    for seed in range(5):
        env.reset(seed=seed)
        assert not {w.lower() for w in env.placed_words} & common
    env = jgem.make(IDS[0])
    for seed in range(5):
        env.reset(seed=seed)
        assert {w.lower() for w in env.placed_words} <= common


@pytest.mark.parametrize("env_id", IDS)
def test_solver_always_wins(env_id):
    kinds = set()
    check_solver_always_wins(env_id, 25, lambda env: len(env.placed_words), each=lambda env: kinds.add(env.hardcore))
    assert kinds == ({False, True} if env_id.endswith("random") else {env_id.endswith("hard")})


def test_reset_is_reproducible():
    check_reset_reproducible(IDS[2], seeds=5, same=lambda a, b: a.grid == b.grid)


@pytest.mark.parametrize("env_id", IDS)
def test_bad_inputs_never_raise(env_id):
    env = check_bad_inputs(env_id, BAD)
    env.reset(seed=1)
    assert env.step("\\boxed{" + "9" * 5000 + " 1 1 1}")[1:4] == (0.0, False, False)


def test_random_agent_and_clone():
    check_random_agent(IDS[2], episodes=10, max_steps=100, end_ok=lambda env, total: 0.0 <= total <= 1.0 + 1e-9)

    def warmup(a):
        a.step(_guess(*_ends(a, next(iter(a.placed_words)))))
        a.step(a.sample_random_action())

    check_clone(IDS[0], reset_seed=9, clone_seed=1, steps=15, warmup=warmup)


@pytest.mark.slow  # imports GEM (seconds), once per process
def test_matches_gem_step_for_step():
    gem_ws = pytest.importorskip("gem.envs.game_env.word_search")
    rng = np.random.default_rng(0)
    for episode in range(10):
        ours = jgem.make(IDS[episode % 3])
        ours.reset(seed=episode)
        ref = object.__new__(gem_ws.WordSearchEnv)  # GEM's reset needs NLTK data: give it our puzzle
        ref.game_board, ref.placed_words = [r[:] for r in ours.grid], dict(ours.placed_words)
        ref.highlighted_positions, ref.correct_words, ref.attempts = set(), set(), []
        ref.turn_count, ref.max_turns, ref.hardcore = 0, ours.max_turns, ours.hardcore
        words = list(ours.placed_words)
        for turn in range(ours.max_turns):
            left = [w for w in words if w not in ours.found]
            if rng.random() < 0.3 and left:
                a, b = _ends(ours, left[int(rng.integers(len(left)))])
                action = _guess(b, a) if rng.random() < 0.5 else _guess(a, b)
            elif episode == 3 and turn == 5:
                action = "\\boxed{1 2 3}"
            else:
                action = ours.sample_random_action()
            if same_step(ours, ref, action):
                break
        assert ours.found == ref.correct_words and ours.highlighted == ref.highlighted_positions
    # The one deliberate difference: GEM pays again for a found word named backwards.
    ours.reset(seed=0)
    ref.game_board, ref.placed_words = [r[:] for r in ours.grid], dict(ours.placed_words)
    ref.highlighted_positions, ref.correct_words, ref.attempts, ref.turn_count = set(), set(), [], 0
    a, b = _ends(ours, next(iter(ours.placed_words)))
    assert ours.step(_guess(a, b))[1] == ref.step(_guess(a, b))[1] == pytest.approx(1 / len(ours.placed_words))
    assert ours.step(_guess(b, a))[1] == 0.0 and ref.step(_guess(b, a))[1] == pytest.approx(1 / len(ours.placed_words))
