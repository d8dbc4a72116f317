"""What the single-turn task suites share: reading local JSONL/Parquet rows and serving them as an env.

A suite env shows one problem at reset and grades one answer at step (GEM's contextual bandits);
tools (ToolEnv) make them multi-turn. Rows are shared, never copied, between env clones.
"""

from __future__ import annotations

import abc
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jgem.core import Env, JgemError, StepResult

TERMINAL_STATE = "<｜TERMINAL_STATE｜>"  # GEM's observation after a single-turn episode ends
DATA_DIR = Path(__file__).resolve().parent


def last_boxed(text: str) -> str | None:
    """Content of the last balanced `\\boxed{...}` in `text`, or None (linear time, any input)."""
    idx = text.rfind("\\boxed{")
    if idx < 0:
        return None
    start = idx + len("\\boxed{")
    depth = 1
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start:i]
    return None


def _need(suite: str, columns: Sequence[str], hint: str = "") -> str:
    cols = ", ".join(repr(c) for c in columns)
    return f"{suite} needs a local JSONL or Parquet file with columns {cols}: pass path='...'{hint}"


def read_file(p: Path) -> list[dict]:
    """The rows of one `.parquet`, `.json` (a list) or `.jsonl` file."""
    if p.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(p).to_pylist()
    if p.suffix == ".json":
        return json.loads(p.read_text())
    with open(p) as f:
        return [json.loads(line) for line in f if line.strip()]


def load_rows(path: str | os.PathLike | None, columns: Sequence[str], suite: str, hint: str = "") -> list[dict]:
    """Rows of a local `.jsonl`/`.json`/`.parquet` file; each must have `columns`.

    Errors name the suite, the file and the columns needed, so a user knows what to pass.
    """
    if path is None:
        raise ValueError(_need(suite, columns, hint))
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p} does not exist; " + _need(suite, columns, hint))
    if p.suffix not in (".parquet", ".json", ".jsonl"):
        raise ValueError(f"{p}: unknown file type {p.suffix!r}; " + _need(suite, columns, hint))
    rows = read_file(p)
    if not rows:
        raise ValueError(f"{p} has no rows; " + _need(suite, columns, hint))
    missing = [c for c in columns if c not in rows[0]]
    if missing:
        raise ValueError(
            f"{p} lacks column(s) {missing} (it has {sorted(rows[0])}); "
            + _need(suite, columns, hint)
            + " or name your columns with question_key=/answer_key="
        )
    return rows


class Rows:
    """An immutable list of rows; deep copies share it (a 57k-row dataset is not cloned per env)."""

    def __init__(self, rows: Sequence[dict]) -> None:
        self._rows = tuple(rows)

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, i: int) -> dict:
        return self._rows[i]

    def __deepcopy__(self, memo: dict) -> Rows:
        return self


class SingleTurnEnv(Env):
    """reset -> a problem (from `rows`, or `_generate` when there are none); step -> graded, episode over.

    Without a seed, reset walks a fresh permutation of the rows per epoch; with one, it picks a row
    from the reseeded generator, so `reset(seed)` is reproducible. With `index_seeds`, `reset(seed)` serves
    row `seed % len(rows)` instead: seeds 0..n-1 visit every row once (evaluation: GEM's eval ids).
    The step's info has `correct` and `success` (the same: the answer was right).
    """

    def __init__(self, rows: Sequence[dict] | None = None, seed: int | None = None, index_seeds: bool = False) -> None:
        super().__init__(seed=seed)
        self.rows = None if rows is None else (rows if isinstance(rows, Rows) else Rows(rows))
        if index_seeds and self.rows is None:
            raise ValueError(f"index_seeds needs rows to index; {type(self).__name__} generates its problems")
        self.index_seeds = index_seeds
        self._order: list[int] = []
        self.row: dict[str, Any] | None = None
        self.done = True

    def _generate(self) -> dict[str, Any]:
        raise NotImplementedError(f"{type(self).__name__} has no rows and no generator")

    def _next_row(self, seed: int | None) -> dict[str, Any]:
        if self.rows is None:
            return self._generate()
        if seed is not None:
            i = seed % len(self.rows) if self.index_seeds else int(self.np_random.integers(len(self.rows)))
            return self.rows[i]
        if not self._order:
            self._order = self.np_random.permutation(len(self.rows)).tolist()
        return self.rows[self._order.pop()]

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed)
        self.row = self._next_row(seed)
        self.done = False
        return self.prompt(self.row), {}

    def step(self, action: str) -> StepResult:
        if self.done:
            raise JgemError(f"{self!r}: the episode is over (single turn); call reset() first")
        self.done = True
        reward, info = self.grade(action, self.row)
        info.setdefault("correct", reward >= 1.0)
        info["success"] = bool(info["correct"])
        return TERMINAL_STATE, float(reward), True, False, info

    @abc.abstractmethod
    def prompt(self, row: dict[str, Any]) -> str:
        """The first observation for a row."""

    @abc.abstractmethod
    def grade(self, action: str, row: dict[str, Any]) -> tuple[float, dict[str, Any]]:
        """(reward, info) for the agent's answer."""
