"""Resume rewinds the metrics log to the checkpoint's step: one line per step, however often a run was killed."""

from __future__ import annotations

import json

from jgem.metrics import MetricsLogger, read_jsonl


def test_rewind_drops_rows_after_the_checkpoint_and_a_half_written_line(tmp_path):
    logger = MetricsLogger(tmp_path, console=False, tensorboard=False)
    for s in range(6):
        logger.log(s, {"x": float(s)})
    logger.close()
    with (tmp_path / "metrics.jsonl").open("a") as f:
        f.write('{"step": 6, "x": ')  # killed mid-write
    logger = MetricsLogger(tmp_path, console=False, tensorboard=False)
    logger.rewind(3)  # resumed from the checkpoint of step 3: steps 4 and 5 run again
    for s in (4, 5, 6):
        logger.log(s, {"x": float(s)})
    logger.close()
    assert [r["step"] for r in read_jsonl(tmp_path / "metrics.jsonl")] == [0, 1, 2, 3, 4, 5, 6]
    assert all(json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines())


def test_rewind_to_minus_one_forgets_everything_and_tensorboard_purges(tmp_path):
    logger = MetricsLogger(tmp_path, console=False, tensorboard=True)
    logger.log(1, {"x": 1.0})
    logger.rewind(-1)
    logger.log(1, {"x": 2.0})
    logger.close()
    assert [r["x"] for r in read_jsonl(tmp_path / "metrics.jsonl")] == [2.0]
