"""What a run shows while it runs: the progress bar or lines on stderr, the console's metric keys, and which
curves `curves.png` plots."""

from __future__ import annotations

import time
from typing import Any

from jgem.config import TrainConfig


def curve_keys(cfg: TrainConfig) -> list[str]:
    """The metrics `curves.png` plots for a run of `cfg`."""
    keys = ["rollout/success_rate", "rollout/turns", "rollout/return"]
    if cfg.eval_every:
        keys += ["eval/success_rate", "eval/turns"]
    if cfg.curriculum.horizons:
        keys += ["rollout/max_turns"]
    if cfg.warm_start.steps:  # the warm start's steps are 1 - W .. 0, left of RL's. Its teacher's success rate is
        keys += ["warm/loss"]  # left out: the scripted solver wins (nearly) every game, a flat line
    return keys


CONSOLE_KEYS = (
    "warm/loss",
    "warm/teacher/success_rate",
    "rollout/success_rate",
    "rollout/return",
    "rollout/turns",
    "eval/success_rate",
    "eval/turns",
    "train/loss",
    "train/entropy",
    "train/grad_norm",
    "batch/padding_frac",
    "time/collect_s",
    "time/update_s",
)


def _console() -> Any:
    """The rich Console a run reports on: stderr (a function, so tests can swap it)."""
    from rich.console import Console

    return Console(stderr=True)


# The metrics of a plain progress line (`Progress` off a terminal): CONSOLE_KEYS without the timings (the line
# ends with the step's wall time) and the evals (each has a line of its own)
LINE_KEYS = tuple(k for k in CONSOLE_KEYS if not k.startswith(("time/", "eval/")))
EVAL_KEYS = ("eval/success_rate", "eval/turns", "eval/return")
BAR_INFO = (  # (label, metric) shown beside a progress bar, where the phase has it
    ("return", "rollout/return"),
    ("success", "rollout/success_rate"),
    ("loss", "warm/loss"),
    ("teacher success", "warm/teacher/success_rate"),
)


class Progress:
    """What a run shows while it runs (on stderr; only process 0, with `console` on, has one enabled).

    In a terminal: a rich progress bar per phase (warm start, RL) with the ETA and the latest reward; the metric
    rows every ~5% of the steps come from MetricsLogger. Elsewhere (a pipe, a file, `| tee`), where a bar would only
    show once it has finished: a plain line for every step, warm-start steps included, with step/total, the key
    metrics and the seconds the step took, so the output is never silent for longer than one step. Both say when
    an evaluation starts and what it measured, and `print` notes (where the run writes, resumes, ends)."""

    def __init__(self, enabled: bool, console: Any = None) -> None:
        self.enabled = enabled
        self.console = (console if console is not None else _console()) if enabled else None
        self.interactive = bool(enabled and self.console.is_terminal)
        self._bar: Any = None
        self._task: Any = None
        self._phase, self._total, self._done = "", 0, 0
        self._t = self._t_eval = time.perf_counter()

    def print(self, text: str, *, markup: bool = True) -> None:
        """Lines of rich markup (`markup=False`: plain text, e.g. paths); they never wrap (a log file gets one line
        however narrow rich thinks it is)."""
        if self.enabled:
            self.console.print(text, highlight=False, soft_wrap=True, markup=markup)

    note = print

    def start(self, phase: str, total: int, done: int = 0) -> None:
        """A phase of `total` steps (e.g. "warm start", "train"), `done` of them behind us (a resume)."""
        self.stop()
        self._phase, self._total, self._done, self._t = phase, total, done, time.perf_counter()
        if not self.interactive or done >= total:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self._bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[info]}"),
            console=self.console,
            transient=False,
        )
        self._task = self._bar.add_task(phase, total=total, completed=done, info="")
        self._bar.start()

    def advance(self, metrics: dict[str, float]) -> None:
        """One step of the phase done, with its metrics."""
        now = time.perf_counter()
        seconds, self._t = now - self._t, now
        self._done += 1
        if self._bar is not None:
            info = "  ".join(f"{label} {metrics[k]:.3g}" for label, k in BAR_INFO if k in metrics)
            self._bar.update(self._task, advance=1, info=info)
        elif self.enabled and not self.interactive:
            from jgem.metrics import scalars_markup

            width = len(str(self._total))
            self.print(
                f"[cyan]{self._phase} {self._done:>{width}}/{self._total}[/cyan]  "
                f"{scalars_markup(metrics, LINE_KEYS)}  {seconds:.1f}s"
            )

    def evaluating(self, episodes: int, what: str) -> None:
        """An evaluation of `episodes` episodes starts (`what`: when, e.g. "random init")."""
        self._t_eval = time.perf_counter()
        self.print(f"evaluating {episodes} episodes ({what})...")

    def evaluated(self, metrics: dict[str, float], what: str) -> None:
        from jgem.metrics import scalars_markup

        seconds = time.perf_counter() - self._t_eval
        self.print(f"[cyan]eval ({what})[/cyan]  {scalars_markup(metrics, EVAL_KEYS)}  {seconds:.1f}s")
        self._t = time.perf_counter()  # the next step's seconds are its own, not the evaluation's

    def stop(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
