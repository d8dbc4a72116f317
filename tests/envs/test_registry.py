"""Registry: helpful errors for unknown ids and parameters, list_envs, and a light `import jgem`."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import jgem
from jgem import registry
from jgem.envs.games import GAME_IDS
from tests.envs.faulty_envs import CounterEnv

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def counter_id() -> Iterator[str]:
    jgem.register("test:RegCounter-v0", CounterEnv, horizon=4)
    yield "test:RegCounter-v0"
    registry._REGISTRY.pop("test:RegCounter-v0", None)


def test_unknown_id_names_the_nearest_ids() -> None:
    with pytest.raises(KeyError, match=r"unknown env id 'game:Sudoku-v0-eazy'; did you mean 'game:Sudoku-v0-easy'"):
        jgem.make("game:Sudoku-v0-eazy")
    with pytest.raises(KeyError, match=r"did you mean .*'game:GuessTheNumber-v0-hard'"):
        jgem.make("game:GuessTheNumbr-v0-hard")
    with pytest.raises(KeyError, match=r"see jgem.list_envs\(\)"):
        jgem.make("zzzzzz")


def test_bad_kwargs_name_the_nearest_parameters(counter_id: str) -> None:
    with pytest.raises(
        TypeError,
        match=r"got an unexpected parameter 'horizn'; did you mean 'horizon'\? "
        r"valid parameters: horizon, seed",
    ):
        jgem.make(counter_id, horizn=3)
    env = jgem.make(counter_id, horizon=2)
    assert env.horizon == 2 and env.spec.id == counter_id and env.spec.kwargs == {"horizon": 2}
    assert jgem.make(counter_id).horizon == 4  # registered default


def test_bad_game_kwargs() -> None:
    with pytest.raises(TypeError, match=r"'max_turn'; did you mean 'max_turns'"):
        jgem.make("game:GuessTheNumber-v0-easy", max_turn=3)


def test_register_refuses_silent_overwrite(counter_id: str) -> None:
    with pytest.raises(ValueError, match="already registered; pass overwrite=True"):
        jgem.register(counter_id, CounterEnv)
    jgem.register(counter_id, CounterEnv, overwrite=True, horizon=9)
    assert jgem.make(counter_id).horizon == 9


def test_list_envs() -> None:
    games = jgem.list_envs("game:")
    assert games == sorted(GAME_IDS) and len(games) == 39
    assert "game:Game2048-v0-extreme-hard" in games
    assert (
        all(i.startswith("game:Sudoku") for i in jgem.list_envs("game:Sudoku"))
        and len(jgem.list_envs("game:Sudoku")) == 3
    )
    everything = jgem.list_envs()
    assert set(games) <= set(everything) and everything == sorted(everything)


def test_import_jgem_stays_light() -> None:
    code = (
        "import sys, jgem; jgem.list_envs(); jgem.EnvPool; import jgem.envs.wrappers, jgem.metrics; "
        "heavy = [m for m in ('jax', 'flax', 'transformers', 'torch', 'optax', 'gem', 'wandb') if m in sys.modules]; "
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"import jgem pulled in heavy modules: {out.stdout.strip()}"
