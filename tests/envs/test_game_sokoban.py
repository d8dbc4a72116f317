"""Sokoban: GEM rules and rewards, levels solvable within the limit, A* solver, robustness, cloning."""

import random

import numpy as np
import pytest

import jgem
from jgem.envs.games.sokoban_gen import FLOOR, TARGET, WALL, solve
from jgem.envs.games.solvers import solver_for
from tests.envs.game_checks import check_bad_inputs, check_clone, check_random_agent, same_step

IDS = ["game:Sokoban-v0-easy", "game:Sokoban-v0-hard", "game:Sokoban-v0-random"]
BAD = ["", "x" * 1_000_000, "倉庫番 \\boxed{上} ✓", "\\boxed{up", "\\boxed{{{}", "}}\\boxed{", "\\boxed{north}", "up"]

# A 5x7 room: one corridor row with a goal at its east end.
ROOM = np.array(
    [
        [0, 0, 0, 0, 0, 0, 0],
        [0, 1, 1, 1, 1, 1, 0],
        [0, 1, 1, 1, 1, 2, 0],
        [0, 1, 1, 1, 1, 1, 0],
        [0, 0, 0, 0, 0, 0, 0],
    ]
)


def _room_env(boxes, player, num_boxes=1, max_turns=20):
    # Generated with a roomy turn limit and a seed (a 2-move limit may admit no generated level), then rigged.
    env = jgem.make(IDS[0], dim_room=(5, 7), num_boxes=num_boxes, max_turns=20, seed=0)
    env.reset(seed=0)
    env.room_fixed, env.boxes, env.player, env.max_turns = ROOM.copy(), set(boxes), player, max_turns
    return env


def test_scripted_moves_exact_rewards():
    env = _room_env({(2, 3)}, (2, 2))
    assert env.render().splitlines()[2] == "# _ P X _ O #"

    def step(a):
        return env.step(a)[1:4]

    assert step("\\boxed{Right}") == (0.0, False, False) and env.boxes == {(2, 4)} and env.player == (2, 3)
    assert step("\\boxed{up}") == (0.0, False, False) and env.player == (1, 3)
    assert step("\\boxed{up}") == (0.0, False, False) and env.player == (1, 3)  # wall
    assert step("\\boxed{down}") == (0.0, False, False) and env.player == (2, 3)
    obs, rew, term, trunc, info = env.step("\\boxed{left} no wait \\boxed{right}")
    assert (rew, term, trunc, info["success"]) == (1.0, True, False, True) and env.boxes == {(2, 5)}
    assert "√" in info["suffix"] and env.turn_count == 5


def test_blocked_pushes_and_player_on_goal():
    env = _room_env({(2, 3), (2, 4)}, (2, 2), num_boxes=2)
    assert env.step("\\boxed{right}")[1:4] == (0.0, False, False)  # box into box
    assert env.boxes == {(2, 3), (2, 4)} and env.player == (2, 2)
    env = _room_env({(1, 5)}, (2, 5))
    assert env.render().splitlines()[2].endswith("S #")  # the player stands on the goal
    assert env.step("\\boxed{up}")[1:4] == (0.0, False, False)  # box into the wall
    assert env.boxes == {(1, 5)} and env.player == (2, 5)


def test_turn_limit_partial_reward_and_format_error():
    env = _room_env({(2, 5), (1, 2)}, (3, 3), num_boxes=2, max_turns=2)
    assert env.step("\\boxed{left}")[1:4] == (0.0, False, False)
    obs, rew, term, trunc, info = env.step("\\boxed{left}")
    assert (rew, term, trunc, info["success"]) == (0.5, True, True, False)
    env = _room_env({(2, 3)}, (2, 2))
    assert env.step("push it right")[1:4] == (-0.1, True, False)


def test_solve_is_shortest():
    assert solve(ROOM, {(2, 3)}, (2, 2)) == ["right", "right"]
    around = solve(ROOM, {(2, 3)}, (2, 4))  # walk round the box (4 moves), then push twice
    assert len(around) == 6 and around[-2:] == ["right", "right"]
    env = _room_env({(2, 3)}, (2, 4))
    results = [env.step(f"\\boxed{{{m}}}") for m in around]
    assert results[-1][1:4] == (1.0, True, False) and all(r[1:4] == (0.0, False, False) for r in results[:-1])
    assert solve(ROOM, {(1, 1)}, (2, 2)) is None  # box stuck in a corner without a goal


@pytest.mark.parametrize("env_id,seeds", [(IDS[0], 40), (IDS[1], 5), (IDS[2], 6)])
def test_levels_are_valid_and_solver_wins_within_the_limit(env_id, seeds):
    env = jgem.make(env_id)
    shapes = set()
    for seed in range(seeds):
        obs, info = env.reset(seed=seed)
        fixed = env.room_fixed
        shapes.add((fixed.shape, env.num_boxes, env.max_turns))
        assert (fixed[0] == WALL).all() and (fixed[-1] == WALL).all() and (fixed[:, 0] == WALL).all()
        assert len(env.boxes) == env.num_boxes == int((fixed == TARGET).sum())
        assert all(fixed[b] == FLOOR for b in env.boxes) and env.player not in env.boxes
        assert fixed[env.player] != WALL and env.boxes_on_targets() == 0
        solver = solver_for(env_id)
        solver.reset(obs, info, env)
        ret, turns, term = 0.0, 0, False
        while not term:
            obs, rew, term, trunc, info = env.step(solver.act(obs, info, env))
            ret, turns = ret + rew, turns + 1
        assert info["success"] and ret == 1.0 and turns <= env.max_turns
    expected = {
        IDS[0]: {((6, 6), 2, 20)},
        IDS[1]: {((8, 8), 4, 50)},
        IDS[2]: {((6, 6), 2, 20), ((8, 8), 5, 50)},
    }[env_id]
    assert shapes == expected


def test_reset_is_reproducible_and_leaves_global_rng_alone():
    random.seed(3)
    np.random.seed(3)
    before = (random.getstate(), np.random.get_state()[1].copy())
    a, b = jgem.make(IDS[1]), jgem.make(IDS[1])
    layouts = set()
    for seed in range(3):
        assert a.reset(seed=seed) == b.reset(seed=seed)
        assert a.render() == b.render()
        layouts.add(a.render())
    assert len(layouts) == 3
    assert random.getstate() == before[0] and (np.random.get_state()[1] == before[1]).all()


@pytest.mark.parametrize("env_id", IDS)
def test_bad_inputs_never_raise(env_id):
    check_bad_inputs(env_id, BAD, from_start_state=True)


def test_random_agent_and_clone():
    check_random_agent(IDS[2], episodes=6, max_steps=100, step_ok=lambda rew: 0.0 <= rew <= 1.0)
    a, b = check_clone(IDS[0], reset_seed=2, clone_seed=5, steps=17, warmup=3)
    assert a.render() == b.render()


@pytest.mark.slow  # imports GEM (seconds), once per process
def test_matches_gem_step_for_step():
    gem_sokoban = pytest.importorskip("gem.envs.game_env.sokoban")
    state = (random.getstate(), np.random.get_state())
    try:
        ref = gem_sokoban.SokobanEnv(dim_room=(6, 6), num_boxes=1, max_turns=20)
    finally:
        random.setstate(state[0])
        np.random.set_state(state[1])
    for episode in range(12):
        ours = jgem.make(IDS[0])
        ours.reset(seed=episode)
        ref.room_fixed, ref.room_state = ours.room_fixed.copy(), ours.room_state
        ref.player_position, ref.num_boxes = np.array(ours.player), ours.num_boxes
        ref.max_turns, ref.turn_count = ours.max_turns, 0
        plan = solve(ours.room_fixed, ours.boxes, ours.player)
        for turn in range(ours.max_turns):
            if episode % 2 and plan:
                action = f"\\boxed{{{plan.pop(0)}}}"  # solved episodes
            elif episode == 4 and turn == 3:
                action = "\\boxed{north}"
            else:
                action = ours.sample_random_action()
            if same_step(ours, ref, action):
                break
        assert (ours.room_state == ref.room_state).all()
