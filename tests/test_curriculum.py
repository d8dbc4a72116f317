from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jgem.curriculum import Curriculum


def test_stages_and_horizons():
    c = Curriculum(horizons=(4, 8, 16), stage_steps=100)
    assert [c.stage(s) for s in (0, 99, 100, 199, 200, 10**6)] == [0, 0, 1, 1, 2, 2]
    assert [c.max_turns(s) for s in (0, 99, 100, 250)] == [4, 4, 8, 16]
    assert c.stage_start(2) == 200 and c.num_stages == 3


def test_constant():
    c = Curriculum.constant(5)
    assert {c.max_turns(s) for s in range(0, 1000, 37)} == {5}
    assert c.stage(10**9) == 0


@given(
    horizons=st.lists(st.integers(1, 64), min_size=1, max_size=5).map(lambda h: tuple(sorted(h))),
    stage_steps=st.integers(1, 50),
    step=st.integers(0, 10_000),
)
def test_pure_function_of_step(horizons, stage_steps, step):
    """Resume-safety: a fresh schedule (as rebuilt after a restart) agrees at every step, and stages only grow."""
    a, b = Curriculum(horizons, stage_steps), Curriculum(tuple(horizons), stage_steps)
    assert a.stage(step) == b.stage(step) and a.max_turns(step) == b.max_turns(step)
    assert a.max_turns(step) == horizons[min(step // stage_steps, len(horizons) - 1)]
    assert a.stage(step + 1) >= a.stage(step)
    assert a.stage_start(a.stage(step)) <= step


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(horizons=(), stage_steps=10), "at least one horizon"),
        (dict(horizons=(4, 0), stage_steps=10), "positive ints"),
        (dict(horizons=(4, 2.5), stage_steps=10), "positive ints"),
        (dict(horizons=(8, 4), stage_steps=10), "must not decrease"),
        (dict(horizons=(4,), stage_steps=0), "stage_steps"),
    ],
)
def test_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Curriculum(**kwargs)


def test_frozen_and_errors():
    c = Curriculum((2, 4), 3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.stage_steps = 5  # type: ignore[misc]
    with pytest.raises(ValueError, match="step must be >= 0"):
        c.stage(-1)
    with pytest.raises(ValueError, match="outside"):
        c.stage_start(2)
    assert Curriculum([2, 4], 3).horizons == (2, 4)  # lists from a CLI become tuples
