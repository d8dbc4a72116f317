"""DeepSearch: multi-turn question answering with a BM25 search tool over a local corpus (AgentGym style).

Each turn the agent either searches (`<search>query</search>`, answered with the top passages) or
answers (`<answer>text</answer>`). A correct answer (exact match after normalisation) ends the episode
with reward 1; a wrong one is told so and the episode goes on until the turn limit, as in AgentGym.
"""

from __future__ import annotations

import json
import re
import string
import threading
from pathlib import Path
from typing import Any

from jgem.core import Env, StepResult

_DATA = Path(__file__).resolve().parents[1] / "data"
DEFAULT_QUESTIONS = _DATA / "qa_questions.jsonl"
DEFAULT_CORPUS = _DATA / "qa_corpus.jsonl"
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_INDEXES: dict[str, Any] = {}
_INDEX_LOCK = threading.Lock()


def normalize_answer(text: str) -> str:
    """Lower case, no punctuation, no articles, single spaces (the usual QA exact-match normalisation)."""
    text = "".join(c for c in text.lower() if c not in set(string.punctuation))
    return " ".join(w for w in text.split() if w not in ("a", "an", "the"))


def load_questions(path: str | Path, hops: int | None = None) -> list[dict[str, Any]]:
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            if not isinstance(row.get("question"), str) or not row.get("answer"):
                raise ValueError(f"{path}:{n}: each line needs 'question' (str) and 'answer' (str or list of str)")
            row["answer"] = [row["answer"]] if isinstance(row["answer"], str) else list(row["answer"])
            if hops is None or row.get("hops") == hops:
                rows.append(row)
    if not rows:
        which = "" if hops is None else f" with hops={hops}"
        raise ValueError(f"no questions{which} in {path}; each JSON line needs 'question' and 'answer'")
    return rows


def shared_index(corpus: str | Path) -> Any:
    """One BM25 index per corpus per process (cached on disk by the search tool, in memory here)."""
    from jgem.envs.tools.search import BM25Index

    key = str(Path(corpus).resolve())
    with _INDEX_LOCK:
        if key not in _INDEXES:
            _INDEXES[key] = BM25Index.from_jsonl(key)
        return _INDEXES[key]


class DeepSearchEnv(Env):
    """Answer a question from the corpus. `search_url` queries a search service instead of a local index."""

    def __init__(
        self,
        questions: str | None = None,
        corpus: str | None = None,
        search_url: str | None = None,
        hops: int | None = None,
        topk: int = 3,
        max_turns: int = 8,
        seed: int | None = None,
    ) -> None:
        super().__init__(seed=seed)
        from jgem.envs.tools.search import SearchTool

        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.rows = load_questions(questions or DEFAULT_QUESTIONS, hops)
        self.tool = SearchTool(search_url or shared_index(corpus or DEFAULT_CORPUS), topk=topk)
        self.max_turns = max_turns
        self.row: dict[str, Any] = {}
        self.turn = 0
        self.done = True

    def __deepcopy__(self, memo: dict) -> DeepSearchEnv:
        # The question list and the tool are read-only and shared; everything else is copied.
        import copy

        clone = object.__new__(type(self))
        memo[id(self)] = clone
        for k, v in vars(self).items():
            setattr(clone, k, v if k in ("rows", "tool") else copy.deepcopy(v, memo))
        return clone

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed)
        self.row = self.rows[int(self.np_random.integers(len(self.rows)))]
        self.turn, self.done = 0, False
        obs = f"{self.tool.instruction()}\n\nQuestion: {self.row['question']}"
        return obs, {"question": self.row["question"], "hops": self.row.get("hops")}

    def step(self, action: str) -> StepResult:
        if self.done:
            raise RuntimeError("step() after the episode ended; call reset()")
        self.turn += 1
        answer = _ANSWER.search(action)
        correct, valid = False, True
        if answer is not None:
            correct = normalize_answer(answer.group(1)) in {normalize_answer(a) for a in self.row["answer"]}
            obs = (
                "Your answer is correct."
                if correct
                else ("Your answer is incorrect. Search for more information and try again.")
            )
        else:
            result = self.tool(action)
            if result is None:
                valid = False
                obs = (
                    "No search or answer found. Search with <search> query </search> or answer with "
                    "<answer> answer </answer>."
                )
            else:
                obs = result.text
        truncated = not correct and self.turn >= self.max_turns
        self.done = correct or truncated
        info: dict[str, Any] = {"action_is_valid": valid, "turn": self.turn}
        if self.done:
            info["success"] = correct
        return obs, 1.0 if correct else 0.0, correct, truncated, info

    def sample_random_action(self) -> str:
        words = self.row.get("question", "what").split()
        return f"<search>{' '.join(words[int(self.np_random.integers(len(words))) :])}</search>"
