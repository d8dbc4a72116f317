"""experiments.eval on a 2-step tiny run: the restored policy, the trainer's own eval episodes, table and JSON."""

from __future__ import annotations

import json

import numpy as np
import pytest

from experiments import eval as eval_cli
from jgem.train import Trainer, params_digest
from tests.train_utils import small_config


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    cfg = small_config(str(tmp_path_factory.mktemp("eval") / "run"), steps=2, eval_episodes=3, eval_greedy=True)
    trainer = Trainer(cfg)
    trainer.run()
    return cfg, trainer.state


def test_eval_restores_the_checkpoint_it_names(run):
    cfg, state = run
    latest, step = eval_cli.load_trainer(cfg.run_dir)
    first, step1 = eval_cli.load_trainer(f"{cfg.run_dir}/checkpoints/1")
    assert (step, step1) == (2, 1)
    assert params_digest(latest.state.params) == params_digest(state.params)
    # the device state's own step counter tells the checkpoints (and a fresh init, 0) apart
    assert (int(latest.state.step), int(first.state.step)) == (2, 1)
    with pytest.raises(FileNotFoundError, match="neither a run directory"):
        eval_cli.resolve(f"{cfg.run_dir}/checkpoints")


def test_eval_cli_equals_the_trainers_evaluation(run, tmp_path, capsys):
    cfg, state = run
    out = tmp_path / "eval.json"
    result = eval_cli.main([cfg.run_dir, "--episodes", "3", "--greedy", "--out", str(out)])
    reference = Trainer(cfg)  # the run's trainer holding the trained params evaluates the same way
    reference.state = state
    assert result["metrics"] == reference.evaluate(2)
    assert [e["seed"] for e in result["per_episode"]] == [s.seed for s in reference.specs(2, eval=True)]
    assert json.loads(out.read_text()) == result
    printed = capsys.readouterr().out
    assert "eval/success_rate" in printed and f"{result['metrics']['eval/return']:10.4f}" in printed

    sampled = eval_cli.main([cfg.run_dir, "--no-greedy", "--episodes", "5", "--max-turns", "1"])
    assert not sampled["greedy"] and sampled["episodes"] == 5
    assert sampled["metrics"]["eval/max_turns"] == 1.0 and all(e["turns"] == 1 for e in sampled["per_episode"])


def test_eval_on_a_named_env(run):
    cfg, _ = run
    result = eval_cli.main([cfg.run_dir, "--env-id", "game:GuessTheNumber-v0-hard", "--episodes", "2"])
    assert result["env_id"] == "game:GuessTheNumber-v0-hard" and result["episodes"] == 2
    assert np.isfinite(result["metrics"]["eval/return"])
    assert result["metrics"]["eval/max_turns"] == 7.0  # the hard variant's turn limit (the run's env has 4)
