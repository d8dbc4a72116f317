"""The composition root: everything a run plays episodes with, built once from a `TrainConfig`.

`Run(cfg)` first refuses a config that cannot run (`validate`; for a run that trains, also a run dir it cannot
write and a token budget the first episode's prompt fills), each mistake a `ConfigError` naming its flag, then
builds the chat format, the mesh, the curriculum, the policy (and PPO's critic), the learner state placed on the
mesh, the env pool and the rollout engine, and plays a step's episodes (`collect`). With `optimizer=False` the state
holds no optimizer moments (evaluation and export: a checkpoint's policy restores into it, `restore_policy`, without
reading the optimizer's share of the checkpoint).
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from jgem.algos.algorithms import get_algorithm
from jgem.algos.critic import make_critic
from jgem.algos.learner import TrainState, init_train_state
from jgem.config import (
    ConfigError,
    EnvConfig,
    TrainConfig,
    cli_flag,
    field_ref,
    pipeline_warnings,
    run_dir_errors,
    validate,
)
from jgem.curriculum import Curriculum
from jgem.envs.pool import EnvPool
from jgem.envs.pool_commands import EnvFactory
from jgem.envs.with_tools import tool_schemas, tool_wrapper
from jgem.models.config import ModelConfig, preset
from jgem.models.hf import load_pretrained
from jgem.models.tokenizer import ChatFormat, load_tokenizer
from jgem.models.transformer import Transformer, init_model
from jgem.rollout.config import MAX_RESAMPLE_ROUNDS, RolloutConfig
from jgem.rollout.engine import EpisodeSpec, RolloutEngine, wrappers_for_view
from jgem.rollout.episode import Episode
from jgem.rollout.views import first_prompt
from jgem.sharding.mesh import split_meshes
from jgem.sharding.publish import Publisher
from jgem.sharding.rules import tree_shardings
from jgem.train.learn import Learner
from jgem.train.roles import Roles

EVAL_SEED_OFFSET = 1_000_000_000  # eval seeds never overlap training seeds
RESAMPLE_SEED_OFFSET = 2_000_000_000  # nor do the seeds of dynamic sampling's extra rounds (jgem.train.dynamic)
SEED_STRIDE = 7_919_000  # run seed s numbers its episodes' seeds from s x this (`Run.specs`)
log = logging.getLogger(__name__)
MAX_TURNS_CAP = 1000  # with no curriculum, the env's own limit applies; this only bounds a runaway env


def env_turn_limit(env_id: str, env_kwargs: dict[str, Any]) -> int | None:
    """The env's own turn limit, read from its registered spec (the `max_turns` its entry point is called with:
    the call's kwargs over the registered ones over the entry point's default), without building the env. None
    when it has none (a `-random` variant draws one per episode)."""
    from jgem.registry import spec

    s = spec(env_id)
    kwargs = {**s.kwargs, **env_kwargs}
    if "max_turns" in kwargs:
        limit = kwargs["max_turns"]
    else:
        param = inspect.signature(s.load()).parameters.get("max_turns")
        limit = None if param is None else param.default
    return int(limit) if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 else None


_copy = jax.jit(lambda tree: jax.tree.map(jnp.copy, tree))  # a version's params, before the update donates them


class Run:
    """A run's pieces, built from `cfg` (see the module docstring)."""

    def __init__(self, cfg: TrainConfig, *, optimizer: bool = True) -> None:
        # a run that trains (`optimizer`) writes its run dir: one it cannot write is refused with the config's
        # other errors, before anything is built (evaluation and export only read theirs)
        problems = run_dir_errors(cfg.run_dir, field_ref) if optimizer else []
        try:
            validate(cfg, jax.device_count())
        except ConfigError as e:
            raise ConfigError(e.problems + problems) from None
        if problems:
            raise ConfigError(problems)
        if optimizer:
            for warning in pipeline_warnings(cfg, cli_flag):
                log.warning(warning)
        self.cfg = cfg
        self.algorithm = get_algorithm(cfg.algorithm)
        self.run_dir = Path(cfg.run_dir)
        # the chat format and the first prompt's token budget are config checks too: before the mesh and the model
        tokenizer = load_tokenizer(cfg.model.tokenizer_path or cfg.model.path)
        self.chat = chat_format(cfg, tokenizer)
        if optimizer:
            check_first_prompt(cfg, self.chat)
        # the learner's mesh and the sampler's: the same one, or with --mesh.rollout-devices disjoint devices
        self.mesh, self.rollout_mesh = split_meshes(cfg.mesh)
        # which processes play and which train: all of them both, or (a role split) whole processes a side
        self.roles = Roles(self.mesh, self.rollout_mesh)
        self.curriculum = (
            Curriculum(cfg.curriculum.horizons, cfg.curriculum.stage_steps)
            if cfg.curriculum.horizons
            else Curriculum.constant(MAX_TURNS_CAP)
        )
        self.env_max_turns = None if cfg.env.backend == "remote" else env_turn_limit(cfg.env.env_id, cfg.env.env_kwargs)

        model, critic, self.model_cfg = build_models(
            cfg, tokenizer, self.mesh, critic=optimizer and self.algorithm.critic
        )
        # With a KL penalty, the state carries the frozen reference policy: the policy RL starts from (the
        # initial one, or the warm-started one after a warm start); checkpoints keep it, so resume is exact.
        # An algorithm with kl="reward" (REINFORCE++) folds its KL penalty into the rewards, so its loss has none
        state = init_train_state(
            model,
            self.algorithm.learner(cfg.learner),
            self.mesh,
            critic=critic,
            seed=cfg.seed,
            reference=optimizer and cfg.learner.kl_coef > 0,
            optimizer=optimizer,
        )
        # the learner side: the state, the update program, the state's checkpoints
        self.learner = Learner(
            cfg, state, self.mesh, algorithm=self.algorithm, pad_id=self.chat.pad_id, learners=self.roles.learners
        )
        # split meshes: the sampler's own copy of the policy on its devices, published after each update
        self.publisher = Publisher(self.mesh, self.rollout_mesh) if self.rollout_mesh is not self.mesh else None
        # (a role split pairs devices of different processes by design: the sides are different hosts)
        if self.publisher is not None and self.publisher.cross_process_pairs and not self.roles.split:
            log.warning(
                "split meshes: %d of the publication's device pairs are on different processes (the meshes' device "
                "orders differ by host): publications take a slower path",
                self.publisher.cross_process_pairs,
            )
        self.sampler_params = self.sampler_model_state = None
        self._shardings: dict[str, Any] = {}
        self.sync_sampler(full=True)
        # the envs and the engine live on the sampler's processes (a learner's process in a role split has none)
        self.pool: EnvPool | None = None
        self.engine: RolloutEngine | None = None
        if self.roles.samples:
            self.pool = self._make_pool(cfg.env)
            self.engine = RolloutEngine(
                self.model_cfg, self.pool, self.chat, cfg.rollout, env_name=cfg.env.env_id, mesh=self.rollout_mesh
            )

    @property
    def state(self) -> TrainState:
        """The learner's state (`Learner.state`)."""
        return self.learner.state

    @state.setter
    def state(self, state: TrainState) -> None:
        self.learner.state = state

    def _make_pool(self, env: EnvConfig) -> EnvPool:
        """The pool of `env`'s envs, each wrapped in the run's tools and chat-view wrappers."""
        return EnvPool(
            env.env_id,
            env.num_envs,
            backend=env.backend,
            num_workers=env.num_workers,
            step_timeout=env.step_timeout,
            env_kwargs=dict(env.env_kwargs),
            wrappers=pool_wrappers(env, self.cfg.rollout),
            remote_urls=env.remote_urls,
            remote_token=env.read_remote_token(),  # read here, never kept in the config
            imports=env.imports,
        )

    def use_env(self, env_id: str, env_kwargs: dict[str, Any]) -> None:
        """Point the run at another env id (evaluation suites): a fresh pool built as the run's own (its backend,
        tools and view) and that env's turn limit. The policy, chat format and engine (whose slots do not depend
        on the env) stay."""
        env = dataclasses.replace(self.cfg.env, env_id=env_id, env_kwargs=dict(env_kwargs))
        self.pool.close()
        self.cfg = dataclasses.replace(self.cfg, env=env)
        self.env_max_turns = None if env.backend == "remote" else env_turn_limit(env_id, env.env_kwargs)
        self.pool = self._make_pool(env)
        self.engine.pool, self.engine.env_name = self.pool, env_id

    def policy(self, params: Any = None):
        """The policy the rollout engine samples with: the learner's (one mesh), or the sampler's published copy;
        with `params`, those trained params (a kept version's) with the rest of the policy on the same side."""
        if self.publisher is None:
            rest, params = self.state.model_state, self.state.params if params is None else params
        else:
            rest, params = self.sampler_model_state, self.sampler_params if params is None else params
        return nnx.merge(self.state.graphdef, params, rest)

    def played_params(self) -> Any:
        """The params the sampler plays the current version with: the learner's (one mesh) or the sampler's copy."""
        return self.state.params if self.publisher is None else self.sampler_params

    def snapshot(self) -> Any:
        """The params the sampler plays the current version with, kept past the next update (which donates the
        learner's): a copy of them, or with split meshes the sampler's copy (the publication leaves it as it is)."""
        return _copy(self.state.params) if self.publisher is None else self.sampler_params

    def sync_sampler(self, *, full: bool = False) -> None:
        """Split meshes: the learner's params onto the sampler's devices, device to device (`Publisher`); with
        `full` the rest of the policy too (its frozen part, e.g. LoRA's base weights: at the start and after a
        restore). With LoRA the params are the adapters, so only they move after an update. The sampler's old
        arrays stay valid (an off_policy run keeps playing older versions with them)."""
        if self.publisher is None:
            return
        if full or self.sampler_model_state is None:
            self.sampler_model_state = self.publisher(
                self.state.model_state, self._sampler_shardings("model_state"), self.sampler_model_state
            )
        self.sampler_params = self.publisher(self.state.params, self._sampler_shardings("params"), self.sampler_params)

    def _sampler_shardings(self, name: str) -> Any:
        """The sampler's shardings of `state.<name>` (the rules on its mesh), worked out once: the trees' structure
        and shapes never change."""
        if name not in self._shardings:
            self._shardings[name] = tree_shardings(getattr(self.state, name), self.rollout_mesh, self.state.rules)
        return self._shardings[name]

    def specs(self, step: int, *, eval: bool = False, round: int = 0) -> list[EpisodeSpec]:
        """The episodes of a step: groups of `group_size` episodes share a seed (one start state). `round` r > 0:
        dynamic sampling's r-th extra round of the step (`jgem.train.dynamic`), whose ids, groups and seeds follow
        the step's others."""
        cfg = self.cfg
        n = cfg.eval_episodes if eval else cfg.episodes_per_step
        g = 1 if eval else cfg.group_size
        # Episodes are numbered over all processes (process p plays n of them from p * n on; in a role split each
        # sampler process plays its share of them all): ids, groups and seeds, hence the sampled tokens, are those
        # of one process playing all of them.
        procs = jax.process_count()
        first, count = self.roles.share(n, side="sampler")
        base = (EVAL_SEED_OFFSET if eval else 0) + cfg.seed * SEED_STRIDE + (0 if eval else step * n * procs)
        if round:
            base = RESAMPLE_SEED_OFFSET + cfg.seed * SEED_STRIDE + (step * MAX_RESAMPLE_ROUNDS + round - 1) * n * procs
        ids = round * n * procs  # the ids of a round's episodes come after those of the step's earlier rounds
        return [EpisodeSpec(ids + i, group_id=(ids + i) // g, seed=base + i // g) for i in range(first, first + count)]

    def horizon(self, step: int, *, eval: bool = False) -> int:
        """The turn limit episodes are cut at: in training the curriculum's current one; in evaluation
        `eval_max_turns`, else the env's own (so evaluations at different curriculum stages compare)."""
        cut = (self.cfg.eval_max_turns or MAX_TURNS_CAP) if eval else self.curriculum.max_turns(step)
        return min(cut, self.env_max_turns) if self.env_max_turns else cut

    def collect(
        self, step: int, *, eval: bool = False, round: int = 0, version: int = 0, others: dict[int, Any] | None = None
    ) -> list[Episode]:
        """Step `step`'s episodes (or its evaluation's, or dynamic sampling's extra `round`), played by the current
        policy (recorded as `version` on the tokens) to the end; `others`: policies of other versions that streams
        are pinned to (a multi-agent evaluation's frozen opponents)."""
        cfg = self.cfg
        key = jax.random.fold_in(jax.random.key(cfg.seed), step * 2 + int(eval))
        return self.engine.collect(
            self.policy(),
            self.specs(step, eval=eval, round=round),
            key,
            max_turns=self.horizon(step, eval=eval),
            greedy=cfg.eval_greedy if eval else None,
            version=version,
            evaluation=eval,
            others=others,
        )

    def restore_policy(self, checkpoints: str | Path, step: int) -> None:
        """The policy (params and the frozen rest of the model, and the update count) of checkpoint `step` under
        `checkpoints`, read into `state`: the optimizer's moments, the critic and the reference policy stay on
        disk."""
        from jgem.checkpoint import CheckpointConfig, Checkpointer

        with Checkpointer(CheckpointConfig(str(checkpoints))) as ckpt:
            if step not in ckpt.all_steps():
                raise FileNotFoundError(f"{checkpoints} has no step {step}; it has {ckpt.all_steps()}")
            keep = ("step", "params", "model_state")
            part = ckpt.restore_part(step, {k: getattr(self.state, k) for k in keep})
        self.state = self.state.replace(**part)
        self.sync_sampler(full=True)

    def close(self) -> None:
        self.learner.close()
        if self.pool is not None:
            self.pool.close()


def pool_wrappers(env: EnvConfig, rollout: RolloutConfig) -> tuple[Callable[[Any], Any], ...]:
    """The wrappers around each of the pool's envs: the run's tools, then what the chat view needs (none for a
    workflow that renders the env's raw observations itself: a multi-agent game's)."""
    from jgem.rollout.workflows import get_workflow

    if get_workflow(rollout.workflow).raw_env:
        return tool_wrapper(env)
    return tool_wrapper(env) + tuple(wrappers_for_view(rollout.view, env.system_prompt))


def chat_format(cfg: TrainConfig, tokenizer: Any) -> ChatFormat:
    """The run's ChatFormat. A template it refuses (none, or one that does not list the tools of a native tool-call
    format), or one the chat view cannot follow (it does not extend its own rendering of a chat by the next turn:
    the chat view would refuse the first observation), is a `ConfigError` naming the flags that chose the tokenizer,
    the format and the view."""
    system = cfg.env.system_prompt if cfg.rollout.view == "per_turn" else None
    tools = tool_schemas(cfg.env)
    if cfg.model.tokenizer_path or not cfg.model.path:
        source = f"{field_ref('model.tokenizer_path')} {cfg.model.tokenizer_path or 'None (the tiny tokenizer)'}"
    else:
        source = f"{field_ref('model.path')} {cfg.model.path}"
    try:
        chat = ChatFormat(tokenizer, system=system, tools=tools)
    except ValueError as e:
        if tools:
            source = f"{field_ref('env.tool_format')} {cfg.env.tool_format} with {source}"
        raise ConfigError([f"{source}: {e}"]) from None
    if cfg.rollout.view == "chat" and not chat.append_only:
        view = field_ref("rollout.view")
        raise ConfigError(
            [
                f"{view} chat with {source}: its chat template renders a chat's earlier turns or generation prompt "
                "otherwise once the next turn follows (Qwen3's with thinking off drops the empty <think> block of "
                "every earlier generation prompt), so the chat view's append-only stream would leave it at the first "
                f"observation; use {view} chat_per_turn (the conversation rendered afresh every turn, as a server "
                "does: docs/tools.md)"
            ]
        )
    return chat


def check_first_prompt(cfg: TrainConfig, chat: ChatFormat) -> None:
    """Refuse a token budget the first episode's prompt already fills, before the model is built: one env, built
    as the pool builds its first, reset with the run's first seed, and its prompt built as the engine builds it (on
    the remote backend: one create, reset and close on the first server). An env that fails here is left to the
    pool, which counts its faults; the engine refuses any later first prompt that does not fit, as a ConfigError."""
    env, rollout = cfg.env, cfg.rollout
    factory = EnvFactory(env.env_id, dict(env.env_kwargs), pool_wrappers(env, rollout), imports=env.imports)
    if env.backend == "remote":
        urls = env.remote_urls
        factory = dataclasses.replace(
            factory,
            remote_url=urls[0],
            remote_token=env.read_remote_token(),
            remote_timeout=env.step_timeout or 30.0,
            remote_fallbacks=tuple(urls[1:]),
        )
    seed = cfg.seed * SEED_STRIDE
    try:
        one = factory()
        try:
            obs, _ = one.reset(seed=seed)
        finally:
            one.close()
    except Exception as e:  # noqa: BLE001 - the pool meets it again and reports it as a fault
        log.info("the first prompt's token budget is not checked: %s failed to reset (%s)", env.env_id, e)
        return
    if isinstance(obs, dict):  # a multi-agent game: each seat's first prompt is its own observation
        tokens = max(len(first_prompt(chat, rollout.view, [{"role": "user", "content": o}])[0]) for o in obs.values())
    else:
        tokens = len(first_prompt(chat, rollout.view, obs)[0])
    if tokens + rollout.max_new_tokens > rollout.max_episode_tokens:
        budget, new = field_ref("rollout.max_episode_tokens"), field_ref("rollout.max_new_tokens")
        raise ConfigError(
            [
                f"the first prompt of {env.env_id} (seed {seed}) has {tokens} tokens, which leaves no room for {new} "
                f"{rollout.max_new_tokens} within {budget} {rollout.max_episode_tokens}; raise {budget} well above "
                f"{tokens + rollout.max_new_tokens} (other seeds' prompts may be longer, and each turn adds to them)"
            ]
        )


def build_models(
    cfg: TrainConfig, tokenizer: Any, mesh: jax.sharding.Mesh, *, critic: bool
) -> tuple[Transformer, Transformer | None, ModelConfig]:
    """(the policy, PPO's critic when `critic`, the model config): loaded from `cfg.model.path` (a Hugging Face
    checkpoint) or initialised from `cfg.model.preset` with `cfg.seed`."""
    dt = dict(
        dtype=cfg.model.dtype,
        param_dtype=cfg.model.param_dtype,
        remat=cfg.model.remat,
        attention=cfg.model.attention,
        scan_layers=cfg.model.scan_layers,
        lora=cfg.model.lora,
    )
    if cfg.model.path is not None:
        model, mcfg = load_pretrained(cfg.model.path, mesh=mesh, seed=cfg.seed, **dt)
        value = load_pretrained(cfg.model.path, mesh=mesh, value_head=True, seed=cfg.seed, **dt)[0] if critic else None
        return model, value, mcfg
    mcfg = preset(cfg.model.preset, **dt)
    if len(tokenizer) > mcfg.vocab_size:
        raise ValueError(
            f"tokenizer has {len(tokenizer)} tokens but preset {cfg.model.preset!r} has "
            f"vocab_size {mcfg.vocab_size}; use a matching tokenizer or preset"
        )
    model = init_model(mcfg, seed=cfg.seed, mesh=mesh)
    value = None
    if critic:
        value = make_critic(mcfg, policy=model if cfg.critic_from_policy else None, seed=cfg.seed + 1, mesh=mesh)
    return model, value, mcfg
