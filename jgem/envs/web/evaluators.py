"""WebArena's evaluators: `string_match`, `url_match` and `program_html`, scored as WebArena scores them.

A task's `eval.eval_types` lists the evaluators; the episode's score is the product of theirs (1.0 or 0.0 each).

- `string_match` compares the agent's `stop [answer]` with `reference_answers`: `exact_match` (case- and
  quote-insensitive equality), `must_include` (each reference is a substring of the answer; a single reference of
  one word must be a whole token, so "2" is not found in "12"), `fuzzy_match` (a judge decides; WebArena asks an
  LLM). The judge is pluggable (`FuzzyJudge`) and off by default: a task that needs one, run without one, is an
  error naming the task, not a silent 0.
- `url_match` ("GOLD in PRED"): some reference URL's host and path is a substring of the current URL's, and every
  reference query key has one of its values in the current URL's query. Alternatives are joined by " |OR| ".
- `program_html` runs each target's JS `locator` on the page at its `url` ("last": the page the episode ended on)
  after the episode, and checks `required_contents` there; this is how changed state (a cart, a posted reply) is
  checked. WebArena's `func:` targets call site-specific admin helpers; register an implementation in
  `HTML_FUNCS` to use them.
"""

from __future__ import annotations

import collections
import html
import re
import urllib.parse
from collections.abc import Callable
from typing import Any, Protocol

OR = " |OR| "
EVAL_TYPES = ("string_match", "url_match", "program_html")


class FuzzyJudge(Protocol):
    """Decides whether `pred` means `reference` for the question `intent` (WebArena: an LLM judge)."""

    def __call__(self, intent: str, reference: str, pred: str) -> bool: ...


class Page(Protocol):
    """What `program_html` needs from the browser (a `BrowserSession` has all three)."""

    @property
    def url(self) -> str: ...

    def goto(self, url: str) -> None: ...

    def evaluate(self, js: str) -> Any: ...

    def content(self) -> str: ...


# `func:` helpers of WebArena's program_html targets, by name: f(page, arg) -> str. None ship with jgem: they call
# the real sites' admin APIs (e.g. `shopping_get_latest_order_url`), which a user with those sites registers here.
HTML_FUNCS: dict[str, Callable[[Page, str], str]] = {}


def clean_answer(answer: str) -> str:
    answer = answer.strip()
    if len(answer) >= 2 and answer[0] == answer[-1] and answer[0] in "'\"":
        answer = answer[1:-1]
    return answer.lower()


def exact_match(ref: str, pred: str) -> float:
    return float(clean_answer(pred) == clean_answer(ref))


_TOKEN = re.compile(r"\w+|[^\w\s]")


def must_include(ref: str, pred: str, tokenize: bool = False) -> float:
    ref, pred = clean_answer(ref), clean_answer(pred)
    if tokenize and len(_TOKEN.findall(ref)) == 1:  # one-word reference: a whole token of the answer
        return float(ref in _TOKEN.findall(pred))
    return float(ref in pred)


def string_match(task: dict[str, Any], answer: str, judge: FuzzyJudge | None = None) -> float:
    score = 1.0
    for approach, value in task["eval"]["reference_answers"].items():
        if approach == "exact_match":
            score *= exact_match(value, answer)
        elif approach == "must_include":
            for ref in _as_list(value, approach):
                score *= must_include(ref, answer, tokenize=len(value) == 1)
        elif approach == "fuzzy_match":
            if judge is None:
                raise ValueError(
                    f"task {task.get('task_id')!r} needs a fuzzy_match judge (an LLM, WebArena's default); "
                    "pass WebEnv(fuzzy_judge=...)"
                )
            if value == "N/A":  # unachievable task: the answer must say so
                score *= exact_match("N/A", answer) or float(judge(task["intent"], task["eval"]["string_note"], answer))
            else:
                score *= float(all(judge(task["intent"], ref, answer) for ref in _as_list(value, approach)))
        else:
            raise ValueError(f"task {task.get('task_id')!r}: unknown reference_answers kind {approach!r}")
    return score


def _clean_url(url: str) -> str:
    return str(url).strip().rstrip("/")


def _split_url(url: str) -> tuple[str, dict[str, list[str]]]:
    parsed = urllib.parse.urlparse(url)
    return parsed.netloc + parsed.path, urllib.parse.parse_qs(parsed.query)


def url_match(task: dict[str, Any], url: str) -> float:
    rule = task["eval"].get("url_note") or "GOLD in PRED"
    if rule != "GOLD in PRED":
        raise ValueError(f"task {task.get('task_id')!r}: unknown url_note {rule!r} (WebArena's is 'GOLD in PRED')")
    refs = [_clean_url(u) for u in task["eval"]["reference_url"].split(OR)]
    pred_path, pred_query = _split_url(_clean_url(url))
    ref_queries: dict[str, set[str]] = collections.defaultdict(set)
    ref_paths = []
    for ref in refs:
        path, query = _split_url(ref)
        ref_paths.append(path)
        for k, v in query.items():
            ref_queries[k].update(v)
    score = float(any(path in pred_path for path in ref_paths))
    for k, values in ref_queries.items():
        score *= float(any(v in pred_query.get(k, []) for v in values))
    return score


def program_html(task: dict[str, Any], page: Page) -> float:
    score = 1.0
    for target in task["eval"]["program_html"]:
        url, locator = target["url"], target["locator"].strip()
        if url.startswith("func:"):
            url = _call_func(task, url, page, page.url)
        if url != "last":
            page.goto(url)
        if not locator:
            selected = page.content()
        elif locator.startswith(("document.", "[...document.")):
            for prep in target.get("prep_actions", ()):
                page.evaluate(prep)
            try:
                value = page.evaluate(locator)
            except Exception:  # noqa: BLE001 - WebArena scores a failing locator as an empty selection
                value = ""
            selected = "" if value is None else str(value)
        elif locator.startswith("func:"):
            selected = _call_func(task, locator, page, "")
        else:
            raise ValueError(f"task {task.get('task_id')!r}: unknown program_html locator {locator!r}")
        selected = html.unescape(selected)
        required = target["required_contents"]
        if "exact_match" in required:
            score *= exact_match(required["exact_match"], selected)
        elif "must_include" in required:
            for content in _as_list(required["must_include"], "must_include"):
                score *= float(any(must_include(alt, selected) for alt in content.split(OR)))
        else:
            raise ValueError(f"task {task.get('task_id')!r}: required_contents needs exact_match or must_include")
    return score


def _call_func(task: dict[str, Any], spec: str, page: Page, arg: str) -> str:
    name = spec.removeprefix("func:").split("(", 1)[0].strip()
    if name not in HTML_FUNCS:
        raise ValueError(
            f"task {task.get('task_id')!r} uses WebArena's func:{name}, a helper that queries the real site's "
            "admin API; register one in jgem.envs.web.evaluators.HTML_FUNCS"
        )
    return str(HTML_FUNCS[name](page, arg))


def _as_list(value: Any, what: str) -> list[str]:
    if isinstance(value, str) or not isinstance(value, list):
        raise ValueError(f"{what} needs a list of strings, got {value!r:.80}")
    return value


def check_task(task: dict[str, Any]) -> None:
    """Raise `ValueError` naming the task and field when its `eval` is not one jgem can score."""
    tid = task.get("task_id")
    ev = task.get("eval")
    if not isinstance(ev, dict) or not ev.get("eval_types"):
        raise ValueError(f"task {tid!r} has no eval.eval_types")
    for kind in ev["eval_types"]:
        if kind not in EVAL_TYPES:
            raise ValueError(f"task {tid!r}: unknown eval type {kind!r}; jgem knows {', '.join(EVAL_TYPES)}")
        field = {"string_match": "reference_answers", "url_match": "reference_url", "program_html": "program_html"}
        if not ev.get(field[kind]):
            raise ValueError(f"task {tid!r}: eval type {kind} needs eval.{field[kind]}")
    for key in ("intent", "start_url"):
        if not isinstance(task.get(key), str):
            raise ValueError(f"task {tid!r} needs a string {key!r}")


def evaluate(task: dict[str, Any], answer: str, page: Page, judge: FuzzyJudge | None = None) -> float:
    """The task's score for an episode that ended on `page` with `answer` (WebArena: the product of its evaluators).
    The URL is read first: `program_html` may navigate away from the page the episode ended on."""
    final_url, score = page.url, 1.0
    for kind in task["eval"]["eval_types"]:
        if kind == "string_match":
            score *= string_match(task, answer, judge)
        elif kind == "url_match":
            score *= url_match(task, final_url)
        else:
            score *= program_html(task, page)
    return score
