"""Names that say one thing: no two classes in jgem/ share a name (a reader, a grep or a traceback that names a
class finds one)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

JGEM = Path(__file__).resolve().parents[1] / "jgem"


def class_names(root: Path) -> dict[str, list[str]]:
    """Every class defined under `root` (top-level and nested) -> where: ["path:line", ...]."""
    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ClassDef):
                where[node.name].append(f"{path.relative_to(root.parent)}:{node.lineno}")
    return where


def test_no_two_classes_in_jgem_share_a_name() -> None:
    where = class_names(JGEM)
    assert {"EnvPool", "EnvResults", "StepInputs", "Publisher"} <= where.keys()  # the walk sees the package
    shared = {name: places for name, places in where.items() if len(places) > 1}
    assert not shared, f"classes sharing a name (give each a name that says what it is): {shared}"


def test_class_names_finds_nested_and_repeated_classes(tmp_path: Path) -> None:
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "a.py").write_text("class A:\n    class Inner:\n        pass\n")
    (tmp_path / "pkg" / "sub" / "b.py").write_text("def f():\n    class A:\n        pass\n")
    where = class_names(tmp_path / "pkg")
    assert where == {"A": ["pkg/a.py:1", "pkg/sub/b.py:2"], "Inner": ["pkg/a.py:2"]}
