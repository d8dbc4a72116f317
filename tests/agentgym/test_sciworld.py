"""SciWorld on the scienceworld JVM: one module-scoped env (one JVM), closed at the end."""

from __future__ import annotations

import pytest

import jgem
from jgem.envs.agentgym.levels import SCIWORLD_TASKS
from jgem.envs.agentgym.sciworld import SciWorldEnv, check_runtime

try:
    check_runtime()
except (ImportError, RuntimeError) as e:  # the message says what to install
    pytest.skip(str(e), allow_module_level=True)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def env():
    e = SciWorldEnv(task="find-plant", variation=0, gold_path=True, max_turns=30)
    yield e
    e.close()
    assert e._sw is None


def test_task_list_matches_the_registered_ids(env):
    assert env.task_names() == list(SCIWORLD_TASKS)
    assert len(jgem.list_envs("agentgym:SciWorld-")) == len(SCIWORLD_TASKS) + 1


def test_gold_path_scores_one_with_score_deltas_as_rewards(env):
    obs, info = env.reset()
    assert obs.startswith("Task Description:") and "This room is called" in obs
    assert info == {"task": "find-plant", "variation": 0, "score": 0.0}
    rewards, scores = [], []
    for action in env.gold_actions():
        obs, reward, term, trunc, info = env.step(action)
        rewards.append(reward)
        scores.append(info["score"])
    assert term and not trunc and info["success"] is True
    assert scores[-1] == 1.0 and sum(rewards) == pytest.approx(1.0)
    assert [round(s - p, 6) for s, p in zip(scores, [0.0, *scores[:-1]])] == [round(r, 6) for r in rewards]
    assert sum(r > 0 for r in rewards) >= 2  # partial credit arrives along the way, not only at the end


def test_turn_limit_and_split_variations(env):
    env.max_turns, env.variation = 2, None
    try:
        obs, info = env.reset(seed=1)
        assert info["variation"] in env._split_variations("find-plant")
        env.step("look around")
        obs, reward, term, trunc, info = env.step("look around")
        assert trunc and not term and info["success"] is False and reward == 0.0
        with pytest.raises(RuntimeError, match="reset"):
            env.step("look around")
    finally:
        env.max_turns, env.variation = 30, 0


def test_config_errors(env):
    with pytest.raises(ValueError, match="split"):
        SciWorldEnv(split="validation")
    with pytest.raises(NotImplementedError, match="JVM"):
        env.get_state()
    bad = SciWorldEnv(task="make-tea")
    bad._sw = env._sw  # reuse the running JVM for the name check
    try:
        with pytest.raises(ValueError, match="unknown SciWorld task 'make-tea'"):
            bad.reset()
    finally:
        bad._sw = None
