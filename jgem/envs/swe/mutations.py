"""Bug injection for repository tasks, as SWE-smith's procedural modifications do it: one small edit of a library
function's source (a comparison flipped, `and` for `or`, `+` for `-`, an integer one off, an `if` inverted). Each
`Mutation` is a byte span of one file and its replacement, found from the file's syntax tree, so applying it
changes those bytes alone (the rest of the file, its formatting and comments, stay as they are) and its reverse is
the reference fix.

Only code inside functions is mutated (a library's behaviour, not its imports or constants), never a docstring.
"""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import asdict, dataclass
from pathlib import Path

# each comparison's counterpart, and how its token reads in the source (the lookarounds keep `<` from matching `<=`)
_COMPARE = {
    ast.Lt: (rb"(?<![<>=!])<(?![<=])", b"<="),
    ast.LtE: (rb"<=", b"<"),
    ast.Gt: (rb"(?<![<>=\-])>(?![>=])", b">="),
    ast.GtE: (rb">=", b">"),
    ast.Eq: (rb"==", b"!="),
    ast.NotEq: (rb"!=", b"=="),
    ast.In: (rb"(?<!not )\bin\b", b"not in"),
    ast.NotIn: (rb"\bnot\s+in\b", b"in"),
    ast.Is: (rb"\bis\b(?!\s+not\b)", b"is not"),
    ast.IsNot: (rb"\bis\s+not\b", b"is"),
}
_BINOP = {ast.Add: (rb"(?<![+=])\+(?![+=])", b"-"), ast.Sub: (rb"(?<![\-=])-(?![\-=>])", b"+")}
_BOOLOP = {ast.And: (rb"\band\b", b"or"), ast.Or: (rb"\bor\b", b"and")}
KINDS = ("flip_compare", "swap_arith", "swap_bool", "off_by_one", "invert_if")


@dataclass(frozen=True)
class Mutation:
    """Replace bytes [start, end) of `file` (a path relative to the repository), which read `old`, with `new`."""

    file: str
    start: int
    end: int
    old: str
    new: str
    kind: str
    line: int
    function: str

    @property
    def id(self) -> str:
        """A stable name: the kind and a digest of where and what."""
        key = f"{self.file}:{self.start}:{self.end}:{self.new}".encode()
        return f"{self.kind}-{hashlib.sha1(key).hexdigest()[:8]}"

    def apply(self, text: bytes) -> bytes:
        """`text` (the file's bytes) with the mutation; a file that does not read `old` there is refused."""
        if text[self.start : self.end] != self.old.encode():
            raise ValueError(
                f"{self.file} does not read {self.old!r} at bytes {self.start}..{self.end} (line {self.line}): "
                "the package is not the version the mutation was found in"
            )
        return text[: self.start] + self.new.encode() + text[self.end :]

    def as_dict(self) -> dict:
        return {"id": self.id, **asdict(self)}

    @classmethod
    def from_dict(cls, d: dict) -> Mutation:
        return cls(**{k: d[k] for k in ("file", "start", "end", "old", "new", "kind", "line", "function")})


def find_mutations(root: Path, rel: str) -> list[Mutation]:
    """Every mutation of the functions in file `rel` under `root`, in source order."""
    src = (root / rel).read_bytes()
    tree = ast.parse(src)
    starts = [0]
    for line in src.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))

    def at(line: int, col: int) -> int:  # ast's columns are UTF-8 byte offsets
        return starts[line - 1] + col

    def begin(node: ast.AST) -> int:
        return at(node.lineno, node.col_offset)

    def finish(node: ast.AST) -> int:
        return at(node.end_lineno, node.end_col_offset)

    found: list[Mutation] = []

    def add(start: int, end: int, new: bytes, kind: str, node: ast.AST, function: str) -> None:
        old = src[start:end].decode("utf-8")
        found.append(Mutation(rel, start, end, old, new.decode("utf-8"), kind, node.lineno, function))

    def between(left: ast.AST, right: ast.AST, pattern: bytes, new: bytes, kind: str, node, function) -> None:
        """The operator between `left` and `right` (matched once by `pattern` in the gap) replaced by `new`."""
        lo, hi = finish(left), begin(right)
        gap = src[lo:hi]
        if b"#" in gap:  # a comment between the operands: leave it
            return
        hits = list(re.finditer(pattern, gap))
        if len(hits) == 1:
            add(lo + hits[0].start(), lo + hits[0].end(), new, kind, node, function)

    def small_ints(node: ast.AST) -> list[ast.Constant]:
        """The operands of a comparison, an arithmetic operation or an index that are small integer literals."""
        if isinstance(node, ast.Compare):
            parts = [node.left, *node.comparators]
        elif isinstance(node, ast.BinOp):
            parts = [node.left, node.right]
        elif isinstance(node, ast.Subscript):
            s = node.slice
            parts = [s.lower, s.upper, s.step] if isinstance(s, ast.Slice) else [s]
        else:
            return []
        return [
            p
            for p in parts
            if isinstance(p, ast.Constant)
            and type(p.value) is int
            and 0 <= p.value <= 8
            and src[begin(p) : finish(p)].isdigit()
        ]

    def visit(node: ast.AST, qual: str, in_function: bool) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            name = f"{qual}.{node.name}" if qual else node.name
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                body = body[1:]  # the docstring
            for child in body:
                visit(child, name, not isinstance(node, ast.ClassDef))
            return
        if in_function:
            if isinstance(node, ast.Compare):
                left = node.left
                for op, right in zip(node.ops, node.comparators, strict=True):
                    if type(op) in _COMPARE:
                        pattern, new = _COMPARE[type(op)]
                        between(left, right, pattern, new, "flip_compare", node, qual)
                    left = right
            elif isinstance(node, ast.BinOp) and type(node.op) in _BINOP:
                pattern, new = _BINOP[type(node.op)]
                between(node.left, node.right, pattern, new, "swap_arith", node, qual)
            elif isinstance(node, ast.BoolOp) and type(node.op) in _BOOLOP:
                pattern, new = _BOOLOP[type(node.op)]
                between(node.values[0], node.values[1], pattern, new, "swap_bool", node, qual)
            elif isinstance(node, ast.If):
                test = node.test
                if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):  # `if not x` -> `if x`
                    inverted = src[begin(test.operand) : finish(test.operand)]
                else:
                    inverted = b"not (" + src[begin(test) : finish(test)] + b")"
                add(begin(test), finish(test), inverted, "invert_if", node, qual)
            for p in small_ints(node):
                add(begin(p), finish(p), str(p.value + 1).encode(), "off_by_one", p, qual)
        for child in ast.iter_child_nodes(node):
            visit(child, qual, in_function)

    for top in tree.body:
        visit(top, "", False)
    return sorted(set(found), key=lambda m: (m.start, m.end, m.new))
