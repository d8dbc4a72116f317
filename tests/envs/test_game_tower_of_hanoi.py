"""Tower of Hanoi: GEM rules and rewards, optimal solver, robustness and cloning."""

import numpy as np
import pytest

import jgem
from jgem.envs.games.tower_of_hanoi import plan
from tests.envs.game_checks import (
    check_bad_inputs,
    check_clone,
    check_random_agent,
    check_solver_always_wins,
    same_step,
)

IDS = ["game:TowerofHanoi-v0-easy", "game:TowerofHanoi-v0-hard", "game:TowerofHanoi-v0-random"]
BAD = [
    "",
    "x" * 1_000_000,
    "河内塔 \\boxed{Ａ Ｃ} ✓",
    "\\boxed{A",
    "\\boxed{{{}",
    "}}\\boxed{",
    "\\boxed{A D}",
    "\\boxed{}",
]


def test_scripted_moves_exact_rewards():
    env = jgem.make(IDS[0])
    obs, info = env.reset(seed=0)
    assert "3 disks" in obs and "10 turns" in obs and "A: 3 2 1" in info["suffix"]

    def step(a):
        return env.step(a)[1:4]

    assert step("\\boxed{B C}") == (0.0, False, False)  # empty source
    assert step("\\boxed{a, c}") == (0.0, False, False)  # disk 1 to C (GEM accepts a comma and lower case)
    assert step("\\boxed{A C}") == (0.0, False, False)  # disk 2 onto disk 1: illegal
    assert env.board == {"A": [3, 2], "B": [], "C": [1]}
    for move in ["A B", "C B", "A C", "B A", "B C"]:
        assert step(f"\\boxed{{{move}}}") == (0.0, False, False)
    obs, rew, term, trunc, info = env.step("thinking... \\boxed{C C} no, \\boxed{A C}")
    assert (rew, term, trunc, info["success"]) == (1.0, True, False, True)
    assert env.turn_count == 9


def test_turn_limit_scores_disks_on_c():
    env = jgem.make(IDS[0], max_turns=3)
    env.reset(seed=0)
    env.step("\\boxed{A C}")
    env.step("\\boxed{A B}")
    obs, rew, term, trunc, info = env.step("\\boxed{A A}")  # a no-op move is legal in GEM
    assert (rew, term, trunc, info["success"]) == (pytest.approx(1 / 3), True, True, False)
    env.reset(seed=0)
    assert env.step("nothing")[1:4] == (-0.1, True, False)


@pytest.mark.parametrize("env_id", IDS)
def test_solver_is_optimal_and_wins(env_id):
    seen = set()
    check_solver_always_wins(
        env_id,
        12,
        lambda env: 2**env.num_disks - 1,
        exact_return=True,
        each=lambda env: seen.add((env.num_disks, env.max_turns)),
    )
    if env_id.endswith("random"):
        assert seen == {(3, 10), (4, 20), (5, 35)}


def test_plan_from_any_position():
    assert plan({"A": [], "B": [2, 1], "C": [3]}) == [("B", "A"), ("B", "C"), ("A", "C")]
    assert len(plan({"A": [5, 4, 3, 2, 1], "B": [], "C": []})) == 31
    assert plan({"A": [], "B": [], "C": [2, 1]}) == []


@pytest.mark.parametrize("env_id", IDS)
def test_bad_inputs_never_raise(env_id):
    check_bad_inputs(env_id, BAD)


def test_random_agent_and_clone():
    check_random_agent(
        IDS[2],
        episodes=20,
        max_steps=100,
        step_ok=lambda rew: 0.0 <= rew <= 1.0,
        end_ok=lambda env, total: env.turn_count <= env.max_turns,
    )

    def no_aliasing(a, b):
        a.board["A"].append(0)
        assert b.board["A"][-1:] != [0]

    check_clone(IDS[1], reset_seed=4, clone_seed=99, steps=15, warmup=3, before_reset=no_aliasing)


@pytest.mark.slow  # imports GEM (seconds), once per process
def test_matches_gem_step_for_step():
    gem_hanoi = pytest.importorskip("gem.envs.game_env.tower_of_hanoi")
    rng = np.random.default_rng(0)
    for episode in range(20):
        ours = jgem.make(IDS[2])
        ours.reset(seed=episode)
        ref = gem_hanoi.TowerofHanoiEnv(num_disks=ours.num_disks, max_turns=ours.max_turns)
        for turn in range(ours.max_turns):
            src, dst = rng.choice(list("ABCab"), size=2)
            action = rng.choice([f"\\boxed{{{src} {dst}}}", f"\\boxed{{{src},{dst}}}", f"x \\boxed{{{src}{dst}}}"])
            if episode % 5 == 4 and turn == 6:
                action = "\\boxed{A to C}"
            elif rng.random() < 0.4:
                src, dst = plan(ours.board)[0]
                action = f"\\boxed{{{src} {dst}}}"
            if same_step(ours, ref, action):
                break
        assert ours.board == ref.board
