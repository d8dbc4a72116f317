"""One behaviour for non-string actions across every registered env: `TypeError`, never a move.

Building every env needs data files, Java and optional packages, so each id's step is called on an
unconstructed instance: the check runs before the env touches any state. Envs that build offline are also
played for real, and the pool refuses non-string actions before sending them anywhere.
"""

from __future__ import annotations

import inspect
import io
import logging

import pytest

import jgem
from jgem.core import Env
from jgem.envs.multiagent.base import MultiAgentEnv
from jgem.envs.pool import EnvPool
from jgem.registry import spec

BAD_ACTIONS = [None, b"\\boxed{5}", {"action": "\\boxed{5}"}, 5, ["\\boxed{5}"]]
PLAYED = [
    "game:GuessTheNumber-v0-easy",
    "game:Mastermind-v0-easy",
    "game:Minesweeper-v0-easy",
    "game:Wordle-v0-easy",
    "game:Hangman-v0-easy",
    "game:FifteenPuzzle-v0-easy",
    "game:Sudoku-v0-easy",
    "agentgym:TextCraft-v0",
    "math:arithmetic",
    "qa:FictionalWiki",
]


def _env_class(env_id: str) -> type[Env]:
    entry = spec(env_id).load()
    if inspect.isclass(entry):
        return entry
    try:
        return type(jgem.make(env_id).unwrapped)
    except Exception as e:  # a factory whose env cannot be built here (data, Java, extras)
        pytest.skip(f"{env_id} cannot be built here: {e}")


@pytest.mark.parametrize("env_id", jgem.list_envs())
def test_every_env_refuses_non_string_actions(env_id: str) -> None:
    cls = _env_class(env_id)
    bare = cls.__new__(cls)
    if issubclass(cls, MultiAgentEnv):  # a joint action: a dict of agent -> str, and nothing else
        for action in BAD_ACTIONS:
            if not isinstance(action, dict):
                with pytest.raises(TypeError, match=f"takes a dict of agent name -> text, got {type(action).__name__}"):
                    cls.step(bare, action)
            with pytest.raises(TypeError, match=f"agent 'a' must be a str, got {type(action).__name__}"):
                cls.step(bare, {"a": action})
        return
    for action in BAD_ACTIONS:
        with pytest.raises(TypeError, match=f"an action must be a str, got {type(action).__name__}"):
            cls.step(bare, action)


@pytest.mark.parametrize("env_id", PLAYED)
def test_non_string_actions_in_play(env_id: str) -> None:
    env = jgem.make(env_id)
    env.reset(seed=0)
    state = env.get_state()
    for action in BAD_ACTIONS:
        with pytest.raises(TypeError, match="an action must be a str"):
            env.step(action)
    obs, reward, *_ = env.step("\\boxed{1}")  # the refused actions did not touch the episode
    env.set_state(state)
    assert env.step("\\boxed{1}")[:2] == (obs, reward)


def test_pool_refuses_non_string_actions_at_send() -> None:
    with EnvPool("game:GuessTheNumber-v0-easy", 2, backend="inline") as pool:
        pool.reset(seeds=[0, 1])
        pool.recv()
        with pytest.raises(
            TypeError, match=r"action 1 \(env 1\) must be a str \(a dict of str for a multi-agent env\), got int"
        ):
            pool.send([0, 1], ["\\boxed{3}", 3])
        assert pool.num_in_flight == 0


def test_a_graders_logging_stays_off_the_console(monkeypatch: pytest.MonkeyPatch) -> None:
    math_verify = pytest.importorskip("math_verify")
    from jgem.envs.math import grade_answer

    def noisy_parse(text: str, **kw):  # what math-verify does on a parse timeout
        logging.getLogger("math_verify.parser").warning(f"Timeout during parsing: {text}")
        return []

    console = io.StringIO()  # a console handler, as logging.basicConfig() would install
    handler = logging.StreamHandler(console)
    root = logging.getLogger()
    root.addHandler(handler)
    monkeypatch.setattr(math_verify, "parse", noisy_parse)
    try:
        assert grade_answer("x" * 10_000, ["1"]) == (False, "math-verify")
    finally:
        root.removeHandler(handler)
    assert "xxxx" not in console.getvalue()
