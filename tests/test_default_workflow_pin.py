"""The default workflow (`turns`) trains exactly the params the engine trained before workflows existed.

The digests below are the final params' sha256 of two short runs at commit cb4f822, the last commit before the
workflow protocol (jgem/rollout/workflow.py): a sync run with a warm start on GuessTheNumber (one warm-start step,
one RL step, the demo's learner settings: PPO clipping, 2 epochs of 2 minibatches, a k2 KL to the warm-started
policy; on the 1-layer test model, which compiles in a third of the demo preset's time) and off_policy lag 1
(tests/test_pipeline.py's config). A change to how the default loop plays (its tokens, its draws, its slots, its
chunks' shapes) changes them. (Until 2026-11-29 the first run was the demo preset itself, pinned from the same
commit; both pins were recomputed then at cb4f822 and at HEAD, equal.)

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
    "warm_start_sync": "022e7135c32f5e131965b91cb643130a39d5b3dead110e2f05c5d8840cac349d",
    "off_policy_lag1": "20c2a9b3e0bbbf80690e15b0f1b8bf76cc8b4fe60718abfaf8a368071687524b",
}

PIN_SCRIPT = """
import dataclasses, json, os, sys, tempfile
from pathlib import Path
os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core: XLA splits no product over cores
from jgem.train import Trainer
from tests.test_pipeline import config
from tests.train_utils import small_config
d = Path(tempfile.mkdtemp())
warm = small_config(str(d / "warm"), steps=1, episodes_per_step=8, checkpoint_every=100,
    env={"env_id": "game:GuessTheNumber-v0-easy", "num_envs": 8},
    learner={"lr": 2e-4, "epochs": 2, "minibatches": 2, "kl_coef": 0.1, "kl_estimator": "k2"})
warm = dataclasses.replace(warm, warm_start=dataclasses.replace(warm.warm_start, steps=1, episodes_per_step=8))
lag1 = config(d, "lag1", "off_policy", 1)
runs = (("warm_start_sync", warm), ("off_policy_lag1", lag1))
print(json.dumps({n: Trainer(c).run()["params_sha256"] for n, c in runs}))
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
