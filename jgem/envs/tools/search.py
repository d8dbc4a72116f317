"""Search tool: BM25 (bm25s) over a local JSONL corpus of {title, text}, or a remote search service.

`<search>query</search>` returns the top-k passages inside `<information>...</information>`
(GEM's SearchTool format). The index is built once per corpus file and cached on disk, keyed by
the file's content hash, so later runs and other processes load it instead of rebuilding.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jgem.envs.tools.base import Tool, ToolResult, function_schema

DEFAULT_CORPUS = Path(__file__).resolve().parent.parent / "data" / "qa_corpus.jsonl"
_INDEX_FORMAT = "1"  # bump when the cached layout changes


@dataclass(frozen=True)
class Passage:
    title: str
    text: str
    score: float


def default_cache_dir() -> Path:
    """`$JGEM_CACHE_DIR/bm25`, else `~/.cache/jgem/bm25`."""
    root = os.environ.get("JGEM_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "jgem")
    return Path(root) / "bm25"


def _tokenize(texts: list[str]) -> list[list[str]]:
    import bm25s

    return bm25s.tokenize(texts, return_ids=False, show_progress=False)


def read_corpus(path: str | os.PathLike) -> list[dict[str, str]]:
    """Rows of a JSONL corpus; each needs a `text` and may have a `title`."""
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            if not isinstance(row, dict) or "text" not in row:
                raise ValueError(f"{path}:{n}: each corpus line must be a JSON object with 'text' (and 'title')")
            rows.append({"title": str(row.get("title", "")), "text": str(row["text"])})
    if not rows:
        raise ValueError(f"corpus {path} is empty; it needs JSON lines with 'title' and 'text'")
    return rows


class BM25Index:
    """An in-process BM25 index over passages (title + text are both indexed)."""

    def __init__(self, passages: list[dict[str, str]], retriever: Any) -> None:
        self.passages = passages
        self._retriever = retriever
        self._lock = threading.Lock()  # bm25s' retrieve is not documented as thread-safe

    @classmethod
    def build(cls, passages: list[dict[str, str]]) -> BM25Index:
        import bm25s

        retriever = bm25s.BM25()
        tokens = bm25s.tokenize([f"{p['title']}\n{p['text']}" for p in passages], show_progress=False)
        retriever.index(tokens, show_progress=False)
        return cls(passages, retriever)

    @classmethod
    def from_jsonl(cls, path: str | os.PathLike, *, cache_dir: str | os.PathLike | None = None) -> BM25Index:
        """Load the cached index of `path`, building and caching it on first use."""
        import bm25s

        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"corpus {path} not found; pass a JSONL file with 'title' and 'text' fields")
        digest = hashlib.sha256(path.read_bytes()).hexdigest()[:24]
        key = f"{digest}-v{_INDEX_FORMAT}-bm25s{bm25s.__version__}"
        target = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        target = target / key
        if (target / "passages.jsonl").is_file():
            retriever = bm25s.BM25.load(str(target), show_progress=False)
            return cls(read_corpus(target / "passages.jsonl"), retriever)
        index = cls.build(read_corpus(path))
        index._save(target)
        return index

    def _save(self, target: Path) -> None:
        # Write into a temp dir and rename, so concurrent builders never see a half-written index.
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=target.parent))
        try:
            self._retriever.save(str(tmp), show_progress=False)
            with open(tmp / "passages.jsonl", "w") as f:
                f.writelines(json.dumps(p) + "\n" for p in self.passages)
            os.rename(tmp, target)
        except OSError:
            if not (target / "passages.jsonl").is_file():
                raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def __len__(self) -> int:
        return len(self.passages)

    def search(self, query: str, k: int = 3) -> list[Passage]:
        """The `k` best passages with a positive score, best first."""
        tokens = _tokenize([query])
        if not tokens[0] or k <= 0:
            return []
        k = min(k, len(self.passages))
        with self._lock:
            docs, scores = self._retriever.retrieve(tokens, k=k, show_progress=False, n_threads=1)
        out = []
        for i, s in zip(docs[0].tolist(), scores[0].tolist()):
            if s > 0:
                p = self.passages[i]
                out.append(Passage(p["title"], p["text"], float(s)))
        return out


def search_remote(url: str, query: str, k: int, timeout: float = 5.0) -> list[Passage]:
    """Query a jgem search service (`jgem.envs.tools.search_server`)."""
    body = json.dumps({"query": query, "k": k}).encode()
    req = urllib.request.Request(url.rstrip("/") + "/search", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        data = json.loads(resp.read())
    return [Passage(p["title"], p["text"], float(p["score"])) for p in data["passages"]]


def format_passages(passages: list[Passage]) -> str:
    """GEM's layout: `Doc i(Title: t) text`, one per line."""
    return "".join(f"Doc {i}(Title: {p.title}) {p.text}\n" for i, p in enumerate(passages, 1))


_SEARCH = re.compile(r"<search>(.*?)</search>", re.DOTALL)


class SearchTool(Tool):
    """`<search>query</search>` -> top-k passages in `<information>...</information>`.

    `index` is a BM25Index (in-process, the default) or the URL of a search service.
    """

    name = "search"

    def __init__(self, index: BM25Index | str | None = None, topk: int = 3, timeout: float = 5.0) -> None:
        if topk < 1:
            raise ValueError(f"topk must be >= 1, got {topk}")
        self.index = BM25Index.from_jsonl(DEFAULT_CORPUS) if index is None else index
        self.topk = topk
        self.timeout = timeout

    def instruction(self) -> str:
        return (
            "You have access to a search engine to help answer questions.\n"
            "- To search, write: <search> your query here </search>\n"
            "- The results come back inside <information> ... </information>.\n"
            "- You may search several times.\n"
            "- When you are ready, give your final answer in <answer> your answer here </answer>"
        )

    def parse(self, action: str) -> str | None:
        m = _SEARCH.search(action)
        return None if m is None else m.group(1).strip()

    def functions(self) -> list[dict[str, Any]]:
        return [
            function_schema(
                "search",
                f"Search the knowledge base; returns the {self.topk} best passages, each with its title.",
                {
                    "type": "object",
                    "properties": {"query": {"type": "string", "description": "What to search for."}},
                    "required": ["query"],
                },
            )
        ]

    def invoke(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        return self.execute(arguments["query"].strip())

    def execute(self, call: str) -> ToolResult:
        if not call:
            return ToolResult(
                "\n\n<information>Empty search query.</information>\n\n", ok=False, content="Empty search query."
            )
        try:
            if isinstance(self.index, str):
                passages = search_remote(self.index, call, self.topk, self.timeout)
            else:
                passages = self.index.search(call, self.topk)
        except (OSError, urllib.error.URLError, ValueError, KeyError) as e:
            error = f"[SearchTool Error: {e}]"
            return ToolResult(f"\n\n<information>{error}</information>\n\n", ok=False, content=error)
        text = format_passages(passages) if passages else "No results.\n"
        return ToolResult(f"\n\n<information>{text}</information>\n\n", ok=True, content=text.rstrip("\n"))
