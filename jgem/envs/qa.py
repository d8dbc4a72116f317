"""QA suite: answer in `<answer>...</answer>` (or `\\boxed{}`), exact match after normalisation.

The shipped set asks about a fictional world described by `data/qa_corpus.jsonl`, so a model cannot
know the answers and the search tool really helps (`qa:FictionalWiki-search`).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from typing import Any

from jgem.envs.data.dataset import DATA_DIR, SingleTurnEnv, last_boxed
from jgem.envs.data.hub import dataset_rows

SHIPPED = DATA_DIR / "qa_questions.jsonl"
CORPUS = DATA_DIR / "qa_corpus.jsonl"
PROMPT = (
    "For any question, always reason through your thought process using:\n"
    "<think> your reasoning here </think>\n"
    "Then, provide your final answer using:\n"
    "<answer> your answer here </answer>\n\n"
    "Question: {question}\n"
)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


def normalize_answer(s: str) -> str:
    """SQuAD normalisation (as GEM's em_check): lower case, no punctuation, articles or extra spaces."""
    return " ".join(_ARTICLES.sub(" ", s.lower().translate(_PUNCT)).split())


def exact_match(prediction: str, golds: list[str]) -> bool:
    p = normalize_answer(prediction)
    return any(p == normalize_answer(g) for g in golds)


def f1_score(prediction: str, golds: list[str]) -> float:
    """The best token-level F1 against any gold answer, over normalised tokens (SQuAD's; reported, not the
    reward: GEM rewards exact match)."""
    pred = normalize_answer(prediction).split()
    best = 0.0
    for gold in golds:
        ref = normalize_answer(gold).split()
        common = sum((Counter(pred) & Counter(ref)).values())
        if common:
            precision, recall = common / len(pred), common / len(ref)
            best = max(best, 2 * precision * recall / (precision + recall))
    return best


def gold_answers(gold: Any) -> list[str]:
    """A row's answers as strings: one (str, int, float) or several (a list), as GEM's check_correct takes them."""
    if isinstance(gold, list | tuple):
        if not gold:
            raise ValueError("a QA row has an empty answer list; every question needs at least one answer")
        return [str(g) for g in gold]
    return [str(gold)]


def extract_answer(text: str, boxed: bool = False) -> str | None:
    if boxed:
        return last_boxed(text)
    found = _ANSWER.findall(text)
    return found[-1].strip() if found else None


class QAEnv(SingleTurnEnv):
    """Rows {"question", "answer" (str or list)} from `path`, or the shipped questions when None.

    `hops` filters the shipped/loaded rows that carry a "hops" field (1: one passage answers).
    """

    def __init__(
        self,
        path: str | None = None,
        question_key: str = "question",
        answer_key: str = "answer",
        extract_boxed: bool = False,
        hops: tuple[int, ...] | None = None,
        dataset: str | None = None,
        split: str | None = None,
        data_dir: str | None = None,
        index_seeds: bool = False,
        seed: int | None = None,
    ) -> None:
        rows = dataset_rows(
            path=path if path is not None or dataset is not None else SHIPPED,
            dataset=dataset,
            split=split,
            data_dir=data_dir,
            columns=[question_key, answer_key],
            what="this QA env",
        )
        if hops is not None:
            rows = [r for r in rows if r.get("hops") in hops]
            if not rows:
                raise ValueError(f"no rows with hops in {hops}")
        super().__init__(rows, seed=seed, index_seeds=index_seeds)
        self.question_key, self.answer_key = question_key, answer_key
        self.extract_boxed = extract_boxed

    def prompt(self, row: dict[str, Any]) -> str:
        return PROMPT.format(question=row[self.question_key])

    def grade(self, action: str, row: dict[str, Any]) -> tuple[float, dict[str, Any]]:
        golds = gold_answers(row[self.answer_key])
        pred = extract_answer(action, self.extract_boxed)
        if pred is None:
            reason = "no \\boxed{} answer" if self.extract_boxed else "no <answer> tag"
            return 0.0, {"correct": False, "f1": 0.0, "reason": reason, "answer": golds[0]}
        ok = exact_match(pred, golds)
        return float(ok), {"correct": ok, "f1": f1_score(pred, golds), "answer": golds[0]}

    def sample_random_action(self) -> str:
        return "<answer>Hello World!</answer>"


def search_env(topk: int = 3, max_tool_uses: int = 5, corpus: str | None = None, **kwargs: Any) -> Any:
    """QAEnv on the shipped questions with a SearchTool over the shipped corpus (or `corpus`)."""
    from jgem.envs.tools.search import BM25Index, SearchTool
    from jgem.envs.tools.tool_env import ToolEnv

    index = BM25Index.from_jsonl(corpus or CORPUS)
    return ToolEnv(QAEnv(**kwargs), [SearchTool(index, topk=topk)], max_tool_uses=max_tool_uses)
