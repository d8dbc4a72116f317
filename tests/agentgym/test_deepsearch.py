"""DeepSearch: searching the shipped corpus finds the answer; wrong answers are told and the episode goes on."""

from __future__ import annotations

import pytest

pytest.importorskip("bm25s")

import jgem  # noqa: E402
from jgem.envs.agentgym.deepsearch import DeepSearchEnv, normalize_answer  # noqa: E402


@pytest.fixture(scope="module")
def env():
    return jgem.make("agentgym:DeepSearch-v0-hop1", max_turns=4)


def test_search_then_correct_answer(env):
    obs, info = env.reset(seed=0)
    question = info["question"]
    assert obs.endswith(f"Question: {question}") and "<search>" in obs
    subject = env.row["support"][0]  # the title of the passage that answers a one-hop question
    assert subject in question
    obs, reward, term, trunc, info = env.step(f"I should look it up. <search>{subject}</search>")
    assert "<information>" in obs and f"(Title: {subject})" in obs and reward == 0 and not term
    answer = env.row["answer"][0]
    assert answer in obs  # the passage about the subject holds the answer
    obs, reward, term, trunc, info = env.step(f"<answer>The {answer.upper()}.</answer>")  # EM after normalisation
    assert reward == 1.0 and term and not trunc and info["success"] is True


def test_wrong_answers_continue_until_the_turn_limit(env):
    env.reset(seed=1)
    for turn in range(1, 5):
        obs, reward, term, trunc, info = env.step("<answer>certainly not this</answer>")
        assert obs.startswith("Your answer is incorrect") and reward == 0.0 and not term
        assert trunc == (turn == 4)
    assert info["success"] is False
    with pytest.raises(RuntimeError, match="reset"):
        env.step("<answer>x</answer>")


def test_invalid_format_and_clone(env):
    env.reset(seed=2)
    obs, reward, term, trunc, info = env.step("just thinking")
    assert not info["action_is_valid"] and "<search>" in obs
    clone = env.spawn(same_state=True)
    assert clone.tool is env.tool and clone.row == env.row and clone.turn == env.turn


def test_hops_and_normalisation():
    assert normalize_answer("The  Crown!") == "crown"
    env = DeepSearchEnv(hops=3)
    assert all(r["hops"] == 3 for r in env.rows) and len(env.rows) > 10
    with pytest.raises(ValueError, match="hops=7"):
        DeepSearchEnv(hops=7)
