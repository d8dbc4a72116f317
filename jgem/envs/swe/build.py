"""Repository tasks made the way SWE-smith makes them: take a real package from the registry, inject a bug into its
source, and keep the bugs that its own tests catch.

    python -m jgem.envs.swe.build [--out DIR]                  # the shipped task list, built under DIR
    python -m jgem.envs.swe.build --search --out DIR           # find new bugs (writes DIR/tasks.json, a new list)

The shipped list (`jgem/envs/swe/tasks.json`) names packages by exact version with their source distribution's
sha256, the paths of their tests, and the bugs to inject (`jgem.envs.swe.mutations.Mutation`: a byte span of one
source file and its replacement). Building fetches each package's source distribution from the registry (`pip
download --no-binary`; a sdist holds the tests, which wheels usually leave out), checks its digest, unpacks it once
under DIR/repos/<name>-<version>, runs its tests, and for each bug runs them again on the mutated file: the tests
that passed before and fail now are the task's FAIL_TO_PASS, the rest of the passing ones its PASS_TO_PASS (as
SWE-bench grades: the bug is fixed when all of both pass). A bug that no test catches, or that its package's
tests no longer catch, is refused by name. Each task is written to DIR/tasks/<id>.json; nothing is vendored here.

Search mode tries the mutations of each package's source files in a seeded order and keeps those that fail at least
one test and at most `max_fail_frac` of them, at most one per function, up to `per_package`.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from jgem.envs.swe.mutations import Mutation, find_mutations

SHIPPED = Path(__file__).with_name("tasks.json")
PLUGIN_DIR = Path(__file__).with_name("plugin")
DATA_SUBDIR = "swe"
TEST_TIMEOUT = 300.0


@dataclass
class Package:
    """A package of the task list: its exact version, its sdist's digest, where its tests and source are (paths in
    the unpacked sdist), and the bugs to inject."""

    name: str
    version: str
    tests: list[str]
    source: list[str]
    sha256: str = ""
    mutations: list[dict] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.name}-{self.version}"

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "version": self.version,
            "sha256": self.sha256,
            "tests": self.tests,
            "source": self.source,
            "mutations": self.mutations,
        }


def read_list(path: Path) -> list[Package]:
    return [Package(**p) for p in json.loads(Path(path).read_text())["packages"]]


def default_out() -> Path:
    root = os.environ.get("JGEM_DATA")
    if not root:
        raise SystemExit("name where the tasks go: --out DIR, or set $JGEM_DATA (they go to $JGEM_DATA/swe)")
    return Path(root) / DATA_SUBDIR


# -- the package ------------------------------------------------------------------------------------------------------


def fetch(pkg: Package, cache: Path, sdist: Path | None = None) -> Path:
    """The package's source distribution: `sdist` where given, else downloaded from the registry into `cache`; its
    sha256 checked against the list's (where the list has one)."""
    if sdist is None:
        cache.mkdir(parents=True, exist_ok=True)
        found = sorted(cache.glob(f"{pkg.name.replace('-', '[-_]')}-{pkg.version}.tar.gz"))
        if not found:
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-d", str(cache)]
            out = subprocess.run([*cmd, f"{pkg.name}=={pkg.version}"], capture_output=True, text=True)
            if out.returncode != 0:
                raise RuntimeError(f"pip could not download {pkg.key}'s sdist: {out.stderr.strip()[-500:]}")
            found = sorted(cache.glob(f"{pkg.name.replace('-', '[-_]')}-{pkg.version}.tar.gz"))
        if not found:
            raise RuntimeError(f"no {pkg.key}.tar.gz in {cache} after pip download")
        sdist = found[0]
    digest = hashlib.sha256(Path(sdist).read_bytes()).hexdigest()
    if pkg.sha256 and digest != pkg.sha256:
        raise RuntimeError(f"{sdist} has sha256 {digest}; the task list pins {pkg.key} at {pkg.sha256}")
    pkg.sha256 = digest
    return Path(sdist)


def unpack(sdist: Path, dest: Path) -> Path:
    """`sdist` unpacked at `dest` (its one top directory's contents), afresh."""
    if dest.exists():
        shutil.rmtree(dest)
    with tempfile.TemporaryDirectory(dir=dest.parent if dest.parent.exists() else None) as tmp:
        with tarfile.open(sdist) as tar:
            tar.extractall(tmp, filter="data")
        (top,) = list(Path(tmp).iterdir())
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(top), dest)
    return dest


def run_tests(repo: Path, tests: Sequence[str], timeout: float = TEST_TIMEOUT) -> dict[str, tuple[str, str]]:
    """The repository's tests run with pytest (the package imported from `repo`): node id -> (outcome, first failure
    line). A run past `timeout` (a bug that loops) raises TimeoutError."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        env = {**os.environ, "PYTHONPATH": f"{repo}{os.pathsep}{PLUGIN_DIR}", "JGEM_PYTEST_REPORT": str(report)}
        env["PYTHONDONTWRITEBYTECODE"] = "1"  # a mutated file is read afresh, never from a stale cache
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "_jgem_pytest_report"]
        cmd += ["-o", "addopts=", *tests]
        try:
            subprocess.run(cmd, cwd=repo, env=env, capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            raise TimeoutError(f"{repo.name}'s tests ran past {timeout:.0f} s") from e
        if not report.exists():
            raise RuntimeError(f"pytest wrote no report for {repo} ({' '.join(tests)})")
        return {k: (v[0], v[1]) for k, v in json.loads(report.read_text()).items()}


# -- the tasks -----------------------------------------------------------------------------------------------------


def unified_diff(rel: str, before: bytes, after: bytes) -> str:
    return "".join(
        difflib.unified_diff(
            before.decode("utf-8").splitlines(keepends=True),
            after.decode("utf-8").splitlines(keepends=True),
            f"a/{rel}",
            f"b/{rel}",
        )
    )


def problem_statement(pkg: Package, fail: list[str], results: dict[str, tuple[str, str]]) -> str:
    """What the agent is told: the failing tests (not the bug), and the first failure's message."""
    shown = "\n".join(f"- {t}" for t in fail[:5]) + (f"\n- ... and {len(fail) - 5} more" if len(fail) > 5 else "")
    message = next((results[t][1] for t in fail if results.get(t, ("", ""))[1]), "")
    text = (
        f"These tests of {pkg.name} {pkg.version} fail; they passed before a recent change to the library's source. "
        f"Find the bug and fix it in the library's code (do not edit the tests).\n\nFailing tests:\n{shown}\n"
    )
    return text + (f"\nThe first failure:\n{message}\n" if message else "")


def try_mutation(
    repo: Path, pkg: Package, m: Mutation, passing: set[str], timeout: float = TEST_TIMEOUT
) -> dict | None:
    """Run the tests with `m` applied (the file restored after): the task, or None where no test catches it (or
    the tests run past `timeout`: a bug that loops)."""
    path = repo / m.file
    original = path.read_bytes()
    mutated = m.apply(original)
    try:
        path.write_bytes(mutated)
        results = run_tests(repo, pkg.tests, timeout=timeout)
    except TimeoutError:
        return None
    finally:
        path.write_bytes(original)
    fail = sorted(t for t in passing if results.get(t, ("missing", ""))[0] != "passed")
    if not fail:
        return None
    return {
        "id": f"{pkg.key}.{m.id}",
        "package": pkg.name,
        "version": pkg.version,
        "repo": f"repos/{pkg.key}",
        "tests": pkg.tests,
        "mutation": m.as_dict(),
        "FAIL_TO_PASS": fail,
        "PASS_TO_PASS": sorted(passing - set(fail)),
        "problem_statement": problem_statement(pkg, fail, results),
        "patch": unified_diff(m.file, original, mutated),
        "fix": unified_diff(m.file, mutated, original),
    }


def baseline(repo: Path, pkg: Package) -> tuple[set[str], float]:
    """The tests that pass on the unmodified package, and how long a mutated run may take (10 times this one's
    time, at least 30 s: past it, a bug loops)."""
    start = time.monotonic()
    results = run_tests(repo, pkg.tests)
    passing = {t for t, (outcome, _) in results.items() if outcome == "passed"}
    if not passing:
        raise RuntimeError(f"no test of {pkg.key} passes unmodified ({' '.join(pkg.tests)} in {repo})")
    return passing, max(30.0, 10 * (time.monotonic() - start))


def build(packages: list[Package], out: Path, *, sdists: dict[str, Path] | None = None, log=print) -> list[dict]:
    """Every listed bug of every package built as a task under `out` (DIR/repos, DIR/tasks): the tasks."""
    tasks = []
    for pkg in packages:
        sdist = fetch(pkg, out / "sdists", (sdists or {}).get(pkg.name))
        repo = unpack(sdist, out / "repos" / pkg.key)
        passing, timeout = baseline(repo, pkg)
        for d in pkg.mutations:
            m = Mutation.from_dict(d)
            task = try_mutation(repo, pkg, m, passing, timeout)
            if task is None:
                raise RuntimeError(
                    f"{pkg.key}: no test of {' '.join(pkg.tests)} catches bug {m.id} ({m.file}:{m.line})"
                )
            if d.get("FAIL_TO_PASS") and d["FAIL_TO_PASS"] != task["FAIL_TO_PASS"]:
                raise RuntimeError(
                    f"{task['id']}: FAIL_TO_PASS {task['FAIL_TO_PASS']}, the list says {d['FAIL_TO_PASS']}"
                )
            write_task(out, task)
            tasks.append(task)
            log(f"{task['id']}: {len(task['FAIL_TO_PASS'])} fail-to-pass, {len(task['PASS_TO_PASS'])} pass-to-pass")
    return tasks


def write_task(out: Path, task: dict) -> None:
    (out / "tasks").mkdir(parents=True, exist_ok=True)
    (out / "tasks" / f"{task['id']}.json").write_text(json.dumps(task, indent=1) + "\n")


def search(
    pkg: Package,
    out: Path,
    *,
    seed: int = 0,
    per_package: int = 10,
    budget: int = 80,
    max_fail_frac: float = 0.2,
    sdist: Path | None = None,
    log=print,
) -> list[dict]:
    """New bugs for `pkg`: its source files' mutations tried in a seeded order (at most `budget`), kept where they
    fail at least one test and at most `max_fail_frac` of the passing ones, one per function, up to
    `per_package`. The tasks (also written under `out`); `pkg.mutations` becomes their list."""
    repo = unpack(fetch(pkg, out / "sdists", sdist), out / "repos" / pkg.key)
    passing, timeout = baseline(repo, pkg)
    candidates = []
    for src in pkg.source:
        files = [repo / src] if (repo / src).is_file() else sorted((repo / src).rglob("*.py"))
        for f in files:
            rel = f.relative_to(repo).as_posix()
            if "/tests/" in f"/{rel}" or Path(rel).name.startswith("test_"):
                continue
            candidates += find_mutations(repo, rel)
    random.Random(f"{pkg.key}:{seed}").shuffle(candidates)
    kept, functions = [], set()
    for m in candidates[:budget]:
        if (m.file, m.function) in functions:
            continue
        task = try_mutation(repo, pkg, m, passing, timeout)
        if task is None or len(task["FAIL_TO_PASS"]) > max_fail_frac * len(passing):
            continue
        functions.add((m.file, m.function))
        write_task(out, task)
        kept.append(task)
        log(f"{task['id']}: {m.kind} in {m.function} ({m.file}:{m.line}), {len(task['FAIL_TO_PASS'])} fail")
        if len(kept) == per_package:
            break
    pkg.mutations = [{**t["mutation"], "FAIL_TO_PASS": t["FAIL_TO_PASS"]} for t in kept]
    return kept


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None, help="where the tasks go (default $JGEM_DATA/swe)")
    ap.add_argument("--list", type=Path, default=SHIPPED, help="the task list (default: the shipped one)")
    ap.add_argument("--search", action="store_true", help="find new bugs; writes OUT/tasks.json, a new list")
    ap.add_argument("--seed", type=int, default=0, help="search: the order the mutations are tried in")
    ap.add_argument("--per-package", type=int, default=10, help="search: bugs kept per package")
    ap.add_argument("--budget", type=int, default=80, help="search: mutations tried per package at most")
    ap.add_argument("--sdist", action="append", default=[], metavar="NAME=PATH", help="a local sdist for NAME")
    args = ap.parse_args(argv)
    out = (args.out or default_out()).resolve()
    out.mkdir(parents=True, exist_ok=True)
    sdists = dict(s.split("=", 1) for s in args.sdist)
    sdists = {k: Path(v) for k, v in sdists.items()}
    packages = read_list(args.list)
    if args.search:
        for pkg in packages:
            search(
                pkg, out, seed=args.seed, per_package=args.per_package, budget=args.budget, sdist=sdists.get(pkg.name)
            )
        (out / "tasks.json").write_text(json.dumps({"packages": [p.as_dict() for p in packages]}, indent=1) + "\n")
        print(f"the new list: {out / 'tasks.json'}")
    else:
        tasks = build(packages, out, sdists=sdists)
        print(f"{len(tasks)} tasks in {out / 'tasks'}")


if __name__ == "__main__":
    main()
