"""Every shipped terminal task: its reference solution passes all its tests, and doing nothing does not."""

from __future__ import annotations

import pytest

import jgem
from jgem.envs.terminal import SHIPPED_TASKS

pytestmark = pytest.mark.xdist_group("terminal")


def test_enough_tasks_are_shipped_and_registered():
    assert len(SHIPPED_TASKS) >= 40
    ids = jgem.list_envs("terminal:")
    assert {f"terminal:{t}" for t in SHIPPED_TASKS} | {"terminal:shipped", "terminal:tb"} == set(ids)


@pytest.mark.parametrize("name", SHIPPED_TASKS)
def test_reference_passes_and_doing_nothing_fails(name: str) -> None:
    env = jgem.make(f"terminal:{name}")
    try:
        _, info = env.reset(seed=0)
        assert info["setup_failed"] == [] and info["not_done"] == [], info
        untouched = env.grade()
        assert untouched.total > 0 and not untouched.success, untouched.summary()

        env.reset(seed=0)
        res = env.run_solution()
        assert res.exit_code == 0, res.message()
        report = env.grade()
        assert report.success, f"{report.summary()}\n{report.output}"
    finally:
        env.close()
