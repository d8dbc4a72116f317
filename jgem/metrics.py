"""Metrics writers behind one `MetricsLogger`: console (rich), JSONL, TensorBoard (tensorboardX) and, optionally,
Weights & Biases; plus `plot_curves` for learning-curve PNGs from the JSONL file.

`log(step, {"name": value})` takes python or numpy/jax scalars; non-finite values are written as
JSON `null` (the JSONL stays valid JSON) and skipped by TensorBoard, W&B and plots.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np


class Writer(Protocol):
    def write(self, step: int, scalars: dict[str, float]) -> None: ...
    def close(self) -> None: ...


def _scalar(name: str, value: Any) -> float:
    try:
        arr = np.asarray(value)
    except Exception as e:  # e.g. a jax array on a deleted buffer
        raise TypeError(f"metric {name!r} is not convertible to a number: {e}") from e
    if arr.size != 1 or arr.dtype.kind not in "biuf":
        raise TypeError(f"metric {name!r} must be a real scalar, got {type(value).__name__} with shape {arr.shape}")
    return float(arr.reshape(()))


class Timer:
    """A step's phase timings (SkyRL's `Timer`): `with timer("collect"): ...` adds the block's seconds to
    `time/collect_s` in `metrics()`; a phase timed twice adds up."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def __call__(self, phase: str) -> _Phase:
        return _Phase(self, phase)

    def metrics(self) -> dict[str, float]:
        return {f"time/{k}_s": v for k, v in self.seconds.items()}


class _Phase:
    def __init__(self, timer: Timer, phase: str) -> None:
        self.timer, self.phase = timer, phase

    def __enter__(self) -> None:
        self.t = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        s = self.timer.seconds
        s[self.phase] = s.get(self.phase, 0.0) + time.perf_counter() - self.t


class JsonlWriter:
    """One JSON object per line: {"step": ..., "time": ..., name: value, ...}; appends on resume."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a", encoding="utf-8")

    def write(self, step: int, scalars: dict[str, float]) -> None:
        row = {"step": step, "time": round(time.time(), 3)}
        row |= {k: (v if math.isfinite(v) else None) for k, v in scalars.items()}
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def rewind(self, step: int) -> None:
        """Drop rows after `step` (and a half-written last line): a resumed run logs those steps again."""
        self._file.close()
        keep = []
        with self.path.open(encoding="utf-8") as f:
            for line in f:
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(row, dict) and row.get("step", 0) <= step:
                    keep.append(line if line.endswith("\n") else line + "\n")
        tmp = self.path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(keep), encoding="utf-8")
        os.replace(tmp, self.path)
        self._file = self.path.open("a", encoding="utf-8")


def import_summary_writer() -> type:
    """tensorboardX's `SummaryWriter`, imported without PyTorch.

    tensorboardX's writer module imports PyTorch where it is installed (the parity extra), only to accept torch
    tensors as values; that import costs 4-8 s of every training process's start-up, and jgem writes Python floats.
    So unless PyTorch is loaded already, `import torch` fails for the length of this import (tensorboardX guards it
    and falls back to numpy)."""
    import sys

    if "torch" in sys.modules or "tensorboardX" in sys.modules:
        from tensorboardX import SummaryWriter

        return SummaryWriter
    sys.modules["torch"] = None  # type: ignore[assignment]  # `import torch` raises ImportError while set
    try:
        from tensorboardX import SummaryWriter
    finally:
        if sys.modules.get("torch", 0) is None:
            del sys.modules["torch"]
    return SummaryWriter


class TensorBoardWriter:
    def __init__(self, logdir: str | Path, purge_step: int | None = None) -> None:
        SummaryWriter = import_summary_writer()  # imported lazily: a heavy import

        self.logdir = logdir
        self._writer = SummaryWriter(logdir=str(logdir), purge_step=purge_step)

    def rewind(self, step: int) -> None:
        """Hide events after `step` from TensorBoard (its purge_step), so a resumed run's steps are not doubled."""
        self._writer.close()
        self.__init__(self.logdir, purge_step=step + 1)

    def write(self, step: int, scalars: dict[str, float]) -> None:
        for k, v in scalars.items():
            if math.isfinite(v):
                self._writer.add_scalar(k, v, global_step=step)
        self._writer.flush()

    def close(self) -> None:
        """Close the writer, waiting `CLOSE_TIMEOUT_S` at most: tensorboardX joins its logger thread, which can wait
        forever on its queue when a Ctrl-C arrived mid-write (an interrupted run hung here, its line never printed:
        the Ctrl-C test once waited out its 120 s). Every write is flushed, so what was logged is on disk."""
        import threading

        for w in list(getattr(self._writer, "all_writers", {}).values()):
            _close_once(w.event_writer)
        closer = threading.Thread(target=self._writer.close, name="jgem-tensorboard-close", daemon=True)
        closer.start()
        closer.join(CLOSE_TIMEOUT_S)


def _close_once(event_writer: Any) -> None:
    """Make `event_writer.close()` a no-op while another close of it runs: tensorboardX also closes it at exit
    (atexit), and two closes at once fail (the second finds its queue gone: an AttributeError traceback on an
    interrupted run's console, seen once under load). Not waiting: a close that hangs must not hang the exit."""
    import threading

    close, busy = event_writer.close, threading.Lock()

    def close_once() -> None:
        if busy.acquire(blocking=False):
            try:
                close()
            finally:
                busy.release()

    event_writer.close = close_once


CLOSE_TIMEOUT_S = 10.0
WANDB_MODES = ("offline", "online")


def import_wandb() -> Any:
    """The `wandb` module, imported only when W&B logging is on (it is an optional extra)."""
    try:
        import wandb
    except ImportError as e:
        raise ImportError(
            f"W&B logging (--log.wandb) needs the wandb package: .venv/bin/pip install -e '.[wandb]' ({e})"
        ) from None
    return wandb


class WandbWriter:
    """A Weights & Biases run under `run_dir/wandb`: "offline" writes files only (`wandb sync` uploads them
    later), "online" streams to the server. `config` (the run's) goes with the run's start.

    W&B's own step must only grow, and jgem logs the warm start at steps <= 0, so each row carries `step` as a
    metric and every metric is plotted against it (`define_metric`). The run id is kept in
    `wandb/jgem_run.json`, so a resumed run goes on in the same W&B run. W&B history is append-only: a resume
    logs the steps after its checkpoint once more (their `step` says which); a rewind to before the first step
    this run logged (a fresh start in the same run dir) begins a new W&B run.
    """

    def __init__(
        self,
        run_dir: str | Path,
        *,
        project: str = "jgem",
        entity: str | None = None,
        name: str | None = None,
        mode: str = "offline",
        config: Mapping[str, Any] | None = None,
    ) -> None:
        if mode not in WANDB_MODES:
            raise ValueError(f"W&B mode {mode!r} is unknown; choose one of {', '.join(WANDB_MODES)}")
        self.run_dir = Path(run_dir)
        self.state_path = self.run_dir / "wandb" / "jgem_run.json"
        name = name or self.run_dir.resolve().name
        self._init = dict(project=project, entity=entity, name=name, mode=mode, config=dict(config or {}))
        self._run: Any = None

    def _state(self) -> dict[str, Any] | None:
        return json.loads(self.state_path.read_text()) if self.state_path.is_file() else None

    def _start(self, step: int) -> None:
        wandb = import_wandb()
        state = self._state()
        run_id = state["id"] if state else None  # None: W&B makes one
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        # create_new: this writer's run, whatever other W&B runs the process has open
        self._run = wandb.init(id=run_id, resume="allow", dir=str(self.run_dir), reinit="create_new", **self._init)
        self._run.define_metric("step")
        self._run.define_metric("*", step_metric="step")
        if state is None:
            self.state_path.write_text(json.dumps({"id": self._run.id, "first_step": step}))

    def write(self, step: int, scalars: dict[str, float]) -> None:
        if self._run is None:
            self._start(step)
        self._run.log({"step": step} | {k: v for k, v in scalars.items() if math.isfinite(v)})

    def rewind(self, step: int) -> None:
        """Before the first step logged: forget the W&B run (the next write starts a new one)."""
        state = self._state()
        if state is not None and step < state["first_step"]:
            self.close()
            self.state_path.unlink()

    def close(self) -> None:
        if self._run is not None:
            self._run.finish()
            self._run = None


def scalars_markup(scalars: Mapping[str, float], keys: Sequence[str] | None = None) -> str:
    """`name=value` pairs (4 significant digits) as rich markup, in the order of `keys` (default: all, sorted)."""
    return "  ".join(f"[bold]{k}[/bold]={scalars[k]:.4g}" for k in (keys or sorted(scalars)) if k in scalars)


class ConsoleWriter:
    """A compact rich table row per log call; `keys` limits the columns (default: all). Rows never wrap (a log
    file or pipe gets one line per row, however narrow rich thinks it is)."""

    def __init__(self, keys: Sequence[str] | None = None, console: Any = None) -> None:
        from rich.console import Console

        self.keys = tuple(keys) if keys else None
        self.console = console or Console(stderr=True)

    def write(self, step: int, scalars: dict[str, float]) -> None:
        text = scalars_markup(scalars, self.keys)
        self.console.print(f"[cyan]step {step:>6}[/cyan]  {text}", highlight=False, soft_wrap=True)

    def close(self) -> None:
        pass


class MetricsLogger:
    """Fan-out to the enabled writers under `run_dir` (`metrics.jsonl`, `tb/`), then to `writers` (e.g. a
    `WandbWriter`)."""

    def __init__(
        self,
        run_dir: str | Path,
        *,
        console: bool = True,
        jsonl: bool = True,
        tensorboard: bool = True,
        console_keys: Sequence[str] | None = None,
        console_every: int = 1,
        writers: Sequence[Writer] = (),
    ) -> None:
        if console_every < 1:
            raise ValueError(f"console_every must be >= 1, got {console_every}")
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.console_every = console_every
        self.writers: list[Writer] = []
        self._console: ConsoleWriter | None = ConsoleWriter(console_keys) if console else None
        self.jsonl_path = self.run_dir / "metrics.jsonl"
        if jsonl:
            self.writers.append(JsonlWriter(self.jsonl_path))
        if tensorboard:
            self.writers.append(TensorBoardWriter(self.run_dir / "tb"))
        self.writers += writers
        self._closed = False

    def rewind(self, step: int) -> None:
        """Forget what was logged after `step` (call on resume from a checkpoint at `step`; -1 forgets all)."""
        for w in self.writers:
            if hasattr(w, "rewind"):
                w.rewind(step)

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        if self._closed:
            raise RuntimeError("MetricsLogger.log after close()")
        scalars = {str(k): _scalar(str(k), v) for k, v in metrics.items()}
        for w in self.writers:
            w.write(int(step), scalars)
        if self._console is not None and step % self.console_every == 0:
            self._console.write(int(step), scalars)

    def close(self) -> None:
        if not self._closed:
            for w in self.writers:
                w.close()
            self._closed = True

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a metrics JSONL file; a torn last line (killed mid-write) is ignored."""
    rows = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def is_rate(key: str) -> bool:
    """A metric that is a fraction of episodes (its plot's y axis is [0, 1])."""
    return key.endswith("success_rate")


def curves_figure(rows: Sequence[Mapping[str, Any]], keys: Sequence[str], *, title: str | None = None) -> Any:
    """The matplotlib Figure of `plot_curves`: one panel per key (value vs step), success rates on [0, 1]."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not keys:
        raise ValueError("plot_curves needs at least one metric key")
    missing = [k for k in keys if not any(r.get(k) is not None for r in rows)]
    if missing:
        present = sorted({k for r in rows for k in r} - {"step", "time"})
        raise KeyError(f"no values for {missing}; available: {present}")
    # constrained layout leaves room for the suptitle above the first panel (tight_layout let them overlap)
    fig, axes = plt.subplots(
        len(keys), 1, figsize=(6, 2.2 * len(keys) + 0.4), squeeze=False, sharex=True, layout="constrained"
    )
    for ax, key in zip(axes[:, 0], keys):
        pts = sorted((r["step"], r[key]) for r in rows if r.get(key) is not None)
        xs, ys = zip(*pts)
        # clip_on=False: a point at exactly 0 or 1 of a rate panel is drawn whole on the axis' edge
        ax.plot(xs, ys, marker="." if len(xs) < 50 else None, clip_on=not is_rate(key))
        if is_rate(key):
            ax.set_ylim(0.0, 1.02)
        ax.set_ylabel(key)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("step")
    if title:
        fig.suptitle(title)
    return fig


def plot_curves(jsonl_path: str | Path, out_png: str | Path, keys: Sequence[str], *, title: str | None = None) -> Path:
    """One subplot per key (value vs step) from a metrics JSONL file, saved as a PNG (`curves_figure`)."""
    import matplotlib.pyplot as plt

    try:
        fig = curves_figure(read_jsonl(jsonl_path), keys, title=title)
    except KeyError as e:
        raise KeyError(f"{e.args[0]} (in {jsonl_path})") from None
    out = Path(out_png)
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        fig.savefig(out, dpi=100)
    finally:
        plt.close(fig)
    return out
