"""History (GEM text modes), chat and episode-statistics wrappers; cloning through wrappers."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jgem.core import Env
from jgem.envs.wrappers import ChatWrapper, EpisodeStatistics, HistoryWrapper, wrapper_fns
from tests.envs.faulty_envs import CounterEnv


class ScriptedEnv(Env):
    """Replays fixed observations and infos, so the rendered history is known exactly."""

    def __init__(self, steps: list[tuple[str, dict]], first: tuple[str, dict] = ("Welcome", {"suffix": "Go."})):
        super().__init__()
        self.first, self.steps, self.t = first, steps, 0

    def reset(self, seed: int | None = None) -> tuple[str, dict]:
        super().reset(seed)
        self.t = 0
        return self.first[0], dict(self.first[1])

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        obs, info = self.steps[self.t]
        self.t += 1
        return obs, 0.5, self.t == len(self.steps), False, dict(info)


STEPS = [
    ("Too low.\n", {"suffix": "Next guess.", "parsed_action": "\\boxed{3}"}),
    ("Tool says 42", {"use_tool": True, "suffix": "Next guess."}),
    ("Right!", {"prefix": "[end] ", "suffix": "Done."}),
]


def test_concat_with_action_renders_gem_text() -> None:
    env = HistoryWrapper(ScriptedEnv(STEPS), mode="concat_with_action")
    obs, _ = env.reset()
    assert obs == "Welcome\nGo."
    obs, *_ = env.step("I guess \\boxed{3}")
    assert obs == "Welcome\n\\boxed{3}\nToo low.\nNext guess."  # parsed_action replaces the raw action
    env.step("think")
    obs, *_ = env.step("\\boxed{42}")
    assert obs == "[end] Welcome\n\\boxed{3}\nToo low.\nthink\nTool says 42\n\\boxed{42}\nRight!\nDone."


def test_concat_and_max_history_length() -> None:
    env = HistoryWrapper(ScriptedEnv(STEPS), mode="concat")
    env.reset()
    env.step("a")
    obs, *_ = env.step("b")
    assert obs == "Welcome\nToo low.\nTool says 42\nNext guess."
    env = HistoryWrapper(ScriptedEnv(STEPS), mode="concat_with_action", max_history_length=1)
    env.reset()
    env.step("a")
    obs, *_ = env.step("b")
    assert obs == "Too low.\nb\nTool says 42\nNext guess."
    with pytest.raises(ValueError, match="unknown history mode 'chat'"):
        HistoryWrapper(CounterEnv(), mode="chat")  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", ["concat", "concat_with_action"])
@pytest.mark.parametrize("max_len", [None, 2])
def test_history_matches_gem_observation_wrapper(mode: str, max_len: int | None) -> None:
    gem_wrappers = pytest.importorskip("gem.wrappers.observation_wrapper")
    ours = HistoryWrapper(ScriptedEnv(STEPS * 2), mode=mode, max_history_length=max_len)
    theirs = gem_wrappers.ObservationWrapper(
        ScriptedEnv(STEPS * 2),
        include_action=mode == "concat_with_action",
        include_chat_template=False,
        max_history_length=max_len,
    )
    assert ours.reset()[0] == theirs.reset()[0]
    for t in range(6):
        assert ours.step(f"act {t}")[0] == theirs.step(f"act {t}")[0]


_text = st.text(alphabet="ab \n{}", max_size=6)
_info = st.fixed_dictionaries({}, optional={"suffix": _text, "prefix": _text, "parsed_action": _text})


@settings(max_examples=60, deadline=None)
@given(
    first=st.tuples(_text, _info),
    steps=st.lists(st.tuples(_text, _info, _text), min_size=1, max_size=5),
    mode=st.sampled_from(["concat", "concat_with_action"]),
    max_len=st.sampled_from([None, 1, 2]),
)
def test_history_matches_gem_on_any_text(first, steps, mode, max_len) -> None:
    gem_wrappers = pytest.importorskip("gem.wrappers.observation_wrapper")
    script = [(o, i) for o, i, _ in steps]
    ours = HistoryWrapper(ScriptedEnv(script, first), mode=mode, max_history_length=max_len)
    theirs = gem_wrappers.ObservationWrapper(
        ScriptedEnv(script, first),
        include_action=mode == "concat_with_action",
        include_chat_template=False,
        max_history_length=max_len,
    )
    assert ours.reset()[0] == theirs.reset()[0]
    for _, _, action in steps:
        assert ours.step(action)[0] == theirs.step(action)[0]


def test_chat_messages_are_append_only() -> None:
    env = ChatWrapper(ScriptedEnv(STEPS), system_prompt="Be brief.")
    msgs, _ = env.reset()
    assert msgs == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Welcome\nGo."}]
    history = [list(msgs)]
    for action in ["I guess \\boxed{3}", "call tool", "\\boxed{42}"]:
        msgs, reward, *_ = env.step(action)
        prev = history[-1]
        assert msgs[: len(prev)] == prev  # earlier messages never change
        assert msgs[len(prev)] == {"role": "assistant", "content": action}  # raw action, not parsed_action
        history.append(list(msgs))
    assert [m["role"] for m in msgs] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
    ]
    assert msgs[3]["content"] == "Too low.\nNext guess."
    assert msgs[-1]["content"] == "[end] Right!\nDone."
    plain = ChatWrapper(ScriptedEnv(STEPS), include_suffix=False)
    assert plain.reset()[0] == [{"role": "user", "content": "Welcome"}]


def test_episode_statistics_only_on_the_final_step() -> None:
    env = EpisodeStatistics(CounterEnv(horizon=3))
    env.reset(seed=0)
    infos = [env.step(a)[4] for a in ["a", "b", "win"]]
    assert "episode" not in infos[0] and "episode" not in infos[1]
    assert infos[2]["episode"] == {"return": 6.0, "length": 3, "success": True}
    env.reset(seed=1)
    env.step("a")
    env.step("a")
    assert env.step("lose")[4]["episode"] == {"return": 6.0, "length": 3, "success": False}


@pytest.mark.parametrize("names", ["concat", "concat_with_action", "chat", "chat,episode_stats"])
def test_clones_through_wrappers_continue_identically(names: str) -> None:
    def build() -> Env:
        env: Env = CounterEnv(horizon=6)
        for fn in wrapper_fns(names):
            env = fn(env)
        return env

    env = build()
    env.reset(seed=3)
    env.step("a")
    state = env.get_state()
    clone = build()
    clone.set_state(state)
    spawned = env.spawn(same_state=True)
    for action in ["b", "c", "d", "e", "f"]:
        out = env.step(action)
        assert clone.step(action) == out
        assert spawned.step(action) == out
    assert out[2] and ("episode" in out[4]) == names.endswith("episode_stats")


def test_wrapper_fns_rejects_unknown_names() -> None:
    with pytest.raises(ValueError, match="unknown wrapper 'concat_chat'; choose from concat, concat_with_action"):
        wrapper_fns("concat_chat")
    assert wrapper_fns(" concat , episode_stats ")[1] is EpisodeStatistics
