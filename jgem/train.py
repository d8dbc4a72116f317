"""The training loop: collect -> returns and advantages -> pack -> update -> log -> checkpoint -> evaluate.

`Trainer(cfg).run()` resumes from `cfg.run_dir` when it holds a checkpoint. Every step is a function of
(params, optimizer state, step) only: the episode seeds and the sampling key are derived from the step,
the curriculum is a function of the step, and no episode is in flight between steps. So a run killed at
any moment and resumed from its last checkpoint ends with the same params as one never interrupted.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jgem.algos.algorithms import get_algorithm
from jgem.algos.critic import make_critic
from jgem.algos.learner import TrainState, init_train_state, reset_optimizer
from jgem.algos.step import StepBatch, StepSpec, prepare_batch, train_step
from jgem.algos.types import TrainBatch
from jgem.config import TrainConfig, validate
from jgem.curriculum import Curriculum
from jgem.envs.pool import EnvPool
from jgem.envs.with_tools import tool_wrapper
from jgem.models.config import ModelConfig, preset
from jgem.models.hf import load_pretrained
from jgem.models.tokenizer import ChatFormat, load_tokenizer
from jgem.models.transformer import Transformer
from jgem.rollout.batch import build_batch, pack_prompts
from jgem.rollout.engine import EpisodeSpec, RolloutEngine, wrappers_for_view
from jgem.rollout.episode import Episode, turn_arrays
from jgem.sharding.mesh import batch_axis_size, make_mesh
from jgem.sharding.rules import shard_batch

EVAL_SEED_OFFSET = 1_000_000_000  # eval seeds never overlap training seeds
# The trainer's host state in every checkpoint (beside the run config): all a resume needs besides the device state
HOST_KEYS = ("step", "episodes", "warm_start_done")
MAX_TURNS_CAP = 1000  # with no curriculum, the env's own limit applies; this only bounds a runaway env


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def episode_metrics(episodes: list[Episode], prefix: str) -> dict[str, float]:
    if not episodes:
        return {}
    return {
        f"{prefix}/success_rate": float(np.mean([e.success for e in episodes])),
        f"{prefix}/return": float(np.mean([e.episode_return for e in episodes])),
        f"{prefix}/turns": float(np.mean([e.num_turns for e in episodes])),
        f"{prefix}/action_tokens": float(np.mean([e.num_action_tokens for e in episodes])),
        f"{prefix}/faults": float(sum(e.fault is not None for e in episodes)),
    }


def check_finite_loss(loss: float, step: int, episodes: list[Episode], what: str = "train/loss") -> None:
    """Stop the run on a non-finite loss: training on NaN silently would waste the run (and its checkpoints)."""
    if math.isfinite(loss):
        return
    returns = [sum(t.reward for t in e.transitions) for e in episodes]
    bad = sum(not math.isfinite(r) for r in returns)
    raise FloatingPointError(
        f"{what} is {loss} at step {step + 1} ({bad} of {len(returns)} episodes have a non-finite return); "
        "the run stops here, before a checkpoint is written. Check the env's rewards, learner.lr and "
        "learner.max_grad_norm, or resume from the last checkpoint with a lower learner.lr"
    )


def env_turn_limit(cfg: TrainConfig) -> int | None:
    """The env's own turn limit (its `max_turns`, read off one env built here), or None when it has none or the
    env is remote."""
    if cfg.env.backend == "remote":
        return None
    from jgem.registry import make

    env = make(cfg.env.env_id, **cfg.env.env_kwargs)
    try:
        limit = getattr(env, "max_turns", None)
    finally:
        if hasattr(env, "close"):
            env.close()
    return int(limit) if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 else None


def params_digest(params: Any) -> str:
    """sha256 over every parameter's bytes in tree order (equal digests: bit-identical params)."""
    import hashlib

    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        params = multihost_utils.process_allgather(params, tiled=True)
    h = hashlib.sha256()
    for leaf in jax.tree.leaves(jax.device_get(params)):
        h.update(np.ascontiguousarray(leaf).tobytes())
    return h.hexdigest()


class Trainer:
    """Builds everything a run needs from a `TrainConfig`; `run()` trains and returns the final summary."""

    def __init__(self, cfg: TrainConfig) -> None:
        validate(cfg, jax.device_count())
        self.cfg = cfg
        self.algorithm = get_algorithm(cfg.algorithm)
        self.run_dir = Path(cfg.run_dir)
        self.mesh = make_mesh(cfg.mesh)
        self.curriculum = (
            Curriculum(cfg.curriculum.horizons, cfg.curriculum.stage_steps)
            if cfg.curriculum.horizons
            else Curriculum.constant(MAX_TURNS_CAP)
        )
        self.env_max_turns = env_turn_limit(cfg)

        tokenizer = load_tokenizer(cfg.model.tokenizer_path or cfg.model.path)
        system = cfg.env.system_prompt if cfg.rollout.view == "per_turn" else None
        self.chat = ChatFormat(tokenizer, system=system)
        model, critic, self.model_cfg = self._build_models(tokenizer)
        # With a KL penalty, the state carries the frozen reference policy: the policy RL starts from (the
        # initial one, or the warm-started one after a warm start); checkpoints keep it, so resume is exact.
        # An algorithm with kl="reward" (REINFORCE++) folds its KL penalty into the rewards, so its loss has none
        learner = self.algorithm.learner(cfg.learner)
        self.state: TrainState = init_train_state(
            model, learner, self.mesh, critic=critic, seed=cfg.seed, reference=cfg.learner.kl_coef > 0
        )
        self.pool = EnvPool(
            cfg.env.env_id,
            cfg.env.num_envs,
            backend=cfg.env.backend,
            num_workers=cfg.env.num_workers,
            step_timeout=cfg.env.step_timeout,
            env_kwargs=dict(cfg.env.env_kwargs),
            wrappers=tool_wrapper(cfg.env) + tuple(wrappers_for_view(cfg.rollout.view, cfg.env.system_prompt)),
            remote_urls=cfg.env.remote_urls,
            remote_token=cfg.env.read_remote_token(),  # read here, never kept in the config
            imports=cfg.env.imports,
        )
        self.engine = RolloutEngine(
            self.model_cfg, self.pool, self.chat, cfg.rollout, env_name=cfg.env.env_id, mesh=self.mesh
        )
        # The step's program is traced with the mesh in context (jax.set_mesh): the model's activation
        # constraints apply, and a fused attention kernel (Pallas splash on TPU) runs per shard (shard_map).
        self._train_step = self._on_mesh(train_step)
        self._prepare = self._on_mesh(prepare_batch)
        minibatches = math.lcm(cfg.learner.minibatches, cfg.warm_start.minibatches)
        self.batch_divisor = minibatches * (cfg.learner.micro_batch_size or batch_axis_size(self.mesh))
        # this process's share of the [E, ...] episode arrays' shards (E is padded to a multiple of it)
        self.episode_divisor = max(1, batch_axis_size(self.mesh) // jax.process_count())
        # HOST_KEYS: the step to resume at, episodes played so far, whether the warm start is behind us
        self.host: dict[str, Any] = {"step": 0, "episodes": 0, "warm_start_done": cfg.warm_start.steps == 0}

    # -- construction ------------------------------------------------------------------------------

    def _on_mesh(self, fn: Callable) -> Callable:
        """`fn` called (and so traced) with the training mesh in context."""

        @functools.wraps(fn)
        def call(*args, **kwargs):
            with jax.set_mesh(self.mesh):
                return fn(*args, **kwargs)

        return call

    def _build_models(self, tokenizer) -> tuple[Transformer, Transformer | None, ModelConfig]:
        cfg = self.cfg
        ppo = self.algorithm.critic
        dt = dict(
            dtype=cfg.model.dtype,
            param_dtype=cfg.model.param_dtype,
            remat=cfg.model.remat,
            attention=cfg.model.attention,
            scan_layers=cfg.model.scan_layers,
            lora=cfg.model.lora,
        )
        if cfg.model.path is not None:
            model, mcfg = load_pretrained(cfg.model.path, mesh=self.mesh, seed=cfg.seed, **dt)
            critic = None
            if ppo:
                critic, _ = load_pretrained(cfg.model.path, mesh=self.mesh, value_head=True, seed=cfg.seed, **dt)
        else:
            mcfg = preset(cfg.model.preset, **dt)
            if len(tokenizer) > mcfg.vocab_size:
                raise ValueError(
                    f"tokenizer has {len(tokenizer)} tokens but preset {cfg.model.preset!r} has "
                    f"vocab_size {mcfg.vocab_size}; use a matching tokenizer or preset"
                )
            model = Transformer(mcfg, rngs=nnx.Rngs(cfg.seed))
            critic = None
            if ppo:
                critic = make_critic(mcfg, policy=model if cfg.critic_from_policy else None, seed=cfg.seed + 1)
        return model, critic, mcfg

    # -- one step ----------------------------------------------------------------------------------

    def specs(self, step: int, *, eval: bool = False) -> list[EpisodeSpec]:
        """The episodes of a step: groups of `group_size` episodes share a seed (one start state)."""
        cfg = self.cfg
        n = cfg.eval_episodes if eval else cfg.episodes_per_step
        g = 1 if eval else cfg.group_size
        # Episodes are numbered over all processes (process p plays n of them from p * n on): ids, groups and seeds,
        # hence the sampled tokens, are those of one process playing all of them.
        procs, first = jax.process_count(), jax.process_index() * n
        base = (EVAL_SEED_OFFSET if eval else 0) + cfg.seed * 7_919_000 + (0 if eval else step * n * procs)
        return [EpisodeSpec(i, group_id=i // g, seed=base + i // g) for i in range(first, first + n)]

    def horizon(self, step: int, *, eval: bool = False) -> int:
        """The turn limit episodes are cut at: in training the curriculum's current one; in evaluation
        `eval_max_turns`, else the env's own (so evaluations at different curriculum stages compare)."""
        cut = (self.cfg.eval_max_turns or MAX_TURNS_CAP) if eval else self.curriculum.max_turns(step)
        return min(cut, self.env_max_turns) if self.env_max_turns else cut

    def collect(self, step: int, *, eval: bool = False) -> list[Episode]:
        cfg = self.cfg
        key = jax.random.fold_in(jax.random.key(cfg.seed), step * 2 + int(eval))
        return self.engine.collect(
            self.state.model(),
            self.specs(step, eval=eval),
            key,
            max_turns=self.horizon(step, eval=eval),
            greedy=cfg.eval_greedy if eval else None,
        )

    def step_spec(self, *, sft: bool = False) -> StepSpec:
        """How the step's program turns the batch into advantages: the algorithm's estimator, or supervised."""
        if sft:
            return StepSpec(None)
        cfg = self.cfg
        return StepSpec.of(self.algorithm, gamma=cfg.gamma, lam=cfg.lam, kl_coef=cfg.learner.kl_coef)

    def pack(self, episodes: list[Episode], *, sft: bool = False) -> tuple[dict[str, np.ndarray], dict[str, float]]:
        """This process's episodes as the host arrays of a `StepBatch` (and the packing's metrics).

        Shapes agree over processes (one host all-gather of six integers): rows to a power-of-two multiple of the
        batch divisor and row lengths to the longest, so the step compiles for a handful of shapes; episodes to a
        multiple of this process's shards, turns to a power of two. Episode indices are global (process p's
        episodes come after those of processes < p). With a critic, each truncated episode's cut state is one
        row of `bootstrap_*` arrays that only the critic reads (its value there is the episode's bootstrap value)."""
        cfg = self.cfg
        episodes = [e for e in episodes if e.fault is None and e.num_turns > 0]
        if not episodes:
            raise RuntimeError("every episode of this step faulted; check the env (see rollout/faults)")
        critic = not sft and self.state.critic_params is not None
        K = _pow2(max(e.num_turns for e in episodes))
        zeros = np.zeros((len(episodes), K), np.float32)
        packed = build_batch(
            episodes,
            zeros,
            view=cfg.rollout.view,
            pad_id=self.chat.pad_id,
            buckets=cfg.batch_buckets,
            batch_divisor=self.batch_divisor,
            returns=zeros if critic else None,
            values=zeros if critic else None,
        )
        d = self.batch_divisor
        shape = lambda a: (_pow2(math.ceil(a["tokens"].shape[0] / d)) * d, a["tokens"].shape[1]) if a else (0, 0)
        boot = {}
        if critic:
            cut = {i: e.next_prompt for i, e in enumerate(episodes) if e.next_prompt is not None}
            boot = pack_prompts(cut, buckets=cfg.batch_buckets, batch_divisor=d, pad_id=self.chat.pad_id)
        K, E, rows_, T_, rows_b, T_b = self._agree_max(K, len(episodes), *shape(packed.arrays), *shape(boot))
        E = -(-E // self.episode_divisor) * self.episode_divisor
        first = jax.process_index() * E  # this process's episodes' global indices start here
        glob = lambda idx: np.where(idx >= 0, idx + first, -1).astype(np.int32)
        pad = lambda x, n, t, fill=0: np.pad(x, [(0, n - x.shape[0]), (0, t - x.shape[1])], constant_values=fill)
        names = ["tokens", "positions", "segment_ids", "loss_mask", "old_logprobs"]
        names += ["value_mask"] if critic else []
        host = {k: pad(packed.arrays[k], rows_, T_) for k in names}
        host["token_episode"] = pad(glob(packed.token_episode), rows_, T_, -1)
        host["token_turn"] = pad(packed.token_turn, rows_, T_, -1)
        for k in ("tokens", "positions", "segment_ids") if critic else ():
            host[f"bootstrap_{k}"] = pad(boot[k], rows_b, T_b)
        if critic:
            host["bootstrap_episode"] = pad(glob(boot["key"]), rows_b, T_b, -1)
        host |= turn_arrays(episodes, num_turns=K, num_rows=E)
        host.pop("values", None)  # the sampler's per-turn values (none here): a critic's come from the step
        metrics: dict[str, float] = dict(packed.metrics)
        if critic:
            metrics["rollout/bootstrapped"] = float(sum(e.next_prompt is not None for e in episodes))
        return host, metrics

    def upload(self, host: dict[str, np.ndarray]) -> StepBatch:
        """The step's one host-to-device transfer: every array of the batch, sharded by rows over the mesh."""
        return StepBatch(**shard_batch(host, self.mesh))

    @staticmethod
    def download(metrics: dict[str, jax.Array]) -> dict[str, float]:
        """The step's one device-to-host transfer: its metrics."""
        return {k: float(v) for k, v in jax.device_get(metrics).items()}

    def learn(self, episodes: list[Episode], *, sft: bool = False) -> dict[str, float]:
        """One update on `episodes`: pack, one upload, one program (`jgem.algos.step.train_step`), one download.
        Returns the packing's metrics and the update's (unprefixed: loss, grad_norm, ...)."""
        host, metrics = self.pack(episodes, sft=sft)
        self.state, m = self._train_step(self.state, self.upload(host), self.step_spec(sft=sft))
        return metrics | self.download(m)

    def make_batch(self, episodes: list[Episode], *, sft: bool = False) -> tuple[TrainBatch, dict[str, float]]:
        """The `TrainBatch` `learn` updates on (advantages, critic targets, reference log-probs on the tokens),
        computed by the same device code, without the update: for tests and inspection."""
        host, metrics = self.pack(episodes, sft=sft)
        return self._prepare(self.state, self.upload(host), self.step_spec(sft=sft)), metrics

    # -- multi-process helpers (no-ops in one process) -----------------------------------------------

    @staticmethod
    def _agree_max(*values: int) -> tuple[int, ...]:
        """The maximum of each value over processes (one host all-gather)."""
        if jax.process_count() == 1:
            return values
        from jax.experimental import multihost_utils

        gathered = np.asarray(multihost_utils.process_allgather(np.asarray(values, np.int64)))
        return tuple(int(v) for v in gathered.reshape(-1, len(values)).max(axis=0))

    # -- the loop ----------------------------------------------------------------------------------

    def train_step(self, step: int) -> dict[str, float]:
        t0 = time.perf_counter()
        episodes = self.collect(step)
        t1 = time.perf_counter()
        metrics = {k if "/" in k else f"train/{k}": v for k, v in self.learn(episodes).items()}
        check_finite_loss(metrics["train/loss"], step, episodes)
        t2 = time.perf_counter()
        self.host["episodes"] += len(episodes)
        metrics |= episode_metrics(episodes, "rollout") | self.engine.stats.as_metrics()
        metrics |= {
            "time/collect_s": t1 - t0,
            "time/update_s": t2 - t1,
            "rollout/max_turns": float(self.horizon(step)),  # the env's limit, or the curriculum's below it
            "curriculum/stage": float(self.curriculum.stage(step)),
            "compile/rollout": float(self.engine.num_compilations),
            "compile/update": float(train_step._cache_size()),
            "pool/faults_total": float(self.pool.num_faults),
        }
        return metrics

    def warm_start(self, log) -> None:
        """Supervised steps on a scripted teacher's games (cross-entropy on its action tokens)."""
        from jgem.rollout.scripted import scripted_episodes

        ws = self.cfg.warm_start
        rl_cfg = self.state.cfg
        sft_cfg = dataclasses.replace(
            rl_cfg,
            lr=ws.lr,
            policy_loss="reinforce",
            epochs=ws.epochs,
            minibatches=ws.minibatches,
            kl_coef=0.0,
            entropy_coef=0.0,
        )
        # the supervised phase trains the policy only: the critic (PPO) sits it out and comes back unchanged
        critic = {k: getattr(self.state, k) for k in ("critic_params", "critic_opt_state", "critic_state")}
        self.state = self.state.replace(cfg=sft_cfg, **dict.fromkeys(critic))
        for s in range(ws.steps):
            # numbered over all processes, as `specs` numbers RL's: each process plays its own teacher games
            n, procs = ws.episodes_per_step, jax.process_count()
            first = jax.process_index() * n
            specs = [EpisodeSpec(i, i, 10**9 * 3 + s * n * procs + i) for i in range(first, first + n)]
            eps = scripted_episodes(
                self.cfg.env.env_id,
                specs,
                self.chat,
                view=self.cfg.rollout.view,
                max_turns=self.curriculum.max_turns(0),
                epsilon=ws.epsilon,
                seed=s,
                env_kwargs=dict(self.cfg.env.env_kwargs),
                system_prompt=self.cfg.env.system_prompt,
                wrappers=tool_wrapper(self.cfg.env),
            )
            m = self.learn(eps, sft=True)
            check_finite_loss(m["loss"], s, eps, what="warm-start loss")
            log(s + 1 - ws.steps, {"warm/step": s + 1, "warm/loss": m["loss"], **episode_metrics(eps, "warm/teacher")})
        self.state = self.state.replace(cfg=rl_cfg, **critic)
        if ws.reset_optimizer:
            self.state = reset_optimizer(self.state)
        if self.state.ref_params is not None:  # KL keeps RL near what the warm start taught
            self.state = self.state.replace(ref_params=jax.tree.map(jnp.copy, self.state.params))
        self.host["warm_start_done"] = True

    def evaluate(self, step: int) -> dict[str, float]:
        """Eval metrics on the held-out seeds, with the horizon evaluation ran at and the training horizon of `step`."""
        return self.eval_metrics(step, self.collect(step, eval=True))

    def eval_metrics(self, step: int, episodes: list[Episode]) -> dict[str, float]:
        return episode_metrics(episodes, "eval") | {
            "eval/max_turns": float(self.horizon(step, eval=True)),
            "eval/train_max_turns": float(self.horizon(step)),
        }

    def run(self) -> dict[str, Any]:
        from jgem.checkpoint import CheckpointConfig, Checkpointer
        from jgem.metrics import MetricsLogger, WandbWriter, plot_curves

        cfg = self.cfg
        primary = jax.process_index() == 0
        self.run_dir.mkdir(parents=True, exist_ok=True)
        ckpt = Checkpointer(
            CheckpointConfig(
                str(self.run_dir / "checkpoints"),
                keep_last=cfg.keep_checkpoints,
                best_metric="eval/success_rate" if cfg.eval_every else None,
            ),
            run_config=cfg,
            defaults=TrainConfig(),  # a field newer than the run's checkpoints resumes at its default
            ignore_fields=(
                "run_dir",  # the checkpoints found there are the run's: it may be moved, or named relatively
                "steps",
                "resume",
                "plot",
                "console",
                "log",  # where metrics go, not what is trained
                "eval_every",
                "eval_episodes",
                "checkpoint_every",
                "keep_checkpoints",
                "eval_max_turns",
                "env.imports",  # where env ids come from, not which env; older runs lack it
                "learner.keep_logits_mb",  # memory vs speed only (the same log-probs); older runs lack it
                "rollout.chunk_steps",  # how the engine schedules work, not what it samples
                "model.scan_layers",  # how the program is laid out, not what it computes
                "rollout.extend_chunk",
            ),
        )
        log = cfg.log
        writers = []
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
        progress = _Progress(enabled=cfg.console and primary)
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
        summary: dict[str, Any] = {}
        t_start = time.perf_counter()
        progress.print(self._outputs_note(bool(writers)), markup=False)
        try:
            restored = ckpt.restore_latest(self.state) if cfg.resume else None
            if restored is not None:
                self.state = restored.state
                self.host = {k: restored.host[k] for k in HOST_KEYS}
                progress.note(f"resumed from step {self.host['step']} in {self.run_dir / 'checkpoints'}", markup=False)
            # one log line per step; the warm start logs at steps 1 - W .. 0, the initial eval before it at -W
            warm = cfg.warm_start.steps
            logger.rewind(self.host["step"] if restored is not None else -warm - 1)
            if restored is None:
                (self.run_dir / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2, default=str))
                if cfg.eval_every:
                    summary["initial_eval"] = self._evaluate(0, "random init", progress)
                    logger.log(-warm if not self.host["warm_start_done"] else 0, summary["initial_eval"])
            if not self.host["warm_start_done"]:
                progress.start("warm start", warm)

                def warm_log(step: int, metrics: dict[str, float]) -> None:
                    logger.log(step, metrics)
                    progress.advance(metrics)

                self.warm_start(warm_log)
                progress.stop()
                if cfg.eval_every:
                    summary["warm_start_eval"] = self._evaluate(0, "after the warm start", progress)
                    logger.log(0, summary["warm_start_eval"])
                ckpt.save(0, self.state, self.host, metrics=summary.get("warm_start_eval"))
            last_eval = summary.get("warm_start_eval", summary.get("initial_eval", {}))
            progress.start("train", cfg.steps, self.host["step"])
            for step in range(self.host["step"], cfg.steps):
                metrics = self.train_step(step)
                self.host["step"] = step + 1
                progress.advance(metrics)
                evaluated = bool(cfg.eval_every) and ((step + 1) % cfg.eval_every == 0 or step + 1 == cfg.steps)
                if evaluated:
                    last_eval = self._evaluate(step + 1, f"after step {step + 1}", progress)
                    metrics |= last_eval
                logger.log(step + 1, metrics)
                if (step + 1) % cfg.checkpoint_every == 0 or step + 1 == cfg.steps:
                    ckpt.save(step + 1, self.state, self.host, metrics=metrics if evaluated else None)
            progress.stop()
            ckpt.wait()
            last_checkpoint = ckpt.latest_step()
            summary["final_eval"] = last_eval
            summary["params_sha256"] = params_digest(self.state.params)
            summary["steps"] = cfg.steps
            logger.close()
            if cfg.plot and primary and cfg.steps:
                summary["plot"] = str(
                    plot_curves(
                        logger.jsonl_path,
                        self.run_dir / "curves.png",
                        curve_keys(cfg),
                        title=f"{cfg.algorithm} on {cfg.env.env_id}",
                    )
                )
        finally:
            progress.stop()
            ckpt.close()
            logger.close()
            self.pool.close()
        if primary:
            (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
        progress.print(self._end_note(summary, last_checkpoint, time.perf_counter() - t_start), markup=False)
        return summary

    def _evaluate(self, step: int, what: str, progress: _Progress) -> dict[str, float]:
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


# The metrics of a plain progress line (`_Progress` off a terminal): CONSOLE_KEYS without the timings (the line
# ends with the step's wall time) and the evals (each has a line of its own)
LINE_KEYS = tuple(k for k in CONSOLE_KEYS if not k.startswith(("time/", "eval/")))
EVAL_KEYS = ("eval/success_rate", "eval/turns", "eval/return")
BAR_INFO = (  # (label, metric) shown beside a progress bar, where the phase has it
    ("return", "rollout/return"),
    ("success", "rollout/success_rate"),
    ("loss", "warm/loss"),
    ("teacher success", "warm/teacher/success_rate"),
)


class _Progress:
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


def train(cfg: TrainConfig) -> dict[str, Any]:
    return Trainer(cfg).run()
