"""experiments.eval on a 2-step tiny run: the restored policy, the trainer's own eval episodes, table and JSON."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

import jgem
from experiments import eval as eval_cli
from experiments.eval_suite import k_values, pass_at_k
from jgem.envs.data import make_eval_samples
from jgem.envs.data.dataset import SingleTurnEnv
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


# -- suites (experiments/eval_suite.py): GEM's eval ids, several attempts, pass@k ---------------------------------
SAMPLES = str(make_eval_samples.OUT)  # the shipped samples of GEM's eval data, a data dir


_GRADED = itertools.count()


class CoinEnv(SingleTurnEnv):
    """Four one-line problems; every third answer graded is right, whatever it says (the tiny policy's answers are
    all cut at its token limit, so they cannot tell attempts apart): some attempts of a problem pass, some fail."""

    def __init__(self, index_seeds: bool = True, seed: int | None = None) -> None:
        rows = [{"problem": f"Problem {i}. Say anything."} for i in range(4)]
        super().__init__(rows, seed=seed, index_seeds=index_seeds)

    def prompt(self, row: dict) -> str:
        return row["problem"]

    def grade(self, action: str, row: dict) -> tuple[float, dict]:
        return float(next(_GRADED) % 3 == 0), {}


@pytest.fixture
def coin():
    jgem.register("test-eval:Coin-v0", CoinEnv, overwrite=True)
    yield "test-eval:Coin-v0"
    jgem.registry._REGISTRY.pop("test-eval:Coin-v0", None)


def test_pass_at_k_is_the_unbiased_estimator():
    for n in range(1, 7):
        for c in range(n + 1):
            for k in range(1, n + 1):  # the chance that k of the n attempts, drawn without replacement, hold a pass
                draws = list(itertools.combinations([True] * c + [False] * (n - c), k))
                assert pass_at_k(n, c, k) == pytest.approx(sum(any(d) for d in draws) / len(draws))
    assert (pass_at_k(5, 2, 2), pass_at_k(4, 1, 1), pass_at_k(4, 0, 4)) == (pytest.approx(0.7), 0.25, 0.0)
    assert k_values(4) == [1, 2, 4] and k_values(6) == [1, 2, 4, 6] and k_values(1) == [1]
    with pytest.raises(ValueError, match="1 <= k <= n"):
        pass_at_k(2, 1, 3)


def test_suite_reads_the_data_dir_and_switches_envs(run, tmp_path, capsys, monkeypatch):
    """Each id of the suite is played on its own env (CodeContest's -0.1 for no code block is no math score), every
    row once per attempt; the JSON and markdown are written."""
    cfg, _ = run
    monkeypatch.delenv("JGEM_DATA", raising=False)
    monkeypatch.setenv("JGEM_CACHE_DIR", str(tmp_path / "cache"))  # datasets' conversion cache, off ~/.cache
    out = tmp_path / "suite.json"
    result = eval_cli.main(
        [
            cfg.run_dir,
            "--suite",
            "eval:AMC,eval:CodeContest",
            "--attempts",
            "2",
            "--data-dir",
            SAMPLES,
            "--out",
            str(out),
        ]
    )
    assert result["ids"] == ["eval:AMC", "eval:CodeContest"] and not result["greedy"] and result["attempts"] == 2
    for env_id in result["ids"]:
        metrics = result["results"][env_id]
        assert (metrics["problems"], metrics["attempts"]) == (3, 2)
        assert [p["seed"] for p in result["per_problem"][env_id]] == [0, 1, 2]  # row i is seed i
    # the tiny policy writes no code block: GEM's -0.1 on every CodeContest attempt, 0 on AMC's
    assert result["results"]["eval:CodeContest"]["return"] == pytest.approx(-0.1)
    assert result["results"]["eval:AMC"]["return"] == 0.0
    assert result["average"]["return"] == pytest.approx(-0.05)
    assert json.loads(out.read_text()) == result
    table = out.with_suffix(".md").read_text()
    assert "| metric | AMC | CodeContest | average |" in table and "| problems | 3 | 3 | |" in table
    assert "| pass@1 |" in table and "| pass@2 |" in table and "| mean@2 |" in table
    assert table.strip() in capsys.readouterr().out


def test_suite_pass_at_k_from_sampled_attempts(run, coin):
    cfg, _ = run
    result = eval_cli.main([cfg.run_dir, "--suite", coin, "--attempts", "4"])
    metrics, problems = result["results"][coin], result["per_problem"][coin]
    correct = np.array([p["correct"] for p in problems])
    assert correct.shape == (4, 4) and 0 < correct.sum() < 16
    assert any(0 < c < 4 for c in correct.sum(axis=1))  # so pass@2 is no plain any/all
    for k in (1, 2, 4):
        assert metrics[f"pass@{k}"] == pytest.approx(np.mean([pass_at_k(4, int(c), k) for c in correct.sum(axis=1)]))
    assert metrics["mean@4"] == pytest.approx(correct.mean()) == metrics["pass@1"]
    assert metrics["pass@4"] == pytest.approx(correct.any(axis=1).mean())
    assert result["average"] == {k: metrics[k] for k in ("pass@1", "pass@2", "pass@4", "mean@4", "return")}


def test_a_game_in_a_suite_plays_the_held_out_seeds(run):
    from jgem.train.run import EVAL_SEED_OFFSET

    cfg, _ = run
    result = eval_cli.main(
        [cfg.run_dir, "--suite", "game:GuessTheNumber-v0-hard", "--attempts", "2", "--episodes", "2"]
    )
    seeds = [p["seed"] for p in result["per_problem"]["game:GuessTheNumber-v0-hard"]]
    assert seeds == [EVAL_SEED_OFFSET + cfg.seed * 7_919_000 + i for i in range(2)]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--suite", "math"], "eval:AIME24: this math env reads the split 'aime24'"),
        (["--suite", "math", "--attempts", "4", "--greedy"], "--greedy with --attempts 4 plays 4 identical attempts"),
        (["--suite", "maths"], "'maths' is neither a suite (math, code, qa) nor a comma-separated list"),
        (["--suite", "eval:AMC,eval:AMCC"], "unknown env id 'eval:AMCC'; did you mean 'eval:AMC'"),
        (["--suite", "math", "--env-id", "eval:AMC"], "--suite and --env-id both name what to evaluate"),
        (["--env-id", "game:Sudoku-v0-easy", "--data-dir", SAMPLES], "game:Sudoku-v0-easy reads none"),
    ],
)
def test_suite_mistakes_are_one_line_errors(run, capsys, monkeypatch, flags, message):
    cfg, _ = run
    monkeypatch.delenv("JGEM_DATA", raising=False)
    with pytest.raises(SystemExit) as e:
        eval_cli.main([cfg.run_dir, *flags])
    err = capsys.readouterr().err
    assert e.value.code == 2 and message in err and "Traceback" not in err
    if flags == ["--suite", "math"]:  # the first id missing its data says where it goes, and how many were not checked
        assert "$JGEM_DATA/axon-rl/math-eval/" in err and "4 more id(s) of the suite not checked" in err


def test_a_suite_keeps_the_runs_tools(run):
    """The env config the run was trained with (here its tools) wraps every id the suite moves the run to."""
    cfg, _ = run
    loaded, _ = eval_cli.load_run(cfg.run_dir, env={"tools": ("python",)})
    try:
        loaded.use_env("eval:AMC", {"data_dir": SAMPLES, "index_seeds": True})
        assert loaded.engine.pool is loaded.pool and loaded.engine.env_name == "eval:AMC"
        loaded.pool.reset([0], seeds=[1])
        (messages,) = loaded.pool.recv(at_least=1).obs
        text = messages[-1]["content"]
        assert text.startswith("How many positive divisors does $36$ have?") and "<python>" in text
    finally:
        loaded.close()
