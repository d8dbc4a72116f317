"""WebArena's action grammar: every verb, replies around the action, and malformed actions."""

from __future__ import annotations

import pytest

from jgem.envs.web.actions import VERBS, Action, ActionError, extract, parse


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("click [12]", Action("click", element_id=12)),
        ("click[12]", Action("click", element_id=12)),
        ("  CLICK [ 12 ]  ", Action("click", element_id=12)),
        ("hover [7]", Action("hover", element_id=7)),
        ("type [5] [blue mug] [1]", Action("type", element_id=5, text="blue mug", press_enter_after=True)),
        ("type [5] [blue mug] [0]", Action("type", element_id=5, text="blue mug", press_enter_after=False)),
        ("type [5] [blue mug]", Action("type", element_id=5, text="blue mug", press_enter_after=True)),
        ("type [5] [a [nested] text] [0]", Action("type", element_id=5, text="a [nested] text")),
        ("type [5] []", Action("type", element_id=5, text="", press_enter_after=True)),
        ("press [Enter]", Action("press", key="Enter")),
        ("press [control+a]", Action("press", key="Control+a")),
        ("press [Meta+Shift+ArrowLeft]", Action("press", key="Meta+Shift+ArrowLeft")),
        ("press [Control++]", Action("press", key="Control++")),
        ("press [pagedown]", Action("press", key="PageDown")),
        ("scroll [down]", Action("scroll", direction="down")),
        ("scroll [UP]", Action("scroll", direction="up")),
        ("scroll down", Action("scroll", direction="down")),
        ("new_tab", Action("new_tab")),
        ("tab_focus [2]", Action("tab_focus", tab=2)),
        ("close_tab", Action("close_tab")),
        ("goto [http://localhost:7770/a?b=[1]]", Action("goto", text="http://localhost:7770/a?b=[1]")),
        ("go_back", Action("go_back")),
        ("Go_Forward", Action("go_forward")),
        ("stop [$12.50]", Action("stop", text="$12.50")),
        ("stop [ Blue Mug [large] ]", Action("stop", text=" Blue Mug [large] ")),
        ("stop []", Action("stop")),
        ("stop", Action("stop")),
        ("stop [line one\nline two]", Action("stop", text="line one\nline two")),
    ],
)
def test_parse_each_verb(text: str, expected: Action) -> None:
    assert parse(text) == expected


def test_every_verb_parses_and_prints_back() -> None:
    examples = {
        "click": "click [1]",
        "type": "type [1] [x] [0]",
        "hover": "hover [1]",
        "press": "press [Tab]",
        "scroll": "scroll [up]",
        "new_tab": "new_tab",
        "tab_focus": "tab_focus [0]",
        "close_tab": "close_tab",
        "goto": "goto [https://example.com/]",
        "go_back": "go_back",
        "go_forward": "go_forward",
        "stop": "stop [42]",
    }
    assert set(examples) == set(VERBS)
    for verb, text in examples.items():
        action = parse(text)
        assert action.kind == verb
        assert str(action) == text
        assert parse(str(action)) == action


def test_action_in_a_reply_takes_the_last_fenced_block() -> None:
    reply = (
        "The search box is [4]. I could ```click [4]``` but typing is faster.\n"
        "In summary, the next action I will perform is ```type [4] [mug] [1]```"
    )
    assert parse(reply) == Action("type", element_id=4, text="mug", press_enter_after=True)
    assert parse("Let me look.\n```text\nhover [9]\n```") == Action("hover", element_id=9)
    assert parse("```\nnew_tab\n```") == Action("new_tab")
    assert extract("  go_back  ") == "go_back"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no action found"),
        ("```\n```", "no action found"),
        ("jump [3]", "unknown action 'jump [3]'; expected one of: click, type"),
        ("I will click [3]", "unknown action"),
        ("clicked [3]", "unknown action"),
        ("click", "click needs one numeric element id"),
        ("click []", "click needs one numeric element id"),
        ("click [abc]", "click needs one numeric element id"),
        ("click [3] [4]", "click needs one numeric element id"),
        ("hover [-1]", "hover needs one numeric element id"),
        ("type [3]", "type needs an element id and a text"),
        ("type [x] [hello]", "type needs an element id and a text"),
        ("press []", "press needs a key"),
        ("press Enter", "press needs its argument in brackets"),
        ("press [Foo]", "unknown key 'Foo' in 'Foo'"),
        ("press [Control+Foo]", "unknown key 'Foo' in 'Control+Foo'"),
        ("press [Ctrl+é]", "unknown key 'Ctrl'"),
        ("scroll [left]", "scroll takes [up] or [down]"),
        ("scroll", "scroll takes [up] or [down]"),
        ("tab_focus [first]", "tab_focus needs a tab index"),
        ("new_tab [1]", "new_tab takes no argument"),
        ("go_back please", "go_back takes no argument"),
        ("goto []", "goto needs a url"),
        ("goto [file:///etc/passwd]", "goto opens http(s) urls"),
        ("goto [localhost:7770]", "goto opens http(s) urls"),
        ("stop [unclosed", "stop needs its argument in brackets"),
    ],
)
def test_malformed_actions_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ActionError) as err:
        parse(text)
    assert message in str(err.value)


def test_action_error_is_a_value_error() -> None:
    assert issubclass(ActionError, ValueError)
