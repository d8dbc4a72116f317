"""The rollout engine: the scheduler of episodes over per-episode KV-cache slots (continuous batching).

How an episode interacts is a workflow (`jgem/rollout/workflow.py`): a coroutine the engine starts on the envs and
slots it reserves and resumes when what it awaited is ready. The engine knows nothing of turns. Per round it:
1. takes whatever the pool has finished (`EnvPool.recv` partial batches; no env groups) and resumes the tasks that
   awaited those envs; the resets and steps they ask for go to the pool together;
2. prefills only the new tokens of the streams that await an action (`extend`), after what each slot already holds,
   so every token is prefilled once (a fork's row is copied first; a group's equal first prompt is prefilled into one
   slot and copied into the others);
3. dispatches one decode chunk (a few steps) per policy version over the generating slots, and while the device
   runs, takes more env results;
4. reads the chunk's tokens: every action that ended (stop token or token limit) goes to the task awaiting it, in
   slot order; no slot waits for another's generation or env step. A run that returned frees its envs and slots
   for the next queued one.

A token's sampling key is a function of (run key, episode id, draw count and lane, index in the action), so the
episodes do not depend on slots, chunks, arrival order or the pool's backend. `collect` plays a fixed list of specs
to the end and leaves nothing in flight, so a checkpoint between steps is exact. The default workflow (`turns`) is
the turn loop of every view (`jgem/rollout/workflows/turns.py`).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np
from flax import nnx

from jgem.envs.pool import EnvPool
from jgem.models.config import ModelConfig
from jgem.models.tokenizer import ChatFormat
from jgem.rollout.config import RolloutConfig, Sampling
from jgem.rollout.episode import Episode, EpisodeSpec
from jgem.rollout.slots import SlotEngine
from jgem.rollout.views import common_prefix, wrappers_for_view
from jgem.rollout.workflow import Context, Generation, Stream, StreamSegment, Trajectory, Workflow
from jgem.rollout.workflows import get_workflow

__all__ = ["EpisodeSpec", "RolloutEngine", "RolloutStats", "Stream", "wrappers_for_view"]


@dataclass
class RolloutStats:
    """Counters of one `collect` call. `prefill_tokens`: prompt tokens the model processed (prefilled, or fed
    as a turn's first decode input); `stream_tokens`: the tokens of the episodes' streams (chat view: each
    episode's stream once; per-turn view: each turn's prompt and action); `shared_prefix_tokens`: first-prompt
    tokens copied from a group peer's slot instead of prefilled; `recomputed_tokens`: positions prefilled again
    under newly published weights (`adopt_version(stale_kv="recompute")`; counted when prefilled, so an episode that
    ends first adds none); `decode_rows`/`decode_active`: row-steps the
    decode chunks computed / of which a slot was generating."""

    turns: int = 0
    episodes: int = 0
    faults: int = 0
    truncated_actions: int = 0
    budget_truncations: int = 0
    prefill_tokens: int = 0
    prefill_computed: int = 0
    shared_prefix_tokens: int = 0
    stream_tokens: int = 0
    action_tokens: int = 0
    decode_chunks: int = 0
    decode_rows: int = 0
    decode_active: int = 0
    recomputed_tokens: int = 0

    def as_metrics(self) -> dict[str, float]:
        out = {f"collect/{k}": float(v) for k, v in dataclasses.asdict(self).items()}
        out["collect/prefill_per_stream_token"] = self.prefill_tokens / max(1, self.stream_tokens)
        out["collect/slot_utilisation"] = self.decode_active / max(1, self.decode_rows)
        return out


@dataclass(frozen=True)
class _Play:
    """How a submitted episode is played: its draws' key and stream, its turn limit, its sampling settings."""

    key: Any
    stream: int
    max_turns: int
    sampling: Sampling
    key_id: int = 0  # equal keys, equal ids (`RolloutEngine._key_id`)
    evaluation: bool = False  # an evaluation's episodes (a workflow may play them otherwise: `Context.evaluating`)

    @property
    def group(self) -> tuple[int, Sampling]:
        return (self.key_id, self.sampling)


@dataclass(eq=False)
class _Unit:
    """One run of the workflow (an episode, or a group of them): its specs, the envs and slots it holds (reserved
    when it starts), the policy version its new streams sample with, its streams and its unfinished tasks."""

    specs: tuple[EpisodeSpec, ...]
    play: _Play
    version: int
    envs: list[int]
    slots: list[int]
    streams: list[Stream] = field(default_factory=list)
    tasks: list[_Task] = field(default_factory=list)  # its coroutines not finished (the root, gathered children)
    lanes: dict[int, int] = field(default_factory=dict)  # episode id -> its streams so far (`RolloutEngine._lane`)
    envs_used: set[int] = field(default_factory=set)  # envs a task has reset, stepped or forked onto
    held: set[int] = field(default_factory=set)  # policy versions its pinned streams play (opened or to open)


class _Task:
    """A coroutine of a unit, suspended on one request; `parent` awaits it (and its siblings) in a gather."""

    __slots__ = ("coro", "index", "parent", "results", "unit", "waiting")

    def __init__(self, coro: Any, unit: _Unit, parent: _Task | None = None, index: int = 0) -> None:
        self.coro, self.unit, self.parent, self.index = coro, unit, parent, index
        self.results: list[Any] | None = None  # a gather's results, as its children finish
        self.waiting = 0  # children not finished


class RolloutEngine:
    """Plays `EpisodeSpec`s on a pool with a model, one KV-cache slot per env. The pool's envs must be wrapped
    for the view (`wrappers_for_view`). `workflow`: how an episode interacts (`jgem.rollout.workflow`; default the
    config's `rollout.workflow`). `turn_token_limit(spec, turn)`, if given, caps a turn's action below
    `max_new_tokens` (benchmarks use it to give responses an LLM's spread of lengths)."""

    def __init__(
        self,
        model_cfg: ModelConfig,
        pool: EnvPool,
        chat: ChatFormat,
        cfg: RolloutConfig,
        *,
        env_name: str = "",
        mesh: Any = None,
        cache_dtype: str | None = None,
        turn_token_limit: Callable[[EpisodeSpec, int], int] | None = None,
        workflow: Workflow | str | None = None,
    ) -> None:
        self.pool, self.chat, self.cfg, self.env_name = pool, chat, cfg, env_name
        self.model_cfg = model_cfg
        self.turn_token_limit = turn_token_limit
        self.workflow = get_workflow(workflow or cfg.workflow) if not isinstance(workflow, Workflow) else workflow
        problems = self.workflow.check(cfg)
        if problems:
            raise ValueError(f"rollout workflow {self.workflow.name!r}: " + "; ".join(problems))
        # Several processes over one mesh: the slots are global, each process's envs own the slots of its shards.
        processes = 1 if mesh is None else len({d.process_index for d in mesh.devices.flat})
        self.slots = SlotEngine(
            model_cfg,
            num_slots=pool.num_envs * processes,
            max_len=cfg.max_episode_tokens,
            eos_ids=chat.stop_token_ids,
            pad_id=chat.pad_id,
            chunk_steps=cfg.chunk_steps,
            extend_chunk=cfg.extend_chunk,
            cache_dtype=cache_dtype,
            mesh=mesh,
        )
        if self.slots.num_local_slots != pool.num_envs:
            raise ValueError(
                f"this process holds {self.slots.num_local_slots} of the engine's {self.slots.num_slots} slots but "
                f"its pool has {pool.num_envs} envs; every process needs the same env.num_envs, a multiple of its "
                "devices on the mesh's batch axes"
            )
        # a mixture of experts: every fed token's experts are recorded on its stream's segment (routing replay)
        self.slots.record_routes = bool(model_cfg.sparse_layers)
        self.stats = RolloutStats()
        self._finished: dict[tuple[int, int], Episode] = {}  # (stream, episode id) -> episode, until taken
        self._drop_work()
        self._last_play: _Play | None = None
        self._keys: list[np.ndarray] = []  # the distinct submitted keys' data (`_key_id`)

    @property
    def num_compilations(self) -> int:
        return self.slots.num_compilations

    def metrics(self) -> dict[str, float]:
        """The engine's statistics as metrics: the counters since `stats` was last replaced (`RolloutStats`), the
        programs compiled (`compile/rollout`) and the pool's faults over its life (`pool/faults_total`)."""
        return self.stats.as_metrics() | {
            "compile/rollout": float(self.num_compilations),
            "pool/faults_total": float(self.pool.num_faults),
        }

    # -- public ------------------------------------------------------------------------------------

    def collect(
        self,
        model: Any,
        specs: Sequence[EpisodeSpec],
        rng: jax.Array,
        *,
        max_turns: int,
        greedy: bool | None = None,
        version: int = 0,
        evaluation: bool = False,
        others: dict[int, Any] | None = None,
    ) -> list[Episode]:
        """Play every spec to its end (or `max_turns`, or a token budget); episodes in `specs` order. `model`: an
        nnx module or `(graphdef, state)`; `greedy` overrides the config's for this call (evaluation); `version`: the
        policy version recorded on every sampled token; `others`: the models of other versions streams are pinned to
        (frozen opponents). The engine must be idle (nothing submitted or in flight), and is idle again after."""
        if self.busy:
            raise ValueError("collect needs an idle engine; run() the submitted episodes to their end first")
        if self.pool.num_in_flight:
            raise ValueError("collect needs an idle pool; recv() the commands in flight first")
        self.stats = RolloutStats()
        try:
            self.submit(specs, rng, max_turns=max_turns, greedy=greedy, version=version, evaluation=evaluation)
            self.run({**(others or {}), version: model})
        except Exception:  # an env or a prompt that cannot be played: the next collect starts afresh
            self._drop_work()
            self._discard_in_flight()
            raise
        except BaseException:  # an interrupt: the episodes are dropped, the env commands in flight left alone
            self._drop_work()
            raise
        return self.take([s.episode_id for s in specs])

    def submit(
        self,
        specs: Sequence[EpisodeSpec],
        key: jax.Array,
        *,
        max_turns: int,
        stream: int = -1,
        greedy: bool | None = None,
        version: int = 0,
        front: bool = False,
        evaluation: bool = False,
    ) -> None:
        """Queue `specs` to be played by policy `version` (a key of the models `run` is given), their tokens drawn
        from `key` (`stream` k >= 0: from fold_in(key, k), so several steps' episodes, each with its step's stream,
        share the engine and the tokens stay those of a `collect` with fold_in(key, k)). Episode ids must be unique
        among the engine's episodes (with streams, unique per stream: they key the draws). `front`: they start before
        the episodes queued already. A grouped workflow plays each run of consecutive specs of one group together."""
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        ids = [(stream, s.episode_id) for s in specs]
        taken = {(u.play.stream, s.episode_id) for u in self._queue for s in u.specs} | {
            (u.play.stream, s.episode_id) for u in self._units for s in u.specs
        }
        if len(set(ids)) != len(ids) or taken & set(ids):
            raise ValueError("submit: episode ids repeat; each spec needs its own episode_id (it keys the sampling)")
        sampling = self.cfg.sampling if greedy is None else dataclasses.replace(self.cfg.sampling, greedy=greedy)
        self._last_play = play = _Play(key, stream, max_turns, sampling, self._key_id(key), evaluation)
        units = [_Unit(g, play, version, [], []) for g in self._runs(specs)]
        for u in units:
            need = self._width(u)
            if need > self.slots.per_shard or need > self.pool.num_envs:
                raise ValueError(
                    f"rollout workflow {self.workflow.name!r} holds {need} slots and envs per run (a group of "
                    f"{len(u.specs)}) but the engine has {self.pool.num_envs} envs and {self.slots.per_shard} slots "
                    f"per shard (its slots are split over {self.slots.shards} shards of the mesh, and a fork's slot is "
                    "on its stream's shard); raise env.num_envs or lower the group size"
                )
        if front:
            self._queue.extendleft(reversed(units))
        else:
            self._queue.extend(units)

    def _runs(self, specs: Sequence[EpisodeSpec]) -> list[tuple[EpisodeSpec, ...]]:
        """The specs one run of the workflow plays: each spec alone, or (grouped) each run of one group's specs."""
        if not self.workflow.grouped:
            return [(s,) for s in specs]
        runs: list[list[EpisodeSpec]] = []
        for s in specs:
            if runs and runs[-1][0].group_id == s.group_id:
                runs[-1].append(s)
            else:
                runs.append([s])
        return [tuple(r) for r in runs]

    def run(
        self, models: dict[int, Any], until: Callable[[], bool] | None = None, *, poll: float | None = None
    ) -> None:
        """Play rounds until `until()` holds (on every process) or nothing is queued or live. `models`: the policy
        of every version a queued or live episode is played by (an nnx module or `(graphdef, state)` each).
        Finished episodes wait for `take`; the others stay in their slots, and their envs keep stepping between
        calls. When every live episode waits for its env, the loop blocks until one answers; with `poll` (seconds)
        it looks again at `until` that often (an `until` that does not depend on the envs: an update finishing)."""
        models = {v: nnx.split(m) if isinstance(m, nnx.Module) else m for v, m in models.items()}
        self._start_free()
        while True:
            live = bool(self._units or self._queue)  # a queued run starts as soon as a run frees its share
            decoding = [i for i, x in enumerate(self._live) if x is not None and x.phase == "decode"]
            extending = [i for i, x in enumerate(self._live) if x is not None and x.phase == "extend"]
            wanted = until is None or not until()
            groups = self._by_version(decoding + extending)
            missing = [v for v in groups if v not in models]
            # in lockstep, every process runs the round's programs when any process has work (its own rows or none),
            # one chunk per version any process has rows of (every process is given the same versions' models)
            versions = sorted(models)
            has = [v in groups for v in versions]  # padded to a multiple of 8: one agreement program for most runs
            live, work, wanted, lost, *has = self._agree_round(
                [live, bool(decoding or extending), wanted, bool(missing), *has, *[0] * (-len(has) % 8)]
            )
            if lost:  # on every process together (a process that went on alone would wait in the next program)
                what = f"{missing}, which live streams sample with" if missing else "another process's streams use"
                raise KeyError(f"run: no model for policy version(s) {what}")
            if not live or not wanted:
                if wanted and until is not None and not until():
                    raise RuntimeError("run: nothing is queued or live, but `until` does not hold")
                break
            if not work:
                self._receive(block=True, timeout=poll)
                self._start_free()
                continue
            if self.slots.lockstep:  # a process without rows of a version takes part with padding rows
                groups = {v: groups.get(v, []) for v, h in zip(versions, has) if h}
            for version, slots in groups.items():
                model, play = models[version], self._play_of(slots)
                ext = [i for i in slots if self._live[i].phase == "extend"]
                if ext or self.slots.lockstep or self._forks:
                    self._extend(model, ext)
                handle = self._dispatch(model, slots, play)
                self._receive(block=False)  # env results that came in while the device decodes
                self._take_actions(slots, handle, version)
            self._start_free()

    def _agree_round(self, values: list[int]) -> list[int]:
        """A round's agreement over the sampler's processes (`SlotEngine.agree`): whether any is live, has work,
        wants more, lacks a model, and per version of the models whether any has rows of it."""
        return self.slots.agree(values)

    def take(self, episode_ids: Sequence[int], *, stream: int = -1) -> list[Episode]:
        """The finished episodes `episode_ids` (of `stream`), in that order, handed over (the engine forgets them)."""
        missing = [i for i in episode_ids if (stream, i) not in self._finished]
        if missing:
            raise KeyError(f"take: episodes {missing[:8]} of stream {stream} are not finished")
        return [self._finished.pop((stream, i)) for i in episode_ids]

    def finished(self, episode_ids: Sequence[int], *, stream: int = -1) -> bool:
        """Whether every one of `episode_ids` (of `stream`) has finished (and waits for `take`)."""
        return all((stream, i) in self._finished for i in episode_ids)

    def _key_id(self, key: jax.Array) -> int:
        """A number per distinct key value among the engine's episodes (chunks group by it, not by the object)."""
        if not self.busy:
            self._keys = []
        data = np.asarray(jax.random.key_data(key))
        for i, k in enumerate(self._keys):
            if np.array_equal(k, data):
                return i
        self._keys.append(data)
        return len(self._keys) - 1

    def put_back(self, episodes: Sequence[Episode], *, stream: int = -1) -> None:
        """Finished episodes (of `stream`) handed to the engine again, to be taken later (a resumed pipeline's)."""
        for e in episodes:
            self._finished[(stream, e.episode_id)] = e

    def versions_in_use(self, *, pinned: bool = False) -> set[int]:
        """The policy versions that queued and live episodes are played by (their runs' and their streams'); with
        `pinned`, only the versions live runs pin streams to (frozen opponents: opened, or held to open later,
        `Context.hold`)."""
        if pinned:
            return {v for u in self._units for v in u.held}
        units = [u.version for u in self._queue] + [u.version for u in self._units]
        return set(units) | {x.version for x in self._live if x is not None and not x.pinned}

    @property
    def busy(self) -> bool:
        """Whether episodes are queued or live."""
        return bool(self._queue) or bool(self._units)

    @property
    def num_live(self) -> int:
        """Episodes (workflow runs) started and not finished."""
        return len(self._units)

    def adopt_version(self, version: int, *, stale_kv: str = "keep") -> int:
        """Every queued and live episode goes on with policy `version` (partial rollouts: the tokens it samples from
        now on are that version's). `stale_kv`: "keep" the keys and values already computed under the old policy,
        or "recompute" them (each live stream is prefilled again under the new one before it samples). Returns
        the positions to recompute."""
        if stale_kv not in ("keep", "recompute"):
            raise ValueError(f"stale_kv {stale_kv!r}; choose 'keep' or 'recompute'")
        for u in [*self._queue, *self._units]:
            u.version = version
        redo = 0
        for x in self._live:
            if x is None or x.pinned:  # a frozen opponent keeps its version
                continue
            x.version, x.prefix_key = version, None  # its prompt's keys and values are another version's
            if stale_kv == "recompute" and x.cached:
                redo += x.cached
                x.redo += x.cached  # counted in the stats once prefilled (an episode may end before that)
                x.cached = 0
                if x.phase == "decode":
                    x.phase = "extend"
        return redo

    def _drop_work(self) -> None:
        """No episode queued or live (finished ones stay until taken)."""
        dropped = [t for u in getattr(self, "_units", []) for t in u.tasks]
        self._queue: deque[_Unit] = deque()
        self._units: list[_Unit] = []
        self._live: list[Stream | None] = [None] * self.pool.num_envs  # the stream of each slot
        self._env_unit: list[_Unit | None] = [None] * self.pool.num_envs  # the unit holding each env
        self._waiting: dict[int, tuple[_Task, bool]] = {}  # env -> (task awaiting it, is a reset)
        self._resets: list[tuple[int, int | None]] = []  # env commands the tasks asked for, sent together
        self._sends: list[tuple[int, str]] = []
        self._forks: list[tuple[int, int]] = []  # (source slot, fork's slot), copied before the next programs
        # a group's shared first prompt: (holder's segment, peer's segment, positions), whose routing (a mixture of
        # experts) is copied once the holder's is read
        self._route_copies: list[tuple[StreamSegment, StreamSegment, int]] = []
        self.slots.forget_routes()  # routing records of dropped streams
        for t in dropped:  # coroutines dropped mid-episode are closed (no "never awaited"), whatever their code does
            with contextlib.suppress(Exception):
                t.coro.close()

    def _discard_in_flight(self) -> None:
        """Wait for the env commands in flight (the pool's timeouts bound each) and drop their results."""
        while self.pool.num_in_flight:
            self.pool.recv(timeout=None)

    def _by_version(self, slots: list[int]) -> dict[int, list[int]]:
        """The slots grouped by the policy version they sample with: one chunk per version, oldest first."""
        groups: dict[int, list[int]] = {}
        for i in slots:
            groups.setdefault(self._live[i].version, []).append(i)
        return dict(sorted(groups.items()))

    def _play_of(self, slots: list[int]) -> _Play:
        """What one chunk's slots are played with (their key and sampling: one per chunk)."""
        plays = {self._live[i].play.group for i in slots}
        if len(plays) > 1:
            raise ValueError(
                "the episodes of one policy version were submitted with different keys or sampling settings; a decode "
                "chunk takes one of each: submit them with the same key (different streams) and sampling"
            )
        return self._live[slots[0]].play if slots else self._last_play

    # -- the workflows' runs ---------------------------------------------------------------------------

    def _start_free(self) -> None:
        """Start the next queued runs on free envs and slots (each takes the workflow's width of both, its slots on
        one shard), and send the resets they ask for."""
        free_envs = [i for i, u in enumerate(self._env_unit) if u is None]
        reserved = {i for u in self._units for i in u.slots}
        free_slots = [i for i in range(len(self._live)) if i not in reserved]  # a stream's slot is its run's
        started = []
        while self._queue:
            unit = self._queue[0]
            need = self._width(unit)
            slots = self._slots_for(free_slots, need)
            if len(free_envs) < need or slots is None:
                break
            self._queue.popleft()
            unit.envs, free_envs = free_envs[:need], free_envs[need:]
            unit.slots = slots
            free_slots = [i for i in free_slots if i not in slots]
            for e in unit.envs:
                self._env_unit[e] = unit
            self._units.append(unit)
            started.append(unit)
        for unit in started:
            spec = unit.specs if self.workflow.grouped else unit.specs[0]
            task = _Task(self.workflow.run(Context(self, unit), spec), unit)
            unit.tasks, unit.envs_used = [task], {unit.envs[0]}
            self._resume(task, None)
        self._flush_env()

    def _slots_for(self, free: list[int], need: int) -> list[int] | None:
        """`need` of the `free` slots on one shard (the lowest), or None."""
        by_shard: dict[int, list[int]] = {}
        for i in free:
            by_shard.setdefault(self.slots.shard_of(i), []).append(i)
        for slots in by_shard.values():
            if len(slots) >= need:
                return slots[:need]
        return None

    def _resume(self, task: _Task, value: Any) -> None:
        """Run `task` until it awaits the next request (taken here) or returns."""
        try:
            request = task.coro.send(value)
        except StopIteration as stop:
            self._task_done(task, stop.value)
            return
        except Exception as e:
            e.add_note(f"(in rollout workflow {self.workflow.name!r}, episode {task.unit.specs[0].episode_id})")
            raise
        kind, args = getattr(request, "kind", None), getattr(request, "args", ())
        if kind in ("reset", "step"):
            env = args[0]
            if env in self._waiting:
                raise ValueError(f"rollout workflow {self.workflow.name!r}: env {env} is awaited twice at once")
            self._waiting[env] = (task, kind == "reset")
            task.unit.envs_used.add(env)
            (self._resets if kind == "reset" else self._sends).append(args)
        elif kind == "generate":
            stream, limit = args
            if stream.waiter is not None or stream.slot < 0:
                raise ValueError(
                    f"rollout workflow {self.workflow.name!r}: generate on a stream that is generating or closed"
                )
            stream.waiter = task
            stream.prompt_len, stream.action, stream.logprobs, stream.versions = len(stream.tokens), [], [], []
            stream.phase, stream.limit = "extend", limit
            if len(stream.tokens) + limit > self.cfg.max_episode_tokens:
                raise ValueError(
                    f"rollout workflow {self.workflow.name!r}: a stream of {len(stream.tokens)} tokens has no room "
                    f"for {limit} more within rollout.max_episode_tokens {self.cfg.max_episode_tokens}; check the "
                    "budget before generating (or start a new segment)"
                )
        elif kind == "gather":
            (coros,) = args
            if not coros:
                self._resume(task, [])
                return
            task.results, task.waiting = [None] * len(coros), len(coros)
            children = [_Task(c, task.unit, task, k) for k, c in enumerate(coros)]
            task.unit.tasks += children
            for child in children:
                self._resume(child, None)
        else:
            raise TypeError(
                f"rollout workflow {self.workflow.name!r} awaited {request!r}; a workflow awaits only its context "
                "(ctx.reset, ctx.step, ctx.generate, ctx.gather)"
            )

    def _task_done(self, task: _Task, result: Any) -> None:
        task.unit.tasks.remove(task)
        parent = task.parent
        if parent is None:
            self._finish(task.unit, result)
            return
        parent.results[task.index] = result
        parent.waiting -= 1
        if not parent.waiting:
            results, parent.results = parent.results, None
            self._resume(parent, results)

    def _finish(self, unit: _Unit, result: Any) -> None:
        """The run returned: its trajectories become finished episodes; its envs and slots are free."""
        name = self.workflow.name
        trajectories = [result] if isinstance(result, Trajectory) else list(result or [])
        if not all(isinstance(t, Trajectory) for t in trajectories):
            raise TypeError(f"rollout workflow {name!r} returned {result!r}; return its Trajectory (grouped: a list)")
        got = sorted(t.spec.episode_id for t in trajectories)
        want = sorted(s.episode_id for s in unit.specs)
        if got != want:
            raise ValueError(f"rollout workflow {name!r} returned trajectories of episodes {got}, not of {want}")
        busy = [e for e in unit.envs if e in self._waiting] + [s.slot for s in unit.streams if s.waiter is not None]
        if busy or unit.tasks:
            raise ValueError(f"rollout workflow {name!r} returned while its envs, streams or gathers were busy")
        for t in trajectories:
            ep = t.to_episode(self.env_name)
            self._finished[(unit.play.stream, ep.episode_id)] = ep
            self.stats.episodes += 1
            if ep.stream is not None:
                self.stats.stream_tokens += ep.stream.size
            else:
                self.stats.stream_tokens += sum(x.prompt_len + x.action_ids.size for x in ep.transitions)
        for s in unit.streams:
            self._close(s)
        for e in unit.envs:
            self._env_unit[e] = None
        self._units.remove(unit)

    def _flush_env(self) -> None:
        """Send the resets and steps the tasks asked for, each kind in one call."""
        if self._resets:
            resets, self._resets = self._resets, []
            self.pool.reset([e for e, _ in resets], [s for _, s in resets])
        if self._sends:
            sends, self._sends = self._sends, []
            self.pool.send([e for e, _ in sends], [t for _, t in sends])

    def _receive(self, *, block: bool, timeout: float | None = None) -> None:
        if not self.pool.num_in_flight:
            return
        b = self.pool.recv(timeout=timeout, at_least=1) if block else self.pool.recv(timeout=0.0)
        for j, i in enumerate(b.env_ids.tolist()):
            task, reset = self._waiting.pop(i)
            info = b.infos[j]
            self.stats.faults += "fault" in info
            if reset:
                self._resume(task, (b.obs[j], info))
            else:
                self._resume(task, (b.obs[j], float(b.rewards[j]), bool(b.terminated[j]), bool(b.truncated[j]), info))
        self._flush_env()

    def _width(self, unit: _Unit) -> int:
        """The slots and envs one run of `unit` holds (`Workflow.width_of`; a duck-typed workflow's `width`)."""
        width_of = getattr(self.workflow, "width_of", None)
        if width_of is None:
            return self.workflow.width(len(unit.specs))
        return width_of(len(unit.specs), cfg=self.cfg, env_name=self.env_name, evaluating=unit.play.evaluation)

    def _open(
        self,
        unit: _Unit,
        tokens: Sequence[int],
        *,
        share: bool,
        spec: EpisodeSpec,
        version: int | None = None,
        adapter: int = 0,
    ) -> Stream:
        if not len(tokens):
            raise ValueError(f"rollout workflow {self.workflow.name!r}: open a stream with at least one token")
        adapter = self._adapter(adapter)
        slot = self._free_slot(unit)
        segment = StreamSegment(tokens)
        pinned = version is not None
        if pinned:
            unit.held.add(version)
        version = unit.version if version is None else version
        stream = Stream(slot, unit, spec.episode_id, spec.group_id, version, segment, share=share, pinned=pinned)
        stream.adapter = adapter
        self.slots.set_adapter(slot, adapter)
        stream.lane = self._lane(unit, spec.episode_id)
        self._live[slot] = stream
        unit.streams.append(stream)
        return stream

    def _adapter(self, adapter: int) -> int:
        """`adapter` checked against the model's LoRA adapters (policies): 0 for a model with one or none."""
        n = self.model_cfg.lora.policies
        if not 0 <= adapter < n:
            raise ValueError(
                f"rollout workflow {self.workflow.name!r}: a stream on adapter (policy) {adapter}, but the model has "
                f"{n} (--model.lora.adapters)"
            )
        return int(adapter)

    def _lane(self, unit: _Unit, episode_id: int) -> int:
        """The next draw lane of `episode_id` in `unit`: the first stream of an episode draws on lane 0 (the keys of
        the turn loop), a second stream or a fork of it on lanes 1, 2, ... (its own tokens, not the first's)."""
        lane = unit.lanes.get(episode_id, 0)
        unit.lanes[episode_id] = lane + 1
        if lane >= 1 << 10:
            raise ValueError(f"rollout workflow {self.workflow.name!r}: more than 1024 streams of episode {episode_id}")
        return lane

    def _free_slot(self, unit: _Unit, shard: int | None = None) -> int:
        for i in unit.slots:
            if self._live[i] is None and (shard is None or self.slots.shard_of(i) == shard):
                return i
        raise ValueError(
            f"rollout workflow {self.workflow.name!r} holds {len(unit.slots)} slots, all in use; open or fork fewer "
            "streams at once (close one first) or give the workflow a larger width"
        )

    def _close(self, stream: Stream) -> None:
        if stream.waiter is not None:
            raise ValueError("close: the stream is generating")
        if stream.slot >= 0:
            self._live[stream.slot] = None
            self._forks = [(s, d) for s, d in self._forks if d != stream.slot]  # nothing to copy into a freed slot
            stream.slot, stream.phase = -1, "env"

    def _new_segment(self, stream: Stream, tokens: Sequence[int], *, keep_prefix: bool) -> None:
        tokens = list(tokens)
        if not tokens or stream.slot < 0 or stream.waiter is not None:
            raise ValueError(
                f"rollout workflow {self.workflow.name!r}: new_segment needs at least one token, on an open stream "
                "that is not generating"
            )
        if keep_prefix:  # the slot keeps the keys and values up to the first token that differs
            stream.cached = min(stream.cached, common_prefix(stream.tokens, tokens), len(tokens) - 1)
            if stream.prefix_key is not None and stream.cached < len(stream.prefix_key[-1]):
                stream.prefix_key = None
        else:
            stream.cached, stream.prefix_key = 0, None
        # the kept prefix's routing (a mixture of experts) as it was recorded when those tokens were fed
        stream.segment = stream.segment.copy(tokens, keep=stream.cached)

    def _fork(self, unit: _Unit, stream: Stream, *, episode_id: int | None) -> Stream:
        if stream.waiter is not None or stream.slot < 0:
            raise ValueError("fork: the stream is generating or closed; fork an open stream between actions")
        spec = next((s for s in unit.specs if s.episode_id == episode_id), None) if episode_id is not None else None
        if episode_id is not None and spec is None:
            raise ValueError(
                f"fork: episode {episode_id} is not one of this run's {[s.episode_id for s in unit.specs]}"
            )
        slot = self._free_slot(unit, shard=self.slots.shard_of(stream.slot))
        child = dataclasses.replace(
            stream,
            slot=slot,
            segment=stream.segment.copy(),  # its tokens and their recorded routing (a mixture of experts)
            episode_id=stream.episode_id if spec is None else spec.episode_id,
            action=[],
            logprobs=[],
            versions=[],
            share=False,
            prefix_key=None,
            waiter=None,
            redo=0,  # the source counts its own recomputation
        )
        child.lane = self._lane(unit, child.episode_id)
        self.slots.set_adapter(slot, child.adapter)
        self._live[slot] = child
        unit.streams.append(child)
        if stream.cached:
            # the source's row as it will be: a source forked since the last programs is itself a pending copy
            src = next((s for s, d in reversed(self._forks) if d == stream.slot), stream.slot)
            self._forks.append((src, slot))
        return child

    def _fork_env(self, unit: _Unit, env: int) -> int:
        if env in self._waiting:
            raise ValueError(f"fork_env: env {env} is stepping; fork it between steps")
        free = [e for e in unit.envs if e not in unit.envs_used]
        if not free:
            raise ValueError(f"rollout workflow {self.workflow.name!r} holds no free env to fork onto")
        try:
            state = self.pool.get_state(env)
        except Exception as e:
            raise TypeError(
                f"env {self.env_name or '?'} cannot be copied (its get_state raised {type(e).__name__}: {e}); "
                "ctx.fork_env needs an env whose get_state/set_state copy it"
            ) from e
        self.pool.set_state(free[0], state)
        unit.envs_used.add(free[0])
        return free[0]

    def _turn_limit(self, spec: EpisodeSpec, turn: int) -> int:
        limit = self.cfg.max_new_tokens
        if self.turn_token_limit is not None:
            limit = max(1, min(limit, int(self.turn_token_limit(spec, turn))))
        return limit

    # -- the device side: prefill, decode, read ----------------------------------------------------------

    def _extend(self, model: Any, slots: list[int]) -> None:
        """Prefill each slot's new tokens (all but the last, which the decode chunk feeds); a group's first
        prompt is prefilled once and copied into its peers' slots. Forks made since the last call are copied first."""
        forks, self._forks = self._forks, []  # in lockstep every process calls copy, with its forks or none
        self.slots.copy([s for s, _ in forks], [d for _, d in forks])
        items, copies = [], []
        shard = self.slots.shard_of  # a prompt is copied within a shard (a row never leaves its device)
        holders = {
            (x.prefix_key, shard(i)): i for i, x in enumerate(self._live) if x is not None and x.prefix_key is not None
        }
        for i in slots:
            ep = self._live[i]
            todo = ep.tokens[ep.cached : -1]
            self.stats.recomputed_tokens += ep.redo  # the positions a publication dropped, computed again now
            ep.redo = 0
            if ep.cached == 0 and ep.share and not ep.action:
                # the keys and values of one policy's (version, adapter) first prompt of a group (of one step's stream)
                ep.prefix_key = (ep.version, ep.adapter, ep.play.stream, ep.group_id, tuple(ep.tokens))
                src = holders.get((ep.prefix_key, shard(i)))
                if src is not None and src != i:
                    copies.append((src, i))
                    if self.slots.record_routes:  # the copied prefix's routing too, once the holder's is read
                        self._route_copies.append((self._live[src].segment, ep.segment, len(todo)))
                    self.stats.shared_prefix_tokens += len(todo)
                    todo = []
                else:
                    holders[(ep.prefix_key, shard(i))] = i
            if todo:
                items.append((i, todo, ep.cached))
            self.stats.prefill_tokens += 1  # the last token, fed by the decode chunk
            ep.cached, ep.phase = len(ep.tokens) - 1, "decode"
        real, computed = self.slots.extend(model, items)
        self.slots.copy([s for s, _ in copies], [d for _, d in copies])
        self.stats.prefill_tokens += real
        self.stats.prefill_computed += computed

    def _dispatch(self, model: Any, slots: list[int], play: _Play) -> Any:
        eps = [self._live[i] for i in slots]
        handle, rows = self.slots.decode(
            model,
            slots,
            last=[e.tokens[-1] for e in eps],
            pos=[len(e.tokens) - 1 for e in eps],
            ntok=[len(e.action) for e in eps],
            limit=[e.limit for e in eps],
            episode=[e.episode_id for e in eps],
            turn=[e.draws + (e.lane << 20) for e in eps],  # lane 0: the turn loop's keys
            key=play.key,
            sampling=play.sampling,
            stream=[e.play.stream for e in eps],
        )
        self.stats.decode_chunks += 1
        return handle, rows

    def _take_actions(self, slots: list[int], dispatched: tuple[Any, int], version: int) -> None:
        """Append each slot's new tokens (sampled by policy `version`); hand every action that ended to the task
        awaiting it (in slot order), then send the env steps they ask for."""
        handle, rows = dispatched
        out = self.slots.fetch(handle)
        self.stats.decode_rows += rows * max((len(t) for t, _ in out), default=0)
        routes = self._read_routes(handle)
        ended = []
        for n, (i, (toks, lps)) in enumerate(zip(slots, out)):
            ep = self._live[i]
            if routes is not None:  # the tokens this chunk fed, from the stream's last (at len - 1) on
                ep.segment.record(len(ep.tokens) - 1, routes[n])
            self.stats.decode_active += len(toks)
            ep.action += toks.tolist()
            ep.logprobs += lps.tolist()
            ep.versions += [version] * len(toks)
            ep.tokens.extend(toks.tolist())
            ep.cached = len(ep.tokens) - 1
            stopped = self.chat.ends_with_stop(ep.action)
            if stopped or len(ep.action) >= ep.limit:
                self.stats.truncated_actions += not stopped
                ep.phase, ep.share, ep.draws = "env", False, ep.draws + 1
                action = Generation(
                    ep.action, ep.logprobs, ep.versions, stopped, ep.prompt_len, ep.segment, adapter=ep.adapter
                )
                task, ep.waiter = ep.waiter, None
                ended.append((task, action))
        for task, action in ended:
            self._resume(task, action)
        self._flush_env()

    def _read_routes(self, handle: Any) -> list[np.ndarray] | None:
        """A mixture of experts' routing records (routing replay): the tokens prefilled since the last read and the
        group prefixes copied from them, onto their streams' segments; returns the decode chunk's per slot (None for
        a dense model)."""
        if not self.slots.record_routes:
            return None
        for slot, start, ids in self.slots.prefill_routes():
            self._live[slot].segment.record(start, ids)
        copies, self._route_copies = self._route_copies, []
        for src, dst, n in copies:
            held = src.routes_upto(n)
            if held is not None:
                dst.record(0, held)
        return self.slots.fetch_routes(handle)
