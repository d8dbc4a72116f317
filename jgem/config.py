"""TrainConfig: the whole run as composed frozen dataclasses (the CLI is tyro over these)."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from tyro.constructors import PrimitiveConstructorSpec

from jgem.algos.algorithms import ALGORITHMS, Algorithm
from jgem.algos.config import LearnerConfig
from jgem.models.config import LoraConfig
from jgem.registry import import_modules, spec
from jgem.rollout.config import RolloutConfig
from jgem.sharding.config import MeshConfig

# A check's `name`: how a message writes a field path (`field_ref` in `validate`, so the CLI names flags). A
# sub-config's `errors(name)` passes its own field names (`env_id`); a module-level check passes TrainConfig paths.
FieldName = Callable[[str], str]


def _json_object(args: list[str]) -> dict[str, Any]:
    try:
        value = json.loads(args[0])
    except json.JSONDecodeError as e:
        raise ValueError(f"not JSON ({e}); pass an object such as '{{\"min_number\": 1}}'") from None
    if not isinstance(value, dict):
        raise ValueError(f"{args[0]!r} is not a JSON object; pass one such as '{{\"min_number\": 1}}'")
    return value


# On the CLI a dict of constructor kwargs is one JSON object: `--env.env-kwargs '{"path": "gsm8k.parquet"}'`.
JsonKwargs = Annotated[
    dict[str, Any],
    PrimitiveConstructorSpec(
        nargs=1,
        metavar="JSON",
        instance_from_str=_json_object,
        is_instance=lambda x: isinstance(x, dict),
        str_from_instance=lambda x: [json.dumps(x)],
    ),
]


@dataclass(frozen=True)
class EnvConfig:
    """Which environment and how the pool runs it."""

    env_id: str = "game:GuessTheNumber-v0-easy"
    """the env id to train on (jgem.list_envs(), docs/environments.md), or one a module given with --import
    registers"""
    env_kwargs: JsonKwargs = field(default_factory=dict)
    """the env's constructor arguments as one JSON object, e.g. '{"path": "gsm8k.parquet"}'"""
    num_envs: int = 16
    """envs in the pool (per process): the most episodes played at once"""
    backend: str = "inline"
    """how the pool runs the envs: inline (deterministic), thread, process, remote (env servers at
    --env.remote-urls)"""
    num_workers: int | None = None
    """worker threads or processes of the thread, process and remote backends; None: one per env"""
    step_timeout: float | None = None
    """seconds an env reset or step may take before its episode ends as a fault (not with the inline backend);
    None: no limit"""
    remote_urls: tuple[str, ...] = ()
    """base URLs of jgem-serve env servers for --env.backend remote (envs are assigned round-robin)"""
    remote_token_file: str | None = None
    """a file whose first line is the env servers' bearer token (--env.backend remote); None: the token in
    $JGEM_SERVE_TOKEN, if set. The token is read when the pool is built and never written to the run directory"""
    system_prompt: str | None = None
    """a system message before every episode's first observation; None: none"""
    imports: tuple[str, ...] = ()
    """modules imported first: they register custom env ids (`--import` on the CLI)"""
    tools: tuple[str, ...] = ()
    """tools around every env (docs/tools.md): any of python, search, mcp, tried in this order"""
    max_tool_uses: int | None = 5
    """tool calls per episode (None: unlimited); they do not use env turns"""
    tool_timeout: float = 5.0
    """seconds per tool call"""
    search_corpus: str | None = None
    """the search tool's JSONL corpus or search server URL; None: the shipped corpus"""
    search_topk: int = 3
    """passages one search call returns"""
    mcp_server: str | None = None
    """the mcp tool's server: a streamable-HTTP URL, or a stdio server's command line"""
    tool_format: str = "gem_tags"
    """how the model calls the tools (docs/tools.md): gem_tags (GEM's <python>/<search> tags, instructions in the
    first observation), hermes (Qwen2.5/Qwen3 <tool_call> JSON, the schemas given to the chat template's tools=,
    results as tool messages), llama3_json (Llama 3.1 JSON calls, results as ipython messages)"""

    def read_remote_token(self) -> str | None:
        """The env servers' bearer token for the remote backend: the first line of `remote_token_file`, else
        $JGEM_SERVE_TOKEN, else None (and None for other backends). Read here, never kept in the config."""
        if self.backend != "remote":
            return None
        if self.remote_token_file is not None:
            from jgem.envs.remote import read_token_file

            return read_token_file(self.remote_token_file)
        import os

        from jgem.envs.remote import TOKEN_ENV

        return os.environ.get(TOKEN_ENV) or None

    def id_errors(self, name: FieldName = str) -> list[str]:
        """An env id the registry lacks, with the nearest ids (the remote backend's ids live on its servers)."""
        if self.backend == "remote":
            return []
        try:
            spec(self.env_id)
        except KeyError as e:
            return [f"{name('env_id')}: {e.args[0]}"]
        return []

    def errors(self, name: FieldName = str) -> list[str]:
        """An unknown env id, the remote backend without servers or with an unreadable token, and the tools."""
        from jgem.envs.with_tools import tool_errors

        errors = self.id_errors(name)
        if self.backend == "remote":
            try:
                self.read_remote_token()
            except ValueError as e:
                errors.append(f"{name('remote_token_file')}: {e}")
            if not self.remote_urls:
                errors.append(f"{name('backend')} remote needs {name('remote_urls')} (one or more env server URLs)")
        return errors + tool_errors(tuple(self.tools), self.mcp_server, self.tool_format)


@dataclass(frozen=True)
class ModelSpec:
    """A local HF checkpoint (`path`) or a preset with random init and the shipped tiny tokenizer."""

    path: str | None = None
    """a local Hugging Face checkpoint directory (config.json, *.safetensors, tokenizer files) to start from;
    None: --model.preset with random init"""
    preset: str = "tiny"
    """the architecture (jgem.models.config.PRESETS) built with random init when --model.path is None"""
    tokenizer_path: str | None = None
    """a directory with the tokenizer files; None: --model.path, or the shipped tiny tokenizer for presets"""
    dtype: str = "float32"
    """compute dtype of the forward pass (float32, bfloat16)"""
    param_dtype: str = "float32"
    """dtype the weights are kept and updated in: float32 master weights, or 16-bit (with LoRA, the frozen
    base's dtype)"""
    remat: bool | str = "none"
    """remat policy of each decoder block (jgem.models.config.REMAT: none, full, dots_saveable, ...); True /
    False, as older configs say, mean full / none"""
    attention: str = "auto"
    """attention implementation (jgem.models.config.ATTENTION): auto, xla, blockwise, cudnn, splash"""
    scan_layers: bool | None = None
    """the training forward as one lax.scan over the layers: None (auto) on GPU/TPU, not on CPU; True / False
    force it"""
    lora: LoraConfig = field(default_factory=LoraConfig)
    """LoRA adapters (`--model.lora.rank 16`): only they train, the base weights stay frozen; rank 0: full
    fine-tuning"""

    def errors(self, name: FieldName = str) -> list[str]:
        """A checkpoint or tokenizer directory that is not there; several LoRA adapters (policies) without LoRA."""
        errors = []
        if self.lora.adapters > 1 and not self.lora.rank:
            errors.append(
                f"{name('lora.adapters')} {self.lora.adapters}: several policies are LoRA adapters on one base; set "
                f"{name('lora.rank')} (e.g. 16)"
            )
        if self.path is not None and not (Path(self.path) / "config.json").is_file():
            errors.append(f"{name('path')} {self.path!r} is not a local HF checkpoint directory (no config.json there)")
        if self.tokenizer_path is not None and not Path(self.tokenizer_path).is_dir():
            errors.append(f"{name('tokenizer_path')} {self.tokenizer_path!r} does not exist")
        return errors


@dataclass(frozen=True)
class CurriculumConfig:
    """ScalingInter-RL horizons; empty `horizons` means the env's own turn limit (capped by 1000)."""

    horizons: tuple[int, ...] = ()
    """the turn horizon of each stage, e.g. 5 10 20 (the env's own limit still applies); empty: the env's
    limit"""
    stage_steps: int = 100
    """RL steps per stage; the last stage lasts to the end of the run"""


@dataclass(frozen=True)
class WarmStartConfig:
    """Optional supervised warm start on a scripted agent's games (games with a reference solver)."""

    steps: int = 0
    """supervised steps imitating the env's scripted solver before RL (games with a solver only); 0: none"""
    episodes_per_step: int = 32
    """teacher episodes per warm-start step (per process)"""
    lr: float = 1e-3
    """learning rate of the warm start"""
    epsilon: float = 0.0
    """chance per turn that the teacher plays a random action instead"""
    teacher: str = "solver"
    """the scripted player imitated: the game's reference solver, or one of its named weaker teachers
    (GuessTheNumber: 'uniform', a guess drawn among the numbers the hints leave possible)"""
    epochs: int = 1
    """passes over each batch of teacher episodes"""
    minibatches: int = 1
    """optimizer steps per pass"""
    reset_optimizer: bool = True
    """RL starts with fresh AdamW moments (not the supervised phase's)"""

    def errors(self, env: EnvConfig, name: FieldName = str) -> list[str]:
        """A warm start on an env without a scripted solver, or with a teacher it lacks (nothing for an id the
        registry lacks: that has its own message, and no solver hint on top)."""
        if self.steps <= 0 or env.id_errors():
            return []
        from jgem.envs.games.solvers import has_solver, teachers

        if _multiagent(env):  # a multi-agent game's teachers are its scripted players, at every seat
            from jgem.rollout.workflows.agents import players_of, seat_errors

            agents = agent_seats(env)
            teacher = next(iter(players_of(env.env_id)), "none") if self.teacher == "solver" else self.teacher
            return (
                seat_errors(env.env_id, agents, teacher, "alternate", 1, name("teacher"), evaluation=True)
                if agents
                else []
            )
        if not has_solver(env.env_id):
            return [
                f"{name('steps')} {self.steps} needs a game with a scripted solver, and {env.env_id!r} has none; "
                "set --warm-start.steps 0"
            ]
        if self.teacher not in (known := teachers(env.env_id)):
            return [
                f"{name('teacher')} {self.teacher!r} is not a teacher of {env.env_id!r}; choose from {', '.join(known)}"
            ]
        return []


PIPELINE_MODES = ("sync", "off_policy", "async", "stream")


@dataclass(frozen=True)
class PipelineConfig:
    """How sampling and training take turns (jgem/train/pipeline.py, docs/architecture.md "The pipeline")."""

    mode: str = "sync"
    """sync: each step plays its episodes to the end, then trains (nothing in flight between steps);
    off_policy: step s trains on episodes sampled by policy version max(0, s - lag), exactly (deterministic);
    async: episodes of up to max_staleness steps ahead play while the learner trains, and take each new policy
    as soon as it is published (partial rollouts); stream: as async, but each step trains whichever whole groups
    finished first (a step never waits for its slowest episode; the tokens' staleness is logged, not bounded)"""
    lag: int = 1
    """off_policy: K, the policy version that samples step s's episodes is s - K (0: the same as sync)"""
    max_staleness: int = 1
    """async: N, an episode of step s starts once the learner is at version s - N, so no trained token is
    more than N updates older than the policy it trains (0: the same as sync); stream: the same admission (AReaL's
    bound on the steps played ahead), but a slow episode trains when it finishes, however stale by then"""
    stale_kv: str = "keep"
    """async, on publication: keep the keys and values an in-flight episode computed under the old policy, or
    recompute them (prefill its stream again under the new one)"""

    @property
    def ahead(self) -> int:
        """How many steps the producer may submit ahead of the learner: sync none, off_policy `lag`, async and
        stream `max_staleness` (`jgem.train.pipeline.Staleness`)."""
        return {"sync": 0, "off_policy": self.lag}.get(self.mode, self.max_staleness)

    def errors(self, name: FieldName = str) -> list[str]:
        """An unknown mode or stale_kv, a lag or staleness that is not an integer >= 0."""
        errors = []
        if self.mode not in PIPELINE_MODES:
            errors.append(f"{name('mode')} is {self.mode!r}; choose {', '.join(PIPELINE_MODES)}")
        for knob in ("lag", "max_staleness"):
            value = getattr(self, knob)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                errors.append(f"{name(knob)} is {value!r}; it must be an integer >= 0")
        if self.stale_kv not in ("keep", "recompute"):
            errors.append(f"{name('stale_kv')} is {self.stale_kv!r}; choose keep or recompute")
        return errors


@dataclass(frozen=True)
class LogConfig:
    """Metric sinks beside metrics.jsonl and TensorBoard (always written): Weights & Biases, off by default."""

    wandb: bool = False
    """log the run's config and every step's scalars to a W&B run (needs the wandb extra)"""
    wandb_project: str = "jgem"
    """the W&B project"""
    wandb_entity: str | None = None
    """a W&B user or team; None: the account's default"""
    wandb_name: str | None = None
    """the run's display name; None: the run dir's name"""
    wandb_mode: str = "offline"
    """offline: files under run_dir/wandb only (`wandb sync` uploads them); online: streamed to the server"""


@dataclass(frozen=True)
class TrainConfig:
    """The whole run: env, model, rollout, learner and the loop around them (docs/quickstart.md)."""

    run_dir: str = "runs/default"
    """where the run writes config.json, metrics, plots and checkpoints; the same command again resumes there"""
    seed: int = 0
    """seeds the initial weights, the episode seeds and the sampling"""
    steps: int = 100
    """RL steps after the warm start; each plays --episodes-per-step episodes and updates the policy"""
    algorithm: str = "rebn"
    """a registered algorithm (advantage estimator, policy loss, KL, critic): rebn, reinforce, grpo, drgrpo, rloo,
    reinforce_pp, ppo, gspo, cispo, or one a module passed with --import registers (docs/algorithms.md)"""
    gamma: float = 1.0
    """discount factor over turns, in [0, 1]"""
    lam: float = 0.95
    """GAE lambda (ppo)"""
    episodes_per_step: int = 32
    """episodes played per RL step (per process: the global batch is this x processes)"""
    group_size: int = 1
    """episodes per start state; > 1 for grpo, drgrpo, rloo"""
    critic_from_policy: bool = True
    """ppo: initialise the critic from the policy's weights"""
    env: EnvConfig = field(default_factory=EnvConfig)
    model: ModelSpec = field(default_factory=ModelSpec)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)
    mesh: MeshConfig = field(default_factory=lambda: MeshConfig(data=-1))
    """device mesh axis sizes (one may be -1: the devices the others leave); the default puts the batch over
    all devices"""
    warm_start: WarmStartConfig = field(default_factory=WarmStartConfig)
    batch_buckets: tuple[int, ...] = (128, 256, 512, 1024, 2048, 4096, 8192)
    """row lengths in tokens that training rows are padded to (the smallest that fits): fewer shapes, fewer
    compilations"""
    batch_rows_per_doubling: int = 4
    """how many numbers of rows the update pads a step's rows to between each power of two and the next: 4 pads to
    ..., 16, 20, 24, 28, 32, 40, ... (at most a fifth of the rows padding, a few update programs per doubling);
    1 pads to a power of two (one program per doubling, up to half the rows padding: a quarter more work per
    update measured on bench/peers/tunix.py's single-turn workload)"""
    eval_every: int = 10
    """evaluate every N RL steps (and before training, after the warm start and at the end); 0: never"""
    eval_at_start: bool = True
    """evaluate before training too (the random init, or the --model.path checkpoint); off for runs that start
    from a policy evaluated already, as a sweep's arms from their shared warm start"""
    eval_episodes: int = 64
    """held-out episodes per evaluation, per process (their seeds never overlap training seeds)"""
    eval_greedy: bool = False
    """evaluate with greedy decoding instead of sampling"""
    eval_max_turns: int | None = None
    """evaluation's turn limit: None plays to the env's own limit, whatever the curriculum's training
    horizon"""
    checkpoint_every: int = 10
    """save a checkpoint every N RL steps (and after the warm start and the last step)"""
    keep_checkpoints: int = 3
    """checkpoints kept: the last N, plus the best by eval/success_rate"""
    resume: bool = True
    """continue from the latest checkpoint in --run-dir if there is one; --no-resume starts from scratch"""
    plot: bool = True
    """draw the learning curves into run_dir/curves.png at the end"""
    console: bool = True
    """print a progress bar and metrics to the console"""
    log: LogConfig = field(default_factory=LogConfig)
    pipeline: PipelineConfig = field(default_factory=PipelineConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# Fields older jgem wrote into config.json that are gone: {class name: {field: why}}. Loading an old run drops them
# with a warning that never shows their value; checkpoints never compare them (checkpoint.UNCOMPARED_CONFIG_FIELDS).
REMOVED_FIELDS: dict[str, dict[str, str]] = {
    "EnvConfig": {
        "remote_token": "the env servers' token is no longer kept in the config; give it with "
        "--env.remote-token-file PATH or $JGEM_SERVE_TOKEN",
    },
}


def cli_flag(path: str) -> str:
    """The command-line flag of a TrainConfig field path: `rollout.max_episode_tokens` ->
    `--rollout.max-episode-tokens`."""
    return "--" + path.replace("_", "-")


_FIELD = "\x1f"  # marks a field path inside a ConfigError message: `field_ref("warm_start.steps")`


def field_ref(path: str) -> str:
    """A TrainConfig field path inside a `ConfigError` message: `str()` writes it as the path, `render()` as the
    flag that sets it, so checks outside this module (jgem/train/run.py, the rollout engine) name flags too."""
    return f"{_FIELD}{path}{_FIELD}"


class ConfigError(ValueError):
    """A TrainConfig that cannot run. `problems` are the messages; `str()` names fields as in Python
    (`warm_start.steps`), `render(flag)` as a command line does (`--warm-start.steps`, or `flag(path)`)."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__(self.render(lambda path: path, header="invalid TrainConfig:"))

    def render(self, flag: Any = cli_flag, *, header: str = "invalid configuration:") -> str:
        pattern = re.compile(f"{_FIELD}([^{_FIELD}]*){_FIELD}")
        lines = [pattern.sub(lambda m: flag(m.group(1)), p) for p in self.problems]
        return header + "\n  - " + "\n  - ".join(lines)


def config_from_dict(cls: type, d: dict[str, Any]) -> Any:
    """The (nested) config dataclass `cls` from its `to_dict()` / config.json form: lists become tuples, nested
    dicts become their dataclasses, fields the dict lacks keep their defaults (runs older than a new field)."""
    import typing

    hints = typing.get_type_hints(cls, include_extras=False)
    names = {f.name for f in dataclasses.fields(cls)}
    removed = REMOVED_FIELDS.get(cls.__name__, {})
    for name in sorted(set(d) & set(removed) - names):  # fields older jgem wrote: dropped, their values never shown
        warnings.warn(f"ignoring {cls.__name__}.{name} in an old config: {removed[name]}", UserWarning, stacklevel=2)
        d = {k: v for k, v in d.items() if k != name}
    unknown = sorted(set(d) - names)
    if unknown:
        raise ValueError(f"{cls.__name__} has no fields {unknown}; was the config written by a newer jgem?")
    kwargs = {}
    for name, value in d.items():
        kind = hints[name]
        if dataclasses.is_dataclass(kind) and isinstance(value, dict):
            value = config_from_dict(kind, value)
        elif isinstance(value, list):
            value = tuple(tuple(v) if isinstance(v, list) else v for v in value)
        kwargs[name] = value
    return cls(**kwargs)


def load_run_config(run_dir: str | Path) -> TrainConfig:
    """The TrainConfig a run was started with (its `config.json`)."""
    path = Path(run_dir) / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; pass a run directory written by experiments.train")
    return config_from_dict(TrainConfig, json.loads(path.read_text()))


def _in(value: Any, lo: float, hi: float, *, lo_open: bool = False, hi_open: bool = False) -> bool:
    """`value` is a real number (never NaN or a bool) in the interval; open ends as asked."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        return False
    return (lo < value if lo_open else lo <= value) and (value < hi if hi_open else value <= hi)


def _plain(path: str) -> str:
    return path


def range_errors(cfg: TrainConfig, name: Any = _plain) -> list[str]:
    """Numbers the CLI accepts as types but that cannot train: each message names the field (as `name(path)`)
    and its range."""
    inf = float("inf")
    checks = [
        ("seed", cfg.seed, 0, 2**31 - 1, False, False, "an integer in [0, 2^31 - 1]"),
        ("learner.lr", cfg.learner.lr, 0, inf, True, True, "a finite number > 0"),
        ("learner.critic_lr", cfg.learner.critic_lr, 0, inf, True, True, "a finite number > 0"),
        ("learner.temperature", cfg.learner.temperature, 0, inf, True, True, "a finite number > 0"),
        ("rollout.temperature", cfg.rollout.temperature, 0, inf, True, True, "a finite number > 0"),
        ("rollout.top_p", cfg.rollout.top_p, 0, 1, True, False, "in (0, 1]"),
        ("rollout.top_k", cfg.rollout.top_k, 0, inf, False, True, "an integer >= 0 (0: off)"),
        ("eval_every", cfg.eval_every, 0, inf, False, True, "an integer >= 0 (0: no evaluation)"),
        ("eval_episodes", cfg.eval_episodes, 1, inf, False, True, "an integer >= 1"),
        ("checkpoint_every", cfg.checkpoint_every, 1, inf, False, True, "an integer >= 1"),
        ("keep_checkpoints", cfg.keep_checkpoints, 1, inf, False, True, "an integer >= 1"),
        ("env.num_envs", cfg.env.num_envs, 1, inf, False, True, "an integer >= 1"),
        ("env.tool_timeout", cfg.env.tool_timeout, 0, inf, True, True, "a finite number of seconds > 0"),
        ("env.search_topk", cfg.env.search_topk, 1, inf, False, True, "an integer >= 1"),
    ]
    errors = [
        f"{name(path)} is {value!r}; it must be {allowed}"
        for path, value, lo, hi, lo_open, hi_open, allowed in checks
        if not _in(value, lo, hi, lo_open=lo_open, hi_open=hi_open)
    ]
    if cfg.eval_max_turns is not None and not _in(cfg.eval_max_turns, 1, inf, hi_open=True):
        errors.append(
            f"{name('eval_max_turns')} is {cfg.eval_max_turns!r}; it must be an integer >= 1, or None (the env's limit)"
        )
    if cfg.env.step_timeout is not None and not _in(cfg.env.step_timeout, 0, float("inf"), lo_open=True, hi_open=True):
        errors.append(
            f"{name('env.step_timeout')} is {cfg.env.step_timeout!r}; it must be a finite number of seconds > 0, "
            "or None"
        )
    if cfg.batch_rows_per_doubling < 1:
        errors.append(f"{name('batch_rows_per_doubling')} is {cfg.batch_rows_per_doubling}; it must be >= 1")
    buckets = cfg.batch_buckets
    if not buckets or any(not _in(b, 1, inf, hi_open=True) or int(b) != b for b in buckets):
        errors.append(
            f"{name('batch_buckets')} is {tuple(buckets)!r}; it must be one or more integers >= 1 (row lengths)"
        )
    return errors


def log_errors(log: LogConfig, name: Any = _plain) -> list[str]:
    """What is wrong with the logging config: an unknown W&B mode, or W&B on without the wandb package."""
    import importlib.util

    from jgem.metrics import WANDB_MODES

    errors = []
    if log.wandb_mode not in WANDB_MODES:
        errors.append(
            f"{name('log.wandb_mode')} {log.wandb_mode!r} is unknown; choose offline (files only, `wandb sync` "
            "uploads them) or online"
        )
    if log.wandb and importlib.util.find_spec("wandb") is None:
        errors.append(
            f"{name('log.wandb')} needs the wandb package: .venv/bin/pip install -e '.[wandb]' (or drop --log.wandb)"
        )
    return errors


def run_dir_errors(run_dir: str, name: Any = _plain) -> list[str]:
    """A run directory that training could not create or write: a file on its path, or a directory without write
    access. A run finds out before it builds anything, not at its first write once the model is built. Not part of
    `validate`: evaluation and export read a run directory that they never write to."""
    import os

    path = Path(run_dir)
    try:
        existing = next(p for p in (path, *path.parents) if p.exists() or p.is_symlink())
    except OSError as e:  # a parent that cannot be searched
        return [f"{name('run_dir')} {run_dir} cannot be reached ({e.strerror}); choose another {name('run_dir')}"]
    if not existing.is_dir():
        what = "is" if existing == path else f"is inside {existing}, which is"
        return [f"{name('run_dir')} {run_dir} {what} not a directory; choose another {name('run_dir')}"]
    if not os.access(existing, os.W_OK | os.X_OK):
        where = "" if existing == path else f" (its nearest existing directory {existing})"
        return [f"{name('run_dir')} {run_dir} is not writable{where}; choose a directory you can write to"]
    return []


def pipeline_warnings(cfg: TrainConfig, name: Any = _plain) -> list[str]:
    """Pipeline settings that run but defeat their purpose: a pipeline that may play steps ahead with fewer envs
    (the engine's slots) than a step's episodes, which hold every slot, so little or nothing plays ahead."""
    pipe = cfg.pipeline
    knob = "pipeline.lag" if pipe.mode == "off_policy" else "pipeline.max_staleness"
    ahead = pipe.ahead
    envs, episodes = cfg.env.num_envs, cfg.episodes_per_step
    if not (isinstance(ahead, int) and ahead > 0 and envs < episodes):
        return []
    return [
        f"{name('pipeline.mode')} {pipe.mode} with {name('env.num_envs')} {envs}, fewer than "
        f"{name('episodes_per_step')} {episodes}: a step's own episodes hold every env, so little or nothing plays "
        f"ahead (staleness stays near 0); give the steps ahead envs of their own: {name('env.num_envs')} "
        f"{(1 + ahead) * episodes} ((1 + {name(knob)} {ahead}) x {episodes})"
    ]


def _under(prefix: str, name: FieldName) -> FieldName:
    """`name` for the fields of the sub-config at `prefix`: `_under("env", f)("env_id")` is `f("env.env_id")`."""
    return lambda path: name(f"{prefix}.{path}")


def _step_errors(cfg: TrainConfig, algorithm: Algorithm | None, name: FieldName) -> list[str]:
    """The steps, a step's episodes and their groups, as the algorithm needs them; the discount."""
    errors = []
    if cfg.steps < 0:
        errors.append(f"{name('steps')} is {cfg.steps}; it must be >= 0")
    if cfg.episodes_per_step < 1:
        errors.append(f"{name('episodes_per_step')} is {cfg.episodes_per_step}; it must be >= 1")
    if cfg.group_size < 1 or cfg.episodes_per_step % cfg.group_size:
        errors.append(
            f"{name('episodes_per_step')} {cfg.episodes_per_step} is not divisible by {name('group_size')} "
            f"{cfg.group_size}; use a multiple of {name('group_size')}"
        )
    if algorithm is not None and algorithm.grouped and cfg.group_size < 2:
        errors.append(f"{cfg.algorithm} normalises within groups of rollouts; set {name('group_size')} >= 2 (e.g. 8)")
    if cfg.rollout.dynamic_sampling and algorithm is not None and not algorithm.grouped:
        grouped = ", ".join(a for a in ALGORITHMS.names() if ALGORITHMS.get(a).grouped)
        errors.append(
            f"{name('rollout.dynamic_sampling')} drops the groups whose returns are all equal, which carry no signal "
            f"only to a group estimator, and {cfg.algorithm} has none; use one of {grouped} (with "
            f"{name('group_size')} >= 2), or drop {name('rollout.dynamic_sampling')}"
        )
    if not 0.0 <= cfg.gamma <= 1.0:
        errors.append(f"{name('gamma')} must be in [0, 1], got {cfg.gamma}")
    return errors


def _learner_errors(cfg: TrainConfig, name: FieldName) -> list[str]:
    """The learner against the sampler (its temperature) and the weights (16-bit full fine-tuning with a small
    learning rate), and the names it takes from the registries."""
    from jgem.algos.learner import config_errors  # the registries fill as the learner's modules load

    errors = []
    if cfg.learner.temperature != cfg.rollout.temperature:
        errors.append(
            f"{name('learner.temperature')} {cfg.learner.temperature} differs from {name('rollout.temperature')} "
            f"{cfg.rollout.temperature}; the learner must score actions at the temperature they were sampled at"
        )
    if cfg.model.param_dtype in ("bfloat16", "float16") and cfg.model.lora.rank == 0 and cfg.learner.lr < 1e-4:
        errors.append(
            f"{name('model.param_dtype')} {cfg.model.param_dtype} with {name('learner.lr')} {cfg.learner.lr:g}: "
            "16-bit weights round away an optimizer step below ~2^-8 of their size (1e-4 at a weight of 0.03), so "
            "full fine-tuning would leave most of them unchanged; use --model.param-dtype float32 (float32 master "
            "weights; --model.dtype bfloat16 keeps bf16 compute) or LoRA (--model.lora.rank 16: float32 adapters on "
            "the frozen 16-bit base)"
        )
    return errors + config_errors(cfg.learner, _under("learner", name))


def _mesh_errors(cfg: TrainConfig, num_devices: int, name: FieldName) -> list[str]:
    """The split of the devices, the learner's mesh on its share, and its micro-batches over the batch axes."""
    errors = cfg.mesh.split_errors(num_devices)
    learner_devices = num_devices - (0 if errors else cfg.mesh.rollout_devices)
    try:
        sizes = cfg.mesh.resolve(learner_devices)
    except ValueError as e:
        if learner_devices != num_devices:
            e = f"the learner's mesh (the {learner_devices} devices {name('mesh.rollout_devices')} leaves): {e}"
        return [*errors, str(e)]
    batch_axes = math.prod(sizes[:-1])  # data, fsdp (and expert): every axis but tensor
    mb = cfg.learner.micro_batch_size
    if mb is not None and mb % batch_axes:
        errors.append(
            f"{name('learner.micro_batch_size')} {mb} is not divisible by {batch_axes} devices on mesh axes "
            f"(data, fsdp); use a multiple of {batch_axes}"
        )
    return errors


def validate(cfg: TrainConfig, num_devices: int) -> None:
    """Fail fast, before anything compiles, on a config that cannot run: a `ConfigError` (a ValueError) whose
    messages say what to change."""
    f = field_ref
    try:
        import_modules(cfg.env.imports)  # before the env id and the algorithm are looked up
    except ImportError as e:
        raise ConfigError([f"{f('env.imports')}: {e}"]) from e
    algorithm = ALGORITHMS.get(cfg.algorithm) if cfg.algorithm in ALGORITHMS else None
    errors = ALGORITHMS.name_errors(cfg.algorithm, f("algorithm")) if algorithm is None else algorithm.errors()
    errors += cfg.env.errors(_under("env", f)) + log_errors(cfg.log, f)
    errors += cfg.warm_start.errors(cfg.env, _under("warm_start", f)) + cfg.model.errors(_under("model", f))
    errors += _step_errors(cfg, algorithm, f) + cfg.pipeline.errors(_under("pipeline", f))
    errors += cfg.rollout.errors(_under("rollout", f)) + _learner_errors(cfg, f) + range_errors(cfg, f)
    errors += _mesh_errors(cfg, num_devices, f) + _workflow_errors(cfg, f) + _policies_errors(cfg, algorithm, f)
    if errors:
        raise ConfigError(errors)


def _workflow_errors(cfg: TrainConfig, name: FieldName) -> list[str]:
    """The rollout workflow: registered (a shipped one, or one a module given with --import registers), and able to
    run the rollout config (`Workflow.check`); a grouped one needs groups."""
    from jgem.rollout.workflows import WORKFLOWS, workflow_errors

    errors = workflow_errors(cfg.rollout, _under("rollout", name))
    if errors:
        return errors
    workflow, flag = WORKFLOWS.get(cfg.rollout.workflow), f"{name('rollout.workflow')} {cfg.rollout.workflow}"
    errors += [f"{flag} " + e.format(group_size=name("group_size")) for e in workflow.group_errors(cfg.group_size)]
    multi = _multiagent(cfg.env)
    if multi and not workflow.raw_env:
        errors.append(
            f"{name('env.env_id')} {cfg.env.env_id} is a multi-agent game; play it with {name('rollout.workflow')} "
            f"agents (self-play, or --rollout.opponent NAME for a scripted player), not {cfg.rollout.workflow}"
        )
    if workflow.raw_env and multi is False:
        errors.append(f"{flag} plays multi-agent games (multi:*), and {cfg.env.env_id} has one agent")
    if workflow.raw_env and (cfg.env.tools or cfg.env.system_prompt):
        errors.append(
            f"{flag} renders each seat's messages from the game's own observations: drop {name('env.tools')} and "
            f"{name('env.system_prompt')}"
        )
    if multi and workflow.raw_env and (agents := agent_seats(cfg.env)):
        from jgem.rollout.workflows.agents import POLICY, players_of, seat_errors

        r, env_id = cfg.rollout, cfg.env.env_id
        errors += seat_errors(env_id, agents, r.opponent, r.seat, cfg.group_size, name("rollout.opponent"), name=name)
        if cfg.eval_every:
            judge = r.eval_opponent or next(iter(players_of(env_id)), "none")
            if judge.startswith(POLICY):
                errors.append(
                    f"{name('rollout.eval_opponent')} {judge}: a frozen policy version plays only in evaluations that "
                    "load it (experiments.eval --agents); name a scripted player"
                )
            else:
                flag = name("rollout.eval_opponent")
                errors += seat_errors(env_id, agents, judge, "alternate", 1, flag, evaluation=True)
    return errors


def _policies_errors(cfg: TrainConfig, algorithm: Algorithm | None, name: FieldName) -> list[str]:
    """Several policies (LoRA adapters on one base): one adapter per entry of rollout.policies, a multi-agent game
    whose every seat one entry names, no critic (it is one model; the policies are several)."""
    lora, policies = cfg.model.lora, cfg.rollout.policies
    adapters = lora.policies
    if not policies and adapters == 1:
        return []
    flag = f"{name('rollout.policies')} {' '.join(policies) or '(none)'}"
    errors = []
    if len(policies) != adapters:
        errors.append(
            f"{flag} names {len(policies)} policies and {name('model.lora.adapters')} is {lora.adapters}: one LoRA "
            f"adapter per policy (each entry the seats of one policy)"
        )
    if cfg.rollout.workflow != "agents":
        errors.append(f"{flag} maps a multi-agent game's seats to policies: it needs {name('rollout.workflow')} agents")
    elif policies and (agents := agent_seats(cfg.env)):
        from jgem.rollout.workflows.agents import policy_errors

        errors += policy_errors(policies, agents, flag)
    r = cfg.rollout
    if policies and r.opponent != "self" and r.seat != "alternate":
        errors.append(
            f"{flag}: with {name('rollout.seat')} {r.seat} only the policy of seat {r.seat} plays (the others are "
            f"{r.opponent}'s) and the rest never train; use {name('rollout.seat')} alternate or self-play"
        )
    if algorithm is not None and algorithm.critic:
        errors.append(
            f"{flag}: {cfg.algorithm} trains a critic, which is one model while the policies are several; use an "
            "estimator without one (rebn, rae, grpo, rloo, reinforce_pp)"
        )
    return errors


def agent_seats(env: EnvConfig) -> list[str] | None:
    """The seats of `env`'s multi-agent game (one env built here); None when it cannot be built here."""
    from jgem.registry import import_modules, make

    try:
        import_modules(env.imports)
        game = make(env.env_id, **env.env_kwargs)
    except Exception:  # noqa: BLE001 - the pool meets it and reports it
        return None
    try:
        return list(game.possible_agents)
    finally:
        game.close()


def _multiagent(env: EnvConfig) -> bool | None:
    """Whether `env`'s id builds a multi-agent game; None when it cannot be told here (an id this process does not
    know, a factory that is not a class)."""
    import inspect

    from jgem.envs.multiagent.base import MultiAgentEnv
    from jgem.registry import import_modules, spec

    try:
        import_modules(env.imports)
        entry = spec(env.env_id).load()
    except (KeyError, ImportError, AttributeError, ValueError):
        return None
    return issubclass(entry, MultiAgentEnv) if inspect.isclass(entry) else None
