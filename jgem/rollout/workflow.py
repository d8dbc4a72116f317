"""Agent workflows: an episode's interaction as a coroutine the user writes, over the rollout engine.

A workflow is an object with `async def run(ctx, spec)` (or, `grouped`, `run(ctx, specs)`: a whole group of
episodes at once, e.g. tree rollouts) that plays one episode through its `Context` and returns its `Trajectory`
(grouped: one per spec). The context offers:
- `await ctx.reset(env)` / `await ctx.step(text, env)`: the env's reset and step through the `EnvPool` (a fault comes
  back in `info["fault"]`, as from the pool; the episode decides what it means);
- `ctx.open(tokens)`: a stream on a KV-cache slot, its first tokens; `ctx.append(stream, tokens)`: tokens after what
  the stream holds (an observation: each token is prefilled once);
- `await ctx.generate(stream)`: the next action sampled on the stream (batched by the engine with every other
  waiting stream into its decode chunks); the `Generation` keeps each token's behaviour log-prob and policy version;
- `ctx.new_segment(stream, tokens)`: the stream starts over with tokens that do not extend it (a summary, a fresh
  template), on the same slot, keeping the keys and values of the prefix the two share;
- `ctx.fork(stream)` / `ctx.fork_env(env)`: a second stream with the same tokens (the slot's row copied on the
  device: nothing is prefilled again) and a copy of an env (`EnvPool.get_state`/`set_state`);
- `await ctx.gather(*coroutines)`: several sub-coroutines of the episode run concurrently (forked branches);
- `traj.record(action, reward)`: the action becomes a trained turn of the trajectory with the reward.

Why coroutines driven by the engine and not an asyncio event loop: the engine's host loop is the scheduler. Each
`await` on the context hands the engine a request (reset, step, generate, gather) and suspends the coroutine; the
engine resumes it, on its own thread, at a fixed point of its rounds (an env result taken, an action's last token
read). Nothing runs concurrently with the engine and nothing depends on timing, so a seed gives the same tokens
whatever the pool's backend or the order results come in, as it did before workflows. A workflow must therefore
await only the context (not asyncio, not threads: an env's slowness belongs in the env, behind the pool).

A token's draws are keyed by (run key, the trajectory's episode id, the stream's draw count, index in the action):
the draw count is the number of `generate` calls on the stream and the streams it was forked from, so the tokens
never depend on slots, chunks or timing. Workflows are registered by name (`WORKFLOWS`); `--rollout.workflow NAME`
picks one, and a module given with `--import` may register its own.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from jgem.registry import Registry
from jgem.rollout.episode import Episode, EpisodeSpec, Transition

Phase = Literal["env", "extend", "decode"]

__all__ = [
    "WORKFLOWS",
    "Generation",
    "Context",
    "StreamSegment",
    "Stream",
    "Trajectory",
    "Workflow",
    "register_workflow",
]


class Workflow:
    """The base of workflows. `grouped`: `run` gets a whole group's specs (they share a start state) and returns a
    trajectory per spec. `width(group_size)`: the most KV slots (and envs) one run holds at once, reserved when it
    starts (a fork takes one of them), so no episode waits for another's slot. `check(rollout config)`: what keeps
    it from running under a config (the config's validation reports it, naming the flags)."""

    grouped: bool = False
    name: str = ""
    # the episode renders its own chat messages from the env's raw observations (a multi-agent game's per-agent
    # dicts): the pool's envs get no chat-view wrapper
    raw_env: bool = False

    def width(self, group_size: int) -> int:
        return 1

    def width_of(self, group_size: int, *, cfg: Any, env_name: str, evaluating: bool) -> int:
        """`width` for a run under `cfg` on `env_name` (an evaluation's or not): what the engine reserves. A workflow
        whose width depends on the config or the env overrides this; the default is `width(group_size)`."""
        return self.width(group_size)

    def group_errors(self, group_size: int) -> list[str]:
        """What is wrong with `group_size` for this workflow (a grouped one plays a group from one state: >= 2)."""
        return [f"plays a group's episodes from one state, so it needs {{group_size}} >= 2, got {group_size}"] * (
            self.grouped and group_size < 2
        )

    async def run(self, ctx: Context, spec: Any) -> Trajectory | Sequence[Trajectory]:
        raise NotImplementedError

    def check(self, cfg: Any) -> list[str]:
        """Problems with running this workflow under `cfg` (a RolloutConfig), each a message; [] when it can run."""
        return []


WORKFLOWS: Registry[Workflow] = Registry("rollout workflow")
register_workflow = WORKFLOWS.register


class StreamSegment:
    """A run of tokens that one stream holds from one position 0: the stream's tokens until it starts a new one.
    With a mixture of experts, `routes` holds the experts each position's token ran in every sparse layer when the
    engine fed it (prefilled, or fed by a decode step): int32[>= positions recorded, M, k], -1 where nothing fed
    the position (the last sampled token), None for a dense model (routing replay's record, `routes_upto`)."""

    __slots__ = ("routes", "tokens")

    def __init__(self, tokens: Sequence[int], routes: np.ndarray | None = None) -> None:
        self.tokens = list(tokens)
        self.routes = routes

    def record(self, start: int, ids: np.ndarray) -> None:
        """The routing int32[n, M, k] of the tokens at positions start .. start + n - 1."""
        n = len(ids)
        if not n:
            return
        end = start + n
        if self.routes is None or self.routes.shape[0] < end:
            grown = np.full((max(end, 2 * (0 if self.routes is None else self.routes.shape[0])), *ids.shape[1:]), -1)
            if self.routes is not None:
                grown[: self.routes.shape[0]] = self.routes
            self.routes = grown.astype(np.int32)
        self.routes[start:end] = ids

    def routes_upto(self, n: int) -> np.ndarray | None:
        """The routing of positions 0 .. n - 1 (int32[n, M, k], -1 where none was recorded), or None (dense)."""
        if self.routes is None:
            return None
        if self.routes.shape[0] >= n:
            return self.routes[:n]
        return np.concatenate([self.routes, np.full((n - self.routes.shape[0], *self.routes.shape[1:]), -1, np.int32)])

    def copy(self, tokens: Sequence[int] | None = None, keep: int | None = None) -> StreamSegment:
        """A new segment (of `tokens`, default these) with this one's routing of its first `keep` positions
        (default all)."""
        routes = None if self.routes is None else self.routes[: self.routes.shape[0] if keep is None else keep].copy()
        return StreamSegment(self.tokens if tokens is None else tokens, routes)


@dataclass(eq=False)
class Stream:
    """A token stream on a KV-cache slot (the scheduler's record; a workflow holds it as a handle and reads `tokens`).
    The slot holds the keys and values of tokens[:cached]. `prompt_len`: where the action being sampled starts;
    `draws`: the `generate` calls made on it (and on the streams it was forked from), which key its draws."""

    slot: int
    unit: Any  # the engine's record of the run that holds it
    episode_id: int
    group_id: int
    version: int
    segment: StreamSegment
    phase: Phase = "env"
    cached: int = 0
    prompt_len: int = 0
    action: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)  # the policy version of each action token
    limit: int = 0
    draws: int = 0
    lane: int = 0  # which of its episode's streams it is: its draws' keys (0: the first, the turn loop's)
    share: bool = False  # its first tokens may be copied from a group peer's slot (until its first action ends)
    # (version, adapter, stream, group, first tokens) while the slot holds their keys/values
    prefix_key: tuple | None = None
    redo: int = 0  # positions a publication (stale_kv recompute) dropped, counted when they are prefilled again
    pinned: bool = False  # samples with its own `version` whatever the run's (a frozen opponent); publications skip it
    # the LoRA adapter (policy) it samples with, in a model with several (`LoraConfig.adapters`); set by `open` (the
    # slot's own copy is what the programs read: read-only here)
    adapter: int = 0
    waiter: Any = None  # the task awaiting its action

    @property
    def tokens(self) -> list[int]:
        return self.segment.tokens

    @property
    def play(self) -> Any:
        return self.unit.play


@dataclass
class Generation:
    """One sampled action: its token ids, each token's behaviour log-prob and policy version, whether it ended with a
    stop token (False: cut at its token limit), where it starts in its stream's segment, and the LoRA adapter
    (policy) that sampled it (a model with several)."""

    ids: list[int]
    logprobs: list[float]
    versions: list[int]
    stopped: bool
    prompt_len: int
    segment: StreamSegment
    adapter: int = 0

    @property
    def prompt(self) -> np.ndarray:
        """The tokens the action was sampled after."""
        return np.asarray(self.segment.tokens[: self.prompt_len], np.int32)

    @property
    def routes(self) -> np.ndarray | None:
        """A mixture of experts' recorded routing of the prompt and the action (int32[prompt_len + len(ids), M, k]:
        each token's experts in every sparse layer when the engine fed it; -1 for a token not fed yet, as the
        action's last), or None (a dense model)."""
        return self.segment.routes_upto(self.prompt_len + len(self.ids))


@dataclass
class _Turn:
    action: Generation
    reward: float
    info: dict[str, Any] = field(default_factory=dict)


class Trajectory:
    """What one episode trains on: its recorded turns (actions and rewards, in order) and its end. `own_prompts`:
    each turn keeps its own prompt (the per-turn view's rows) even where the turns share one stream."""

    def __init__(self, spec: EpisodeSpec, *, own_prompts: bool = False) -> None:
        self.spec = spec
        self.turns: list[_Turn] = []
        self.success = False
        self.truncated = False
        self.fault: str | None = None
        self.next_prompt: np.ndarray | None = None
        self.own_prompts = own_prompts
        self.role = 0  # the seat it played in a multi-agent game (a per-role estimator's baseline)
        self.outcome: str | None = None  # its seat's result in a multi-agent game (the env's `outcome`)
        self.opponent: int | None = None  # the policy version that played the other seats (an opponent pool's draw)

    def record(self, action: Generation, reward: float, info: dict[str, Any] | None = None) -> None:
        """Train on `action` as this trajectory's next turn, with `reward` (returns are discounted over turns)."""
        self.turns.append(_Turn(action, float(reward), dict(info or {})))

    def set_reward(self, turn: int, reward: float) -> None:
        """Replace the reward of recorded turn `turn` (a judge's score, a segment's outcome known later)."""
        self.turns[turn].reward = float(reward)

    def copy_for(self, spec: EpisodeSpec) -> Trajectory:
        """A trajectory of `spec` holding this one's turns and end so far (a fork's branch trains the shared prefix
        too)."""
        other = Trajectory(spec, own_prompts=self.own_prompts)
        other.turns = [_Turn(t.action, t.reward, dict(t.info)) for t in self.turns]
        other.success, other.truncated, other.fault, other.next_prompt = (
            self.success,
            self.truncated,
            self.fault,
            self.next_prompt,
        )
        return other

    def to_episode(self, env_name: str) -> Episode:
        """The finished `Episode`: one token stream when every turn sits in one segment (the chat view's row),
        else each turn owns its prompt (a view of its segment's tokens) and the batch packs runs of turns whose
        prompts extend each other into one row (`jgem.rollout.batch.extending_runs`): a segment trains as its own
        sample, with the exact ids its actions were sampled after."""
        s = self.spec
        stream = routes = None
        arrays: dict[int, np.ndarray] = {}
        if self.turns and not self.own_prompts and self._one_stream():
            last = self.turns[-1].action
            stream = np.asarray(last.segment.tokens[: last.prompt_len + len(last.ids)], np.int32)
            routes = last.routes
        policies = sorted({t.action.adapter for t in self.turns})
        if len(policies) > 1:
            raise ValueError(
                f"episode {s.episode_id}: its turns were sampled by policies (LoRA adapters) {policies}; an episode "
                "trains one policy: give each policy's turns a trajectory of their own"
            )
        transitions = []
        for k, t in enumerate(self.turns):
            a = t.action
            prompt = own_routes = None
            if stream is None:
                if id(a.segment) not in arrays:
                    arrays[id(a.segment)] = np.asarray(a.segment.tokens, np.int32)
                seg = arrays[id(a.segment)]
                prompt = seg[: a.prompt_len]  # a view: the episode's memory stays linear in its tokens
                own_routes = a.routes  # a view of the segment's record too
            transitions.append(
                Transition(
                    s.episode_id,
                    k,
                    a.prompt_len,
                    np.asarray(a.ids, np.int32),
                    np.asarray(a.logprobs, np.float32),
                    t.reward,
                    stopped=a.stopped,
                    info=t.info,
                    versions=np.asarray(a.versions, np.int32),
                    prompt_ids=prompt,
                    routes=own_routes,
                )
            )
        return Episode(
            s.episode_id,
            s.group_id,
            env_name,
            s.seed,
            transitions,
            success=self.success,
            truncated=self.truncated,
            fault=self.fault,
            stream=stream,
            next_prompt=None if self.next_prompt is None or self.fault else np.asarray(self.next_prompt, np.int32),
            role=self.role,
            outcome=self.outcome,
            opponent=self.opponent,
            policy=policies[0] if policies else 0,
            routes=routes,
        )

    def _one_stream(self) -> bool:
        """Whether every turn's prompt and action sit at their offsets in the last turn's segment (one segment, or a
        fork's, whose tokens start with those of the stream it was forked from)."""
        last = self.turns[-1].action.segment.tokens
        ends: dict[int, tuple[list[int], int]] = {}
        for t in self.turns:
            a = t.action
            ends[id(a.segment)] = (
                a.segment.tokens,
                max(ends.get(id(a.segment), ([], 0))[1], a.prompt_len + len(a.ids)),
            )
        return all(tokens is last or tokens[:end] == last[:end] for tokens, end in ends.values())


async def _awaiting(request: Awaitable) -> Any:
    return await request


class _Request:
    """What an `await` on the context hands the engine: (kind, arguments); the engine sends back the answer."""

    __slots__ = ("args", "kind")

    def __init__(self, kind: str, *args: Any) -> None:
        self.kind, self.args = kind, args

    def __await__(self):
        return (yield self)


class Context:
    """An episode's handle on the engine (one per `Workflow.run`): see the module docstring. `env` is the first env
    the episode holds; `specs` the specs it plays (one, or a group's); `cfg` the RolloutConfig; `chat` the chat
    format; `max_turns` the turn limit of the step; `stats` the engine's counters (a workflow may count its own
    budget truncations there)."""

    def __init__(self, engine: Any, unit: Any) -> None:  # the RolloutEngine and its record of the run
        self._engine, self._unit = engine, unit
        self.cfg, self.chat = engine.cfg, engine.chat
        self.env_name = engine.env_name
        self.specs: tuple[EpisodeSpec, ...] = unit.specs
        self.spec = unit.specs[0]
        self.max_turns: int = unit.play.max_turns
        self.env: int = unit.envs[0]
        self.envs: tuple[int, ...] = tuple(unit.envs)  # every env the run holds (its width)
        self.evaluating: bool = unit.play.evaluation  # an evaluation's episodes (not trained on)

    @property
    def version(self) -> int:
        """The policy version the run's streams sample with now: the one it was submitted at (async and stream
        pipelines move it on with each update; a pinned stream keeps its own)."""
        return self._unit.version

    @property
    def stats(self) -> Any:
        """The engine's counters now (`RolloutStats`; the pipeline replaces them each step)."""
        return self._engine.stats

    # -- envs -----------------------------------------------------------------------------------------

    def reset(self, env: int | None = None, seed: int | None = None) -> Awaitable[tuple[Any, dict]]:
        """Reset `env` (default: the episode's) with `seed` (default: the spec's); answers (obs, info)."""
        return _Request("reset", self._env(env), self.spec.seed if seed is None else seed)

    def step(
        self, text: str | dict[str, str], env: int | None = None
    ) -> Awaitable[tuple[Any, float, bool, bool, dict]]:
        """Play `text` on `env`; answers (obs, reward, terminated, truncated, info). A multi-agent env takes the joint
        action (a dict of agent -> text) and answers its packed row (`jgem.envs.multiagent.AgentsStep.unpack`)."""
        return _Request("step", self._env(env), text)

    def fork_env(self, env: int | None = None) -> int:
        """A copy of `env` (not stepping) on one of the episode's reserved envs, in the same state."""
        return self._engine._fork_env(self._unit, self._env(env))

    def _env(self, env: int | None) -> int:
        env = self.env if env is None else env
        if env not in self._unit.envs:
            raise ValueError(f"env {env} is not one of this episode's envs {self._unit.envs}")
        return env

    # -- streams --------------------------------------------------------------------------------------

    def open(
        self,
        tokens: Sequence[int],
        *,
        share: bool = True,
        episode_id: int | None = None,
        version: int | None = None,
        adapter: int = 0,
    ) -> Stream:
        """A new stream on a free reserved slot, holding `tokens`. `share`: streams of a group with equal first
        tokens (and policy version and adapter) prefill them once and copy the keys and values. `episode_id`: whose
        draws its tokens are (default: the episode's). `version`: the stream samples with that policy version for
        good (a frozen opponent; the engine's `run` must be given its model), not the run's. `adapter`: the LoRA
        adapter (policy) it prefills and samples with, in a model with several (its forks keep it)."""
        spec = self.spec if episode_id is None else next((s for s in self.specs if s.episode_id == episode_id), None)
        if spec is None:
            raise ValueError(
                f"open: episode {episode_id} is not one of this run's {[s.episode_id for s in self.specs]}"
            )
        return self._engine._open(self._unit, tokens, share=share, spec=spec, version=version, adapter=adapter)

    def hold(self, version: int) -> None:
        """This run will pin streams to policy `version` (`open(..., version=)`): its model is kept from now until
        the run ends (a frozen opponent drawn when a game starts, whose stream opens at its first action)."""
        self._unit.held.add(int(version))

    def append(self, stream: Stream, tokens: Sequence[int]) -> None:
        """Tokens after what `stream` holds (prefilled with the next `generate`)."""
        stream.segment.tokens += tokens

    def generate(self, stream: Stream, max_tokens: int | None = None) -> Awaitable[Generation]:
        """The next action on `stream`, at most `max_tokens` (default rollout.max_new_tokens) tokens."""
        limit = self.cfg.max_new_tokens if max_tokens is None else max(1, min(int(max_tokens), self.cfg.max_new_tokens))
        return _Request("generate", stream, limit)

    def new_segment(self, stream: Stream, tokens: Sequence[int], *, keep_prefix: bool = True) -> None:
        """`stream` starts over with `tokens` (a segment that does not extend the last one). With `keep_prefix`, the
        slot keeps the keys and values of the leading tokens the two share (computed once, as the stream held them)."""
        self._engine._new_segment(stream, tokens, keep_prefix=keep_prefix)

    def fork(self, stream: Stream, *, episode_id: int | None = None) -> Stream:
        """A stream holding `stream`'s tokens on another reserved slot: its keys and values are the slot's row copied
        on the device (nothing prefilled again). `episode_id`: whose draws the fork's tokens are (a branch's)."""
        return self._engine._fork(self._unit, stream, episode_id=episode_id)

    def close(self, stream: Stream) -> None:
        """Give `stream`'s slot back (a sub-agent done) for a later `open` or `fork` of this episode."""
        self._engine._close(stream)

    def gather(self, *awaitables: Coroutine | Awaitable) -> Awaitable[list[Any]]:
        """Run `awaitables` (coroutines awaiting only this context, or its requests: `ctx.generate(s)`) concurrently;
        answers their results in order."""
        return _Request("gather", tuple(a if inspect.iscoroutine(a) else _awaiting(a) for a in awaitables))

    # -- records --------------------------------------------------------------------------------------

    def trajectory(self, spec: EpisodeSpec | None = None, *, own_prompts: bool = False) -> Trajectory:
        return Trajectory(self.spec if spec is None else spec, own_prompts=own_prompts)

    def text(self, action: Generation) -> str:
        """What the env receives for `action`: its text, or rollout.invalid_action for one cut at its limit."""
        return self.chat.action_text(action.ids) if action.stopped else self.cfg.invalid_action

    def token_limit(self, turn: int, spec: EpisodeSpec | None = None) -> int:
        """The token limit of turn `turn` of `spec` (default the episode's): the engine's `turn_token_limit`, within
        rollout.max_new_tokens."""
        return self._engine._turn_limit(self.spec if spec is None else spec, turn)
