"""Builds the shipped code problems (run once; the output is committed).

    python -m jgem.envs.data.make_code

Each problem has a reference solution; expected outputs are what the reference prints, so the
shipped tests are consistent by construction (a test runs every reference in the sandbox).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent

# (statement, reference solution, test inputs)
PROBLEMS = [
    (
        "Read two integers a and b on one line and print their sum.",
        "a, b = map(int, input().split())\nprint(a + b)",
        ["1 2", "-5 5", "1000000000 1000000000", "0 0"],
    ),
    (
        "Read an integer n and print n! (the factorial of n). 0 <= n <= 30.",
        "import math\nprint(math.factorial(int(input())))",
        ["0", "1", "5", "20", "30"],
    ),
    ("Read a line of text and print it reversed.", "print(input()[::-1])", ["hello", "racecar", "a b c", "12345"]),
    (
        "Read an integer n (1 <= n <= 10^6) and print YES if it is prime, otherwise NO.",
        "n = int(input())\nok = n > 1 and all(n % d for d in range(2, int(n**0.5) + 1))\nprint('YES' if ok else 'NO')",
        ["1", "2", "15", "97", "999983", "1000000"],
    ),
    (
        "Read n, then n integers on the next line. Print the maximum and the minimum, separated by a space.",
        "input()\nxs = list(map(int, input().split()))\nprint(max(xs), min(xs))",
        ["3\n1 2 3", "1\n-7", "5\n5 -1 9 0 9"],
    ),
    (
        "Read an integer n (0 <= n <= 90) and print the n-th Fibonacci number (F0 = 0, F1 = 1).",
        "n = int(input())\na, b = 0, 1\nfor _ in range(n):\n    a, b = b, a + b\nprint(a)",
        ["0", "1", "10", "50", "90"],
    ),
    (
        "Read a word and print YES if it is a palindrome (case-insensitive), otherwise NO.",
        "w = input().strip().lower()\nprint('YES' if w == w[::-1] else 'NO')",
        ["Level", "abc", "a", "Noon"],
    ),
    (
        "Read a line of words and print the number of vowels (a, e, i, o, u; any case) in it.",
        "print(sum(c in 'aeiou' for c in input().lower()))",
        ["hello world", "xyz", "AEIOU aeiou", "Programming in Python"],
    ),
    (
        "Read two positive integers a and b and print their greatest common divisor.",
        "import math\na, b = map(int, input().split())\nprint(math.gcd(a, b))",
        ["12 18", "7 13", "100 75", "1 1"],
    ),
    (
        "Read n, then n integers (one line). Print them sorted in ascending order, space-separated.",
        "input()\nprint(*sorted(map(int, input().split())))",
        ["4\n3 1 2 3", "1\n5", "6\n-1 -5 10 0 2 2"],
    ),
    (
        "Read a non-negative integer n and print it in binary without leading zeros.",
        "print(bin(int(input()))[2:])",
        ["0", "1", "10", "255", "1024"],
    ),
    (
        "Read a line of text and print the number of words in it (words are separated by spaces).",
        "print(len(input().split()))",
        ["one", "the quick brown fox", "  spaced   out  words "],
    ),
    (
        "Read an integer n and print the sum of its decimal digits (n may be negative).",
        "print(sum(int(c) for c in input().strip().lstrip('-')))",
        ["0", "12345", "-909", "1000000"],
    ),
    (
        "Read n, then n lines each with a name. Print the names that appear more than once, "
        "in order of first appearance, one per line; print NONE if there are none.",
        "n = int(input())\nnames = [input().strip() for _ in range(n)]\nseen, out = set(), []\n"
        "for x in names:\n    if names.count(x) > 1 and x not in seen:\n        seen.add(x)\n        out.append(x)\n"
        "print('\\n'.join(out) if out else 'NONE')",
        ["3\nann\nbob\nann", "2\nx\ny", "5\na\nb\nb\na\nc"],
    ),
    (
        "Read an integer n (1 <= n <= 20) and print an n-row right triangle of '*' (row i has i stars).",
        "n = int(input())\nfor i in range(1, n + 1):\n    print('*' * i)",
        ["1", "3", "5"],
    ),
    (
        "Read a string of brackets ()[]{} and print YES if it is balanced, otherwise NO.",
        "s = input().strip()\nst = []\npairs = {')': '(', ']': '[', '}': '{'}\nok = True\nfor c in s:\n"
        "    if c in '([{':\n        st.append(c)\n    elif not st or st.pop() != pairs[c]:\n        ok = False\n"
        "        break\nprint('YES' if ok and not st else 'NO')",
        ["()[]{}", "([)]", "((()))", "(", "{[()()]}"],
    ),
    (
        "Read n, then n integers. Print the length of the longest strictly increasing contiguous run.",
        "input()\nxs = list(map(int, input().split()))\nbest = cur = 1\nfor a, b in zip(xs, xs[1:]):\n"
        "    cur = cur + 1 if b > a else 1\n    best = max(best, cur)\nprint(best)",
        ["5\n1 2 3 2 5", "1\n7", "6\n5 4 3 2 1 0", "7\n1 2 3 4 5 6 7"],
    ),
    (
        "Read two integers n and k (0 <= k <= n <= 60) and print the binomial coefficient C(n, k).",
        "import math\nn, k = map(int, input().split())\nprint(math.comb(n, k))",
        ["5 2", "10 0", "60 30", "7 7"],
    ),
    (
        "Read a sentence and print it with the first letter of every word capitalised and the rest lower case.",
        "print(' '.join(w.capitalize() for w in input().split()))",
        ["hello world", "PYTHON is FUN", "a"],
    ),
    (
        "Read an integer n (1 <= n <= 10^5) and print the number of primes less than or equal to n.",
        "n = int(input())\ns = bytearray([1]) * (n + 1)\ns[0:2] = b'\\x00\\x00'[: min(2, n + 1)]\n"
        "for i in range(2, int(n**0.5) + 1):\n    if s[i]:\n        s[i * i :: i] = bytearray(len(s[i * i :: i]))\n"
        "print(sum(s))",
        ["1", "2", "10", "100", "100000"],
    ),
]


def run(code: str, stdin: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], input=stdin, capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        raise RuntimeError(f"reference failed on {stdin!r}: {out.stderr}")
    return out.stdout


def main() -> None:
    with open(HERE / "code_problems.jsonl", "w") as f:
        for i, (statement, ref, inputs) in enumerate(PROBLEMS):
            tests = {"inputs": [x + "\n" for x in inputs], "outputs": [run(ref, x + "\n") for x in inputs]}
            f.write(json.dumps({"id": i, "problem": statement, "tests": tests, "solution": ref}) + "\n")
    print(f"{len(PROBLEMS)} problems")


if __name__ == "__main__":
    main()
