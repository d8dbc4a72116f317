"""experiments.eval on a 2-step tiny run: the restored policy, the trainer's own eval episodes, table and JSON."""

from __future__ import annotations

import json

import numpy as np
import pytest

from experiments import eval as eval_cli
from jgem.train import Trainer
from jgem.train.loop import params_digest
from tests.train_utils import small_config


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    cfg = small_config(str(tmp_path_factory.mktemp("eval") / "run"), steps=2, eval_episodes=3, eval_greedy=True)
    trainer = Trainer(cfg)
    trainer.run()
    return cfg, trainer.state


def test_eval_restores_the_checkpoint_it_names(run):
    cfg, state = run
    latest, step = eval_cli.load_run(cfg.run_dir)
    first, step1 = eval_cli.load_run(f"{cfg.run_dir}/checkpoints/1")
    latest.close(), first.close()
    assert (step, step1) == (2, 1)
    # the policy alone was read: no optimizer state is built or restored for an evaluation
    assert latest.state.opt_state is None and state.opt_state is not None
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
    captured = capsys.readouterr()
    printed = captured.out
    assert "eval/success_rate" in printed and f"{result['metrics']['eval/return']:10.4f}" in printed
    assert f"wrote the metrics and every episode to {out}" in printed
    # progress on stderr: where the results go, what is evaluated, when it is done
    assert f"the results go to {out}" in captured.err
    assert f"evaluating step 2 of {cfg.run_dir} on {cfg.env.env_id}: 3 episodes, greedy" in captured.err
    assert "evaluated 3 episodes in" in captured.err

    sampled = eval_cli.main([cfg.run_dir, "--no-greedy", "--episodes", "5", "--max-turns", "1"])
    assert not sampled["greedy"] and sampled["episodes"] == 5
    assert sampled["metrics"]["eval/max_turns"] == 1.0 and all(e["turns"] == 1 for e in sampled["per_episode"])


def test_eval_on_a_named_env(run):
    cfg, _ = run
    result = eval_cli.main([cfg.run_dir, "--env-id", "game:GuessTheNumber-v0-hard", "--episodes", "2"])
    assert result["env_id"] == "game:GuessTheNumber-v0-hard" and result["episodes"] == 2
    assert np.isfinite(result["metrics"]["eval/return"])
    assert result["metrics"]["eval/max_turns"] == 7.0  # the hard variant's turn limit (the run's env has 4)


def test_progress_lines_as_episodes_finish() -> None:
    """A line per change of the finished count, at most every `every_s`, as plain text (no terminal needed)."""
    import threading
    import time
    from types import SimpleNamespace

    trainer = SimpleNamespace(engine=SimpleNamespace(stats=SimpleNamespace(episodes=0)))
    lines: list[str] = []
    lock = threading.Lock()

    def say(line: str) -> None:
        with lock:
            lines.append(line)

    with eval_cli._episode_progress(trainer, 8, say, time.perf_counter(), every_s=0.02):
        for done in (2, 5):
            trainer.engine.stats.episodes = done
            deadline = time.monotonic() + 10
            while not any(f"{done}/8 episodes done" in x for x in lines) and time.monotonic() < deadline:
                time.sleep(0.01)
    assert [x.split(" (")[0].strip() for x in lines] == ["2/8 episodes done", "5/8 episodes done"]


@pytest.mark.parametrize("command", ["eval", "export"])
def test_an_hf_export_is_named_as_such(tmp_path, capsys, command) -> None:
    """`experiments.eval DIR` on `experiments.export`'s output says what DIR is and how to use it, no traceback."""
    from experiments import export as export_cli

    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"}))
    main = eval_cli.main if command == "eval" else export_cli.main
    with pytest.raises(SystemExit) as e:
        main([str(hf)] + (["--out", str(tmp_path / "out")] if command == "export" else []))
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "is a Hugging Face export" in err and f"--model.path {hf}" in err
    assert "Traceback" not in err and "has no fields" not in err
