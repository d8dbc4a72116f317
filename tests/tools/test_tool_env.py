"""ToolEnv (GEM's ToolEnvWrapper semantics) and the Python tool on top of the sandbox."""

from __future__ import annotations

import copy
import pickle

import pytest

from jgem.core import Env
from jgem.envs.tools.base import Tool, ToolResult
from jgem.envs.tools.python import PythonTool, parse_python
from jgem.envs.tools.tool_env import LIMIT_MESSAGE, ToolEnv


class Echo(Env):
    """Counts the actions that reach it; ends when it hears 'done'."""

    def __init__(self) -> None:
        super().__init__(seed=0)
        self.seen: list[str] = []

    def reset(self, seed=None):
        super().reset(seed)
        self.seen = []
        return "question", {"from": "env"}

    def step(self, action):
        self.seen.append(action)
        done = action == "done"
        return f"env saw {action}", 1.0 if done else 0.0, done, False, {"env": True}


class Upper(Tool):
    name = "upper"

    def instruction(self):
        return "Write <up>text</up> to upper-case text."

    def parse(self, action):
        if "<up>" in action and "</up>" in action:
            return action.split("<up>", 1)[1].split("</up>", 1)[0]
        return None

    def execute(self, call):
        return ToolResult(call.upper(), ok=bool(call))


class Broken(Upper):
    name = "broken"

    def execute(self, call):
        return ToolResult("broken failed", ok=False)


def test_tool_calls_do_not_reach_the_env_and_count():
    env = ToolEnv(Echo(), [Upper()], max_tool_uses=2, tool_reward=0.1, tool_success_reward=0.5)
    obs, info = env.reset()
    assert obs == "question\nWrite <up>text</up> to upper-case text."
    assert info["use_tool"] is False and info["from"] == "env"
    obs, r, term, trunc, info = env.step("<up>abc</up>")
    assert (obs, r, term, trunc) == ("ABC", pytest.approx(0.6), False, False)
    assert info["tool_use_counter"] == 1 and info["tool_success_counter"] == 1 and info["tool"] == "upper"
    obs, r, *_ = env.step("<up></up>")  # parsed but failed: counts as a use, earns only tool_reward
    assert obs.endswith(LIMIT_MESSAGE) and r == pytest.approx(0.1)
    assert env.unwrapped.seen == []
    obs, r, term, _, info = env.step("<up>again</up>")  # over the limit: goes to the env
    assert obs == "env saw <up>again</up>" and info["use_tool"] is False and info["tool_use_counter"] == 2
    _, r, term, _, _ = env.step("done")
    assert term and r == 1.0
    _, info = env.reset()
    assert info["prev_ep_tool_use_counter"] == 2 and info["tool_use_counter"] == 0


def test_second_tool_answers_when_first_fails_and_instructions_list_all():
    env = ToolEnv(Echo(), [Broken(), Upper()], max_tool_uses=None)
    obs, _ = env.reset()
    assert obs.startswith("question\nAvailable tools:\n")
    obs, _, _, _, info = env.step("<up>x</up>")
    assert obs == "X" and info["tool"] == "upper"
    only_broken = ToolEnv(Echo(), [Broken()])
    only_broken.reset()
    obs, _, _, _, info = only_broken.step("<up>x</up>")
    assert obs == "broken failed" and info["tool_ok"] is False and only_broken.unwrapped.seen == []


def test_state_and_spawn_keep_counters_and_share_tools():
    tool = Upper()
    env = ToolEnv(Echo(), [tool], max_tool_uses=3)
    env.reset()
    env.step("<up>a</up>")
    state = env.get_state()
    env.step("<up>b</up>")
    env.set_state(state)
    assert env.tool_use_counter == 1
    clone = env.spawn(same_state=True)
    assert clone.tool_use_counter == 1 and clone.tools[0] is tool
    with pytest.raises(ValueError, match="at least one tool"):
        ToolEnv(Echo(), [])


class Closable(Upper):
    closed = False

    def close(self):
        self.closed = True


def test_close_closes_owned_tools_and_leaves_shared_ones_open():
    owned, shared = Closable(), Closable()
    ToolEnv(Echo(), [owned]).close()
    assert owned.closed
    # tools shared by a pool's envs (what `EnvConfig.tools` builds) outlive any one env: a rebuilt env keeps them
    env, peer = (ToolEnv(Echo(), [shared], close_tools=False) for _ in range(2))
    env.close()
    assert not shared.closed
    peer.reset()
    assert peer.step("<up>a</up>")[0] == "A"


@pytest.mark.parametrize(
    ("action", "code"),
    [
        ("<python>print(1)</python> and ```python\nprint(2)\n```", "print(1)"),
        ("```python\nprint(2)\n``` then <python>print(1)</python>", "print(2)"),
        ("```\npython\nprint(3)```", "print(3)"),
        ("no code here", None),
    ],
)
def test_python_parse_takes_the_block_that_ends_first(action, code):
    assert parse_python(action) == code


def test_python_tool_executes_in_the_sandbox(sandbox):
    tool = PythonTool(sandbox=sandbox)
    env = ToolEnv(Echo(), [tool])
    obs, _ = env.reset()
    assert "<python>" in obs
    obs, _, _, _, info = env.step("Let me compute. <python>print(6 * 7)</python>")
    assert obs == "Code execution result: 42\n\n" and info["tool_ok"]  # GEM appends "\\n" to the output
    obs, _, _, _, info = env.step("<python>while True: pass</python>")
    assert obs.startswith("Code execution result: ") and "timeout" in obs and not info["tool_ok"]
    short = PythonTool(sandbox=sandbox, keep_error_last_line=True)("<python>print('a')\n1/0</python>")
    assert short.text == "Code execution result: a\n\nZeroDivisionError: division by zero\n" and not short.ok
    assert copy.deepcopy(tool) is tool
    revived = pickle.loads(pickle.dumps(tool))  # in another process: that process's shared sandbox
    assert revived.config == tool.config and revived.sandbox.config == sandbox.config
    assert revived("<python>print(2 + 2)</python>").text == "Code execution result: 4\n\n"
