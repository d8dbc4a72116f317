"""Code suite: problems with stdin/stdout tests; the last fenced code block runs in the sandbox.

Reward (GEM's CodeEnv): 1 if every test's stdout matches (after stripping), 0 otherwise, -0.1 when
the answer has no code block. Tests run one by one and stop at the first failure.
"""

from __future__ import annotations

import json
import re
from typing import Any

from jgem.envs.data.dataset import DATA_DIR, SingleTurnEnv
from jgem.envs.data.hub import dataset_rows
from jgem.envs.tools.sandbox import Sandbox, SandboxConfig, local, shared_sandbox

SHIPPED = DATA_DIR / "code_problems.jsonl"
INSTRUCTION = (
    "\n\nWrite a complete Python 3 program that reads the input from stdin and prints the answer to stdout. "
    "Put the program in a ```python ... ``` code block."
)
NO_CODE_REWARD = -0.1
_CODE = re.compile(r"```(?:\w+)?\n(.*?)```", re.DOTALL)


def extract_code(text: str) -> str | None:
    """The last fenced code block (GEM's extract_code_from_model), or None."""
    blocks = _CODE.findall(text)
    return blocks[-1].strip() if blocks else None


def normalize_tests(tests: Any, max_tests: int) -> list[tuple[str, str]]:
    """(stdin, expected stdout) pairs from {"inputs": [...], "outputs": [...]} or [{"input", "output"}]
    (a JSON string of either works too); the `max_tests` with the longest inputs are kept, as GEM does."""
    if isinstance(tests, str):
        tests = json.loads(tests)
    if isinstance(tests, dict):
        pairs = list(zip(tests["inputs"], tests["outputs"], strict=True))
    elif isinstance(tests, list):
        pairs = [(t["input"], t["output"]) for t in tests]
    else:
        raise ValueError(f"tests must be a dict of inputs/outputs or a list of {{input, output}}, got {type(tests)}")

    def text(x: Any) -> str:
        return "\n".join(map(str, x)) if isinstance(x, list) else str(x)

    pairs = [(text(i), text(o)) for i, o in pairs]
    if len(pairs) > max_tests:
        pairs = sorted(pairs, key=lambda p: len(p[0]), reverse=True)[:max_tests]
    return pairs


class CodeEnv(SingleTurnEnv):
    """Rows {"problem", "tests"} from `path` (JSONL/Parquet), from the local copy of GEM's Hugging Face `dataset`
    (its `split`) under `data_dir` / $JGEM_DATA, or the shipped set when neither is named."""

    def __init__(
        self,
        path: str | None = None,
        question_key: str = "problem",
        test_key: str = "tests",
        max_tests: int = 12,
        timeout: float = 5.0,
        memory_mb: int = 512,
        dataset: str | None = None,
        split: str | None = None,
        data_dir: str | None = None,
        index_seeds: bool = False,
        seed: int | None = None,
        sandbox: Sandbox | None = None,
    ) -> None:
        rows = dataset_rows(
            path=path if path is not None or dataset is not None else SHIPPED,
            dataset=dataset,
            split=split,
            data_dir=data_dir,
            columns=[question_key, test_key],
            what="this code env",
        )
        super().__init__(rows, seed=seed, index_seeds=index_seeds)
        self.question_key, self.test_key = question_key, test_key
        self.max_tests = max_tests
        self.timeout = timeout
        self.config = SandboxConfig(timeout=timeout, memory_mb=memory_mb)
        self._sandbox = sandbox

    @property
    def sandbox(self) -> Sandbox:
        return local(self._sandbox) if self._sandbox is not None else shared_sandbox(self.config)

    def prompt(self, row: dict[str, Any]) -> str:
        return f"{row[self.question_key]}{INSTRUCTION}"

    def grade(self, action: str, row: dict[str, Any]) -> tuple[float, dict[str, Any]]:
        code = extract_code(action)
        if code is None:
            return NO_CODE_REWARD, {"correct": False, "reason": "no code block"}
        tests = normalize_tests(row[self.test_key], self.max_tests)
        for n, (stdin, expected) in enumerate(tests):
            res = self.sandbox.run(code, stdin=stdin, timeout=self.timeout)
            if not res.ok or res.stdout.strip() != expected.strip():
                reason = f"test {n} failed: {res.status}" if not res.ok else f"test {n} failed: wrong output"
                return 0.0, {"correct": False, "passed": n, "total": len(tests), "reason": reason}
        return 1.0, {"correct": True, "passed": len(tests), "total": len(tests)}

    def sample_random_action(self) -> str:
        return "```python\nprint(input())\n```"
