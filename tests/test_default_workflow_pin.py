"""The default workflow (`turns`) trains exactly the params the engine trained before workflows existed.

The digests below are the final params' sha256 of two short runs at commit cb4f822, the last commit before the
workflow protocol (jgem/rollout/workflow.py): the demo preset (`make demo`'s config: one warm-start step, one RL
step) and off_policy lag 1 (tests/test_pipeline.py's config). A change to how the default loop plays (its tokens,
its draws, its slots, its chunks' shapes) changes them.

XLA:CPU compiles for the machine it runs on (docs/quickstart.md: the instruction set and the core count change the
last bits of a sum), so the runs are made portable: a subprocess on one core (`sched_setaffinity`), with the tests'
XLA flags, 8 simulated devices and the instruction set capped at SSE4.2, which every x86-64 machine CI may use has.
A deliberate change to the numerics (a new jax) moves the digests too: then re-pin them at the commit before the
change with `PIN_SCRIPT` and say so in the commit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.multiprocess import TEST_XLA_FLAGS

ROOT = Path(__file__).resolve().parents[1]

PINNED = {
    "demo": "29e2396cf5649401b5f18bc2629eebc1007bf8c7718a3914d57e7480ef175229",
    "off_policy_lag1": "20c2a9b3e0bbbf80690e15b0f1b8bf76cc8b4fe60718abfaf8a368071687524b",
}

PIN_SCRIPT = """
import dataclasses, json, os, sys, tempfile
from pathlib import Path
os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core: XLA splits no product over cores
from experiments.configs import tiny
from jgem.train import Trainer
from tests.test_pipeline import config
d = Path(tempfile.mkdtemp())
demo = tiny()
demo = dataclasses.replace(demo, run_dir=str(d / "demo"), steps=1, warm_start=dataclasses.replace(demo.warm_start,
    steps=1), eval_every=0, eval_episodes=1, checkpoint_every=100, console=False, plot=False)
lag1 = config(d, "lag1", "off_policy", 1)
print(json.dumps({n: Trainer(c).run()["params_sha256"] for n, c in (("demo", demo), ("off_policy_lag1", lag1))}))
"""


def portable_env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu", "JAX_NUM_CPU_DEVICES": "8"}
    flags = "--xla_force_host_platform_device_count=8 --xla_cpu_max_isa=SSE4_2"
    env["XLA_FLAGS"] = f"{TEST_XLA_FLAGS} {flags}"
    return env


@pytest.mark.slow
def test_the_default_workflow_trains_the_params_it_did_before_workflows():
    p = subprocess.run(
        [sys.executable, "-c", PIN_SCRIPT], cwd=ROOT, env=portable_env(), capture_output=True, text=True, timeout=900
    )
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got == PINNED, (
        f"the default workflow no longer trains the params the engine trained before workflows: {got} (or the "
        "numerics moved: see this file's docstring)"
    )
