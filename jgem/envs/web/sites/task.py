"""WebArena's task-config format, as the shipped sites' task templates fill it in.

A template returns an `Instance` (its intent template and values, start page, evaluator and solution); `config`
turns it into the JSON WebArena's `config_files/*.json` hold, plus jgem's `solution` (the ground-truth plan the
scripted solver plays, as `[kind, role, name, ...]` steps on accessible names) and `login_user`. URLs carry the
site's placeholder (`__SHOP__`, `__FORUM__`), which the env replaces with the served base URL.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

Step = list[Any]
_SLOT = re.compile(r"\{\{(\w+)\}\}")


@dataclasses.dataclass(frozen=True)
class Instance:
    """One instantiated template: `intent_template` has `{{slot}}`s that `values` fill."""

    template_id: int
    intent_template: str
    values: dict[str, str]
    eval: dict[str, Any]
    solution: list[Step]
    start_url: str


def config(site: str, placeholder: str, user: str, seed: int, difficulty: str, inst: Instance) -> dict[str, Any]:
    """The WebArena task config of an instance."""
    slots = set(_SLOT.findall(inst.intent_template))
    if slots != set(inst.values):
        raise ValueError(f"template {inst.template_id}: slots {sorted(slots)} but values for {sorted(inst.values)}")
    if not inst.start_url.startswith(placeholder):
        raise ValueError(f"template {inst.template_id}: start_url {inst.start_url!r} is not on {placeholder}")
    return {
        "task_id": f"{site}-{difficulty}-{seed}",
        "sites": [site],
        "require_login": True,
        "storage_state": None,
        "login_user": user,
        "start_url": inst.start_url,
        "geolocation": None,
        "intent_template": inst.intent_template,
        "instantiation_dict": dict(inst.values),
        "intent": _SLOT.sub(lambda m: inst.values[m.group(1)], inst.intent_template),
        "require_reset": True,
        "intent_template_id": inst.template_id,
        "eval": inst.eval,
        "solution": [list(s) for s in inst.solution],
    }


def _eval(kinds: list[str], answers: dict[str, Any] | None = None, url: str = "", html: list | None = None) -> dict:
    return {
        "eval_types": kinds,
        "reference_answers": answers,
        "reference_url": url,
        "program_html": html or [],
        "string_note": "",
        "url_note": "GOLD in PRED",
    }


def string_match(*, exact: str | None = None, include: list[str] | None = None) -> dict[str, Any]:
    """`string_match` on the `stop` answer: equal to `exact`, or containing every string of `include`."""
    if (exact is None) == (include is None):
        raise ValueError("string_match takes one of exact= or include=")
    return _eval(["string_match"], {"exact_match": exact} if include is None else {"must_include": include})


def url_match(url: str) -> dict[str, Any]:
    """`url_match`: the episode ends on a URL containing `url`'s path and its query parameters."""
    return _eval(["url_match"], url=url)


def program_html(*targets: dict[str, Any]) -> dict[str, Any]:
    """`program_html` over `target(...)`s, checked after the episode."""
    return _eval(["program_html"], html=list(targets))


def target(url: str, selector: str, *, exact: str | None = None, include: list[str] | None = None) -> dict:
    """A `program_html` check: the text of the element `selector` (a CSS selector) on the page at `url` equals
    `exact` or contains every string of `include`; a missing element reads as "" (WebArena's failed locator)."""
    if (exact is None) == (include is None):
        raise ValueError("a program_html target takes one of exact= or include=")
    return {
        "url": url,
        "locator": f"document.querySelector({json.dumps(selector)})?.outerText ?? ''",
        "required_contents": {"exact_match": exact} if include is None else {"must_include": include},
    }


def click(role: str, name: str) -> Step:
    return ["click", role, name]


def type_(role: str, name: str, text: str, enter: bool = False) -> Step:
    if "]" in text or "\n" in text:
        raise ValueError(f"text {text!r} cannot be typed by WebArena's grammar (no ']' or newline)")
    return ["type", role, name, text, int(enter)]


def stop(answer: str = "") -> Step:
    return ["stop", answer]


GO_BACK: Step = ["go_back"]


def scan(links: list[str], hit: int) -> list[Step]:
    """Open each listed link before `hit` and come back, then open `hit`: checking a listing's items in turn."""
    return [s for name in links[:hit] for s in (click("link", name), GO_BACK)] + [click("link", links[hit])]
