"""What a training run prints (issue 31): off a terminal a plain line for every step, warm-start steps included, and
for every evaluation; in a terminal a progress bar per phase; where the run writes, at its start and its end."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

import jgem.train.loop
import jgem.train.progress
from jgem.checkpoint import Checkpointer
from jgem.config import WarmStartConfig
from jgem.train import Trainer, train
from jgem.train.progress import Progress, curve_keys
from tests.train_utils import small_config

STEP_METRICS = {
    "rollout/success_rate": 0.75,
    "rollout/return": 0.625,
    "rollout/turns": 2.875,
    "train/loss": 0.0123,
    "train/entropy": 1.5,
    "train/grad_norm": 0.25,
    "batch/padding_frac": 0.2,
    "time/collect_s": 1.0,
    "time/update_s": 2.0,
    "collect/turns": 99.0,  # not a console key
}


def _plain(buf: io.StringIO) -> list[str]:
    return buf.getvalue().splitlines()


def _pipe() -> tuple[io.StringIO, Console]:
    """A console as on a pipe or a file (no terminal), 40 columns so that long lines would wrap."""
    buf = io.StringIO()
    return buf, Console(file=buf, width=40, force_terminal=False, color_system=None)


def test_off_a_terminal_every_step_and_eval_gets_a_line():
    buf, console = _pipe()
    p = Progress(enabled=True, console=console)
    assert not p.interactive
    p.start("warm start", 3)
    for loss in (3.0, 2.0, 1.0):
        p.advance({"warm/step": 1.0, "warm/loss": loss, "warm/teacher/success_rate": 1.0})
    p.evaluating(8, "after the warm start")
    p.evaluated({"eval/success_rate": 0.5, "eval/turns": 3.0, "eval/return": 0.25, "eval/faults": 0.0}, "after it")
    p.start("train", 12, done=9)  # a resume: steps 10..12 remain
    for _ in range(3):
        p.advance(STEP_METRICS)
    p.stop()
    lines = _plain(buf)
    assert len(lines) == 3 + 2 + 3  # nothing wraps, nothing else is printed
    for i, line in enumerate(lines[:3]):
        assert re.fullmatch(rf"warm start {i + 1}/3  warm/loss={3 - i}  warm/teacher/success_rate=1  \d+\.\ds", line)
    assert lines[3] == "evaluating 8 episodes (after the warm start)..."
    assert re.fullmatch(
        r"eval \(after it\)  eval/success_rate=0\.5  eval/turns=3  eval/return=0\.25  \d+\.\ds", lines[4]
    )
    for i, line in enumerate(lines[5:]):
        assert line.startswith(f"train {10 + i:>2}/12  rollout/success_rate=0.75  rollout/return=0.625  "), line
        assert "train/loss=0.0123" in line and "batch/padding_frac=0.2" in line and "collect/" not in line
        assert "time/" not in line and re.search(r"  \d+\.\ds$", line)  # the step's wall time instead


def test_in_a_terminal_a_bar_and_no_plain_lines():
    buf = io.StringIO()
    p = Progress(enabled=True, console=Console(file=buf, width=120, force_terminal=True, color_system=None))
    assert p.interactive
    p.start("train", 2)
    assert p._bar is not None
    p.advance(STEP_METRICS)
    p.advance(STEP_METRICS)
    p.stop()
    out = buf.getvalue()
    assert "2/2" in out and "success 0.75" in out and "return 0.625" in out
    assert "rollout/success_rate=" not in out  # the bar, not the plain lines


def test_disabled_prints_nothing(monkeypatch):
    monkeypatch.setattr(jgem.train.progress, "_console", lambda: pytest.fail("a disabled progress made a console"))
    p = Progress(enabled=False)
    assert not p.interactive
    p.print("x")
    p.start("train", 2)
    p.advance(STEP_METRICS)
    p.evaluating(4, "now")
    p.evaluated({"eval/success_rate": 1.0}, "now")
    p.stop()


def test_curves_leave_out_the_teachers_flat_success_rate(tmp_path):
    cfg = small_config(str(tmp_path), eval_every=1, warm_start=WarmStartConfig(steps=3))
    assert "warm/loss" in curve_keys(cfg) and "warm/teacher/success_rate" not in curve_keys(cfg)
    assert "eval/success_rate" in curve_keys(cfg)


def _fake_warm_start(self: Trainer, log) -> None:
    """The warm start's logging without its updates: a log call per step, at steps 1 - W .. 0."""
    W = self.cfg.warm_start.steps
    for s in range(W):
        log(s + 1 - W, {"warm/step": s + 1, "warm/loss": 1.0 / (s + 1), "warm/teacher/success_rate": 1.0})
    self.host["warm_start_done"] = True


def test_a_piped_run_reports_each_phase_step_and_where_it_writes(tmp_path, monkeypatch):
    """Trainer.run's reports, with the work of each step stubbed out (the real thing takes a minute: compiles)."""
    buf, console = _pipe()
    monkeypatch.setattr(jgem.train.progress, "_console", lambda: console)
    monkeypatch.setattr(Trainer, "train_step", lambda self, step: dict(STEP_METRICS))
    evals = {"eval/success_rate": 0.5, "eval/turns": 3.0, "eval/return": 0.25}
    monkeypatch.setattr(Trainer, "evaluate", lambda self, step: dict(evals))
    monkeypatch.setattr(Trainer, "warm_start", _fake_warm_start)
    saved = []  # and no checkpoint writes (seconds each on 8 simulated devices)
    monkeypatch.setattr(Checkpointer, "save", lambda self, step, *a, **k: saved.append(step))
    monkeypatch.setattr(Checkpointer, "latest_step", lambda self: max(saved, default=None))
    cfg = small_config(
        str(tmp_path),
        steps=2,
        eval_every=2,
        eval_episodes=4,
        console=True,
        plot=True,
        warm_start=WarmStartConfig(steps=2, episodes_per_step=4),
    )
    summary = train(cfg)
    lines = _plain(buf)
    d = str(tmp_path)
    assert lines[:4] == [
        f"run dir {d}/ (config.json)",
        f"  metrics      {d}/metrics.jsonl",
        f"  tensorboard  {d}/tb/",
        f"  checkpoints  {d}/checkpoints/",
    ]
    heads = [re.split(r"  |\.\.\.", line)[0] for line in lines[4:-4]]
    assert heads == [
        "evaluating 4 episodes (random init)",
        "eval (random init)",
        "warm start 1/2",
        "warm start 2/2",
        "evaluating 4 episodes (after the warm start)",
        "eval (after the warm start)",
        "train 1/2",
        "train 2/2",
        "evaluating 4 episodes (after step 2)",
        "eval (after step 2)",
    ]
    assert re.fullmatch(r"done: 2 steps in \d+\.\d min", lines[-4])
    assert lines[-3:] == [
        f"  summary          {d}/summary.json",
        f"  learning curves  {d}/curves.png",
        f"  last checkpoint  {d}/checkpoints/2/ (step 2)",
    ]
    assert summary["plot"] == f"{d}/curves.png" and saved == [0, 1, 2]
    assert re.fullmatch(r"warm start 2/2  warm/loss=0\.5  warm/teacher/success_rate=1  \d+\.\ds", lines[7])
    assert re.fullmatch(r"train 2/2  rollout/success_rate=0\.75  .*  batch/padding_frac=0\.2  \d+\.\ds", lines[11])
    assert re.fullmatch(
        r"eval \(after step 2\)  eval/success_rate=0\.5  eval/turns=3  eval/return=0\.25  \d+\.\ds", lines[13]
    )


def test_only_process_0_reports(tmp_path, monkeypatch):
    buf, console = _pipe()
    monkeypatch.setattr(jgem.train.progress, "_console", lambda: console)
    monkeypatch.setattr(Trainer, "train_step", lambda self, step: dict(STEP_METRICS))
    monkeypatch.setattr(Trainer, "evaluate", lambda self, step: {"eval/success_rate": 0.5})
    monkeypatch.setattr(Checkpointer, "save", lambda self, *a, **k: None)
    cfg = small_config(str(tmp_path), steps=2, eval_every=1, console=True)
    trainer = Trainer(cfg)
    monkeypatch.setattr(jgem.train.loop.jax, "process_index", lambda: 1)  # as on the second host of a pod
    trainer.run()
    assert buf.getvalue() == ""
