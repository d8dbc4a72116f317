"""WebArena's observation: a page's accessibility tree as `[id] role 'name' prop: value` lines, or cheaper text.

Input is the node list of CDP `Accessibility.getFullAXTree`. Each shown node gets an id from `number`, a map
from the node's `backendDOMNodeId` (the browser session numbers them in the order it first shows them, which is
deterministic; Chromium's own numbers depend on what else asked for a node first); the id is what `click [id]`
and the other element actions take. Pruning follows WebArena's `TextObervationProcessor`:
ignored nodes, nodes without a DOM node, unnamed structural nodes (`generic`, `paragraph`, `list`, ...) are
dropped and their children lifted to their depth; `InlineTextBox` and `LineBreak` are dropped; a StaticText
whose text already appears in one of the three lines before it is dropped. Names are Python `repr`s, as
WebArena writes them (a name with a single quote in it is double-quoted); `elements` parses both forms back.

The text rendering keeps the same ids: visible text, with interactive elements as `[id] role 'name'` inline
(with only the properties that say their state: checked, selected, expanded, pressed, disabled), the text of
one paragraph, heading, list item or table row joined onto one line.
Both renderings are pure functions of the node list, so the same page gives the same observation.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

KINDS = ("accessibility_tree", "text")

# WebArena's IGNORED_ACTREE_PROPERTIES: properties that are noise to an agent.
IGNORED_PROPERTIES = frozenset(("focusable", "editable", "readonly", "level", "settable", "multiline", "invalid"))
# Roles WebArena drops when they have neither a name nor a shown property (their children stay).
UNNAMED_DROPPED = frozenset(
    ("generic", "none", "img", "list", "strong", "paragraph", "banner", "navigation", "Section", "LabelText")
    + ("Legend", "listitem")
)
SKIPPED_ROLES = frozenset(("InlineTextBox", "LineBreak"))
INTERACTIVE = frozenset(
    ("link", "button", "textbox", "searchbox", "combobox", "listbox", "option", "checkbox", "radio", "switch")
    + ("slider", "spinbutton", "tab", "menuitem", "menuitemcheckbox", "menuitemradio", "treeitem", "MenuListOption")
)
# The text rendering keeps only the properties that say a control's state.
TEXT_PROPERTIES = frozenset(("checked", "selected", "expanded", "pressed", "disabled"))
# Text under one of these roles is one line in the text rendering.
TEXT_BLOCKS = frozenset(
    ["paragraph", "heading", "listitem", "row", "LabelText", "caption", "term", "definition", "Legend"]
)

_LINE = re.compile(r"\[(\d+)\] (\S+) ('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")")


def _value(field: dict[str, Any] | None) -> Any:
    return (field or {}).get("value")


def _properties(node: dict[str, Any], only: frozenset[str] | None = None) -> list[str]:
    return [
        f"{p['name']}: {p['value']['value']}"
        for p in node.get("properties", ())
        if p.get("name") not in IGNORED_PROPERTIES
        and (only is None or p.get("name") in only)
        and "value" in p.get("value", {})
    ]


Number = Callable[[int], int]  # backendDOMNodeId -> the id shown


def _same(backend_id: int) -> int:
    return backend_id


def _line(node: dict[str, Any], number: Number, only: frozenset[str] | None = None) -> str:
    name = _value(node.get("name"))
    name = name if isinstance(name, str) else ""
    text = f"[{number(node['backendDOMNodeId'])}] {_value(node.get('role')) or ''} {name!r}"
    return " ".join([text, *_properties(node, only)])


def _kept(node: dict[str, Any]) -> bool:
    if node.get("ignored") or "backendDOMNodeId" not in node:
        return False
    role = _value(node.get("role")) or ""
    name = _value(node.get("name"))
    if isinstance(name, str) and name.strip():
        return True
    return not (role in UNNAMED_DROPPED and (not _properties(node) or role == "listitem"))


def _walk(nodes: Sequence[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], int, tuple[dict[str, Any], ...]]]:
    """Kept nodes in document order, each with its depth (kept ancestors) and all its ancestors, outermost first
    (pruned ones too: an unnamed paragraph is not shown but still holds its text together)."""
    if not nodes:
        return
    by_id: dict[str, dict[str, Any]] = {}
    for node in nodes:
        by_id.setdefault(node["nodeId"], node)  # Chromium repeats a few nodes; the first is the one in the tree
    stack: list[tuple[str, int, tuple[dict[str, Any], ...]]] = [(nodes[0]["nodeId"], 0, ())]
    seen: set[str] = set()
    while stack:
        node_id, depth, ancestors = stack.pop()
        node = by_id.get(node_id)
        if node is None or node_id in seen or _value(node.get("role")) in SKIPPED_ROLES:
            continue
        seen.add(node_id)
        if _kept(node):
            yield node, depth, ancestors
            depth += 1
        ancestors = (*ancestors, node)
        stack.extend((child, depth, ancestors) for child in reversed(node.get("childIds", ())))


def _is_repeated(text: str, previous: list[str]) -> bool:
    """WebArena's rule: a StaticText already shown in one of the last three lines adds nothing."""
    return not text or any(text in line for line in previous[-3:])


def accessibility_tree(nodes: Sequence[dict[str, Any]], number: Number = _same) -> list[str]:
    """The tree lines of `nodes` (tab-indented by depth), pruned as WebArena prunes them."""
    lines: list[str] = []
    for node, depth, _ in _walk(nodes):
        if _value(node.get("role")) == "StaticText" and _is_repeated(_value(node.get("name")) or "", lines):
            continue
        lines.append("\t" * depth + _line(node, number))
    return lines


def text(nodes: Sequence[dict[str, Any]], number: Number = _same) -> list[str]:
    """The text rendering of `nodes`: visible text and interactive elements (as tree lines), no structure."""
    pieces: list[tuple[str, int | None]] = []  # (piece, id of the outermost text block it sits in)
    for node, _, ancestors in _walk(nodes):
        role = _value(node.get("role"))
        if role == "StaticText":
            piece = _value(node.get("name")) or ""
            if _is_repeated(piece, [p for p, _ in pieces]):
                continue
        elif role in INTERACTIVE:
            piece = _line(node, number, TEXT_PROPERTIES)
        else:
            continue
        block = next((a["backendDOMNodeId"] for a in ancestors if _value(a.get("role")) in TEXT_BLOCKS), None)
        pieces.append((piece, block))
    lines: list[str] = []
    for i, (piece, block) in enumerate(pieces):
        if i and block is not None and block == pieces[i - 1][1]:
            lines[-1] += " " + piece
        else:
            lines.append(piece)
    return lines


def fit(lines: list[str], budget: int) -> list[str]:
    """`lines` cut to at most `budget` characters (whole lines; the first one cut if it alone is longer),
    with a last line saying so when anything was cut."""
    if budget <= 0:
        raise ValueError(f"observation budget must be a positive number of characters; got {budget}")
    total = sum(len(line) for line in lines) + max(len(lines) - 1, 0)
    if total <= budget:
        return lines
    kept: list[str] = []
    used = 0
    for line in lines:
        cost = len(line) + (1 if kept else 0)
        if used + cost > budget:
            if not kept:
                kept.append(line[:budget])
                used = budget
            break
        kept.append(line)
        used += cost
    return [*kept, f"... (truncated: {used} of {total} characters shown)"]


def footer(url: str, titles: Sequence[str], current: int) -> list[str]:
    """The URL line and WebArena's tab list: `Tabs: [0] title (current) | [1] title`."""
    tabs = " | ".join(f"[{i}] {title}" + (" (current)" if i == current else "") for i, title in enumerate(titles))
    return [f"URL: {url}", f"Tabs: {tabs}"]


def render(
    nodes: Sequence[dict[str, Any]],
    url: str,
    titles: Sequence[str],
    current: int,
    kind: str,
    budget: int,
    number: Number = _same,
) -> str:
    """The full observation: the page in `kind` rendering within `budget` characters, then URL and tabs."""
    if kind not in KINDS:
        raise ValueError(f"observation kind must be one of {KINDS}; got {kind!r}")
    lines = accessibility_tree(nodes, number) if kind == "accessibility_tree" else text(nodes, number)
    return "\n".join([*fit(lines, budget), *footer(url, titles, current)])


def elements(observation: str) -> list[tuple[int, str, str]]:
    """Every `(id, role, name)` in an observation of either kind, in order."""
    return [(int(i), role, ast.literal_eval(name)) for i, role, name in _LINE.findall(observation)]


def find(observation: str, role: str, name: str) -> int:
    """The id of the first element with exactly this role and name; `LookupError` listing those of the role."""
    found = elements(observation)
    for i, r, n in found:
        if r == role and n == name:
            return i
    names = [n for _, r, n in found if r == role]
    raise LookupError(f"no {role} named {name!r} in the observation; {role} names there: {names[:20]}")
