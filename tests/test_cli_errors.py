"""What a user sees when a command line is wrong (issue 31 B): the message alone on stderr, exit status 2, fields
written as the flags that set them, and for a refused resume the flags that resume it."""

from __future__ import annotations

import dataclasses
import shlex

import numpy as np
import pytest

from experiments import train as train_cli


def _fails(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as e:
        train_cli.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.startswith("error: ")
    return err


def test_a_misspelled_preset_gets_did_you_mean_and_the_list(capsys) -> None:
    err = _fails(["tinyy", "--steps", "3"], capsys)
    assert "unknown preset 'tinyy'; did you mean 'tiny' or 'tiny-moe' or 'tiny-gamma'?" in err
    presets = "tiny, tiny-gamma, tiny-gamma-1to50, tiny-mastermind, tiny-kuhn-selfplay, qwen3-1.7b-games"
    assert f"{presets}, qwen3-4b-math-python, scaling-inter" in err
    assert len(err.splitlines()) <= 3  # not tyro's forty lines of option suggestions


def test_config_errors_are_one_message_with_flag_names(capsys, tmp_path) -> None:
    err = _fails(["tiny", "--run-dir", str(tmp_path / "r"), "--learner.lr", "nan", "--algorithm", "grpo"], capsys)
    assert "--learner.lr is nan; it must be a finite number > 0" in err
    assert "set --group-size >= 2" in err
    assert "group_size" not in err and "learner.lr" not in err.replace("--learner.lr", "")
    assert not (tmp_path / "r").exists()  # refused before anything is built


def test_a_bad_flag_value_keeps_tyros_own_message(capsys) -> None:
    """The nested-config rewrite once turned `--steps abc` into `----steps.*: invalid literal ...`."""
    with pytest.raises(SystemExit) as e:
        train_cli.main(["tiny", "--steps", "abc"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "----steps" not in err
    assert "Error parsing --steps" in err and "abc" in err


def test_a_misspelled_env_id_gets_only_its_did_you_mean(capsys, tmp_path) -> None:
    # the tiny preset warm-starts (100 steps): the solver check must not pile on for an id that does not exist
    err = _fails(["tiny", "--run-dir", str(tmp_path), "--env.env-id", "game:GuessTheNumbr-v0-easy"], capsys)
    assert (
        "--env.env-id: unknown env id 'game:GuessTheNumbr-v0-easy'; did you mean 'game:GuessTheNumber-v0-easy'" in err
    )
    assert "warm" not in err


def test_a_nested_configs_own_check_names_flags(capsys) -> None:
    err = _fails(["tiny", "--rollout.max-episode-tokens", "10"], capsys)
    assert "--rollout.max-new-tokens (12) < --rollout.max-episode-tokens (10)" in err
    assert "__tyro" not in err and "max_episode_tokens" not in err


def test_an_unknown_learner_name_is_refused_by_flag(capsys, tmp_path) -> None:
    # LearnerConfig is light data; its names are checked against the learner's registries by validate
    err = _fails(["tiny", "--run-dir", str(tmp_path / "r"), "--learner.policy-loss", "nope"], capsys)
    assert "--learner.policy-loss 'nope' is unknown; choose one of ppo, reinforce, gspo, cispo" in err
    assert not (tmp_path / "r").exists()


def test_a_missing_import_module_is_a_message(capsys) -> None:
    err = _fails(["tiny", "--import", "no_such_module_xyz"], capsys)
    assert "cannot import 'no_such_module_xyz'" in err


def _check(saved_args: list[str], new_args: list[str], directory) -> None:
    """Trainer.run's resume check (as jgem/train/loop.py configures it) of a run of `new_args` against a checkpoint
    written by a run of `saved_args`: a ConfigMismatchError where they differ."""
    from jgem.checkpoint import CheckpointConfig, Checkpointer, flatten_config
    from jgem.config import TrainConfig

    now = train_cli.parse(new_args)
    with Checkpointer(
        CheckpointConfig(str(directory)), run_config=now, defaults=TrainConfig(), ignore_fields=("run_dir",)
    ) as ck:
        ck.check_config({"config": flatten_config(train_cli.parse(saved_args))}, step=10)


def _refused(saved_args: list[str], new_args: list[str], directory):
    from jgem.checkpoint import ConfigMismatchError

    with pytest.raises(ConfigMismatchError) as e:
        _check(saved_args, new_args, directory)
    return e.value, train_cli.parse(new_args)


def test_a_refused_resume_says_which_flags_resume_it(tmp_path) -> None:
    base = ["tiny", "--run-dir", str(tmp_path / "run")]
    changed = [
        "--model.preset", "qwen3-0.6b",
        "--learner.lr", "1e-3",
        "--env.tools", "python",
        "--env.env-kwargs", '{"max_turns": 3}',
        "--rollout.greedy",
        "--curriculum.horizons", "2", "3",
    ]  # fmt: skip
    err, now = _refused(base, base + changed, tmp_path / "ck")
    message = train_cli.mismatch_message(err, now)
    assert "--model.preset: checkpoint tiny, now qwen3-0.6b" in message
    assert "--learner.lr: checkpoint 0.0002, now 0.001" in message
    assert "--rollout.greedy: checkpoint False, now True" in message
    assert f"--run-dir {tmp_path / 'run'}-2" in message
    slashed = dataclasses.replace(now, run_dir=str(tmp_path / "run") + "/")  # a sibling, never inside the run
    assert f"--run-dir {tmp_path / 'run'}-2" in train_cli.mismatch_message(err, slashed)
    assert "ignore_fields" not in message and "model.preset:" not in message.replace("--model.preset:", "")
    lines = message.splitlines()
    resume = shlex.split(lines[lines.index("to resume the run as it was, run the same command with") + 1])
    assert resume[:2] == ["--curriculum.horizons", "--env.env-kwargs"]  # an empty tuple: the flag alone
    # the suggested flags, appended to the new command, give back the checkpoint's config: it resumes
    _check(base, base + changed + resume, tmp_path / "ck")


def test_the_cli_prints_a_refused_resume_without_a_traceback(tmp_path, capsys, monkeypatch) -> None:
    import jgem.train

    base = ["tiny", "--run-dir", str(tmp_path / "run")]
    err, _ = _refused(base, [*base, "--learner.lr", "1e-3"], tmp_path / "ck")

    def refuse(cfg):
        raise err

    monkeypatch.setattr(jgem.train, "train", refuse)
    out = _fails([*base, "--learner.lr", "1e-3"], capsys)
    assert "cannot resume" in out and "--learner.lr 0.0002" in out and "--run-dir" in out


def test_cli_value_writes_what_tyro_reads() -> None:
    assert train_cli.cli_value("rollout.greedy", False) == ["--rollout.no-greedy"]
    assert train_cli.cli_value("eval_greedy", True) == ["--eval-greedy"]
    assert train_cli.cli_value("model.path", None) == ["--model.path", "None"]
    assert train_cli.cli_value("env.tools", []) == ["--env.tools"]
    assert train_cli.cli_value("env.env_kwargs", {"a": 1}) == ["--env.env-kwargs", "'{\"a\": 1}'"]
    assert train_cli.cli_value("model.remat", True) == ["--model.remat", "True"]  # bool | str: a value
    assert np.isclose(float(train_cli.cli_value("learner.lr", 2e-4)[1]), 2e-4)


def test_the_documented_remote_training_command_parses_and_validates(tmp_path, monkeypatch) -> None:
    """docs/services.md's command for training against env servers: the token comes from a file."""
    import re
    from pathlib import Path

    from jgem.config import validate

    text = (Path(__file__).resolve().parents[1] / "docs" / "services.md").read_text()
    (cmd,) = [c for c in re.findall(r"```bash\n(.*?)```", text, re.S) if "experiments.train" in c]
    words = shlex.split(cmd.replace("\\\n", " "))
    argv = words[words.index("experiments.train") + 1 :]
    cfg = train_cli.parse(argv)
    assert cfg.env.backend == "remote" and len(cfg.env.remote_urls) == 2
    assert cfg.env.remote_token_file.endswith(".jgem-serve-token")
    token = tmp_path / "token"
    token.write_text("t0ken\n")
    monkeypatch.delenv("JGEM_SERVE_TOKEN", raising=False)
    cfg = train_cli.parse([*argv, "--env.remote-token-file", str(token), "--run-dir", str(tmp_path / "run")])
    validate(cfg, 1)
    assert cfg.env.read_remote_token() == "t0ken"
