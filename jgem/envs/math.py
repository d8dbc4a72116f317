"""Math suite: procedural generators (offline) and local-file datasets, graded by math-verify.

The agent answers in `\\boxed{}`; the last box is compared with the reference by math-verify
(symbolic equality: 0.75 == 3/4 == \\frac{6}{8}) within a time bound.
"""

from __future__ import annotations

import json
import logging
import select
import subprocess
import sys
import threading
from fractions import Fraction
from typing import Any

from jgem.envs.data.dataset import SingleTurnEnv, last_boxed
from jgem.envs.data.hub import dataset_rows

INSTRUCTION = "\nPlease reason step by step, and put your final answer within \\boxed{}."
KINDS = ("arithmetic", "linear", "fractions", "word")


class MathEnv(SingleTurnEnv):
    """Grading shared by generated and file-backed math problems. Rows: {"problem", "answer"}."""

    def __init__(
        self,
        rows: Any = None,
        seed: int | None = None,
        grade_timeout: float = 1.0,
        instruction: str = INSTRUCTION,
        index_seeds: bool = False,
    ) -> None:
        super().__init__(rows, seed=seed, index_seeds=index_seeds)
        if grade_timeout <= 0:
            raise ValueError(f"grade_timeout must be > 0 seconds, got {grade_timeout}")
        self.grade_timeout = grade_timeout
        self.instruction = instruction
        self.question_key, self.answer_key = "problem", "answer"

    def prompt(self, row: dict[str, Any]) -> str:
        return f"{row[self.question_key]}{self.instruction}"

    def grade(self, action: str, row: dict[str, Any]) -> tuple[float, dict[str, Any]]:
        pred = last_boxed(action)
        if pred is None:
            return 0.0, {"correct": False, "reason": "no \\boxed{} answer"}
        gold = row[self.answer_key]
        golds = [str(g) for g in gold] if isinstance(gold, list | tuple) else [str(gold)]
        correct, reason = grade_answer(pred, golds, timeout=self.grade_timeout)
        return float(correct), {"correct": correct, "reason": reason, "answer": golds[0]}

    def sample_random_action(self) -> str:
        return f"\\boxed{{{int(self.np_random.integers(-10, 100))}}}"


class MathFileEnv(MathEnv):
    """Problems from a local file (`path`), or from the local copy of GEM's Hugging Face `dataset` (its `split`)
    under `data_dir` / $JGEM_DATA (jgem.envs.data.hub says where it goes)."""

    def __init__(
        self,
        path: str | None = None,
        question_key: str = "problem",
        answer_key: str = "answer",
        dataset: str | None = None,
        split: str | None = None,
        data_dir: str | None = None,
        index_seeds: bool = False,
        seed: int | None = None,
        grade_timeout: float = 1.0,
        instruction: str = INSTRUCTION,
    ) -> None:
        rows = dataset_rows(
            path=path,
            dataset=dataset,
            split=split,
            data_dir=data_dir,
            columns=[question_key, answer_key],
            what="this math env",
        )
        super().__init__(rows, seed=seed, grade_timeout=grade_timeout, instruction=instruction, index_seeds=index_seeds)
        self.question_key, self.answer_key = question_key, answer_key


class MathGenEnv(MathEnv):
    """Procedural problems: `kind` in arithmetic, linear, fractions, word; `difficulty` 1..3 scales
    sizes; `num_terms` / `max_value` override the difficulty's defaults."""

    def __init__(
        self,
        kind: str = "arithmetic",
        difficulty: int = 1,
        num_terms: int | None = None,
        max_value: int | None = None,
        seed: int | None = None,
        grade_timeout: float = 1.0,
        instruction: str = INSTRUCTION,
    ) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown math kind {kind!r}; choose one of {', '.join(KINDS)}")
        if difficulty not in (1, 2, 3):
            raise ValueError(f"difficulty must be 1, 2 or 3, got {difficulty}")
        super().__init__(None, seed=seed, grade_timeout=grade_timeout, instruction=instruction)
        self.kind, self.difficulty = kind, difficulty
        self.num_terms = num_terms if num_terms is not None else 1 + difficulty
        self.max_value = max_value if max_value is not None else 10**difficulty
        if self.num_terms < 2 or self.max_value < 2:
            raise ValueError("num_terms and max_value must be >= 2")

    def _generate(self) -> dict[str, Any]:
        return _GENERATORS[self.kind](self)


# -- grading ---------------------------------------------------------------------------------------
# math-verify bounds its time with SIGALRM, which works only in the main thread. There we call it
# directly; from other threads (env pools) a grader process does the work and is killed on timeout.


_QUIET = logging.NullHandler()


def _quiet_math_verify() -> None:
    """math-verify logs the whole input on a parse timeout (a 1 MB action goes to the console): keep a grader's
    logging out of the console and the caller's logs. Set on every call: logging config elsewhere may reset it."""
    log = logging.getLogger("math_verify")
    if _QUIET not in log.handlers:
        log.addHandler(_QUIET)
    log.propagate = False


def _verify(pred: str, golds: list[str], timeout: int | None) -> bool:
    from math_verify import parse, verify

    _quiet_math_verify()

    target = parse(f"\\boxed{{{pred}}}", parsing_timeout=timeout)
    if not target:
        return False
    for gold in golds:
        ref = parse(f"\\boxed{{{gold}}}", parsing_timeout=timeout)
        if ref and verify(ref, target, timeout_seconds=timeout):
            return True
    return False


def grader_loop() -> None:
    """The grader process: JSON lines [pred, golds] on stdin -> "1"/"0" lines on stdout."""
    import math_verify  # noqa: F401  (import once, before saying ready)

    print("ready", flush=True)
    for line in sys.stdin:
        pred, golds = json.loads(line)
        try:
            ok = _verify(pred, golds, None)
        except Exception:
            ok = False
        print("1" if ok else "0", flush=True)


class _GraderProcess:
    # A plain subprocess, not multiprocessing: spawn would re-import the user's __main__ and fork
    # is unsafe in a host that runs JAX threads.
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from jgem.envs.math import grader_loop; grader_loop()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,  # a grader's warnings (with the whole action in them) stay off the console
            text=True,
        )
        if self._readline(60) != "ready":
            self.kill()
            raise RuntimeError(
                "the math grader process did not start (is math-verify installed? pip install math-verify)"
            )

    def _readline(self, timeout: float) -> str | None:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            return None
        line = self.proc.stdout.readline()
        return line.strip() if line else None

    def grade(self, pred: str, golds: list[str], timeout: float) -> bool | None:
        try:
            self.proc.stdin.write(json.dumps([pred, golds]) + "\n")
            self.proc.stdin.flush()
        except OSError:
            return None
        line = self._readline(timeout)
        return None if line is None else line == "1"

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


_grader: _GraderProcess | None = None
_grader_lock = threading.Lock()


def _normal(s: str) -> str:
    return s.strip().strip("$").replace(" ", "").rstrip(".")


def grade_answer(pred: str, golds: list[str], timeout: float = 1.0) -> tuple[bool, str]:
    """(correct, how it was decided). Equal strings pass at once; otherwise math-verify, time-bounded."""
    if any(_normal(pred) == _normal(g) for g in golds):
        return True, "exact"
    if threading.current_thread() is threading.main_thread():
        try:
            return _verify(pred, golds, max(1, round(timeout))), "math-verify"
        except TimeoutError:
            return False, "grading timed out"
    global _grader
    with _grader_lock:  # one grader process per host process; calls queue up behind each other
        if _grader is None:
            _grader = _GraderProcess()
        result = _grader.grade(pred, golds, timeout)
        if result is None:
            _grader.kill()
            _grader = None
            return False, "grading timed out"
    return bool(result), "math-verify"


def _int(env: MathGenEnv, lo: int = 1) -> int:
    return int(env.np_random.integers(lo, env.max_value + 1))


def _arithmetic(env: MathGenEnv) -> dict[str, Any]:
    rng = env.np_random
    expr = str(_int(env))
    for _ in range(env.num_terms - 1):
        op = str(rng.choice(["+", "-", "*"] if env.difficulty > 1 else ["+", "-"]))
        term = str(_int(env))
        if env.difficulty == 3 and rng.random() < 0.4:
            expr = f"({expr})"
        expr = f"{expr} {op} {term}"
    value = eval(expr, {"__builtins__": {}})  # our own expression of integers and + - * ( )
    return {"problem": f"Compute {expr}.", "answer": str(value)}


def _linear(env: MathGenEnv) -> dict[str, Any]:
    rng = env.np_random
    x = int(rng.integers(-env.max_value, env.max_value + 1))
    a = int(rng.integers(2, 3 + 3 * env.difficulty))
    b = int(rng.integers(-env.max_value, env.max_value + 1))
    c = 0 if env.difficulty == 1 else int(rng.integers(1, a))  # x on both sides from difficulty 2
    d = a * x + b - c * x
    lhs = f"{a}x {'+' if b >= 0 else '-'} {abs(b)}"
    rhs = f"{c}x {'+' if d >= 0 else '-'} {abs(d)}" if c else str(d)
    return {"problem": f"Solve for x: {lhs} = {rhs}.", "answer": str(x)}


def _fractions(env: MathGenEnv) -> dict[str, Any]:
    rng = env.np_random
    den_max = max(3, min(env.max_value, 4 * 3**env.difficulty))
    total = Fraction(0)
    parts = []
    for i in range(env.num_terms):
        f = Fraction(int(rng.integers(1, den_max)), int(rng.integers(2, den_max + 1)))
        sign = 1 if i == 0 or rng.random() < 0.6 else -1
        total += sign * f
        parts.append(("" if i == 0 else (" + " if sign > 0 else " - ")) + f"{f.numerator}/{f.denominator}")
    answer = str(total.numerator) if total.denominator == 1 else f"{total.numerator}/{total.denominator}"
    return {"problem": f"Compute {''.join(parts)} and simplify the result as a fraction.", "answer": answer}


_NAMES = ("Ana", "Ben", "Chen", "Dara", "Eli", "Fatima", "Goran", "Hana")
_WORD = (
    (
        "{n} has {a} apples and buys {b} bags with {c} apples in each. How many apples does {n} have now?",
        lambda a, b, c: a + b * c,
    ),
    (
        "A train travels {a} km every hour for {b} hours, then {c} km more. How far does it travel in total?",
        lambda a, b, c: a * b + c,
    ),
    (
        "{n} had {a} stickers, gave away {c}, then received {b} more. How many stickers does {n} have?",
        lambda a, b, c: a - c + b,
    ),
    (
        "A box holds {c} pencils. {n} fills {b} boxes and has {a} pencils left over. How many pencils were there?",
        lambda a, b, c: b * c + a,
    ),
    (
        "{n} saves {c} dollars a week for {b} weeks and already had {a} dollars. How much does {n} have?",
        lambda a, b, c: a + b * c,
    ),
)


def _word(env: MathGenEnv) -> dict[str, Any]:
    rng = env.np_random
    template, fn = _WORD[int(rng.integers(len(_WORD)))]
    a, b = _int(env), int(rng.integers(2, 2 + 4 * env.difficulty))
    c = int(rng.integers(1, a + 1))  # keeps "gave away c of a" non-negative
    n = _NAMES[int(rng.integers(len(_NAMES)))]
    return {"problem": template.format(n=n, a=a, b=b, c=c), "answer": str(fn(a, b, c))}


_GENERATORS = {"arithmetic": _arithmetic, "linear": _linear, "fractions": _fractions, "word": _word}
