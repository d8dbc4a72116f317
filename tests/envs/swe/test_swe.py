"""Repository tasks (jgem.envs.swe): bugs injected into a package's source and kept where its own tests catch them,
a task list that rebuilds the same tasks, and the `swe:` env that grades a fix as SWE-bench does. The package here
is a small one the test writes as a source distribution (the shipped list's packages come from the registry, which
the suite does not reach)."""

from __future__ import annotations

import ast
import io
import json
import tarfile
from pathlib import Path

import pytest

from jgem.envs.swe import build
from jgem.envs.swe.mutations import KINDS, Mutation, find_mutations

pytestmark = pytest.mark.xdist_group("terminal")  # the sandbox's shell workers, shared with the terminal env's tests

SOURCE = '''"""A small library."""


def clamp(x, lo, hi):
    """Clamp x into [lo, hi]."""
    if x < lo:
        return lo
    if x > hi:
        return hi
    return x


def mean(xs):
    if not xs:
        raise ValueError("mean of nothing")
    return sum(xs) / len(xs)


def window(xs, n):
    return [xs[i : i + n] for i in range(len(xs) - n + 1)]


def both(a, b):
    return bool(a) and bool(b)


def shift(x):
    return x + 1
'''

TESTS = """import pytest

from minilib import both, clamp, mean, shift, window


def test_clamp_low():
    assert clamp(-5, 0, 10) == 0


def test_clamp_high():
    assert clamp(50, 0, 10) == 10


def test_clamp_inside():
    assert clamp(3, 0, 10) == 3


def test_mean():
    assert mean([1, 2, 3]) == 2


def test_mean_empty():
    with pytest.raises(ValueError):
        mean([])


def test_window():
    assert window([1, 2, 3, 4], 2) == [[1, 2], [2, 3], [3, 4]]


def test_both():
    assert both(1, 1) and not both(1, 0) and not both(0, 1)


def test_shift():
    assert shift(1) == 2


def test_unrelated():
    assert 1 + 1 == 2
"""


def _sdist(tmp_path: Path) -> Path:
    path = tmp_path / "minilib-0.1.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, text in (("minilib/__init__.py", SOURCE), ("tests/test_minilib.py", TESTS), ("PKG-INFO", "")):
            data = text.encode()
            info = tarfile.TarInfo(f"minilib-0.1/{name}")
            info.size, info.mtime = len(data), 0
            tar.addfile(info, io.BytesIO(data))
    return path


def test_mutations_edit_one_span_of_function_code_and_keep_the_rest(tmp_path):
    """Every kind is found in the library's functions (not in its docstrings); each mutated file parses, differs
    from the original only in the mutation's span, and the mutation's id is stable."""
    (tmp_path / "m.py").write_text(SOURCE)
    found = find_mutations(tmp_path, "m.py")
    assert {m.kind for m in found} == set(KINDS)
    original = SOURCE.encode()
    for m in found:
        mutated = m.apply(original)
        ast.parse(mutated)
        assert mutated[: m.start] == original[: m.start] and mutated.endswith(original[m.end :])
        assert "Clamp" not in m.old and m.function in {"clamp", "mean", "window", "both", "shift"}
        assert Mutation.from_dict(json.loads(json.dumps(m.as_dict()))).id == m.id
    with pytest.raises(ValueError, match="not the version"):
        found[0].apply(b"x" + original)


@pytest.fixture(scope="module")
def searched(tmp_path_factory) -> tuple[Path, Path, build.Package, list[dict]]:
    """A search over the package's mutations (seeded: the first three tried), built under DIR/data."""
    tmp = tmp_path_factory.mktemp("swe")
    sdist = _sdist(tmp)
    pkg = build.Package("minilib", "0.1", tests=["tests"], source=["minilib"])
    found = build.search(pkg, tmp / "data", per_package=2, budget=3, max_fail_frac=0.5, sdist=sdist, log=lambda _: 0)
    return tmp, sdist, pkg, found


def test_search_keeps_bugs_the_tests_catch_and_the_list_rebuilds_them(searched):
    """Search tries mutations in a seeded order and keeps those that fail some (not most) of the passing tests, one
    per function; the list it writes builds the same tasks again, each with fail-to-pass tests that fail with the bug
    and passed without it (the baseline); a sdist that is not the listed one is refused."""
    tmp, sdist, pkg, found = searched
    assert len(found) == 2 and len({t["mutation"]["function"] for t in found}) == 2
    for t in found:
        assert t["FAIL_TO_PASS"] and "tests/test_minilib.py::test_unrelated" in t["PASS_TO_PASS"]
        assert not set(t["FAIL_TO_PASS"]) & set(t["PASS_TO_PASS"])
        assert t["mutation"]["old"] in t["fix"] and "minilib/__init__.py" in t["patch"]
    again = build.build([build.Package(**pkg.as_dict())], tmp / "again", sdists={"minilib": sdist}, log=lambda _: 0)
    assert again == found
    bad = build.Package(**{**pkg.as_dict(), "sha256": "0" * 64})
    with pytest.raises(RuntimeError, match="pins minilib-0.1"):
        build.build([bad], tmp / "bad", sdists={"minilib": sdist})


def _call(name: str, **arguments) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def test_the_env_grades_a_fix_made_with_its_tools_as_swe_bench_does(searched):
    """view, search, str_replace and run_tests act in the sandbox's copy of the repository; a fix resolves the
    task (reward 1: every fail-to-pass and pass-to-pass test passes), submitting the bug as it is does not, and
    deleting the failing tests does not either (the test files are put back before grading)."""
    from jgem.envs.swe.env import SWEEnv

    tmp, _, _, found = searched
    task = found[0]
    m = Mutation.from_dict(task["mutation"])
    pristine = (tmp / "data" / task["repo"] / m.file).read_text()
    line = pristine.splitlines()[m.line - 1]
    buggy = m.apply(pristine.encode()).decode().splitlines()[m.line - 1]
    env = SWEEnv(data_dir=str(tmp / "data"), task=task["id"], tool_format="hermes")
    try:
        obs, info = env.reset(seed=0)
        assert task["FAIL_TO_PASS"][0].split("::")[1] in obs and buggy not in obs and info["file"] == m.file
        obs, r, done, _, info = env.step(_call("view", path=m.file, start_line=m.line, end_line=m.line))
        assert f"{m.line:6d}\t{buggy}\n" in obs and not done and r == 0
        obs, *_ = env.step(_call("search", pattern=f"def {m.function}"))
        assert f"{m.file}:" in obs and f"def {m.function}" in obs
        obs, *_ = env.step(_call("str_replace", path=m.file, old_str="return", new_str="yield"))
        assert f"old_str occurs {SOURCE.count('return')} times" in obs, obs
        obs, *_ = env.step(_call("run_tests"))
        assert "failed" in obs
        obs, *_ = env.step(_call("str_replace", path=m.file, old_str=buggy, new_str=line))
        assert f"Replaced at line {m.line}" in obs
        obs, *_ = env.step(_call("run_tests"))
        assert "passed" in obs and "failed" not in obs
        obs, r, done, _, info = env.step(_call("submit"))
        assert done and r == 1.0 and info["resolved"] and info["fail_to_pass"] == info["pass_to_pass"] == 1.0

        env.reset(seed=0)
        obs, r, done, _, info = env.step(_call("submit"))
        assert done and r == 0.0 and info["fail_to_pass"] == 0.0 and info["pass_to_pass"] == 1.0

        env.reset(seed=0)
        env.step(_call("bash", command="rm -r tests"))
        obs, r, done, _, info = env.step(_call("submit"))
        assert r == 0.0 and info["fail_to_pass"] == 0.0, "the deleted tests are put back and still fail"
    finally:
        env.close()
