"""W&B logging (`--log.wandb`): offline runs under the run dir, read back from their .wandb files, hold the
scalars of metrics.jsonl against jgem's own step; a resume goes on in the same W&B run."""

from __future__ import annotations

import json
import struct
import sys
import time
from pathlib import Path

import pytest

from jgem.config import LogConfig, log_errors
from jgem.metrics import MetricsLogger, WandbWriter, import_wandb, read_jsonl


@pytest.fixture(autouse=True)
def offline_wandb(tmp_path, monkeypatch):
    """W&B's own settings, caches and credentials go to the test's directory; nothing reaches the network."""
    for var in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
        monkeypatch.setenv(var, str(tmp_path / "wandb-home"))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)


def _records(path: Path) -> list:
    """The protobuf records of a .wandb file: W&B's LevelDB-style log, a 7-byte header (":W&B", magic, version),
    then 32 KiB blocks of chunks, each with a 7-byte header (crc32c, length, type: full, first, middle, last)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B transaction log"
    pos, pending, records = 7, b"", []
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        if left < 7:  # a block's tail too short for a chunk header is zero padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        pending += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a full record, or the last chunk of one
            record = pb.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def _finished_records(path: Path, timeout: float = 30.0) -> list:
    """The records of a finished run's file: W&B's service writes it after `finish()` returns, ending with the
    exit record."""
    deadline = time.monotonic() + timeout
    while True:
        records = _records(path)
        if records and records[-1].WhichOneof("record_type") == "exit":
            return records
        assert time.monotonic() < deadline, f"{path} has no exit record {timeout} s after the run finished"
        time.sleep(0.05)


def _offline_runs(run_dir: Path) -> list[dict]:
    """Each offline W&B run under `run_dir/wandb`, oldest first: its id, config, metric definitions and history
    rows (W&B's own `_step`, `_runtime`, ... left out)."""
    runs = []
    for path in (run_dir / "wandb").glob("offline-run-*/run-*.wandb"):
        run = {"dir": path.parent.name, "config": {}, "metrics": [], "history": []}
        for r in _finished_records(path):
            kind = r.WhichOneof("record_type")
            if kind == "run":
                run["id"], run["start"] = r.run.run_id, r.run.start_time.ToNanoseconds()
                run["config"] |= {u.key: json.loads(u.value_json) for u in r.run.config.update}
            elif kind == "config":
                run["config"] |= {u.key: json.loads(u.value_json) for u in r.config.update}
            elif kind == "metric":
                run["metrics"].append((r.metric.name or r.metric.glob_name, r.metric.step_metric))
            elif kind == "history":
                items = {(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in r.history.item}
                run["history"].append({k: v for k, v in items.items() if not k.startswith("_")})
        runs.append(run)
    return sorted(runs, key=lambda r: r["start"])


def _state(run_dir: Path) -> dict:
    return json.loads((run_dir / "wandb" / "jgem_run.json").read_text())


def _logger(run_dir: Path) -> MetricsLogger:
    writer = WandbWriter(run_dir, project="jgem-test", mode="offline", config={"lr": 0.5})
    return MetricsLogger(run_dir, console=False, tensorboard=False, writers=[writer])


def test_writer_keeps_its_run_id_on_resume_and_starts_a_new_run_on_a_fresh_start(tmp_path):
    run_dir = tmp_path / "run"
    with _logger(run_dir) as logger:
        logger.rewind(-2)  # a fresh run: nothing to forget yet
        for s in (-1, 0, 1):
            logger.log(s, {"x": float(s), "bad": float("nan")})
    first = _state(run_dir)
    assert first["first_step"] == -1
    with _logger(run_dir) as logger:
        logger.rewind(0)  # resumed from the checkpoint of step 0
        logger.log(1, {"x": 1.0})
    assert _state(run_dir) == first
    with _logger(run_dir) as logger:
        logger.rewind(-2)  # started over in the same run dir: a new W&B run
        logger.log(-1, {"x": -1.0})
    assert _state(run_dir)["id"] != first["id"]

    runs = _offline_runs(run_dir)
    assert [r["id"] for r in runs] == [first["id"], first["id"], _state(run_dir)["id"]]
    assert runs[0]["config"]["lr"] == 0.5
    assert ("*", "step") in runs[0]["metrics"]  # every metric is plotted against jgem's step
    # negative steps are a metric, not W&B's step; non-finite values are skipped as TensorBoard skips them
    assert runs[0]["history"] == [{"step": -1, "x": -1}, {"step": 0, "x": 0}, {"step": 1, "x": 1}]
    assert runs[1]["history"] == [{"step": 1, "x": 1}]  # append-only: the resumed step is logged again
    assert runs[2]["history"] == [{"step": -1, "x": -1}]


@pytest.mark.slow
def test_training_logs_to_wandb_what_metrics_jsonl_holds_and_resume_continues_the_run(tmp_path):
    from jgem.train import train
    from tests.train_utils import small_config

    run_dir = tmp_path / "run"

    def config(steps: int):
        return small_config(
            str(run_dir),
            steps=steps,
            warm_start={"steps": 2, "episodes_per_step": 4},  # logged at steps -1 and 0
            log={"wandb": True, "wandb_project": "jgem-test"},
        )

    train(config(1))
    train(config(2))  # resumes from the checkpoint of step 1

    runs = _offline_runs(run_dir)
    run_id = _state(run_dir)["id"]
    assert [r["id"] for r in runs] == [run_id, run_id], [r["dir"] for r in runs]
    jsonl = read_jsonl(run_dir / "metrics.jsonl")
    rows = [{k: v for k, v in row.items() if k != "time" and v is not None} for row in jsonl]
    assert [r["step"] for r in rows] == [-1, 0, 1, 2]
    assert runs[0]["history"] + runs[1]["history"] == rows
    assert {"train/loss", "warm/loss", "rollout/success_rate"} <= {k for r in rows for k in r}
    config_logged = runs[1]["config"]
    assert config_logged["steps"] == 2 and config_logged["warm_start"]["steps"] == 2
    assert config_logged["env"]["env_id"] == "game:GuessTheNumber-v0-easy"
    assert config_logged["log"]["wandb_mode"] == "offline"


def test_cli_switches_and_clear_errors(monkeypatch):
    import tyro

    from experiments.configs import PRESETS

    argv = ["tiny", "--log.wandb", "--log.wandb-project", "p", "--log.wandb-name", "n", "--log.wandb-mode", "online"]
    cfg = tyro.extras.overridable_config_cli(PRESETS, args=argv, console_outputs=False)
    assert cfg.log == LogConfig(wandb=True, wandb_project="p", wandb_name="n", wandb_mode="online")
    assert PRESETS["tiny"][1].log == LogConfig(wandb=False, wandb_mode="offline")  # off, and offline when on

    assert "log.wandb_mode 'onlin' is unknown" in log_errors(LogConfig(wandb=True, wandb_mode="onlin"))[0]
    monkeypatch.setitem(sys.modules, "wandb", None)  # as if the extra were not installed
    assert log_errors(LogConfig()) == []
    assert "pip install -e '.[wandb]'" in log_errors(LogConfig(wandb=True))[0]
    with pytest.raises(ImportError, match=r"pip install -e '\.\[wandb\]'"):
        import_wandb()
