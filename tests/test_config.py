"""TrainConfig validation: numbers the CLI accepts as types but that cannot train fail before anything is built."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from jgem.config import validate
from jgem.models.config import LoraConfig
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
        ({"batch_rows_per_doubling": 0}, r"batch_rows_per_doubling is 0; it must be >= 1"),
        ({"checkpoint_every": 0}, r"checkpoint_every is 0; it must be an integer >= 1"),
        ({"seed": -1}, r"seed is -1; it must be an integer in \[0, 2\^31 - 1\]"),
        ({"keep_checkpoints": 0}, r"keep_checkpoints is 0"),
        ({"eval_every": -1}, r"eval_every is -1"),
        (
            {"warm_start": {"steps": 2, "teacher": "scan"}},
            r"warm_start.teacher 'scan' is not a teacher of 'game:GuessTheNumber-v0-easy'; choose from solver, uniform",
        ),
        (
            {"model": {"lora": LoraConfig(rank=0, adapters=2)}},
            r"model.lora.adapters 2: several policies are LoRA adapters on one base; set model.lora.rank",
        ),
        (
            {"model": {"lora": LoraConfig(rank=4, adapters=2)}, "rollout": {"policies": ("a", "b")}},
            r"rollout.policies a b maps a multi-agent game's seats to policies: it needs rollout.workflow agents",
        ),
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


# -- the help text (issue 31 A): every field has its own help ------------------------------------------------


def _help_of_options(text: str) -> dict[str, str]:
    """{first flag of each option: its help without the default} from tyro's help, boxed (a terminal) or plain."""
    import re

    helps: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        inner = line[line.index("│") + 1 :] if "│" in line else line
        inner = inner.rstrip().rstrip("│").rstrip()
        indent, body = len(inner) - len(inner.lstrip(" ")), inner.strip()
        if body.startswith("-") and not body.startswith("---") and indent <= 3:
            current = body.split()[0].rstrip(",")
            helps[current] = []
        elif current is not None and body and indent >= 6:
            helps[current].append(body)
        else:
            current = None
    return {k: re.sub(r"\s*\(default: .*\)$", "", " ".join(v)).strip() for k, v in helps.items()}


def _tiny_help(monkeypatch, capsys) -> dict[str, str]:
    from experiments import train as train_cli

    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit) as e:
        train_cli.main(["tiny", "--help"])
    assert e.value.code in (0, None)
    return _help_of_options(capsys.readouterr().out)


# Fields outside jgem/config.py that share one help on purpose: one comment above the three critic fields of
# jgem/algos/learner.py's LearnerConfig describes all of them (tyro applies it to each).
SHARED_ON_PURPOSE = {"--learner.critic-lr", "--learner.critic-max-grad-norm", "--learner.value-clip"}


def test_every_option_of_the_tiny_preset_has_its_own_help(monkeypatch, capsys) -> None:
    from jgem import config

    helps = _tiny_help(monkeypatch, capsys)
    assert len(helps) > 80, sorted(helps)
    by_help: dict[str, list[str]] = {}
    for flag, text in helps.items():
        if text and flag not in SHARED_ON_PURPOSE:
            by_help.setdefault(text, []).append(flag)
    shared = {
        text: flags
        for text, flags in by_help.items()
        if len({f.rsplit(".", 1)[-1].removeprefix("--") for f in flags}) > 1  # the same name in two groups may
    }
    assert not shared, shared
    # the fields that used to show evaluation's turn limit have their own help
    assert "turn limit" in helps["--eval-max-turns"]
    for flag, words in {
        "--checkpoint-every": "save a checkpoint",
        "--keep-checkpoints": "checkpoints kept",
        "--resume": "latest checkpoint",
        "--plot": "curves",
        "--console": "console",
        "--log.wandb": "W&B run",
        "--log.wandb-project": "project",
        "--log.wandb-mode": "offline",
        "--env.remote-token-file": "JGEM_SERVE_TOKEN",
    }.items():
        assert words in helps[flag], (flag, helps[flag])
        assert "turn limit" not in helps[flag]
    # every field of jgem/config.py's dataclasses has help
    classes = {
        "": config.TrainConfig,
        "env.": config.EnvConfig,
        "model.": config.ModelSpec,
        "curriculum.": config.CurriculumConfig,
        "warm-start.": config.WarmStartConfig,
        "log.": config.LogConfig,
    }
    for prefix, cls in classes.items():
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if not dataclasses.is_dataclass(hints[f.name]):  # a nested config is a group, not an option
                flag = f"--{prefix}{f.name.replace('_', '-')}"
                assert helps.get(flag), f"{flag} has no help"


# -- errors in CLI terms (issue 31 B) --------------------------------------------------------------------------


def test_config_errors_name_fields_in_python_and_flags_on_the_command_line(tmp_path) -> None:
    from jgem.config import ConfigError

    cfg = small_config(str(tmp_path), learner={"lr": -1.0}, rollout={"max_new_tokens": 6})
    cfg = dataclasses.replace(cfg, warm_start=dataclasses.replace(cfg.warm_start, steps=3, episodes_per_step=4))
    cfg = dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, env_id="math:arithmetic"))
    with pytest.raises(ConfigError) as e:
        validate(cfg, 1)
    assert isinstance(e.value, ValueError)
    text = str(e.value)
    assert text.startswith("invalid TrainConfig:") and "learner.lr is -1.0" in text and "\x1f" not in text
    assert "warm_start.steps 3 needs a game with a scripted solver" in text
    cli = e.value.render()
    assert "--learner.lr is -1.0" in cli and "--warm-start.steps 3 needs" in cli and "\x1f" not in cli
    assert "learner.lr" not in cli.replace("--learner.lr", "")


def test_an_unknown_env_id_gets_its_did_you_mean_and_no_warm_start_hint(tmp_path) -> None:
    cfg = small_config(str(tmp_path), env={"env_id": "game:GuessTheNumbr-v0-easy"}, warm_start={"steps": 5})
    with pytest.raises(ValueError) as e:
        validate(cfg, 1)
    assert "did you mean 'game:GuessTheNumber-v0-easy'" in str(e.value)
    assert "warm" not in str(e.value)


# -- the remote env token (issue 31 C): read from a file or the environment, never saved -----------------------


def test_the_remote_token_comes_from_a_file_or_the_environment(tmp_path, monkeypatch) -> None:
    from jgem.config import EnvConfig

    monkeypatch.delenv("JGEM_SERVE_TOKEN", raising=False)
    f = tmp_path / "token"
    f.write_text("s3cret-file\nignored\n")
    remote = EnvConfig(backend="remote", remote_urls=("http://127.0.0.1:1",))
    assert remote.read_remote_token() is None
    monkeypatch.setenv("JGEM_SERVE_TOKEN", "s3cret-env")
    assert remote.read_remote_token() == "s3cret-env"
    assert dataclasses.replace(remote, remote_token_file=str(f)).read_remote_token() == "s3cret-file"  # file first
    assert EnvConfig(remote_token_file=str(f)).read_remote_token() is None  # only the remote backend reads it
    assert "remote_token" not in {f.name for f in dataclasses.fields(EnvConfig)}

    empty = tmp_path / "empty"
    empty.write_text("\n")
    for bad, why in ((empty, "is empty"), (tmp_path / "missing", "cannot read a token")):
        cfg = small_config(str(tmp_path), env={"backend": "remote", "remote_urls": ("http://x:1",)})
        cfg = dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, remote_token_file=str(bad)))
        with pytest.raises(ValueError, match=f"env.remote_token_file: .*{why}"):
            validate(cfg, 1)


def test_the_token_is_never_written_to_the_run_directory(tmp_path, monkeypatch) -> None:
    """config.json as the trainer writes it and a checkpoint's host JSON hold the token file's path, not the token."""
    import json

    import numpy as np

    from jgem.checkpoint import CheckpointConfig, Checkpointer
    from jgem.config import load_run_config

    token = "tok-6f1e2d3c4b5a"
    f = tmp_path / "token"
    f.write_text(token + "\n")
    monkeypatch.setenv("JGEM_SERVE_TOKEN", token)
    run = tmp_path / "run"
    cfg = small_config(str(run), env={"backend": "remote", "remote_urls": ("http://127.0.0.1:1",)})
    cfg = dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, remote_token_file=str(f)))
    assert cfg.env.read_remote_token() == token
    run.mkdir()
    (run / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2, default=str))  # as Trainer.run writes it
    with Checkpointer(CheckpointConfig(str(run / "checkpoints")), run_config=cfg) as ck:
        ck.save(1, {"w": np.zeros(2, np.float32)}, {"step": 1})
    files = [p for p in run.rglob("*") if p.is_file()]
    assert any("host" in str(p) for p in files)
    for p in files:
        assert token.encode() not in p.read_bytes(), p
    assert load_run_config(run).env.remote_token_file == str(f)


def test_an_old_config_with_a_token_still_loads_without_showing_it(tmp_path) -> None:
    import json
    import warnings

    from jgem.config import TrainConfig, load_run_config

    doc = TrainConfig().to_dict()
    doc["env"]["remote_token"] = "old-s3cret"
    (tmp_path / "config.json").write_text(json.dumps(doc))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = load_run_config(tmp_path)
    assert cfg == TrainConfig()
    (w,) = [w for w in caught if "remote_token" in str(w.message)]
    assert "old-s3cret" not in str(w.message) and "--env.remote-token-file" in str(w.message)
