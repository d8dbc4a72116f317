"""WebArena's evaluators, scored as WebArena scores them (string and URL matching; program_html runs in
test_web_env.py against a real browser)."""

from __future__ import annotations

import json

import pytest

from jgem.envs.web.evaluators import check_task, evaluate, must_include, string_match, url_match
from jgem.envs.web.tasks import fill_urls, placeholders, read_tasks


def task(**ev) -> dict:
    base = {"eval_types": ["string_match"], "reference_answers": None, "reference_url": "", "program_html": []}
    return {"task_id": 7, "intent": "q?", "start_url": "__SHOPPING__/", "eval": {**base, **ev}}


@pytest.mark.parametrize(
    ("refs", "answer", "score"),
    [
        ({"exact_match": "$12.50"}, " '$12.50' ", 1.0),  # quotes and case and spaces do not matter
        ({"exact_match": "$12.50"}, "The price is $12.50", 0.0),
        ({"must_include": ["Blue", "Mug"]}, "a blue mug", 1.0),
        ({"must_include": ["Blue", "Mug"]}, "a blue cup", 0.0),
        ({"must_include": ["2"]}, "12 items", 0.0),  # one one-word reference: a whole token, not a substring
        ({"must_include": ["2"]}, "there are 2 items", 1.0),
        ({"must_include": ["2", "items"]}, "12 items", 1.0),  # several references: substrings (WebArena)
    ],
)
def test_string_match(refs, answer, score):
    assert string_match(task(reference_answers=refs), answer) == score


def test_fuzzy_match_needs_a_judge_and_uses_it():
    t = task(reference_answers={"fuzzy_match": ["blue mug"]})
    with pytest.raises(ValueError, match="fuzzy_match judge"):
        string_match(t, "the blue mug")
    assert string_match(t, "it is the blue mug", judge=lambda intent, ref, pred: ref in pred) == 1.0
    assert string_match(t, "a red cup", judge=lambda intent, ref, pred: ref in pred) == 0.0


@pytest.mark.parametrize(
    ("ref", "pred", "score"),
    [
        ("http://h:1/shop/cat/kitchen", "http://h:1/shop/cat/kitchen/", 1.0),
        ("http://h:1/shop/cat/kitchen", "http://h:1/shop/cat/garden", 0.0),
        ("http://h:1/c/k?sort=price", "http://h:1/c/k?page=2&sort=price", 1.0),  # every reference key present
        ("http://h:1/c/k?sort=price", "http://h:1/c/k?sort=name", 0.0),
        ("http://h:1/a |OR| http://h:1/b", "http://h:1/b", 1.0),
    ],
)
def test_url_match_gold_in_pred(ref, pred, score):
    assert url_match(task(eval_types=["url_match"], reference_url=ref), pred) == score


class FixedPage:
    """A page that stays put: enough for evaluators that read only the URL."""

    def __init__(self, url: str) -> None:
        self.url = url

    def goto(self, url: str) -> None:
        raise AssertionError("string and url evaluators must not navigate")

    def evaluate(self, js: str):
        raise AssertionError

    def content(self) -> str:
        raise AssertionError


def test_evaluate_multiplies_every_evaluator():
    t = task(
        eval_types=["string_match", "url_match"],
        reference_answers={"must_include": ["mug"]},
        reference_url="http://h/p/3",
    )
    assert evaluate(t, "mug", FixedPage("http://h/p/3")) == 1.0
    assert evaluate(t, "mug", FixedPage("http://h/p/4")) == 0.0
    assert evaluate(t, "cup", FixedPage("http://h/p/3")) == 0.0


def test_must_include_helper_matches_webarena_cleaning():
    assert must_include('"Mug"', "MUG") == 1.0


def test_check_task_names_what_is_wrong():
    with pytest.raises(ValueError, match="unknown eval type 'vibes'"):
        check_task(task(eval_types=["vibes"]))
    with pytest.raises(ValueError, match="url_match needs eval.reference_url"):
        check_task(task(eval_types=["url_match"]))
    with pytest.raises(ValueError, match="no eval.eval_types"):
        check_task({"task_id": 1, "intent": "x", "start_url": "u", "eval": {}})


def test_webarena_task_files_load_and_take_their_urls_from_the_environment(tmp_path, monkeypatch):
    raw = [
        task(reference_answers={"exact_match": "x"}),
        {**task(eval_types=["url_match"], reference_url="__REDDIT__/f/books"), "task_id": 8, "start_url": "__REDDIT__"},
    ]
    (tmp_path / "test.raw.json").write_text(json.dumps(raw))
    tasks = read_tasks(tmp_path / "test.raw.json")
    assert [t["task_id"] for t in tasks] == [7, 8] and placeholders(tasks[1]) == {"__REDDIT__"}
    monkeypatch.delenv("REDDIT", raising=False)
    with pytest.raises(ValueError, match="export REDDIT="):
        fill_urls(tasks[1], {})
    monkeypatch.setenv("REDDIT", "http://forum.example:9999/")
    filled = fill_urls(tasks[1], {})
    assert filled["start_url"] == "http://forum.example:9999"
    assert filled["eval"]["reference_url"] == "http://forum.example:9999/f/books"
    assert fill_urls(tasks[0], {"SHOPPING": "http://s:1"})["start_url"] == "http://s:1/"
    for i, t in enumerate(raw):  # WebArena's per-task files: config_files/<id>.json
        (tmp_path / f"{i}.json").write_text(json.dumps(t))
    (tmp_path / "test.raw.json").unlink()
    assert [t["task_id"] for t in read_tasks(tmp_path)] == [7, 8]
    (tmp_path / "bad.json").write_text("{nope")
    with pytest.raises(ValueError, match="bad.json is not valid JSON"):
        read_tasks(tmp_path)
