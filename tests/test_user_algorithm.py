"""A user's algorithm reaches the trainer through the registries (docs/algorithms.md, "Adding an algorithm").

`--import tests.user_algorithm` registers an advantage estimator, a policy loss and the algorithm `test_user_algo`
that pairs them; the real command line trains with it, and without the import the same command is refused naming
the algorithm and the registered ones. The module is only ever imported in subprocesses: imported here it would add
its names to this process's registries, which other tests enumerate.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from jgem.algos.algorithms import ALGORITHMS
from tests.multiprocess import TEST_XLA_FLAGS

ROOT = Path(__file__).resolve().parents[1]
BUILTIN = ("rebn", "reinforce", "rae", "grpo", "drgrpo", "rloo", "reinforce_pp", "ppo", "gspo", "cispo")


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu", **extra}
    env.pop("JAX_NUM_CPU_DEVICES", None)
    env["XLA_FLAGS"] = TEST_XLA_FLAGS
    return env


def _command(run_dir: Path) -> list[str]:
    """The tiny preset made small (tests.train_utils' micro model, few short episodes, one optimizer step, no KL
    reference, no warm start) so the run compiles and trains in seconds."""
    cmd = [sys.executable, "-m", "experiments.train", "tiny", "--import", "tests.train_utils"]
    cmd += ["--model.preset", "test-micro", "--steps", "2", "--episodes-per-step", "4", "--env.num-envs", "4"]
    cmd += ["--rollout.max-new-tokens", "6", "--rollout.max-episode-tokens", "320"]
    cmd += ["--batch-buckets", "128", "256", "512"]
    cmd += ["--learner.epochs", "1", "--learner.minibatches", "1", "--learner.kl-coef", "0"]
    cmd += ["--warm-start.steps", "0", "--eval-every", "0", "--no-plot", "--no-console", "--run-dir", str(run_dir)]
    return cmd


@pytest.mark.slow
def test_a_user_algorithm_trains_from_the_cli_with_import(tmp_path):
    run, trace = tmp_path / "run", tmp_path / "trace"
    cmd = [*_command(run), "--import", "tests.user_algorithm", "--algorithm", "test_user_algo"]
    p = subprocess.run(
        cmd,
        cwd=ROOT,
        env=_env(JGEM_TEST_USER_ALGO_TRACE=str(trace)),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "train/loss" in r]
    assert [r["step"] for r in steps] == [1, 2]
    for r in steps:
        assert math.isfinite(r["train/loss"]) and r["train/skipped"] == 0, r
        # the user's estimator, sign(G_t): every action token's advantage is exactly -1, 0 or +1, not all 0 (the
        # untrained policy's episodes all return -0.1 here: no built-in estimator gives these values)
        assert {r["train/adv_min"], r["train/adv_max"]} <= {-1.0, 0.0, 1.0}, r
        assert (r["train/adv_min"], r["train/adv_max"]) != (0.0, 0.0), r
    # the step's program was traced with the user's estimator and the user's policy loss (the record's policy loss
    # replaced the preset's --learner.policy-loss ppo)
    assert set(trace.read_text().split()) == {"test_user_sign", "test_user_ratio"}
    saved = json.loads((run / "config.json").read_text())
    assert saved["algorithm"] == "test_user_algo"
    assert saved["env"]["imports"] == ["tests.train_utils", "tests.user_algorithm"]
    assert json.loads((run / "summary.json").read_text())["steps"] == 2


def test_without_the_import_the_algorithm_is_refused_naming_the_registered_ones(tmp_path):
    run = tmp_path / "run"
    cmd = [*_command(run), "--algorithm", "test_user_algo"]
    p = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    assert p.returncode == 2, p.stderr[-3000:]
    assert "Traceback" not in p.stderr and "error: invalid configuration:" in p.stderr
    m = re.search(r"--algorithm 'test_user_algo' is unknown; choose one of (.*)", p.stderr)
    assert m, p.stderr
    listed = m.group(1).strip().split(", ")
    # the registry's names, gspo and cispo included (a fixed tuple of the older seven would lack them)
    assert set(BUILTIN) <= set(listed) and "test_user_algo" not in listed
    assert not (run / "metrics.jsonl").exists()  # refused before anything trained


def test_the_user_module_registers_idempotently_and_its_parts_compute_what_it_says():
    """Importing the module twice (a reload registers new function objects under the same names) is fine, and its
    estimator and loss are jit-compatible and give sign(G_t) and -A rho."""
    script = textwrap.dedent(
        """
        import importlib
        import jax, jax.numpy as jnp, numpy as np
        import tests.user_algorithm as m
        from jgem.algos.advantages import ADVANTAGES, compute_advantages
        from jgem.algos.algorithms import ALGORITHMS, get_algorithm
        from jgem.algos.config import LearnerConfig
        from jgem.algos.losses import POLICY_LOSSES
        from jgem.algos.types import TrainBatch

        before = len(ALGORITHMS), len(POLICY_LOSSES), len(ADVANTAGES)
        m = importlib.reload(m)
        assert (len(ALGORITHMS), len(POLICY_LOSSES), len(ADVANTAGES)) == before
        a = get_algorithm("test_user_algo")
        assert (a.advantage, a.policy_loss, a.kl, a.critic, a.grouped) == (
            "test_user_sign", "test_user_ratio", "loss", False, False)
        assert POLICY_LOSSES.get("test_user_ratio") is m.ratio_loss
        assert ADVANTAGES.get("test_user_sign") is m.return_sign

        rewards = jnp.array([[0.0, 1.0, 0.0], [0.0, -2.0, 0.0], [0.0, 0.0, 0.0]])
        mask = jnp.array([[True, True, False], [True, True, True], [True, False, False]])
        out = jax.jit(lambda r, k: compute_advantages("test_user_sign", r, k, gamma=0.5))(rewards, mask)
        np.testing.assert_array_equal(out.advantages, [[1, 1, 0], [-1, -1, 0], [0, 0, 0]])

        lp = jnp.log(jnp.array([[0.5, 0.2, 0.1]]))
        old = jnp.log(jnp.array([[0.25, 0.2, 0.4]]))
        z = jnp.zeros((1, 3), jnp.int32)
        batch = TrainBatch(z, z, z + 1, jnp.array([[True, True, False]]), jnp.array([[1.0, -2.0, 0.0]]), old)
        loss, clipped = jax.jit(lambda x: POLICY_LOSSES.get("test_user_ratio")(x, batch, LearnerConfig()))(lp)
        np.testing.assert_allclose(loss, [[-2.0, 2.0, 0.0]], rtol=1e-6)
        assert clipped.dtype == jnp.bool_ and not clipped.any()
        print("OK")
        """
    )
    p = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300
    )
    assert p.returncode == 0 and p.stdout.strip().endswith("OK"), p.stderr[-3000:]


def test_the_documented_example_module_and_command_validate(tmp_path):
    """docs/algorithms.md's `my_algos.py` and its command: the command parses and validates with the module
    imported (the algorithm found, its estimator and loss registered), and the parts compute what they say."""
    text = (ROOT / "docs" / "algorithms.md").read_text()
    (module,) = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if b.startswith("# my_algos.py")]
    (command,) = [b for b in re.findall(r"```bash\n(.*?)```", text, re.S) if "--import my_algos" in b]
    (tmp_path / "my_algos.py").write_text(module)
    words = command.split()
    argv = words[words.index("experiments.train") + 1 :]
    script = textwrap.dedent(
        """
        import dataclasses, json, sys
        import jax, jax.numpy as jnp, numpy as np
        from experiments.train import parse, pop_imports
        from jgem.config import validate

        modules, args = pop_imports(json.loads(sys.argv[1]))
        cfg = parse(args)
        cfg = dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, imports=(*cfg.env.imports, *modules)))
        validate(cfg, 1)  # imports my_algos, then finds the algorithm and its parts
        from jgem.algos.advantages import compute_advantages
        from jgem.algos.algorithms import get_algorithm
        from jgem.algos.config import LearnerConfig
        from jgem.algos.losses import POLICY_LOSSES
        from jgem.algos.types import TrainBatch

        a = get_algorithm(cfg.algorithm)
        assert (a.name, a.advantage, a.policy_loss) == ("my_algo", "rebn_sign", "tis_reinforce"), a
        rewards = jnp.array([[1.0, 0.0], [0.0, 0.0], [3.0, 0.0]])
        mask = jnp.array([[True, False], [True, False], [True, False]])
        out = jax.jit(lambda r, k: compute_advantages(a.advantage, r, k))(rewards, mask)
        np.testing.assert_array_equal(out.advantages, [[-1, 0], [-1, 0], [1, 0]])  # mean 4/3

        lp = jnp.log(jnp.array([[0.5, 0.2]]))
        old = jnp.log(jnp.array([[0.25, 0.2]]))
        z = jnp.zeros((1, 2), jnp.int32)
        batch = TrainBatch(z, z, z + 1, jnp.array([[True, True]]), jnp.array([[1.0, 1.0]]), old)
        loss, clipped = POLICY_LOSSES.get(a.policy_loss)(lp, batch, LearnerConfig())
        np.testing.assert_allclose(loss, -jnp.array([[1.2, 1.0]]) * lp, rtol=1e-6)  # rho 2 capped at 1.2
        np.testing.assert_array_equal(clipped, [[True, False]])
        print("OK")
        """
    )
    env = _env(PYTHONPATH=f"{tmp_path}{os.pathsep}{ROOT}")
    p = subprocess.run(
        [sys.executable, "-c", script, json.dumps(argv)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0 and p.stdout.strip().endswith("OK"), p.stderr[-3000:]


def _table(text: str, header: str) -> list[list[str]]:
    lines = text[text.index(header) :].splitlines()[2:]
    rows = []
    for line in lines:
        if not line.startswith("|"):
            break
        rows.append([c.strip().strip("`") for c in line.strip("|").split("|")])
    return rows


def test_the_documented_table_of_algorithms_is_the_registry():
    text = (ROOT / "docs" / "algorithms.md").read_text()
    rows = _table(text, "| algorithm | estimator | policy loss | kl | critic | grouped |")
    documented = {
        name: (est, None if loss.startswith("--learner.policy-loss") else loss, kl, critic == "yes", grouped == "yes")
        for name, est, loss, kl, critic, grouped in rows
    }
    registered = {n: ALGORITHMS.get(n) for n in BUILTIN}
    assert list(documented) == list(BUILTIN) == list(ALGORITHMS.names())[: len(BUILTIN)]
    for name, a in registered.items():
        assert documented[name] == (a.advantage, a.policy_loss, a.kl, a.critic, a.grouped), name
