"""Builds the tiny samples of GEM's evaluation datasets (run once; the output is committed).

    python -m jgem.envs.data.make_eval_samples

`eval_samples/` is laid out as a data dir (`$JGEM_DATA`, docs/environments.md): one folder per Hugging Face
dataset, each as a copy of the dataset's repository would be (`data/<split>-00000-of-00001.jsonl`; nq_open's
repository keeps its files under `nq_open/` and names them in its README's `configs`), with GEM's columns. The
rows are a few real questions per split with their answers, written for jgem: `python -m experiments.eval RUN
--suite math --data-dir jgem/envs/data/eval_samples` runs end to end on them. The code problems' reference
solutions are here (`CODE_SOLUTIONS`), not in the data, so a test can run them against the shipped tests.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

OUT = Path(__file__).parent / "eval_samples"

MATH = {  # axon-rl/math-eval: split -> (problem, answer)
    "math": [
        ("What is the value of $\\sqrt{36} + 2^3$?", "14"),
        ("Simplify $\\frac{18}{24}$.", "\\frac{3}{4}"),
        ("Find the positive solution of $x^2 = 49$.", "7"),
    ],
    "amc": [
        ("What is the sum of the interior angles of a hexagon, in degrees?", "720"),
        ("How many positive divisors does $36$ have?", "9"),
        ("What is the remainder when $2^{10}$ is divided by $7$?", "2"),
    ],
    "olympiad_bench": [
        ("Compute $\\binom{6}{2}$.", "15"),
        ("Let $f(x) = 3x + 1$. Compute $f(f(2))$.", "22"),
        ("Find the least positive integer $n$ with $n \\equiv 2 \\pmod 3$ and $n \\equiv 3 \\pmod 5$.", "8"),
    ],
    "minerva": [
        ("A car travels $150$ km in $2.5$ hours. What is its average speed in km/h?", "60"),
        ("What is $\\log_{10} 1000$?", "3"),
        ("Compute $0.5 \\times 0.4$.", "0.2"),
    ],
    "aime24": [
        ("Find the number of ordered pairs of positive integers $(a, b)$ with $a + b = 10$.", "9"),
        ("Find the remainder when $3^6$ is divided by $1000$.", "729"),
        ("Find the sum of the first $20$ positive odd integers.", "400"),
    ],
}

# axon-rl/CodeContest, split test: problem, tests {"inputs": [...], "outputs": [...]} (stdin -> stdout)
CODE = [
    (
        "Two integers a and b are given on one line. Print a + b.",
        "a, b = map(int, input().split())\nprint(a + b)",
        ["1 2\n", "-7 7\n", "1000000000 1000000000\n"],
    ),
    (
        "The first line holds n, the second n integers. Print the largest of them.",
        "input()\nprint(max(map(int, input().split())))",
        ["3\n1 5 2\n", "1\n-4\n", "5\n-1 -2 -3 -4 -5\n"],
    ),
    (
        "A line of lowercase letters is given. Print how many of them are vowels (a, e, i, o, u).",
        "print(sum(c in 'aeiou' for c in input()))",
        ["hello\n", "rhythm\n", "aeiouaeiou\n"],
    ),
]
CODE_OUTPUTS = [["3", "0", "2000000000"], ["5", "-4", "-1"], ["2", "0", "10"]]
CODE_SOLUTIONS = [solution for _, solution, _ in CODE]

NQ_OPEN = [  # google-research-datasets/nq_open, split validation: question, answer (a list)
    ("who wrote the novel pride and prejudice", ["Jane Austen"]),
    ("what is the capital city of australia", ["Canberra"]),
    ("how many players does a soccer team have on the field", ["11", "eleven"]),
]

SEARCH = {  # axon-rl/search-eval: split -> (question, answer list)
    "nq": [
        ("who painted the mona lisa", ["Leonardo da Vinci"]),
        ("what is the largest planet in the solar system", ["Jupiter"]),
    ],
    "tq": [
        ("Which chemical element has the symbol Fe?", ["Iron"]),
        ("In which country is the city of Timbuktu?", ["Mali"]),
    ],
    "popqa": [
        ("In what country is Kyoto?", ["Japan"]),
        ("What is Ludwig van Beethoven's occupation?", ["composer", "pianist"]),
    ],
    "hotpotqa": [
        ("The Eiffel Tower stands in the capital of which country?", ["France"]),
        ("Who was born first, Isaac Newton or Albert Einstein?", ["Isaac Newton"]),
    ],
    "2wiki": [
        ("In which country was the author of Don Quixote born?", ["Spain"]),
        ("Are Lyon and Marseille in the same country?", ["yes"]),
    ],
    "musique": [
        ("What is the currency of the country where the Taj Mahal is?", ["Indian rupee", "rupee"]),
        ("Which ocean lies on the west coast of the country whose capital is Lisbon?", ["Atlantic Ocean", "Atlantic"]),
    ],
    "bamboogle": [
        ("Who was president of the United States when the first iPhone was released?", ["George W. Bush"]),
        ("What is the capital of the country that hosted the 2016 Summer Olympics?", ["Brasília", "Brasilia"]),
    ],
}

NQ_OPEN_README = """---
configs:
- config_name: nq_open
  data_files:
  - split: validation
    path: nq_open/validation-*
---
A tiny sample in the layout of google-research-datasets/nq_open, written for jgem's tests.
"""


def _write(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def build(out: Path = OUT) -> None:
    if out.exists():
        shutil.rmtree(out)
    for split, rows in MATH.items():
        _write(
            out / f"axon-rl/math-eval/data/{split}-00000-of-00001.jsonl", [{"problem": p, "answer": a} for p, a in rows]
        )
    code = [
        {"problem": p, "tests": {"inputs": inputs, "outputs": outputs}}
        for (p, _, inputs), outputs in zip(CODE, CODE_OUTPUTS, strict=True)
    ]
    _write(out / "axon-rl/CodeContest/data/test-00000-of-00001.jsonl", code)
    _write(
        out / "google-research-datasets/nq_open/nq_open/validation-00000-of-00001.jsonl",
        [{"question": q, "answer": a} for q, a in NQ_OPEN],
    )
    (out / "google-research-datasets/nq_open/README.md").write_text(NQ_OPEN_README)
    for split, rows in SEARCH.items():
        _write(
            out / f"axon-rl/search-eval/data/{split}-00000-of-00001.jsonl",
            [{"question": q, "answer": a} for q, a in rows],
        )


if __name__ == "__main__":
    build()
    print(f"wrote {sum(1 for f in OUT.rglob('*') if f.is_file())} files under {OUT}")
