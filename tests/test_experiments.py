"""Light checks of the experiment scripts: launchers (dry runs), ablation sweeps (run lists, dry runs, tables)
and the train commands documented in docs/quickstart.md (they must parse and validate)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.ablations import common, compare_algorithms, gamma_sweep
from tests.multiprocess import xla_flags

ROOT = Path(__file__).resolve().parents[1]
POD = ROOT / "experiments" / "tpu_pod"


def _sh(script: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(script), *args], capture_output=True, text=True, cwd=ROOT, env={**os.environ, **env}, timeout=30
    )


# -- tpu_pod ---------------------------------------------------------------------------------------


def test_launch_dry_run_runs_one_command_on_every_worker():
    r = _sh(
        POD / "launch.sh",
        "my-tpu",
        "us-central2-b",
        "tiny",
        "--steps",
        "3",
        "--run-dir",
        "/mnt/shared/a b",
        DRY_RUN="1",
        JGEM_COORDINATOR="10.0.0.2:8476",
        JGEM_NUM_PROCESSES="4",
        PROJECT="proj",
    )
    assert r.returncode == 0, r.stderr
    (line,) = r.stdout.rstrip("\n").splitlines()
    argv = shlex.split(line)
    assert argv[:6] == ["gcloud", "compute", "tpus", "tpu-vm", "ssh", "my-tpu"]
    assert "--worker=all" in argv and argv[argv.index("--project") + 1] == "proj"
    remote = argv[argv.index("--command") + 1]
    assert "JGEM_COORDINATOR=10.0.0.2:8476" in remote and "JGEM_NUM_PROCESSES=4" in remote
    assert "JGEM_PROCESS_ID=$(curl" in remote and "agent-worker-number" in remote
    # the train arguments survive the remote shell's word splitting, spaces included
    train = remote.split("-m experiments.train ", 1)[1]
    assert shlex.split(train) == ["tiny", "--steps", "3", "--run-dir", "/mnt/shared/a b"]


def test_launch_usage_error():
    r = _sh(POD / "launch.sh", "my-tpu")
    assert r.returncode == 2 and "need <tpu-name> <zone> <preset>" in r.stderr


def test_local_multiprocess_dry_run_gives_each_process_its_id():
    r = _sh(POD / "local_multiprocess.sh", "3", "tiny", "--steps", "2", DRY_RUN="1", JGEM_PORT="9999")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 3
    for i, line in enumerate(lines):
        assert f"JGEM_PROCESS_ID={i} " in line and "JGEM_NUM_PROCESSES=3" in line
        assert "JGEM_COORDINATOR=localhost:9999" in line and "JAX_PLATFORMS=cpu" in line
        assert line.rstrip().endswith("-m experiments.train tiny --steps 2")
    bad = _sh(POD / "local_multiprocess.sh", "two", "tiny")
    assert bad.returncode == 2 and "positive integer" in bad.stderr


# -- ablations -------------------------------------------------------------------------------------


def test_gamma_sweep_runs_every_gamma_and_seed(tmp_path):
    runs = gamma_sweep.build_runs([0.5, 1.0], [0, 1, 2], tmp_path, ["--steps", "2"], ["--eval-episodes", "8"])
    assert len(runs) == 6 and len({r.run_dir for r in runs}) == 6
    argv = runs[0].argv("tiny")
    assert argv[0] == "tiny" and argv[argv.index("--gamma") + 1] == "0.5" and argv[-2:] == ["--eval-episodes", "8"]
    with pytest.raises(SystemExit, match="outside"):
        gamma_sweep.build_runs([1.5], [0], tmp_path, [], [])


def test_compare_algorithms_checks_names_and_group_size(tmp_path):
    runs = compare_algorithms.build_runs(["rebn", "grpo"], [0], 4, tmp_path, [], [])
    assert [r.variant for r in runs] == ["rebn", "grpo"]
    assert all(r.argv("tiny")[r.argv("tiny").index("--group-size") + 1] == "4" for r in runs)
    with pytest.raises(SystemExit, match="group-size"):
        compare_algorithms.build_runs(["rloo"], [0], 1, tmp_path, [], [])
    with pytest.raises(SystemExit, match="unknown"):
        compare_algorithms.build_runs(["a2c"], [0], 4, tmp_path, [], [])


def test_dry_runs_print_resolved_configs(tmp_path, capsys):
    gamma_sweep.main(
        [
            "--gammas",
            "0.7",
            "--seeds",
            "3",
            "--steps",
            "2",
            "--out",
            str(tmp_path),
            "--dry-run",
            "--",
            "--eval-episodes",
            "8",
        ]
    )
    compare_algorithms.main(["--algorithms", "rloo", "--seeds", "1", "--out", str(tmp_path), "--dry-run"])
    from experiments.configs import tiny

    rows = [json.loads(x) for x in capsys.readouterr().out.strip().splitlines()]
    assert rows[0]["config"] | {"run_dir": None} == {
        "gamma": 0.7,
        "seed": 3,
        "steps": 2,
        "algorithm": tiny().algorithm,
        "env.env_id": tiny().env.env_id,
        "run_dir": None,
    }
    assert rows[0]["config"]["run_dir"] == str(tmp_path / "gamma0.7" / "seed3")
    assert rows[1]["config"]["algorithm"] == "rloo" and rows[1]["config"]["group_size"] == 4


def test_summarize_reads_summaries_and_curves(tmp_path):
    runs = gamma_sweep.build_runs([0.5, 1.0], [0, 1], tmp_path, [], [])
    for r, final in zip(runs, [0.25, 0.75, 0.5, None]):
        r.run_dir.mkdir(parents=True)
        rows = [{"step": s, "eval/success_rate": s / 10} for s in (0, 5, 10)]
        (r.run_dir / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))
        if final is not None:
            (r.run_dir / "summary.json").write_text(
                json.dumps({"steps": 10, "final_eval": {"eval/success_rate": final}})
            )
    out = common.summarize(runs, tmp_path, "gamma", numeric_x=True, steps=10)
    assert out[0]["mean"] == pytest.approx(0.5) and out[0]["n"] == 2 and out[0]["failed"] == []
    # no summary.json: the run did not finish; its metrics.jsonl is not a result
    assert out[1]["per_seed"] == {0: 0.5} and out[1]["n"] == 1 and out[1]["failed"] == [1]
    table = (tmp_path / "results.md").read_text()
    assert "| 0.5 | 2 | 0.500 |" in table and table.splitlines()[-1].endswith("| 1 |")
    assert (tmp_path / "plot.png").stat().st_size > 0
    # a summary of another length (an older run in the same dir) is not this sweep's result
    assert common.summarize(runs, tmp_path, "gamma", numeric_x=True, steps=20)[0]["failed"] == [0, 1]


def test_sweep_reports_crashed_runs_and_exits_nonzero(tmp_path, monkeypatch, capsys):
    """compare_algorithms with every ppo run crashing after its initial eval: ppo is reported as failed (not as
    0.000 over 2 runs) and the sweep exits non-zero (issue 20 bug 6)."""
    import sys

    script = (
        "import json, sys, pathlib\n"
        "d = pathlib.Path(sys.argv[sys.argv.index('--run-dir') + 1])\n"
        "algo = sys.argv[sys.argv.index('--algorithm') + 1]\n"
        "(d / 'metrics.jsonl').write_text(json.dumps({'step': 0, 'eval/success_rate': 0.0}) + '\\n')\n"
        "if algo == 'ppo': sys.exit('ValueError: crashed')\n"
        "(d / 'summary.json').write_text(json.dumps({'steps': 2, 'final_eval': {'eval/success_rate': 0.5}}))\n"
    )
    monkeypatch.setattr(common.Run, "command", lambda self, preset: [sys.executable, "-c", script, *self.argv(preset)])
    argv = ["--algorithms", "rebn", "ppo", "--seeds", "0", "1", "--steps", "2", "--out", str(tmp_path)]
    with pytest.raises(SystemExit) as e:
        compare_algorithms.main(argv)
    assert e.value.code not in (0, None) and "ppo seed 0, ppo seed 1" in str(e.value.code)
    rows = {r["variant"]: r for r in json.loads((tmp_path / "results.json").read_text())}
    assert rows["rebn"]["n"] == 2 and rows["rebn"]["mean"] == 0.5 and rows["rebn"]["failed"] == []
    assert rows["ppo"]["n"] == 0 and rows["ppo"]["mean"] is None and rows["ppo"]["failed"] == [0, 1]
    assert "| ppo | 0 | - |" in (tmp_path / "results.md").read_text()
    assert capsys.readouterr().out.count("FAILED") == 2
    # re-running skips the finished runs, retries the failed ones, and still exits non-zero
    with pytest.raises(SystemExit):
        compare_algorithms.main(argv)


# -- docs/quickstart.md ----------------------------------------------------------------------------


def _documented_train_commands() -> list[tuple[dict[str, str], list[str]]]:
    text = (ROOT / "docs" / "quickstart.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    out = []
    for block in blocks:
        for cmd in block.replace("\\\n", " ").splitlines():
            words = shlex.split(cmd, comments=True)
            if "experiments.train" not in words or "--help" in words:
                continue
            env = dict(w.split("=", 1) for w in words[: words.index(".venv/bin/python")])
            out.append((env, words[words.index("experiments.train") + 1 :]))
    return out


def test_quickstart_train_commands_parse_and_validate():
    import tyro

    from experiments.configs import PRESETS
    from experiments.train import pop_imports
    from jgem.config import validate

    cmds = _documented_train_commands()
    assert len(cmds) >= 6
    for env, argv in cmds:
        modules, argv = pop_imports(argv)
        cfg = tyro.extras.overridable_config_cli(PRESETS, args=argv, console_outputs=False)
        cfg = dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, imports=(*cfg.env.imports, *modules)))
        if cfg.model.path is not None:  # the documented paths are placeholders for the user's checkpoint
            cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, path=None))
        validate(cfg, int(env.get("JAX_NUM_CPU_DEVICES", "1")))


def test_env_kwargs_from_the_cli(monkeypatch):
    """`--env.env-kwargs` takes a JSON object through experiments.train's own parser, with or without a preset
    that fills it (issue 20 bug 8)."""
    import sys

    import jgem.train
    from experiments import train as train_cli

    seen = []
    monkeypatch.setattr(jgem.train, "train", seen.append)
    for argv, want in [
        (["tiny", "--env.env-kwargs", '{"min_number": 1}'], {"min_number": 1}),
        (["qwen3-4b-math-python", "--env.env-kwargs", '{"path": "gsm8k.parquet"}'], {"path": "gsm8k.parquet"}),
        (["tiny"], {}),
    ]:
        monkeypatch.setattr(sys, "argv", ["experiments.train", *argv])
        train_cli.main()
        assert seen.pop().env.env_kwargs == want
    monkeypatch.setattr(sys, "argv", ["experiments.train", "tiny", "--env.env-kwargs", "[1]"])
    with pytest.raises(SystemExit):
        train_cli.main()


def test_pop_imports_takes_every_import_flag():
    from experiments.train import pop_imports

    argv = ["tiny", "--import", "a.b", "--steps", "2", "--import=c", "--env.env-id", "x:y"]
    assert pop_imports(argv) == (["a.b", "c"], ["tiny", "--steps", "2", "--env.env-id", "x:y"])
    with pytest.raises(SystemExit, match="module name"):
        pop_imports(["tiny", "--import", "--steps", "2"])


@pytest.mark.slow
def test_a_custom_env_trains_from_the_cli_with_import(tmp_path, capsys):
    """`--import tests.custom_envs` registers an id jgem does not know, in the trainer and in process workers;
    without it the same command is refused naming the id."""
    from experiments import train as train_cli
    from jgem.registry import list_envs

    run = tmp_path / "run"
    args = ["tiny", "--env.env-id", "test-custom:TinyGuess-v0", "--steps", "1", "--episodes-per-step", "4"]
    args += ["--env.num-envs", "4", "--env.backend", "process", "--warm-start.steps", "0", "--eval-every", "0"]
    args += ["--no-plot", "--no-console", "--run-dir", str(run)]
    # tests/train_utils.py's 1-layer "test-micro" architecture (registered by the module, in every process that
    # imports it): the model's size is not what this test is about
    args += ["--import", "tests.learner_micro_preset", "--model.preset", "test-micro"]
    # the refusal, here in-process: validation runs before anything is built, and nothing in the test session
    # imports tests.custom_envs (so jgem does not know the id)
    assert "test-custom:TinyGuess-v0" not in list_envs()
    with pytest.raises(SystemExit) as refused:
        train_cli.main(args)
    assert refused.value.code not in (0, None)
    assert "unknown env id 'test-custom:TinyGuess-v0'" in capsys.readouterr().err
    assert not (run / "config.json").exists()
    # one CPU device, not the session's 8: the mesh is not what this test is about, and 8 devices compile 8-way programs
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu", "XLA_FLAGS": xla_flags(1)}
    env.pop("JAX_NUM_CPU_DEVICES", None)
    cmd = [sys.executable, "-m", "experiments.train", *args, "--import", "tests.custom_envs"]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 1
    saved = json.loads((run / "config.json").read_text())
    assert saved["env"]["env_id"] == "test-custom:TinyGuess-v0" and saved["model"]["preset"] == "test-micro"
    assert saved["env"]["imports"] == ["tests.learner_micro_preset", "tests.custom_envs"]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r for r in rows if r.get("step") == 1][0]["rollout/max_turns"] == 2.0  # TinyGuess's own limit
