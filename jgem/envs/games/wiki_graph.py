"""The WikiGame's link graph: articles (title, text) and the links between them, read from a JSONL file.

One article a line: `{"title": "Paris", "text": "Paris is the capital ...", "links": ["France", "Seine", ...]}`.
`text` is the article's opening (the game shows its first `page_summary_length`); `links` are the titles it links
to, in page order. A link to a title that is not in the file, a link to the page itself and a repeated link are
dropped when the graph is read, so every link the game shows can be followed. Other fields are ignored.

The graph jgem ships (`data/wiki_pages.jsonl`) is a curated set of 245 general-knowledge articles written for jgem
(1053 links, every page reachable from every other). A converted Wikipedia dump in the same format is used with
`pages=` or from `$JGEM_DATA/wikigame/pages.jsonl`. Links are kept as integer arrays (CSR), so a graph of a few
million links costs tens of MB, and one copy is read per process however many envs use it.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import numpy as np

SHIPPED = Path(__file__).resolve().parent / "data" / "wiki_pages.jsonl"
DATA_FILE = Path("wikigame") / "pages.jsonl"  # under $JGEM_DATA


class LinkGraph:
    """Titles, texts and links of a set of articles; immutable, shared (not copied) by env clones."""

    def __init__(self, titles: list[str], texts: list[str], links: list[list[int]], source: str = "") -> None:
        self.titles, self.texts, self.source = titles, texts, source
        self.index = {t: i for i, t in enumerate(titles)}
        self.offsets = np.zeros(len(titles) + 1, dtype=np.int64)
        self.offsets[1:] = np.cumsum([len(x) for x in links])
        self.targets = np.fromiter((j for x in links for j in x), dtype=np.int32, count=int(self.offsets[-1]))

    def __len__(self) -> int:
        return len(self.titles)

    def __deepcopy__(self, memo: dict) -> LinkGraph:
        return self

    def links(self, page: int) -> np.ndarray:
        """int32[n] the pages `page` links to, in page order."""
        return self.targets[self.offsets[page] : self.offsets[page + 1]]

    def link_titles(self, page: int) -> list[str]:
        return [self.titles[j] for j in self.links(page)]

    def distances(self, start: int, limit: int) -> np.ndarray:
        """int32[N] the fewest links from `start` to each page (breadth first, level by level), -1 beyond `limit`."""
        dist = np.full(len(self), -1, dtype=np.int32)
        dist[start] = 0
        frontier = np.array([start], dtype=np.int64)
        for level in range(1, limit + 1):
            starts, ends = self.offsets[frontier], self.offsets[frontier + 1]
            counts = ends - starts
            if not counts.sum():
                break
            # the targets of every frontier page, gathered at once: position k of page f is starts[f] + k
            idx = np.repeat(starts - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())
            nxt = np.unique(self.targets[idx])
            nxt = nxt[dist[nxt] < 0]
            if not nxt.size:
                break
            dist[nxt] = level
            frontier = nxt.astype(np.int64)
        return dist

    def shortest_path(self, start: int, goal: int) -> list[int] | None:
        """The pages of a shortest link path from `start` to `goal` (both included), or None when none exists."""
        parent = {start: start}
        frontier = [start]
        while frontier and goal not in parent:
            nxt = []
            for page in frontier:
                for j in self.links(page).tolist():
                    if j not in parent:
                        parent[j] = page
                        nxt.append(j)
            frontier = nxt
        if goal not in parent:
            return None
        path = [goal]
        while path[-1] != start:
            path.append(parent[path[-1]])
        return path[::-1]


def read_graph(path: str | os.PathLike) -> LinkGraph:
    """A `LinkGraph` from a JSONL file of articles (the module docstring gives the format)."""
    p = Path(path)
    titles, texts, raw = [], [], []
    with open(p, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                page = json.loads(line)
                title, text, links = page["title"], page.get("text", ""), page.get("links", [])
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                raise ValueError(
                    f"{p}:{n} is not an article: each line must be a JSON object with a 'title', a 'text' and a "
                    f'list of \'links\' (titles), e.g. {{"title": "Paris", "text": "...", "links": '
                    f'["France"]}} ({type(e).__name__}: {e})'
                ) from None
            if not isinstance(title, str) or not isinstance(links, list):
                raise ValueError(f"{p}:{n}: 'title' must be a string and 'links' a list of titles")
            titles.append(title)
            texts.append(str(text))
            raw.append(links)
    if len(set(titles)) != len(titles):
        seen: set[str] = set()
        dup = next(t for t in titles if t in seen or seen.add(t))
        raise ValueError(f"{p}: the title {dup!r} names two articles; titles must be unique")
    if len(titles) < 2:
        raise ValueError(f"{p} holds {len(titles)} article(s); the game needs at least two")
    index = {t: i for i, t in enumerate(titles)}
    links = []
    for i, ls in enumerate(raw):
        kept = dict.fromkeys(index[t] for t in ls if isinstance(t, str) and t in index and index[t] != i)
        links.append(list(kept))
    return LinkGraph(titles, texts, links, source=str(p))


def graph_path(pages: str | os.PathLike | None) -> Path:
    """The articles file: `pages`, else `$JGEM_DATA/wikigame/pages.jsonl` when it exists, else the shipped graph."""
    if pages is not None:
        p = Path(pages).expanduser()
        if not p.is_file():
            raise FileNotFoundError(
                f"WikiGame pages file {p} does not exist; pass pages= a JSONL file of articles (one JSON object a "
                "line: title, text, links), or leave it out for the shipped graph"
            )
        return p
    root = os.environ.get("JGEM_DATA")
    if root and (Path(root).expanduser() / DATA_FILE).is_file():
        return Path(root).expanduser() / DATA_FILE
    return SHIPPED


@functools.lru_cache(maxsize=4)
def _load(path: str, stamp: int) -> LinkGraph:
    del stamp  # keys the cache: an edited file is read again
    return read_graph(path)


def load_graph(pages: str | os.PathLike | None = None) -> LinkGraph:
    """The graph `graph_path(pages)` names, read once per process."""
    p = graph_path(pages).resolve()
    return _load(str(p), p.stat().st_mtime_ns)
