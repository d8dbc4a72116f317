"""The suite's own scheduling: `make test` runs `pytest -n 2 --dist loadgroup`, and tests marked with one
`xdist_group` (the web envs' heavy browsers and sites, the 2-process trainer tests that share one run through a
module fixture) must run on one worker. pytest 9.2 stores node ids where pytest-xdist 3.8 cannot tag them, so
grouped tests were spread like any others and a shared module fixture ran once per worker (pyproject pins
pytest below 9.2)."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_an_xdist_group_runs_on_one_worker(tmp_path):
    (tmp_path / "test_grouped.py").write_text(
        textwrap.dedent(
            """
            import pytest

            @pytest.mark.parametrize("i", range(4))
            @pytest.mark.xdist_group("together")
            def test_grouped(i):
                pass

            @pytest.mark.parametrize("i", range(4))
            def test_free(i):
                pass
            """
        )
    )
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout
    assert "8 passed" in out, out[-2000:]
    grouped = [ln for ln in out.splitlines() if "test_grouped[" in ln and "PASSED" in ln]
    assert len(grouped) == 4 and all("@together" in ln for ln in grouped), grouped
    assert len({ln.split()[0] for ln in grouped}) == 1, grouped  # "[gw0] [ 12%] PASSED ...": one worker
