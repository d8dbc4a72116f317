"""Light checks of the experiment scripts: launchers (dry runs), ablation sweeps (run lists, dry runs, tables)
and the train commands documented in docs/quickstart.md (they must parse and validate)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import statistics
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


def test_shared_warm_start_runs_once_per_seed(tmp_path):
    """With the shared warm start, each seed's warm start is one run of 0 RL steps in <out>/warm/seed<s>, listed
    first, and every variant of that seed trains from its export with no warm start of its own: flags that come
    after the pass-through, so `-- --warm-start.steps 5 --steps 9` cannot undo them."""
    extra = ["--warm-start.steps", "5", "--steps", "9"]
    for runs, arms in [
        (gamma_sweep.build_runs([0.5, 1.0], [0, 1], tmp_path, ["--steps", "2"], extra, shared_warm_start=True), 4),
        (compare_algorithms.build_runs(["rebn", "grpo"], [0, 1], 4, tmp_path, [], extra, shared_warm_start=True), 4),
    ]:
        warm, rest = runs[:2], runs[2:]
        assert len(rest) == arms and all(r.is_warm_start for r in warm) and not any(r.is_warm_start for r in rest)
        assert [(r.seed, r.run_dir) for r in warm] == [(s, tmp_path / "warm" / f"seed{s}") for s in (0, 1)]
        for r in warm:
            argv = r.argv("tiny")
            assert argv[-2:] == ["--steps", "0"] and "--gamma" not in argv and "--algorithm" not in argv
            assert r.steps(2) == 0
        for r in rest:
            hf = str(tmp_path / "warm" / f"seed{r.seed}" / "hf")
            pinned = ["--model.path", hf, "--warm-start.steps", "0", "--no-eval-at-start"]
            assert r.argv("tiny")[-5:] == pinned and r.steps(2) == 2
    # without it, no warm-start runs and nothing pinned
    plain = gamma_sweep.build_runs([0.5], [0, 1], tmp_path, [], extra)
    assert [r.warm for r in plain] == [None, None] and plain[0].argv("tiny")[-4:] == extra


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
    argv = ["--algorithms", "rloo", "--seeds", "1", "--out", str(tmp_path), "--dry-run", "--no-shared-warm-start"]
    compare_algorithms.main(argv)
    from experiments.configs import tiny, tiny_gamma

    rows = [json.loads(x) for x in capsys.readouterr().out.strip().splitlines()]
    assert len(rows) == 5
    # gamma_sweep's default preset warm-starts: seed 3's warm start, then gamma 0.7 from its (future) export
    assert rows[0]["variant"] == "warm-start" and rows[0]["run_dir"] == str(tmp_path / "warm" / "seed3")
    assert rows[0]["config"]["steps"] == 0 and rows[0]["config"]["warm_start.steps"] == tiny_gamma().warm_start.steps
    assert rows[1]["config"] | {"run_dir": None} == {
        "gamma": 0.7,
        "seed": 3,
        "steps": 2,
        "warm_start.steps": 0,
        "algorithm": tiny_gamma().algorithm,
        "env.env_id": tiny_gamma().env.env_id,
        "run_dir": None,
    }
    assert rows[1]["config"]["run_dir"] == str(tmp_path / "gamma0.7" / "seed3")
    assert rows[1]["starts_from"] == str(tmp_path / "warm" / "seed3" / "hf")
    assert f"--model.path {tmp_path / 'warm' / 'seed3' / 'hf'} --warm-start.steps 0" in rows[1]["command"]
    assert rows[2]["variant"] == "warm-start" and rows[3]["config"]["algorithm"] == "rloo"
    assert rows[3]["config"]["group_size"] == 4 and rows[3]["config"]["warm_start.steps"] == 0
    # --no-shared-warm-start: the run warm-starts itself
    assert rows[4]["config"]["warm_start.steps"] == tiny().warm_start.steps and "starts_from" not in rows[4]


def _fake_run(run_dir: Path, rows: list[dict], summary: dict | None) -> None:
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))
    if summary is not None:
        (run_dir / "summary.json").write_text(json.dumps(summary))


def test_a_sweeps_runs_share_one_compilation_cache_unless_one_is_set(tmp_path, monkeypatch):
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    env = common.compile_cache_env(tmp_path)
    assert env["JAX_COMPILATION_CACHE_DIR"] == str(tmp_path / ".jax_cache")
    assert env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] == "0"
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", "/elsewhere")
    assert common.compile_cache_env(tmp_path)["JAX_COMPILATION_CACHE_DIR"] == "/elsewhere"


def test_summarize_reads_summaries_and_curves(tmp_path):
    runs = gamma_sweep.build_runs([0.5, 1.0], [0, 1], tmp_path, [], [])
    for r, final in zip(runs, [0.25, 0.75, 0.5, None]):
        rows = [{"step": s, "eval/success_rate": s / 10, "rollout/success_rate": s / 20} for s in (0, 5, 10)]
        _fake_run(r.run_dir, rows, None if final is None else {"steps": 10, "final_eval": {"eval/success_rate": final}})
    out = common.summarize(runs, tmp_path, "gamma", numeric_x=True, steps=10)
    sr = "eval/success_rate"
    assert out[0]["metrics"][sr]["mean"] == pytest.approx(0.5) and out[0]["runs"] == 2 and out[0]["failed"] == []
    # no summary.json: the run did not finish; its metrics.jsonl is not a result
    assert out[1]["metrics"][sr]["per_seed"] == {0: 0.5} and out[1]["runs"] == 1 and out[1]["failed"] == [1]
    # a metric eval does not log comes from the last metrics.jsonl row that has it
    assert common.final_metric(runs[0].run_dir, "rollout/success_rate", 10) == 0.5
    table = (tmp_path / "results.md").read_text()
    assert f"| 0.5 | 2 | 0.500 ± {12.706 * 0.25:.3f} | - |" in table and "| 1 | 1 | 0.500 | 1 |" in table
    assert (tmp_path / "plot.png").stat().st_size > 0
    # a summary of another length (an older run in the same dir) is not this sweep's result
    assert common.summarize(runs, tmp_path, "gamma", numeric_x=True, steps=20)[0]["failed"] == [0, 1]


def test_summarize_gives_95_percent_intervals_per_metric(tmp_path):
    """2 gammas x 3 seeds, seed 2 of gamma 1 crashed: means, sample stds and Student-t half-widths by hand; the
    crashed seed is listed and left out of everything; a finished run without eval/turns_success (nothing
    succeeded) is left out of that metric only, never given an earlier eval's value."""
    sr, ts = "eval/success_rate", "eval/turns_success"
    runs = gamma_sweep.build_runs([0.5, 1.0], [0, 1, 2], tmp_path, [], [])
    finals = [{sr: 0.5, ts: 4.0}, {sr: 0.7, ts: 5.0}, {sr: 0.9, ts: 6.0}, {sr: 0.0}, {sr: 0.6, ts: 7.0}, None]
    for r, final in zip(runs, finals):
        rows = [{"step": 0, sr: 0.3, ts: 3.0}, {"step": 10, sr: 0.99, "rollout/turns": 5.0}]
        _fake_run(r.run_dir, rows, None if final is None else {"steps": 10, "final_eval": final})
    out = common.summarize(
        runs,
        tmp_path,
        "gamma",
        numeric_x=True,
        metrics=[sr, ts],
        steps=10,
        curve_metric="rollout/turns",
        baseline="0.5",
    )
    a, b = (r["metrics"] for r in out)
    assert a[sr]["mean"] == pytest.approx(0.7) and a[sr]["std"] == pytest.approx(0.2) and a[sr]["n"] == 3
    assert a[sr]["half_width"] == pytest.approx(4.303 * 0.2 / 3**0.5)
    assert a[sr]["ci95"] == pytest.approx([0.7 - 4.303 * 0.2 / 3**0.5, 0.7 + 4.303 * 0.2 / 3**0.5])
    assert a[ts]["mean"] == pytest.approx(5.0) and a[ts]["half_width"] == pytest.approx(4.303 * 1.0 / 3**0.5)
    assert out[1]["runs"] == 2 and out[1]["failed"] == [2] and b[sr]["per_seed"] == {0: 0.0, 1: 0.6}
    assert b[sr]["mean"] == pytest.approx(0.3) and b[sr]["std"] == pytest.approx(0.18**0.5)
    assert b[sr]["half_width"] == pytest.approx(12.706 * 0.18**0.5 / 2**0.5)
    assert b[ts]["per_seed"] == {0: None, 1: 7.0} and b[ts]["n"] == 1 and b[ts]["mean"] == 7.0
    assert b[ts]["std"] is None and b[ts]["half_width"] is None  # one value: no interval
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["metrics"] == [sr, ts] and saved["variants"][1]["metrics"][sr]["per_seed"] == {"0": 0.0, "1": 0.6}
    table = (tmp_path / "results.md").read_text()
    assert f"| gamma | runs | {sr} | {ts} | failed seeds |" in table
    assert "| 0.5 | 3 | 0.700 ± 0.497 | 5.000 ± 2.484 | - |" in table
    assert "| 1 | 2 | 0.300 ± 3.812 | 7.000 (n=1) | 2 |" in table
    assert "| 1 | 0 | 0.000 | - |" in table and "| 1 | 2 |" not in table.split("Per seed")[1]
    assert "0.990" not in table
    # paired with the baseline (gamma 0.5) on the seeds both finished: 0.0 - 0.5 and 0.6 - 0.7; turns_success on
    # seed 1 only (seed 0 of gamma 1 has none): a difference without an interval
    d = out[1]["paired"]
    assert "paired" not in out[0] and d[sr]["seeds"] == [0, 1] and d[sr]["mean"] == pytest.approx(-0.3)
    assert d[sr]["half_width"] == pytest.approx(12.706 * 0.08**0.5 / 2**0.5)
    assert d[ts]["seeds"] == [1] and d[ts]["mean"] == pytest.approx(2.0) and d[ts]["ci95"] is None
    hw = 12.706 * 0.08**0.5 / 2**0.5
    assert f"| 1 | 2 | -0.300 [{-0.3 - hw:+.3f}, {-0.3 + hw:+.3f}] | +2.000 |" in table.split("Paired by seed")[1]
    assert saved["baseline"] == "0.5" and saved["variants"][1]["paired"][sr]["seeds"] == [0, 1]
    # past 30 degrees of freedom the normal quantile
    assert common.interval([0.0, 1.0] * 20)["half_width"] == pytest.approx(
        1.96 * common.interval([0.0, 1.0] * 20)["std"] / 40**0.5
    )
    assert common.interval([0.0, 1.0] * 15 + [0.0])["half_width"] == pytest.approx(
        2.042 * statistics.stdev([0.0, 1.0] * 15 + [0.0]) / 31**0.5
    )


def test_progress_says_where_each_running_run_is(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    assert common.position(run) == "start"
    (run / "config.json").write_text(json.dumps({"steps": 40, "warm_start": {"steps": 100}}))
    (run / "metrics.jsonl").write_text(json.dumps({"step": -100}) + "\n" + json.dumps({"step": -37}) + "\n")
    assert common.position(run) == "warm-start 63/100"
    with open(run / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"step": 12}) + "\n" + '{"step": 1')  # a torn last line is skipped
    assert common.position(run) == "step 12/40"
    (run / "config.json").write_text(json.dumps({"steps": 0, "warm_start": {"steps": 100}}))
    (run / "metrics.jsonl").write_text(json.dumps({"step": 0}) + "\n")
    assert common.position(run) == "warm-start 100/100"  # a shared warm start, evaluating or exporting
    progress = common._Progress(5, 60.0)
    progress.started(common.Run("0.9", 2, run, ()))
    progress.ended(True)
    assert progress.line() == "progress: 1/5 runs done; running: 0.9 seed 2 at warm-start 100/100"


def test_sweep_reports_crashed_runs_and_exits_nonzero(tmp_path, monkeypatch, capsys):
    """compare_algorithms with every ppo run crashing after its initial eval: ppo is reported as failed (not as
    0.000 over 2 runs) and the sweep exits non-zero (issue 20 bug 6)."""
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
    argv += ["--no-shared-warm-start"]
    with pytest.raises(SystemExit) as e:
        compare_algorithms.main(argv)
    assert e.value.code not in (0, None) and "ppo seed 0, ppo seed 1" in str(e.value.code)
    rows = {r["variant"]: r for r in json.loads((tmp_path / "results.json").read_text())["variants"]}
    rebn, ppo = rows["rebn"], rows["ppo"]
    assert rebn["runs"] == 2 and rebn["metrics"]["eval/success_rate"]["mean"] == 0.5 and rebn["failed"] == []
    assert ppo["runs"] == 0 and ppo["metrics"]["eval/success_rate"]["mean"] is None and ppo["failed"] == [0, 1]
    assert "| ppo | 0 | - | 0, 1 |" in (tmp_path / "results.md").read_text()
    assert capsys.readouterr().out.count("FAILED") == 2
    # re-running skips the finished runs, retries the failed ones, and still exits non-zero
    with pytest.raises(SystemExit):
        compare_algorithms.main(argv)


def test_shared_warm_start_sweep_trains_each_seed_from_its_export(tmp_path, monkeypatch, capsys):
    """compare_algorithms with fake train and export commands, 2 at a time: the warm starts run (0 steps) and are
    exported before any run of their seed, which loads the export with no warm start of its own; seed 1's warm
    start crashes, so its runs fail without running; a re-run skips what is done."""
    train = (
        "import json, sys, pathlib\n"
        "a = sys.argv\n"
        "d = pathlib.Path(a[a.index('--run-dir') + 1])\n"
        "steps = int([a[i + 1] for i, x in enumerate(a) if x == '--steps'][-1])\n"
        "if '--model.path' in a:\n"
        "    assert a[-5] == '--model.path' and a[-3:] == ['--warm-start.steps', '0', '--no-eval-at-start'], a\n"
        "    assert (pathlib.Path(a[-4]) / 'config.json').is_file(), 'export missing'\n"
        "elif a[a.index('--seed') + 1] == '1': sys.exit('warm start crashed')\n"
        "(d / 'summary.json').write_text(json.dumps({'steps': steps, 'final_eval': {'eval/success_rate': 0.5}}))\n"
    )
    export = "import sys, pathlib; d = pathlib.Path(sys.argv[1]); d.mkdir(); (d / 'config.json').write_text('{}')"
    monkeypatch.setattr(common.Run, "command", lambda self, preset: [sys.executable, "-c", train, *self.argv(preset)])
    monkeypatch.setattr(
        common.Run, "export_command", lambda self: [sys.executable, "-c", export, str(self.run_dir / "hf")]
    )
    argv = ["--algorithms", "rebn", "grpo", "--seeds", "0", "1", "--steps", "2", "--out", str(tmp_path), "--jobs", "2"]
    with pytest.raises(SystemExit) as e:
        compare_algorithms.main([*argv, "--", "--warm-start.steps", "5"])
    assert "2 run(s) failed: rebn seed 1, grpo seed 1" in str(e.value.code)
    out = capsys.readouterr().out
    assert out.index("[1/6] warm-start seed 0") < out.index("[3/6] rebn seed 0")
    assert out.count("FAILED") == 3 and "FAILED: rebn seed 1 (its warm start failed)" in out
    assert json.loads((tmp_path / "warm" / "seed0" / "summary.json").read_text())["steps"] == 0
    assert (tmp_path / "warm" / "seed0" / "hf" / "config.json").is_file()
    assert "shared warm start failed" in (tmp_path / "grpo" / "seed1" / "sweep.log").read_text()
    rows = json.loads((tmp_path / "results.json").read_text())["variants"]
    assert [(r["variant"], r["runs"], r["failed"]) for r in rows] == [("rebn", 1, [1]), ("grpo", 1, [1])]
    with pytest.raises(SystemExit):
        compare_algorithms.main([*argv, "--", "--warm-start.steps", "5"])
    assert capsys.readouterr().out.count("done already") == 3  # seed 0's warm start and both its runs


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


def test_quickstart_train_commands_parse_and_validate(tmp_path, monkeypatch):
    import tyro

    from experiments.configs import PRESETS
    from experiments.train import pop_imports
    from jgem.config import validate
    from jgem.rollout.workflow import WORKFLOWS

    # a module the page writes out (a ```python block opening with `# name.py`) is there for its commands' --import
    text = (Path(__file__).resolve().parents[1] / "docs" / "quickstart.md").read_text()
    written = dict(re.findall(r"```python\n# (\w+)\.py\n(.*?)```", text, re.S))
    assert "my_workflows" in written
    for name, code in written.items():
        (tmp_path / f"{name}.py").write_text(code)
        sys.modules.pop(name, None)  # imported afresh from here, registering what it registers
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(WORKFLOWS.names())
    cmds = _documented_train_commands()
    assert len(cmds) >= 6
    try:
        _validate_commands(cmds, PRESETS, pop_imports, tyro, validate)
    finally:  # what the page's modules registered leaves with them
        for name in set(WORKFLOWS.names()) - before:
            WORKFLOWS._entries.pop(name)
        for name in written:
            sys.modules.pop(name, None)


def _validate_commands(cmds, PRESETS, pop_imports, tyro, validate) -> None:
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


# The sweep's smoke run: 1 RL step per run after a 1-step shared warm start, 4 episodes, 4 eval episodes, the 1-layer
# "test-micro" architecture (tests/learner_micro_preset.py) on one CPU device.
SMOKE = ["--steps", "1", "--seeds", "0", "--jobs", "1"]
SMOKE_RUN = ["--warm-start.steps", "1", "--warm-start.episodes-per-step", "4", "--episodes-per-step", "4"]
SMOKE_RUN += ["--env.num-envs", "4", "--eval-episodes", "4", "--no-plot", "--model.preset", "test-micro"]
SMOKE_RUN += ["--import", "tests.learner_micro_preset"]


@pytest.mark.slow
def test_a_sweep_runs_end_to_end_with_one_step_per_run(tmp_path):
    """A sweep as a researcher runs it (the gamma sweep on its default preset, tiny-gamma, one warm start for every
    run), cut to 1 step per run, 2 arms and 1 seed: the shared warm start trains and exports, both arms train from
    it, and the table lists both arms with one finished run each. The other sweeps share this machinery
    (experiments/ablations/common.py); their own parts are checked by their dry runs and run lists above and their
    tables below."""
    from jgem.metrics import read_jsonl

    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu", "XLA_FLAGS": xla_flags(1)}
    env.pop("JAX_NUM_CPU_DEVICES", None)
    arms = ["--gammas", "0.5", "1.0", "--warm-starts", "one"]
    cmd = [sys.executable, "-m", "experiments.ablations.gamma_sweep", *SMOKE, *arms, "--out", str(tmp_path), "--"]
    done = subprocess.run([*cmd, *SMOKE_RUN], cwd=ROOT, env=env, capture_output=True, text=True)
    logs = "".join(p.read_text()[-2000:] for p in tmp_path.glob("*/seed0/sweep.log"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:] + logs
    warm = tmp_path / "warm" / "all-seed0"  # one warm start for every run
    assert (warm / "hf" / "config.json").is_file()
    results = json.loads((tmp_path / "results.json").read_text())
    assert [(v["variant"], v["runs"], v["failed"]) for v in results["variants"]] == [("0.5", 1, []), ("1", 1, [])]
    for a in ("0.5", "1"):
        cfg = json.loads((tmp_path / f"gamma{a}" / "seed0" / "config.json").read_text())
        assert cfg["model"]["path"] == str(warm / "hf") and cfg["warm_start"]["steps"] == 0
        # no evaluation before training (the warm start's run made it), one after the last step
        evals = [r["step"] for r in read_jsonl(tmp_path / cfg["run_dir"] / "metrics.jsonl") if "eval/turns" in r]
        assert evals == [1]
    assert "| 1 | " in (tmp_path / "results.md").read_text()
    assert "| 0.5 | 1 | " in (tmp_path / "results.md").read_text().split("Paired by seed")[1]  # against gamma 1


def test_gamma_advantages_are_rebns_first_turn_advantages_per_batch():
    """The diagnostic of docs/results.md on two games by hand: won in 1 turn and in 3 (rewards 1 at the win).
    gamma 0.5: returns 1 | 0.25, 0.5, 1 over the 4 turns (mean 0.6875, std 0.32476), so the first turns get
    +0.962 and -1.347; gamma 1: every return is 1, every advantage 0 (no push towards fewer turns); in batches
    of one game each, each batch's own statistics."""
    from experiments.ablations import gamma_advantages as ga

    games = [([1.0], True), ([0.0, 0.0, 1.0], True)]
    np = pytest.importorskip("numpy")
    np.testing.assert_allclose(ga.first_turn_advantages(games, 0.5, 2), [0.9623, -1.3472], atol=1e-4)
    np.testing.assert_allclose(ga.first_turn_advantages(games, 1.0, 2), [0.0, 0.0], atol=1e-6)
    np.testing.assert_allclose(ga.first_turn_advantages(games, 0.5, 1), [0.0, -1.0690], atol=1e-4)
    half, one = ga.table(games, [0.5, 1.0], fast=1, batch=2)
    assert half["gap"] == pytest.approx(2.3095, abs=1e-3) and half["lost"] is None
    assert one["gap"] == 0.0 and one["corr_with_turns"] == 0.0


def test_the_self_play_sweep_pairs_each_run_with_its_own_warm_start(tmp_path):
    """experiments.ablations.selfplay's table on run dirs written by hand: per seed the final eval minus its warm
    start's (the warm start's summary holds the eval after it), the paired t test over seeds, a seed whose run did
    not finish left out and shown with no final value."""
    from experiments.ablations.power import paired_t
    from experiments.ablations.selfplay import build_runs, rise

    runs = build_runs(["self"], [1, 2, 3, 4], tmp_path, ["--steps", "30"], [])
    assert [(r.variant, r.seed) for r in runs][:4] == [("warm-start", s) for s in (1, 2, 3, 4)]
    warm = {1: 0.40, 2: 0.45, 3: 0.38, 4: 0.50}
    final = {1: 0.55, 2: 0.60, 3: 0.50}  # seed 4's run did not finish
    for r in runs:
        r.run_dir.mkdir(parents=True)
        value = warm[r.seed] if r.is_warm_start else final.get(r.seed)
        if value is not None:
            steps = 0 if r.is_warm_start else 30
            summary = {"steps": steps, "final_eval": {"eval/success_rate": value, "eval/return": 2 * value}}
            (r.run_dir / "summary.json").write_text(json.dumps(summary))
    out = rise(runs, tmp_path, ["eval/success_rate", "eval/return"], 30)
    got = out["settings"]["self"]["eval/success_rate"]
    want = paired_t([0.15, 0.15, 0.12])
    assert got["test"]["n"] == 3 and got["test"]["t"] == pytest.approx(want["t"]) and got["test"]["p"] == want["p"]
    assert got["per_seed"][4] == {"warm": 0.50, "final": None}
    table = (tmp_path / "rise.md").read_text()
    assert f"| self | eval/success_rate | 3 | 0.410 | 0.550 | +0.140 [{want['ci95'][0]:+.3f}" in table
    assert "| self | eval/success_rate | 4 | 0.500 | - |" in table
    assert json.loads((tmp_path / "rise.json").read_text()) == json.loads(json.dumps(out))


def test_the_confirmatory_sweep_tests_its_three_hypotheses_with_holms_correction(tmp_path):
    """experiments.ablations.confirm_gem's tests on run dirs written by hand: one warm start (seed 0) every arm trains
    from, each primary test the paired t of its arm minus its baseline over the seeds, Holm's adjusted p over the
    three, a seed whose run did not finish left out of that test only."""
    from experiments.ablations.confirm_gem import TESTS, build_runs, confirm
    from experiments.ablations.power import holm, paired_t

    runs = build_runs([11, 12, 13, 14], tmp_path, ["--steps", "30"], [], warm_seed=0)
    assert runs[0].is_warm_start and runs[0].seed == 0 and {r.warm for r in runs[1:]} == {runs[0].run_dir}
    turns = {"rebn-g0.9": [5.1, 5.0, 5.2, 5.1], "rebn-g1.0": [5.45, 5.4, 5.55, 5.5]}
    turns["reinforce-g0.9"] = [5.4, 5.35, 5.45, 5.4]
    success = {"rebn-g0.9": [0.62, 0.60, 0.66, 0.64], "rebn-g1.0": [0.6] * 4, "reinforce-g0.9": [0.6, 0.62, 0.6, None]}
    for r in runs[1:]:
        k = [11, 12, 13, 14].index(r.seed)
        r.run_dir.mkdir(parents=True)
        if success[r.variant][k] is None:
            continue  # reinforce seed 14 did not finish
        evals = {"eval/turns": turns[r.variant][k], "eval/success_rate": success[r.variant][k]}
        (r.run_dir / "summary.json").write_text(json.dumps({"steps": 30, "final_eval": evals}))
    out = confirm(runs, tmp_path, 30)
    h1, h2, h3 = (out["tests"][n] for n in TESTS)
    assert h1["test"]["n"] == 4 and h1["test"]["mean"] == pytest.approx(-0.375)
    assert h2["test"]["n"] == 3 and h2["test"]["mean"] == pytest.approx((0.02 - 0.02 + 0.06) / 3)
    assert h3["test"]["n"] == 3 and h3["test"]["t"] == pytest.approx(paired_t([-0.3, -0.35, -0.25])["t"])
    want = holm({n: out["tests"][n]["test"]["p"] for n in TESTS})
    assert {n: out["tests"][n]["holm"] for n in TESTS} == want
    assert h1["holm"]["reject"] and not h2["holm"]["reject"]
    table = (tmp_path / "confirm.md").read_text()
    assert "| H1 gamma 0.9 vs 1.0, turns | eval/turns | 4 | -0.375 [" in table and "| yes |" in table
    assert "| H2 ReBN vs REINFORCE, success | 14 | 0.6400 | - |" in table


def test_the_two_policy_sweep_compares_each_seat_with_its_warm_start(tmp_path):
    """experiments.ablations.two_policies's table from evaluations written by hand (no run launched): per seat the
    warm start's win rate there, its policy's after RL, and the difference with Newcombe's interval; improved only
    where the interval lies above 0."""
    from experiments.ablations.power import newcombe
    from experiments.ablations.two_policies import VARIANT, build_runs, seats

    lora = ["--model.lora.adapters", "2", "--rollout.policies", "player_0", "player_1"]
    runs = build_runs([201], tmp_path, ["--steps", "30"], [], lora=lora)
    assert [(r.variant, r.seed) for r in runs] == [("warm-start", 201), (VARIANT, 201)]
    assert "--model.lora.adapters" in runs[1].argv("p") and "--model.lora.adapters" not in runs[0].argv("p")
    row = lambda wins, games: {"wins": wins, "games": games, "win_rate": wins / games}
    evals = {
        "warm-seed201": ("step 0", {"player_0": row(400, 1024), "player_1": row(450, 1024)}),
        f"{VARIANT}-seed201": ("step 30", {"player_0": row(500, 1024), "player_1": row(470, 1024)}),
    }
    (tmp_path / "eval").mkdir()
    for name, (step, per_seat) in evals.items():
        doc = {"seats": ["player_0", "player_1"], "policy": {step: {"random": per_seat}}}
        (tmp_path / "eval" / f"{name}.json").write_text(json.dumps(doc))
    out = seats(runs, tmp_path, "random", 1024)["seeds"][201]
    assert out["player_0"]["ci95"] == pytest.approx(newcombe(400, 1024, 500, 1024)["ci95"])
    assert out["player_0"]["improved"] and not out["player_1"]["improved"]  # +0.098 clears 0; +0.020 does not
    assert (out["player_0"]["policy"], out["player_1"]["policy"]) == (0, 1)
    assert "| 201 | player_0 (0) | 0.391 | 0.488 | +0.098 [" in (tmp_path / "seats.md").read_text()
