from __future__ import annotations

import io
import json
import math
import struct

import jax.numpy as jnp
import numpy as np
import pytest
from rich.console import Console

from jgem.metrics import ConsoleWriter, MetricsLogger, plot_curves, read_jsonl


def test_jsonl_rows_and_scalar_types(tmp_path):
    with MetricsLogger(tmp_path, console=False, tensorboard=False) as log:
        log.log(0, {"loss": 1.5, "acc": np.float32(0.25), "n": jnp.array(3), "bad": float("nan")})
        log.log(2, {"loss": 0.5})
    rows = read_jsonl(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 2]
    assert rows[0]["loss"] == 1.5 and rows[0]["acc"] == 0.25 and rows[0]["n"] == 3.0
    assert rows[0]["bad"] is None  # NaN would not be valid JSON
    assert rows[1] == {"step": 2, "time": rows[1]["time"], "loss": 0.5}
    # appends on resume; a torn last line is skipped
    with MetricsLogger(tmp_path, console=False, tensorboard=False) as log:
        log.log(3, {"loss": 0.25})
    with (tmp_path / "metrics.jsonl").open("a") as f:
        f.write('{"step": 4, "lo')
    assert [r["step"] for r in read_jsonl(tmp_path / "metrics.jsonl")] == [0, 2, 3]


def test_rejects_non_scalars_and_log_after_close(tmp_path):
    log = MetricsLogger(tmp_path, console=False, tensorboard=False)
    with pytest.raises(TypeError, match="'v' must be a real scalar"):
        log.log(0, {"v": np.zeros(3)})
    with pytest.raises(TypeError, match="'s' must be a real scalar"):
        log.log(0, {"s": "text"})
    log.close()
    log.close()  # idempotent
    with pytest.raises(RuntimeError, match="after close"):
        log.log(1, {"v": 1.0})
    with pytest.raises(ValueError, match="console_every"):
        MetricsLogger(tmp_path, console_every=0)


def _read_scalars(logdir) -> list[tuple[str, int, float]]:
    """(tag, step, value) from TensorBoard event files (TFRecord framing; no tensorboard install needed)."""
    from tensorboardX.proto.event_pb2 import Event

    out = []
    for path in sorted(logdir.glob("events.out.tfevents.*")):
        data = path.read_bytes()
        i = 0
        while i < len(data):
            (n,) = struct.unpack("<Q", data[i : i + 8])
            event = Event.FromString(data[i + 12 : i + 12 + n])
            i += 12 + n + 4
            out += [(v.tag, event.step, v.simple_value) for v in event.summary.value]
    return out


def test_tensorboard_events(tmp_path):
    with MetricsLogger(tmp_path, console=False, jsonl=False) as log:
        for s in range(3):
            log.log(s, {"train/loss": 1.0 / (s + 1), "skip": math.inf})
    scalars = _read_scalars(tmp_path / "tb")
    assert {tag for tag, _, _ in scalars} == {"train/loss"}  # non-finite values are skipped
    assert [step for _, step, _ in scalars] == [0, 1, 2]
    np.testing.assert_allclose([v for _, _, v in scalars], [1.0, 0.5, 1 / 3], rtol=1e-6)


def test_console_row():
    buf = io.StringIO()
    w = ConsoleWriter(keys=["b", "a"], console=Console(file=buf, width=200, color_system=None))
    w.write(7, {"a": 0.123456, "b": 2.0, "c": 9.0})
    assert buf.getvalue().strip() == "step      7  b=2  a=0.1235"


def test_plot_curves(tmp_path):
    with MetricsLogger(tmp_path, console=False, tensorboard=False) as log:
        for s in range(10):
            log.log(s, {"return": s * 0.1, **({"eval/success": s / 10} if s % 3 == 0 else {})})
    out = plot_curves(tmp_path / "metrics.jsonl", tmp_path / "plots" / "curves.png", ["return", "eval/success"])
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    with pytest.raises(KeyError, match="available: \\['eval/success', 'return'\\]"):
        plot_curves(tmp_path / "metrics.jsonl", tmp_path / "x.png", ["nope"])
    assert json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])["step"] == 0


def test_curves_title_clears_the_first_panel_and_rates_stay_in_0_1(tmp_path):
    """Issue 31: the suptitle overlapped the first panel, and success-rate axes dipped below 0."""
    import matplotlib.pyplot as plt
    from matplotlib.text import Text

    from jgem.metrics import curves_figure

    rows = [{"step": s, "rollout/success_rate": s % 2 * 1.0, "eval/success_rate": 0.0, "loss": -s} for s in range(5)]
    for r in rows:
        r |= {f"other/{i}": 0.875 + r["step"] / 1000 for i in range(4)}
    keys = ["rollout/success_rate", "loss", "eval/success_rate"] + [f"other/{i}" for i in range(4)]
    fig = curves_figure(rows, keys, title="rebn on game:X")  # 7 panels, as the demo's curves.png had
    try:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        top_axes = fig.axes[0]
        (title,) = [t for t in fig.get_children() if isinstance(t, Text) and t.get_text() == "rebn on game:X"]
        title = title.get_window_extent(renderer)
        assert title.y0 >= top_axes.get_tightbbox(renderer).y1  # the title sits above the panel and its labels
        for ax in fig.axes:
            lo, hi = ax.get_ylim()
            if ax.get_ylabel().endswith("success_rate"):
                assert lo == 0.0 and 1.0 < hi <= 1.05
            elif ax.get_ylabel() == "loss":
                assert lo < -4  # other panels keep their own range
    finally:
        plt.close(fig)
    # plot_curves draws the same figure (and names the file when a key has no values)
    with MetricsLogger(tmp_path, console=False, tensorboard=False) as log:
        for r in rows:
            log.log(r["step"], {k: v for k, v in r.items() if k != "step"})
    assert plot_curves(tmp_path / "metrics.jsonl", tmp_path / "c.png", ["eval/success_rate"]).stat().st_size > 0
    with pytest.raises(KeyError, match="metrics.jsonl"):
        plot_curves(tmp_path / "metrics.jsonl", tmp_path / "x.png", ["nope"])


def test_console_row_does_not_wrap():
    buf = io.StringIO()
    w = ConsoleWriter(console=Console(file=buf, width=40, color_system=None))
    w.write(1, {f"metric/number_{i}": float(i) for i in range(8)})
    assert buf.getvalue().count("\n") == 1  # a log file gets one line per row, however narrow the console


def test_a_tensorboard_close_racing_the_exit_hooks_close_is_quiet(tmp_path):
    """tensorboardX closes its event writer again at exit (atexit); when our close is still running (slow, under
    load), the two used to collide: the second found the queue gone and printed an AttributeError traceback on an
    interrupted run's one-line console. Now the second close, while the first runs, does nothing."""
    import threading
    import time

    from jgem.metrics import TensorBoardWriter

    tb = TensorBoardWriter(tmp_path / "tb")
    tb.write(1, {"a": 1.0})
    (fw,) = tb._writer.all_writers.values()
    ev = fw.event_writer
    slow = ev._ev_writer.close

    def slow_close():
        time.sleep(0.3)
        slow()

    ev._ev_writer.close = slow_close
    errors = []
    hook = threading.excepthook
    threading.excepthook = lambda args: errors.append(args.exc_value)
    try:
        closing = threading.Thread(target=tb.close)
        closing.start()
        time.sleep(0.1)  # our close is inside the slow part now
        ev.close()  # what tensorboardX's atexit hook runs
        closing.join()
    finally:
        threading.excepthook = hook
    assert errors == [] and ev._closed
