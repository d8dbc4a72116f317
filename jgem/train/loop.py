"""The training loop: collect -> one device step -> log -> checkpoint -> evaluate.

`Trainer(cfg).run()` resumes from `cfg.run_dir` when it holds a checkpoint. Every step is a function of
(params, optimizer state, step) only: the episode seeds and the sampling key are derived from the step,
the curriculum is a function of the step, and no episode is in flight between steps. So a run killed at
any moment and resumed from its last checkpoint ends with the same params as one never interrupted.
"""

from __future__ import annotations

import json
import time
from functools import partial
from typing import Any

import jax
import numpy as np

from jgem.algos.step import train_step
from jgem.checkpoint import CheckpointConfig
from jgem.config import TrainConfig
from jgem.metrics import MetricsLogger, Timer, WandbWriter, plot_curves
from jgem.sharding.mesh import RUN, log_to_run_dir, replicated
from jgem.train.evaluate import eval_metrics
from jgem.train.learn import check_finite_loss
from jgem.train.pipeline import NoSampler, Pipeline
from jgem.train.progress import CONSOLE_KEYS, Progress, curve_keys
from jgem.train.run import Run
from jgem.train.side import SamplerSide
from jgem.train.transport import make_transport
from jgem.train.warm_start import Teacher, warm_start

# The trainer's host state in every checkpoint (beside the run config): all a resume needs besides the device state
HOST_KEYS = ("step", "episodes", "warm_start_done")
# Config fields a resumed run may change: where it writes and how often, not what it trains
RESUMABLE_FIELDS = (
    "run_dir",  # the checkpoints found there are the run's: it may be moved, or named relatively
    "steps",
    "resume",
    "plot",
    "console",
    "log",  # where metrics go, not what is trained
    "eval_every",
    "eval_at_start",
    "eval_episodes",
    "checkpoint_every",
    "keep_checkpoints",
    "eval_max_turns",
    "env.imports",  # where env ids come from, not which env; older runs lack it
    "learner.keep_logits_mb",  # memory vs speed only (the same log-probs); older runs lack it
    "rollout.chunk_steps",  # how the engine schedules work, not what it samples
    "model.scan_layers",  # how the program is laid out, not what it computes
    "rollout.extend_chunk",
)


class Trainer(Run):
    """Builds everything a run needs from a `TrainConfig`; `run()` trains and returns the final summary.

    Assembled once from the run's parts: the learner (`Run.learner`: the state, the update program, its checkpoints),
    the sampler side (`pipeline`: the engine as producer, `jgem.train.pipeline`; a role split's learner process has
    none), and the transport between them (`jgem.train.transport`: one mesh, split meshes, or a role split's
    processes). `train_step` is written once against them."""

    def __init__(self, cfg: TrainConfig) -> None:
        super().__init__(cfg)
        # HOST_KEYS: the step to resume at, episodes played so far, whether the warm start is behind us
        self.host: dict[str, Any] = {"step": 0, "episodes": 0, "warm_start_done": cfg.warm_start.steps == 0}
        self.transport = make_transport(self.roles, self.sync_sampler, split_meshes=self.publisher is not None)
        self.pipeline: Pipeline | NoSampler = Pipeline(self.sampler_side()) if self.transport.samples else NoSampler()

    def sampler_side(self) -> SamplerSide:
        """What the pipeline and dynamic sampling use of this run (`SamplerSide`)."""
        return SamplerSide(
            cfg=self.cfg,
            engine=self.engine,
            specs=self.specs,
            horizon=self.horizon,
            stage=self.curriculum.stage,
            policy=self.policy,
            snapshot=self.snapshot,
            played_params=self.played_params,
            publisher=self.publisher,
            rollout_mesh=self.rollout_mesh,
            run_dir=self.run_dir,
        )

    def run(self) -> dict[str, Any]:
        cfg = self.cfg
        log_to_run_dir(self.run_dir)  # several processes: XLA's own messages and tracebacks to a log file
        RUN.checkpoints = self.run_dir / "checkpoints"  # what a process that stops tells the user to resume from
        logger, progress = self._open_outputs()
        summary: dict[str, Any] = {}
        t_start = time.perf_counter()
        last_checkpoint = None
        try:
            RUN.doing = "while resuming" if cfg.resume else "while starting"
            if not self._resume(logger, progress) and cfg.eval_every and cfg.eval_at_start:
                RUN.doing = "in the evaluation at the start"
                summary["initial_eval"] = self._evaluate(0, "random init", progress)
                logger.log(-cfg.warm_start.steps if not self.host["warm_start_done"] else 0, summary["initial_eval"])
            if not self.host["warm_start_done"]:
                RUN.doing = "in the warm start"
                summary |= self._warm_phase(logger, progress)
            last_eval = summary.get("warm_start_eval", summary.get("initial_eval", {}))
            progress.start("train", cfg.steps, self.host["step"])
            self.pipeline.start(self.host["step"])
            for step in range(self.host["step"], cfg.steps):
                RUN.doing = f"in step {step + 1} of {cfg.steps}"
                metrics = self.train_step(step)
                self.host["step"] = step + 1
                progress.advance(metrics)
                evaluated = bool(cfg.eval_every) and ((step + 1) % cfg.eval_every == 0 or step + 1 == cfg.steps)
                saved = (step + 1) % cfg.checkpoint_every == 0 or step + 1 == cfg.steps
                if evaluated or saved:
                    self.pipeline.drain(step + 1)  # the engine idle for the evaluation, the steps ahead finished
                if evaluated:
                    RUN.doing = f"in the evaluation after step {step + 1}"
                    last_eval = self._evaluate(step + 1, f"after step {step + 1}", progress)
                    metrics |= last_eval
                logger.log(step + 1, metrics)
                if saved:
                    RUN.doing = f"while saving checkpoint {step + 1}"
                    self.pipeline.save(step + 1)
                    self.transport.samplers_done("saved")  # the learners save once every pipeline file is written
                    kept = metrics if evaluated else None  # an evaluated checkpoint is ranked by its metrics
                    self.transport.from_learners(None, partial(self.learner.save, step + 1, self.host, metrics=kept))
                    self.pipeline.prune(self.run_dir / "checkpoints")
            progress.stop()
            RUN.doing = "while finishing"
            last_checkpoint = self.transport.from_learners("checkpoint", self.learner.last_checkpoint)
            summary |= {"final_eval": last_eval, "params_sha256": self._digest(), "steps": cfg.steps}
            summary["last_checkpoint"] = last_checkpoint  # the end note's (a role split's samplers learn it)
            logger.close()
            if cfg.plot and jax.process_index() == 0 and cfg.steps:
                title = f"{cfg.algorithm} on {cfg.env.env_id}"
                curves = plot_curves(logger.jsonl_path, self.run_dir / "curves.png", curve_keys(cfg), title=title)
                summary["plot"] = str(curves)
        finally:
            progress.stop()
            logger.close()
            self.close()
        if jax.process_index() == 0:
            (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
        progress.print(self._end_note(summary, last_checkpoint, time.perf_counter() - t_start), markup=False)
        return summary

    def close(self) -> None:
        self.pipeline.close()
        super().close()

    def train_step(self, step: int) -> dict[str, float]:
        """One RL step: the sampler side's episodes (`pipeline.step`: played, with dynamic sampling the groups
        without signal dropped and more played), the update on this process's share of them (`transport.update`:
        where it is not the learner's, the sampler plays on until the update's metrics arrive), the new policy
        published; the step's metrics (the update's, the sampler side's, the phases' times)."""
        timer, pipe = Timer(), self.pipeline
        with timer("collect"):
            batch = pipe.step(step)
            episodes = self.transport.episodes(batch.episodes)
        with timer("update"):
            pipe.before_update(step)
            learned = self.transport.update(
                lambda meanwhile: self.learn(episodes, meanwhile=meanwhile), partial(pipe.meanwhile, step)
            )
            check_finite_loss(learned["loss"], step, episodes)
            self.transport.publish()
            pipe.after_update(step)
        self.host["episodes"] += len(episodes)
        metrics = (
            _prefixed(learned, "train")
            | pipe.metrics(batch, step)
            | timer.metrics()
            | {"compile/update": float(train_step._cache_size())}
        )
        return metrics

    def _digest(self) -> str:
        """`params_digest` of the params the run ends with, worked out by the learners over their own devices."""
        return self.transport.from_learners("digest", lambda: params_digest(self.state.params, self.mesh))

    def learn(self, episodes, **kwargs) -> dict[str, float]:
        """`Learner.learn` (the update), through which the step trains (a subclass may watch it)."""
        return self.learner.learn(episodes, **kwargs)

    def warm_start(self, log) -> None:
        """The supervised warm start (`jgem.train.warm_start`), `log(step, metrics)` after each of its steps."""
        share = partial(self.roles.share, side="learner")
        teacher = Teacher(self.cfg, self.chat, self.curriculum.max_turns(0), share)
        warm_start(self.learner, teacher, self.transport, log)
        self.host["warm_start_done"] = True

    def evaluate(self, step: int) -> dict[str, float]:
        """Eval metrics on the held-out seeds, with the horizon evaluation ran at and the training horizon of `step`,
        played on the sampler side (in a role split the learners get the first sampler's: they rank checkpoints by
        them)."""
        return self.transport.from_samplers("eval", lambda: eval_metrics(self, step, self.collect(step, eval=True)))

    def collect(self, step: int, *, eval: bool = False, round: int = 0):
        """`Run.collect`, recording version `step` (the updates applied) on every sampled token."""
        return super().collect(step, eval=eval, round=round, version=step)

    # -- the loop's parts ---------------------------------------------------------------------------

    def _open_outputs(self) -> tuple[MetricsLogger, Progress]:
        """The learner's checkpointer (on the learners' processes: they save the state), the run's metrics logger
        and progress display (and its start note, where they write)."""
        self.transport.check_checkpoints()
        cfg, primary = self.cfg, jax.process_index() == 0
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.transport.from_learners(
            None,
            lambda: self.learner.open_checkpoints(
                CheckpointConfig(
                    str(self.run_dir / "checkpoints"),
                    keep_last=cfg.keep_checkpoints,
                    best_metric="eval/success_rate" if cfg.eval_every else None,
                ),
                run_config=cfg,
                defaults=TrainConfig(),  # a field newer than the run's checkpoints resumes at its default
                ignore_fields=RESUMABLE_FIELDS,
                processes=self.transport.checkpoint_processes,
            ),
        )
        log, writers = cfg.log, []
        if log.wandb and primary:
            writers.append(
                WandbWriter(
                    self.run_dir,
                    project=log.wandb_project,
                    entity=log.wandb_entity,
                    name=log.wandb_name,
                    mode=log.wandb_mode,
                    config=cfg.to_dict(),
                )
            )
        progress = Progress(enabled=cfg.console and primary)
        logger = MetricsLogger(
            self.run_dir,
            # in a terminal, metric rows every ~5% of the steps beside the progress bar; elsewhere the progress
            # lines (one per step) carry the metrics
            console=progress.interactive,
            jsonl=primary,
            tensorboard=primary,
            console_keys=CONSOLE_KEYS,
            console_every=max(1, cfg.steps // 20),
            writers=writers,
        )
        progress.print(self._outputs_note(bool(writers)), markup=False)
        return logger, progress

    def _resume(self, logger: MetricsLogger, progress: Progress) -> bool:
        """Restore the latest checkpoint (with `cfg.resume`); whether there was one. A fresh run writes its
        config.json. Either way the logger rewinds to where the run stands: one log line per step, the warm start
        at steps 1 - W .. 0, the initial evaluation before it at -W. In a role split the learners restore the
        state and tell the samplers the host state; the publication brings the samplers the params."""
        restore = self.learner.restore_latest if self.cfg.resume else lambda: None
        host = self.transport.from_learners("resume", restore)
        if host is None:
            logger.rewind(-self.cfg.warm_start.steps - 1)
            (self.run_dir / "config.json").write_text(json.dumps(self.cfg.to_dict(), indent=2, default=str))
            return False
        self.sync_sampler(full=True)
        self.host = {k: host[k] for k in HOST_KEYS}
        self.pipeline.restore(self.host["step"])
        logger.rewind(self.host["step"])
        progress.note(f"resumed from step {self.host['step']} in {self.run_dir / 'checkpoints'}", markup=False)
        return True

    def _warm_phase(self, logger: MetricsLogger, progress: Progress) -> dict[str, Any]:
        """The warm start, its evaluation and its checkpoint (step 0)."""
        progress.start("warm start", self.cfg.warm_start.steps)

        def log(step: int, metrics: dict[str, float]) -> None:
            logger.log(step, metrics)
            progress.advance(metrics)

        self.warm_start(log)
        progress.stop()
        out = {}
        if self.cfg.eval_every:
            out["warm_start_eval"] = self._evaluate(0, "after the warm start", progress)
            logger.log(0, out["warm_start_eval"])
        self.transport.from_learners(None, lambda: self.learner.save(0, self.host, metrics=out.get("warm_start_eval")))
        return out

    def _evaluate(self, step: int, what: str, progress: Progress) -> dict[str, float]:
        """`evaluate(step)`, saying so before (it may take minutes) and what it measured after."""
        progress.evaluating(self.cfg.eval_episodes * jax.process_count(), what)
        metrics = self.evaluate(step)
        progress.evaluated(metrics, what)
        return metrics

    def _outputs_note(self, wandb: bool) -> str:
        """Where the run writes (printed at its start)."""
        d = self.run_dir
        lines = [
            f"run dir {d}/ (config.json)",
            f"  metrics      {d / 'metrics.jsonl'}",
            f"  tensorboard  {d / 'tb'}/",
            f"  checkpoints  {d / 'checkpoints'}/",
        ]
        if wandb:
            lines.append(f"  wandb        {d / 'wandb'}/ ({self.cfg.log.wandb_mode})")
        return "\n".join(lines)

    def _end_note(self, summary: dict[str, Any], last_checkpoint: int | None, seconds: float) -> str:
        """Where the run's results are (printed at its end)."""
        d = self.run_dir
        lines = [f"done: {self.cfg.steps} steps in {seconds / 60:.1f} min", f"  summary          {d / 'summary.json'}"]
        if "plot" in summary:
            lines.append(f"  learning curves  {summary['plot']}")
        if last_checkpoint is not None:
            lines.append(f"  last checkpoint  {d / 'checkpoints' / str(last_checkpoint)}/ (step {last_checkpoint})")
        return "\n".join(lines)


def _prefixed(metrics: dict[str, float], prefix: str) -> dict[str, float]:
    """`metrics` with `prefix/` before each name that has no prefix of its own (the update's loss, grad_norm ...)."""
    return {k if "/" in k else f"{prefix}/{k}": v for k, v in metrics.items()}


def params_digest(params: Any, mesh: Any = None) -> str:
    """sha256 over every parameter's bytes in tree order (equal digests: bit-identical params). On several
    processes each array is gathered to every process first, one array at a time (a model's whole params
    replicated on every chip would not fit a pod's: an 8B model is 32 GB in float32): over all processes, or with
    `mesh` (the params' own) by a program over its devices, which only its processes run (a role split's
    learners)."""
    import hashlib

    def whole(x: jax.Array) -> np.ndarray:
        if x.is_fully_addressable:
            return np.asarray(jax.device_get(x))
        if mesh is not None:
            return np.asarray(replicated(mesh)(x).addressable_data(0))
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(x, tiled=True))

    h = hashlib.sha256()
    for leaf in jax.tree.leaves(params):
        h.update(np.ascontiguousarray(whole(leaf) if isinstance(leaf, jax.Array) else np.asarray(leaf)).tobytes())
    return h.hexdigest()


def train(cfg: TrainConfig) -> dict[str, Any]:
    return Trainer(cfg).run()
