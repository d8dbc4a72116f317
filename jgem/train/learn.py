"""The host side of a training step: episodes packed into one `StepInputs`, one upload, the step's one device
program (`jgem.algos.step.train_step`: advantages, critic targets, reference log-probs and the update), one
download of its metrics."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh

from jgem.algos.algorithms import Algorithm
from jgem.algos.learner import TrainState
from jgem.algos.step import StepInputs, StepSpec, prepare_batch, train_step
from jgem.algos.types import TrainBatch
from jgem.checkpoint import CheckpointConfig, Checkpointer
from jgem.config import TrainConfig
from jgem.rollout.batch import build_batch, pack_prompts
from jgem.rollout.episode import Episode, turn_arrays
from jgem.shapes import bucket, next_pow2
from jgem.sharding.mesh import batch_axis_size, process_max
from jgem.sharding.rules import shard_batch


def on_mesh(mesh: Mesh, fn: Callable) -> Callable:
    """`fn` called (and so traced) with `mesh` in context (jax.set_mesh): the model's activation constraints apply,
    and a fused attention kernel (Pallas splash on TPU) runs per shard (shard_map)."""

    @functools.wraps(fn)
    def call(*args, **kwargs):
        with jax.set_mesh(mesh):
            return fn(*args, **kwargs)

    return call


class Learner:
    """The learner side of a run: the `TrainState` on the learner's mesh, the update program (`learn(episodes)`: one
    training step on them) and the checkpoints of the state (`open_checkpoints`, `save`, `restore_latest`). It
    neither plays episodes nor knows which process plays them; `learners` are the processes that train, whose
    episodes it numbers globally."""

    def __init__(
        self, cfg: TrainConfig, state: TrainState, mesh: Mesh, *, algorithm: Algorithm, pad_id: int, learners: list[int]
    ) -> None:
        self.cfg, self.state, self.mesh, self.algorithm = cfg, state, mesh, algorithm
        self.pad_id, self.learners = pad_id, learners
        self._train_step = on_mesh(mesh, train_step)
        self._prepare = on_mesh(mesh, prepare_batch)
        minibatches = math.lcm(cfg.learner.minibatches, cfg.warm_start.minibatches)
        self.batch_divisor = minibatches * (cfg.learner.micro_batch_size or batch_axis_size(mesh))
        # this process's share of the [E, ...] episode arrays' shards (E is padded to a multiple of it)
        self.episode_divisor = max(1, batch_axis_size(mesh) // len(learners))
        self.ckpt: Checkpointer | None = None
        # a mixture of experts: (sparse layers M, experts per token k) of the recorded routing each batch carries
        model_cfg = state.model().cfg
        self.routing = (
            (len(model_cfg.sparse_layers), model_cfg.num_experts_per_tok) if model_cfg.sparse_layers else None
        )

    # -- checkpoints of the state -------------------------------------------------------------------

    def open_checkpoints(self, config: CheckpointConfig, **kwargs: Any) -> Checkpointer:
        """The checkpointer of the state (`jgem.checkpoint.Checkpointer(config, **kwargs)`), kept for `save` and
        `restore_latest`."""
        self.ckpt = Checkpointer(config, **kwargs)
        return self.ckpt

    def save(self, step: int, host: dict[str, Any], *, metrics: dict[str, float] | None = None) -> None:
        """Checkpoint `step`: the state and the trainer's `host` values (`metrics` rank it, when given)."""
        self.ckpt.save(step, self.state, host, metrics=metrics)

    def restore_latest(self) -> dict[str, Any] | None:
        """The latest checkpoint's state into `state`; its host values (None: there is none)."""
        restored = self.ckpt.restore_latest(self.state)
        if restored is None:
            return None
        self.state = restored.state
        return restored.host

    def last_checkpoint(self) -> int | None:
        """The step of the last checkpoint, once every save has finished."""
        self.ckpt.wait()
        return self.ckpt.latest_step()

    def close(self) -> None:
        if self.ckpt is not None:
            self.ckpt.close()
            self.ckpt = None

    # -- the update ---------------------------------------------------------------------------------

    def step_spec(self, *, sft: bool = False) -> StepSpec:
        """How the step's program turns the batch into advantages: the algorithm's estimator, or supervised."""
        if sft:
            return StepSpec(None)
        cfg = self.cfg
        return StepSpec.of(self.algorithm, gamma=cfg.gamma, lam=cfg.lam, kl_coef=cfg.learner.kl_coef)

    def learn(
        self,
        episodes: list[Episode],
        *,
        sft: bool = False,
        meanwhile: Callable[[Callable[[], bool]], None] | None = None,
    ) -> dict[str, float]:
        """One update on `episodes`: pack, one upload, one program (`jgem.algos.step.train_step`), one download.
        `meanwhile(done)`, when given, runs after the program is dispatched and before its metrics are read, `done()`
        telling whether the update has finished: with split meshes the sampler's devices go on generating (the
        pipeline's steps ahead) while the learner's run the update. Returns the packing's metrics and the update's
        (unprefixed: loss, grad_norm, ...). The new policy reaches the sampler by the run's transport (`publish`),
        not here."""
        host, metrics = self.pack(episodes, sft=sft)
        self.state, m = self._train_step(self.state, self.upload(host), self.step_spec(sft=sft))
        if meanwhile is not None:
            meanwhile(lambda: all(x.is_ready() for x in jax.tree.leaves(m)))
        return metrics | self.download(m)

    def make_batch(self, episodes: list[Episode], *, sft: bool = False) -> tuple[TrainBatch, dict[str, float]]:
        """The `TrainBatch` `learn` updates on (advantages, critic targets, reference log-probs on the tokens),
        computed by the same device code, without the update: for tests and inspection."""
        host, metrics = self.pack(episodes, sft=sft)
        return self._prepare(self.state, self.upload(host), self.step_spec(sft=sft)), metrics

    def pack(self, episodes: list[Episode], *, sft: bool = False) -> tuple[dict[str, np.ndarray], dict[str, float]]:
        """This process's episodes as the host arrays of a `StepInputs` (and the packing's metrics).

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
        K = next_pow2(max(e.num_turns for e in episodes))
        packed = build_batch(
            episodes,
            view=cfg.rollout.view,
            pad_id=self.pad_id,
            buckets=cfg.batch_buckets,
            batch_divisor=self.batch_divisor,
            routing=self.routing,
        )
        d = self.batch_divisor
        rows = lambda a: bucket(math.ceil(a["tokens"].shape[0] / d), cfg.batch_rows_per_doubling) * d
        shape = lambda a: (rows(a), a["tokens"].shape[1]) if a else (0, 0)
        boot = {}
        if critic:
            cut = {i: e.next_prompt for i, e in enumerate(episodes) if e.next_prompt is not None}
            boot = pack_prompts(cut, buckets=cfg.batch_buckets, batch_divisor=d, pad_id=self.pad_id)
        K, E, rows_, T_, rows_b, T_b = process_max([K, len(episodes), *shape(packed.arrays), *shape(boot)], self.mesh)
        E = -(-E // self.episode_divisor) * self.episode_divisor
        first = self.learners.index(jax.process_index()) * E  # this process's episodes' global indices
        glob = lambda idx: np.where(idx >= 0, idx + first, -1).astype(np.int32)
        pad = lambda x, n, t, fill=0: np.pad(x, [(0, n - x.shape[0]), (0, t - x.shape[1])], constant_values=fill)
        names = ["tokens", "positions", "segment_ids", "loss_mask", "old_logprobs"]
        names += ["value_mask"] if critic else []
        several = self.state.policies > 1  # each token's and each episode's policy (LoRA adapter)
        names += ["adapter_ids"] if several else []
        host = {k: pad(packed.arrays[k], rows_, T_) for k in names}
        host["token_episode"] = pad(glob(packed.token_episode), rows_, T_, -1)
        host["token_turn"] = pad(packed.token_turn, rows_, T_, -1)
        if self.routing is not None:  # each token's recorded experts (-1: none, padding too)
            x = packed.arrays["expert_ids"]
            host["expert_ids"] = np.pad(
                x, [(0, rows_ - x.shape[0]), (0, T_ - x.shape[1]), (0, 0), (0, 0)], constant_values=-1
            )
        for k in ("tokens", "positions", "segment_ids") if critic else ():
            host[f"bootstrap_{k}"] = pad(boot[k], rows_b, T_b)
        if critic:
            host["bootstrap_episode"] = pad(glob(boot["key"]), rows_b, T_b, -1)
        host |= turn_arrays(episodes, num_turns=K, num_rows=E)
        if not several:
            del host["policy_ids"]
        metrics: dict[str, float] = dict(packed.metrics)
        if critic:
            metrics["rollout/bootstrapped"] = float(sum(e.next_prompt is not None for e in episodes))
        return host, metrics

    def upload(self, host: dict[str, np.ndarray]) -> StepInputs:
        """The step's one host-to-device transfer: every array of the batch, sharded by rows over the mesh."""
        return StepInputs(**shard_batch(host, self.mesh))

    @staticmethod
    def download(metrics: dict[str, jax.Array]) -> dict[str, float]:
        """The step's one device-to-host transfer: its metrics."""
        return {k: float(v) for k, v in jax.device_get(metrics).items()}


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
