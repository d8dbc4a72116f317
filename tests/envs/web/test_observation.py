"""Observations: WebArena's accessibility-tree lines and the text rendering, on synthetic trees and real pages."""

from __future__ import annotations

import re

import pytest

from jgem.envs.web import observation
from jgem.envs.web.actions import parse
from jgem.envs.web.browser import BrowserSession

LINE = re.compile(r"^\t*\[\d+\] \S+ ('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")( \S+: .+)*$")


def node(node_id: str, role: str, name: str | None = None, children=(), backend: int | None = None, **extra):
    n = {"nodeId": node_id, "role": {"type": "role", "value": role}, "childIds": list(children), **extra}
    if name is not None:
        n["name"] = {"type": "computedString", "value": name}
    n["backendDOMNodeId"] = backend if backend is not None else int(node_id) * 10
    return n


def prop(name: str, value) -> dict:
    return {"name": name, "value": {"type": "booleanOrUndefined", "value": value}}


# RootWebArea > [generic (unnamed) > link 'Blue Mug' > StaticText 'Blue Mug'], ignored div > StaticText,
# textbox with properties, paragraph (unnamed) > StaticText + InlineTextBox, LineBreak, a node without DOM node.
TREE = [
    node("1", "RootWebArea", "Shop", ["2", "5", "7", "8", "11", "12"], properties=[prop("focused", True)]),
    node("2", "generic", "", ["3"]),
    node("3", "link", "Blue Mug", ["4"], properties=[prop("focusable", True)]),
    node("4", "StaticText", "Blue Mug"),
    node("5", "none", None, ["6"], ignored=True),
    node("6", "StaticText", "Price: $12.50"),
    node("7", "textbox", "Search", properties=[prop("focusable", True), prop("required", False)]),
    node("8", "paragraph", "", ["9", "10"]),
    node("9", "StaticText", "Free shipping", ["10"]),
    node("10", "InlineTextBox", "Free shipping"),
    node("11", "LineBreak", "\n"),
    {"nodeId": "12", "role": {"type": "role", "value": "button"}, "name": {"value": "Ghost"}, "childIds": []},
]


def test_tree_lines_are_webarenas() -> None:
    assert observation.accessibility_tree(TREE) == [
        "[10] RootWebArea 'Shop' focused: True",
        "\t[30] link 'Blue Mug'",  # generic '' dropped, link lifted; focusable is an ignored property
        "\t[60] StaticText 'Price: $12.50'",  # the ignored node's child is kept, lifted
        "\t[70] textbox 'Search' required: False",
        "\t[90] StaticText 'Free shipping'",  # unnamed paragraph dropped; InlineTextBox, LineBreak skipped
    ]  # StaticText 'Blue Mug' repeats the link; the button without a DOM node is not addressable


def test_text_rendering_keeps_ids_and_drops_structure() -> None:
    assert observation.text(TREE) == [
        "[30] link 'Blue Mug'",
        "Price: $12.50",
        "[70] textbox 'Search'",  # only state properties (checked, selected, ...)
        "Free shipping",
    ]


def test_text_rendering_joins_a_paragraph_onto_one_line() -> None:
    tree = [
        node("1", "RootWebArea", "T", ["2", "6"]),
        node("2", "paragraph", "", ["3", "4", "5"]),
        node("3", "StaticText", "Read the"),
        node("4", "link", "terms", ["7"]),
        node("7", "StaticText", "terms"),
        node("5", "StaticText", "first."),
        node("6", "StaticText", "Next block"),
    ]
    assert observation.text(tree) == ["Read the [40] link 'terms' first.", "Next block"]


def test_names_with_quotes_are_reprs_and_parse_back() -> None:
    tree = [node("1", "RootWebArea", "T", ["2", "3"]), node("2", "button", "Bob's"), node("3", "link", 'say "hi"')]
    lines = observation.accessibility_tree(tree)
    assert lines[1] == '\t[20] button "Bob\'s"'
    assert lines[2] == "\t[30] link 'say \"hi\"'"
    text = "\n".join(lines)
    assert observation.elements(text) == [(10, "RootWebArea", "T"), (20, "button", "Bob's"), (30, "link", 'say "hi"')]
    assert observation.find(text, "button", "Bob's") == 20
    with pytest.raises(LookupError, match=r"no link named 'nope'.*\['say \"hi\"'\]"):
        observation.find(text, "link", "nope")


def test_budget_cuts_whole_lines_and_says_so() -> None:
    lines = [f"line {i:02d}" for i in range(10)]  # 7 characters each, 79 with newlines
    assert observation.fit(lines, 79) == lines
    cut = observation.fit(lines, 30)
    assert cut == ["line 00", "line 01", "line 02", "... (truncated: 23 of 79 characters shown)"]
    assert observation.fit(["x" * 50], 10) == ["x" * 10, "... (truncated: 10 of 50 characters shown)"]
    with pytest.raises(ValueError, match="budget must be a positive"):
        observation.fit(lines, 0)


def test_footer_lists_tabs_and_marks_the_current_one() -> None:
    assert observation.footer("http://a/x", ["Shop", "Forum"], 1) == [
        "URL: http://a/x",
        "Tabs: [0] Shop | [1] Forum (current)",
    ]
    with pytest.raises(ValueError, match="observation kind must be one of"):
        observation.render(TREE, "u", ["t"], 0, "html", 100)


# -- real pages ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def home(session: BrowserSession, origin: str) -> dict[str, list[str]]:
    """The fixture home page, observed twice in each kind (nothing done in between), for the tests that only read it."""
    session.reset(origin + "/")
    return {kind: [session.observe(kind), session.observe(kind)] for kind in observation.KINDS}


def test_tree_of_a_real_page(home: dict[str, list[str]], origin: str) -> None:
    obs, again = home["accessibility_tree"]
    body, url_line, tabs_line = obs.rsplit("\n", 2)
    assert url_line == f"URL: {origin}/"
    assert tabs_line == "Tabs: [0] Home (current)"
    lines = body.split("\n")
    assert lines[0] == f"[1] RootWebArea 'Home' focused: True url: {origin}/"
    for line in lines:
        assert LINE.match(line), line
    roles_names = [(role, name) for _, role, name in observation.elements(obs)]
    assert ("heading", "Welcome home") in roles_names
    assert ("link", "Form page") in roles_names
    assert ("button", "Bob's button") in roles_names
    assert ("StaticText", "Pick a page below.") in roles_names
    assert ("link", "Hidden link") not in roles_names  # display:none is not in the tree
    # pruned: no unnamed generic nodes, no inline text boxes, no StaticText repeating its link's name
    assert not any(role in ("generic", "InlineTextBox", "LineBreak") and not name for role, name in roles_names)
    assert ("StaticText", "Form page") not in roles_names
    assert again == obs  # deterministic for the same page


def test_ids_are_what_click_takes(session: BrowserSession, origin: str) -> None:
    session.reset(origin + "/")
    for kind in observation.KINDS:
        obs = session.observe(kind)
        session.execute(parse(f"click [{observation.find(obs, 'link', 'Form page')}]"))
        assert session.url == f"{origin}/form", kind
        session.execute(parse("go_back"))  # to the home page, for the next kind


def test_same_page_same_ids_after_reset(session: BrowserSession, origin: str) -> None:
    for path in ("/form", "/"):
        observed = set()
        for _ in range(4):
            session.reset(origin + path)
            observed.add(session.observe())
        assert len(observed) == 1  # a fresh context numbers the page's nodes the same way every time
    ids = [i for i, _, _ in observation.elements(observed.pop())]
    assert ids == sorted(ids)  # in document order


def test_ids_stay_while_the_page_does(session: BrowserSession, origin: str) -> None:
    session.reset(origin + "/menu")
    before = observation.elements(session.observe())
    menu = observation.find(session.observe(), "StaticText", "Products menu")
    session.execute(parse(f"hover [{menu}]"))
    after = observation.elements(session.observe())
    assert set(before) < set(after)  # what was there keeps its id
    (new,) = [i for i, role, name in after if (role, name) == ("link", "Secret item")]
    assert new > max(i for i, _, _ in before)  # what appears is numbered on


def test_form_controls_show_their_state(session: BrowserSession, origin: str) -> None:
    session.reset(origin + "/form")
    obs = session.observe()
    names = {(role, name) for _, role, name in observation.elements(obs)}
    assert {("textbox", "Name"), ("combobox", "Colour"), ("button", "Submit")} <= names
    textbox = observation.find(obs, "textbox", "Name")
    session.execute(parse(f"type [{textbox}] [Ada Lovelace] [0]"))
    after = session.observe()
    assert "Ada Lovelace" in after  # the typed text is in the tree
    assert any("focused: True" in line and f"[{textbox}]" in line for line in after.split("\n"))


def test_budget_on_a_long_page(session: BrowserSession, origin: str) -> None:
    session.reset(origin + "/long")
    full = session.observe(budget=1_000_000)
    assert "Paragraph number 59 of the long page." in full and "truncated" not in full
    short = session.observe(budget=300)
    body, marker, url_line, tabs_line = short.rsplit("\n", 3)
    assert len(body) <= 300
    assert re.fullmatch(r"\.\.\. \(truncated: \d+ of \d+ characters shown\)", marker)
    assert url_line == f"URL: {origin}/long" and tabs_line == "Tabs: [0] Long (current)"
    assert full.startswith(body)


def test_text_rendering_of_a_real_page(home: dict[str, list[str]], origin: str) -> None:
    tree = home["accessibility_tree"][0]
    text, again = home["text"]
    assert "\t" not in text
    assert "RootWebArea" not in text and "heading" not in text
    lines = text.split("\n")
    assert "Welcome home" in lines and "Pick a page below." in lines
    tree_ids = {(role, name): i for i, role, name in observation.elements(tree) if role in observation.INTERACTIVE}
    text_ids = {(role, name): i for i, role, name in observation.elements(text)}
    assert text_ids == tree_ids  # the same interactive elements, the same ids
    assert lines[-2:] == [f"URL: {origin}/", "Tabs: [0] Home (current)"]
    assert len(text) < len(tree)
    assert again == text


def test_text_rendering_shows_control_state(session: BrowserSession, origin: str) -> None:
    session.reset(origin + "/form")
    box = observation.find(session.observe(), "checkbox", "Gift wrap")
    assert f"[{box}] checkbox 'Gift wrap' checked: false" in session.observe("text")
    session.execute(parse(f"click [{box}]"))
    text = session.observe("text")
    assert f"[{box}] checkbox 'Gift wrap' checked: true" in text
    assert "option 'Green' selected: False" in text
    assert "required" not in text and "url:" not in text
