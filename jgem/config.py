"""TrainConfig: the whole run as composed frozen dataclasses (the CLI is tyro over these)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jgem.algos.learner import LearnerConfig
from jgem.rollout.engine import RolloutConfig
from jgem.sharding.mesh import MeshConfig

ALGORITHMS = ("rebn", "reinforce", "grpo", "drgrpo", "rloo", "reinforce_pp", "ppo")
GROUPED = ("grpo", "drgrpo", "rloo")


@dataclass(frozen=True)
class EnvConfig:
    """Which environment and how the pool runs it."""

    env_id: str = "game:GuessTheNumber-v0-easy"
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    num_envs: int = 16
    backend: str = "inline"  # inline (deterministic), thread, process, remote
    num_workers: int | None = None
    step_timeout: float | None = None
    remote_urls: tuple[str, ...] = ()
    remote_token: str | None = None
    system_prompt: str | None = None


@dataclass(frozen=True)
class ModelSpec:
    """A local HF checkpoint (`path`) or a preset with random init and the shipped tiny tokenizer."""

    path: str | None = None
    preset: str = "tiny"
    tokenizer_path: str | None = None  # default: `path`, or the tiny tokenizer for presets
    dtype: str = "float32"
    param_dtype: str = "float32"
    # Remat policy of each decoder block (jgem.models.config.REMAT: none, full, dots_saveable, ...);
    # True / False, as older configs say, mean "full" / "none".
    remat: bool | str = "none"
    attention: str = "auto"  # jgem.models.config.ATTENTION: auto, xla, blockwise, cudnn, splash


@dataclass(frozen=True)
class CurriculumConfig:
    """ScalingInter-RL horizons; empty `horizons` means the env's own turn limit (capped by 1000)."""

    horizons: tuple[int, ...] = ()
    stage_steps: int = 100


@dataclass(frozen=True)
class WarmStartConfig:
    """Optional supervised warm start on a scripted agent's games (games with a reference solver)."""

    steps: int = 0
    episodes_per_step: int = 32
    lr: float = 1e-3
    epsilon: float = 0.0  # chance per turn that the teacher plays a random action instead
    epochs: int = 1  # passes over each batch of teacher episodes
    minibatches: int = 1  # optimizer steps per pass
    reset_optimizer: bool = True  # RL starts with fresh AdamW moments (not the supervised phase's)


@dataclass(frozen=True)
class TrainConfig:
    run_dir: str = "runs/default"
    seed: int = 0
    steps: int = 100
    algorithm: str = "rebn"
    gamma: float = 1.0
    lam: float = 0.95  # GAE lambda (ppo)
    episodes_per_step: int = 32
    group_size: int = 1  # episodes per start state; > 1 for grpo, drgrpo, rloo
    critic_from_policy: bool = True  # ppo: initialise the critic from the policy's weights
    env: EnvConfig = field(default_factory=EnvConfig)
    model: ModelSpec = field(default_factory=ModelSpec)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)
    mesh: MeshConfig = field(default_factory=lambda: MeshConfig(data=-1))  # all devices, batch over data
    warm_start: WarmStartConfig = field(default_factory=WarmStartConfig)
    batch_buckets: tuple[int, ...] = (128, 256, 512, 1024, 2048, 4096, 8192)
    eval_every: int = 10
    eval_episodes: int = 64
    eval_greedy: bool = False
    checkpoint_every: int = 10
    keep_checkpoints: int = 3
    resume: bool = True
    plot: bool = True
    console: bool = True

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def validate(cfg: TrainConfig, num_devices: int) -> None:
    """Fail fast, before anything compiles, on a config that cannot run; messages say what to change."""
    from jgem.registry import spec

    errors = []
    if cfg.algorithm not in ALGORITHMS:
        errors.append(f"algorithm {cfg.algorithm!r} is unknown; choose one of {', '.join(ALGORITHMS)}")
    if cfg.env.backend != "remote":
        try:
            spec(cfg.env.env_id)
        except KeyError as e:
            errors.append(str(e.args[0]))
    if cfg.model.path is not None and not (Path(cfg.model.path) / "config.json").is_file():
        errors.append(f"model.path {cfg.model.path!r} is not a local HF checkpoint directory (no config.json there)")
    if cfg.model.tokenizer_path is not None and not Path(cfg.model.tokenizer_path).is_dir():
        errors.append(f"model.tokenizer_path {cfg.model.tokenizer_path!r} does not exist")
    if cfg.steps < 0 or cfg.episodes_per_step < 1:
        errors.append("steps must be >= 0 and episodes_per_step >= 1")
    if cfg.group_size < 1 or cfg.episodes_per_step % cfg.group_size:
        errors.append(
            f"episodes_per_step {cfg.episodes_per_step} is not divisible by group_size {cfg.group_size}; "
            "use a multiple of group_size"
        )
    if cfg.algorithm in GROUPED and cfg.group_size < 2:
        errors.append(f"{cfg.algorithm} normalises within groups of rollouts; set group_size >= 2 (e.g. 8)")
    if cfg.learner.temperature != cfg.rollout.temperature:
        errors.append(
            f"learner.temperature {cfg.learner.temperature} differs from rollout.temperature "
            f"{cfg.rollout.temperature}; the learner must score actions at the temperature they were sampled at"
        )
    if not 0.0 <= cfg.gamma <= 1.0:
        errors.append(f"gamma must be in [0, 1], got {cfg.gamma}")
    try:
        sizes = cfg.mesh.resolve(num_devices)
    except ValueError as e:
        errors.append(str(e))
    else:
        batch_axes = sizes[0] * sizes[1]
        mb = cfg.learner.micro_batch_size
        if mb is not None and mb % batch_axes:
            errors.append(
                f"learner.micro_batch_size {mb} is not divisible by {batch_axes} devices on mesh axes (data, fsdp); "
                f"use a multiple of {batch_axes}"
            )
    if errors:
        raise ValueError("invalid TrainConfig:\n  - " + "\n  - ".join(errors))
