"""TrainConfig validation: numbers the CLI accepts as types but that cannot train fail before anything is built."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jgem.config import validate
from tests.train_utils import small_config

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"learner": {"lr": -1.0}}, r"learner.lr is -1.0; it must be a finite number > 0"),
        ({"learner": {"lr": float("nan")}}, r"learner.lr is nan; it must be a finite number > 0"),
        ({"learner": {"lr": float("inf")}}, r"learner.lr is inf"),
        (
            {"learner": {"temperature": 0.0}, "rollout": {"temperature": 0.0}},
            r"learner.temperature is 0.0; it must be a finite number > 0",
        ),
        ({"learner": {"temperature": 0.0}, "rollout": {"temperature": 0.0}}, r"rollout.temperature is 0.0"),
        ({"rollout": {"top_p": -1.0}}, r"rollout.top_p is -1.0; it must be in \(0, 1\]"),
        ({"rollout": {"top_p": 1.5}}, r"rollout.top_p is 1.5"),
        ({"eval_episodes": -4}, r"eval_episodes is -4; it must be an integer >= 1"),
        ({"batch_buckets": ()}, r"batch_buckets is \(\); it must be one or more integers >= 1"),
        ({"batch_buckets": (128, 0)}, r"batch_buckets is \(128, 0\)"),
        ({"checkpoint_every": 0}, r"checkpoint_every is 0; it must be an integer >= 1"),
        ({"seed": -1}, r"seed is -1; it must be an integer in \[0, 2\^31 - 1\]"),
        ({"keep_checkpoints": 0}, r"keep_checkpoints is 0"),
        ({"eval_every": -1}, r"eval_every is -1"),
    ],
)
def test_values_that_cannot_train_fail_validation_naming_the_field(tmp_path, overrides, message) -> None:
    cfg = small_config(str(tmp_path), **overrides)
    with pytest.raises(ValueError, match=message):
        validate(cfg, 1)


def test_the_defaults_and_the_small_config_pass(tmp_path) -> None:
    validate(small_config(str(tmp_path)), 1)
    validate(dataclasses.replace(small_config(str(tmp_path)), seed=2**31 - 1), 1)


def test_cli_refuses_a_nan_learning_rate_before_training(tmp_path) -> None:
    cmd = [sys.executable, "-m", "experiments.train", "tiny", "--run-dir", str(tmp_path), "--learner.lr", "nan"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode != 0
    assert "learner.lr is nan; it must be a finite number > 0" in p.stdout + p.stderr
    assert not (tmp_path / "metrics.jsonl").exists()


def test_sixteen_bit_weights_with_a_small_lr_are_refused_for_full_fine_tuning(tmp_path):
    # bf16 weights round away Adam steps of 1e-6: the run would train nothing, silently
    from jgem.models.config import LoraConfig

    cfg = small_config(str(tmp_path))
    bad = dataclasses.replace(
        cfg,
        model=dataclasses.replace(cfg.model, param_dtype="bfloat16"),
        learner=dataclasses.replace(cfg.learner, lr=1e-6),
    )
    with pytest.raises(ValueError, match="param-dtype float32"):
        validate(bad, 1)
    lora = dataclasses.replace(bad, model=dataclasses.replace(bad.model, lora=LoraConfig(rank=8)))
    validate(lora, 1)  # the adapters are float32; the bf16 base is frozen
    validate(dataclasses.replace(bad, learner=dataclasses.replace(bad.learner, lr=1e-3)), 1)
