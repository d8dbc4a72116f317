"""BM25 search: the shipped corpus answers the shipped questions; cache, HTTP service, tool format."""

from __future__ import annotations

import json

import pytest

from jgem.envs.tools import search as search_mod
from jgem.envs.tools.search import DEFAULT_CORPUS, BM25Index, SearchTool
from jgem.envs.tools.search_server import SearchServer

QUESTIONS = DEFAULT_CORPUS.with_name("qa_questions.jsonl")


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    return BM25Index.from_jsonl(DEFAULT_CORPUS, cache_dir=tmp_path_factory.mktemp("bm25"))


def test_one_hop_questions_retrieve_their_passage(index):
    rows = [json.loads(line) for line in QUESTIONS.read_text().splitlines()]
    one_hop = [r for r in rows if r["hops"] == 1]
    assert len(one_hop) >= 100
    for r in one_hop:
        hits = index.search(r["question"], k=3)
        assert r["support"][0] in [h.title for h in hits], r["question"]
        passage = next(h for h in hits if h.title == r["support"][0])
        assert r["answer"][0].lower() in passage.text.lower()  # the passage really answers it
    scores = [h.score for h in index.search("capital currency country", k=5)]
    assert scores == sorted(scores, reverse=True) and all(s > 0 for s in scores)


def test_index_is_built_once_and_cached(tmp_path, monkeypatch):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"title": "Zebra", "text": "Zebras have stripes."}) + "\n")
    first = BM25Index.from_jsonl(corpus, cache_dir=tmp_path / "cache")
    monkeypatch.setattr(BM25Index, "build", classmethod(lambda cls, p: pytest.fail("rebuilt a cached index")))
    second = BM25Index.from_jsonl(corpus, cache_dir=tmp_path / "cache")
    assert second.search("stripes", 1)[0].title == "Zebra" == first.search("stripes", 1)[0].title
    corpus.write_text(json.dumps({"title": "Lion", "text": "Lions roar."}) + "\n")  # new content, new key
    monkeypatch.undo()
    assert BM25Index.from_jsonl(corpus, cache_dir=tmp_path / "cache").search("roar", 1)[0].title == "Lion"
    assert len(list((tmp_path / "cache").iterdir())) == 2


def test_bad_corpus_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="title"):
        BM25Index.from_jsonl(tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"title": "no text"}\n')
    with pytest.raises(ValueError, match="'text'"):
        BM25Index.from_jsonl(bad, cache_dir=tmp_path)


def test_search_tool_format_and_no_match(index):
    tool = SearchTool(index, topk=2)
    assert tool.parse("think <search> capital of Ulzopelia </search> more") == "capital of Ulzopelia"
    assert tool.parse("no search") is None
    res = tool("<search>capital of Ulzopelia</search>")
    assert res.ok and res.text.startswith("\n\n<information>Doc 1(Title: Ulzopelia) ")
    assert res.text.count("Doc ") == 2 and res.text.endswith("</information>\n\n")
    assert "No results" in tool("<search>qqqq zzzz</search>").text
    assert not tool("<search> </search>").ok


def test_http_service_matches_in_process(index):
    with SearchServer(index) as server:
        remote = SearchTool(server.url, topk=3)
        local = SearchTool(index, topk=3)
        for q in ["Who created The Vazo Statue?", "river Dorkaholm"]:
            assert remote(f"<search>{q}</search>") == local(f"<search>{q}</search>")
    dead = SearchTool(server.url, timeout=1.0)("<search>anything</search>")  # server closed
    assert not dead.ok and "SearchTool Error" in dead.text


def test_default_tool_uses_the_shipped_corpus():
    assert len(SearchTool().index) == len(search_mod.read_corpus(DEFAULT_CORPUS))
