"""A user's workflow reaches the engine through the registry: `--import tests.user_workflow --rollout.workflow
test_user_glance` on the real command line trains with it (its episodes are several segments, each trained as its
own row), and without the import the name is refused, naming the registered workflows."""

from __future__ import annotations

import json
import math
import subprocess

import pytest

from tests.test_user_algorithm import ROOT, _command, _env


@pytest.mark.slow
def test_a_user_workflow_trains_from_the_cli_with_import(tmp_path):
    run, trace = tmp_path / "run", tmp_path / "trace"
    cmd = [*_command(run), "--import", "tests.user_workflow", "--rollout.workflow", "test_user_glance"]
    cmd += ["--steps", "1", "--env.env-id", "test:talk"]
    p = subprocess.run(
        cmd, cwd=ROOT, env=_env(JGEM_TEST_USER_WORKFLOW_TRACE=str(trace)), capture_output=True, text=True, timeout=600
    )
    assert p.returncode == 0, p.stderr[-3000:]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    (step,) = [r for r in rows if "train/loss" in r]
    assert math.isfinite(step["train/loss"]) and step["train/skipped"] == 0, step
    played = [line.split() for line in trace.read_text().splitlines()]
    assert len(played) >= 4  # the step's episodes (and the held-out evaluation's) were the workflow's
    turns = sum(int(t) for _, t in played[:4])
    assert turns > 4 and step["batch/segments"] >= turns - 1, step  # a row per segment: every turn its own prompt
    assert json.loads((run / "config.json").read_text())["rollout"]["workflow"] == "test_user_glance"


def test_without_the_import_the_workflow_is_refused_naming_the_registered_ones(tmp_path):
    cmd = [*_command(tmp_path / "run"), "--rollout.workflow", "test_user_glance"]
    p = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    assert p.returncode == 2, p.stderr[-3000:]
    assert "Traceback" not in p.stderr
    assert "--rollout.workflow 'test_user_glance' is unknown; choose one of turns, compact, tree, agents" in p.stderr
