"""The rollout engine: continuous batching of multi-turn episodes over per-episode KV-cache slots.

Each env of the pool owns one slot of a `SlotEngine` (`jgem/rollout/slots.py`), which holds its live
episode's whole token stream. The host loop, per round:
1. takes whatever the pool has finished (`EnvPool.recv` partial batches; no env groups): a reset starts an
   episode's first prompt, a step result records the turn and appends the new tokens to the stream (chat
   view: the action's closing token if it was cut, then `ChatFormat.observation_tokens` of the new messages);
2. prefills only those new tokens into their slots (`extend`), after what each slot already holds, so every
   token of an episode is prefilled once. The episodes of a group share their first prompt: it is prefilled
   into one slot and copied into the others;
3. dispatches one decode chunk (a few steps) over the slots that are generating, and while the device runs,
   takes more env results;
4. reads the chunk's tokens: every action that ended (stop token or token limit) is decoded once and sent to
   its env at once (`EnvPool.send`); no slot waits for another's generation or env step. A slot whose
   episode ended is reset onto the next `EpisodeSpec`.

A token's sampling key is a function of (run key, episode id, turn, index in the action), so the episodes do not
depend on slots, chunks, arrival order or the pool's backend. `collect` plays a fixed list of specs to the end
and leaves nothing in flight, so a checkpoint between steps is exact.

The per-turn view (GEM's fresh template every turn) runs on the same loop, but a turn's prompt is not a prefix
of the next one: each turn is a fresh prefill into the slot. The per-turn chat view renders the conversation afresh
every turn too, but its prompt shares the previous prompt and action up to the template's first change: the slot
keeps the keys and values of those tokens and prefills the rest.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import jax
import numpy as np
from flax import nnx

from jgem.envs.pool import EnvPool
from jgem.models.config import ModelConfig
from jgem.models.tokenizer import ChatFormat
from jgem.rollout.config import PromptBudgetError, RolloutConfig, Sampling
from jgem.rollout.episode import Episode, Transition
from jgem.rollout.slots import SlotEngine
from jgem.rollout.views import common_prefix, first_prompt, observation_suffix, wrappers_for_view

__all__ = ["EpisodeSpec", "RolloutEngine", "RolloutStats", "wrappers_for_view"]


@dataclass(frozen=True)
class EpisodeSpec:
    """One episode to play: its id, its group (episodes of a group share a start state) and seed."""

    episode_id: int
    group_id: int
    seed: int


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


Phase = Literal["env", "extend", "decode"]


@dataclass(frozen=True)
class _Play:
    """How a submitted episode is played: its draws' key and stream, its turn limit, its sampling settings."""

    key: Any
    stream: int
    max_turns: int
    sampling: Sampling
    key_id: int = 0  # equal keys, equal ids (`RolloutEngine._key_id`)

    @property
    def group(self) -> tuple[int, Sampling]:
        return (self.key_id, self.sampling)


@dataclass
class _Live:
    """An episode in a slot. `stream`: chat view, the whole stream so far; per-turn view, this turn's prompt
    and the action being sampled. The slot holds the keys and values of stream[:cached]."""

    spec: EpisodeSpec
    play: _Play
    version: int = 0  # the policy version sampling its tokens now
    phase: Phase = "env"
    stream: list[int] = field(default_factory=list)
    cached: int = 0
    prompt_len: int = 0  # where the current action starts in `stream`
    num_messages: int = 0
    action: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)  # the policy version of each action token
    limit: int = 0
    transitions: list[Transition] = field(default_factory=list)
    prefix_key: tuple | None = None  # (group, first prompt) while the slot holds that prompt's keys and values
    redo: int = 0  # positions a publication (stale_kv recompute) dropped, counted when they are prefilled again


class RolloutEngine:
    """Plays `EpisodeSpec`s on a pool with a model, one KV-cache slot per env. The pool's envs must be wrapped
    for the view (`wrappers_for_view`). `turn_token_limit(spec, turn)`, if given, caps a turn's action below
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
    ) -> None:
        self.pool, self.chat, self.cfg, self.env_name = pool, chat, cfg, env_name
        self.turn_token_limit = turn_token_limit
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
        self.stats = RolloutStats()
        self._finished: dict[tuple[int, int], Episode] = {}  # (stream, episode id) -> episode, until taken
        self._drop_work()
        self._last_play: _Play | None = None
        self._keys: list[np.ndarray] = []  # the distinct submitted keys' data (`_key_id`)

    @property
    def num_compilations(self) -> int:
        return self.slots.num_compilations

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
    ) -> list[Episode]:
        """Play every spec to its end (or `max_turns`, or a token budget); episodes in `specs` order. `model`: an
        nnx module or `(graphdef, state)`; `greedy` overrides the config's for this call (evaluation); `version`: the
        policy version recorded on every sampled token. The engine must be idle (nothing submitted or in flight), and
        is idle again after."""
        if self.busy:
            raise ValueError("collect needs an idle engine; run() the submitted episodes to their end first")
        if self.pool.num_in_flight:
            raise ValueError("collect needs an idle pool; recv() the commands in flight first")
        self.stats = RolloutStats()
        try:
            self.submit(specs, rng, max_turns=max_turns, greedy=greedy, version=version)
            self.run({version: model})
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
    ) -> None:
        """Queue `specs` to be played by policy `version` (a key of the models `run` is given), their tokens drawn
        from `key` (`stream` k >= 0: from fold_in(key, k), so several steps' episodes, each with its step's stream,
        share the engine and the tokens stay those of a `collect` with fold_in(key, k)). Episode ids must be unique
        among the engine's episodes (with streams, unique per stream: they key the draws). `front`: they start before
        the episodes queued already."""
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        ids = [(stream, s.episode_id) for s in specs]
        taken = {(play.stream, spec.episode_id) for spec, play in self._queue} | {
            (x.play.stream, x.spec.episode_id) for x in self._live if x is not None
        }
        if len(set(ids)) != len(ids) or taken & set(ids):
            raise ValueError("submit: episode ids repeat; each spec needs its own episode_id (it keys the sampling)")
        sampling = self.cfg.sampling if greedy is None else dataclasses.replace(self.cfg.sampling, greedy=greedy)
        self._last_play = play = _Play(key, stream, max_turns, sampling, self._key_id(key))
        if front:
            self._queue.extendleft((s, play) for s in reversed(specs))
        else:
            self._queue.extend((s, play) for s in specs)
        for s in specs:
            self._versions[(stream, s.episode_id)] = version

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
            live = any(x is not None for x in self._live)
            decoding = [i for i, x in enumerate(self._live) if x is not None and x.phase == "decode"]
            extending = [i for i, x in enumerate(self._live) if x is not None and x.phase == "extend"]
            wanted = until is None or not until()
            groups = self._by_version(decoding + extending)
            lo, hi = min(groups, default=1 << 30), max(groups, default=-1)
            # in lockstep, every process runs the round's programs when any process has work (its own rows or none),
            # one chunk per version from the oldest to the newest any process has
            live, work, wanted, neg_lo, hi = self.slots.agree([live, bool(decoding or extending), wanted, -lo, hi])
            if not live or not wanted:
                if wanted and until is not None and not until():
                    raise RuntimeError("run: nothing is queued or live, but `until` does not hold")
                break
            if not work:
                self._receive(block=True, timeout=poll)
                self._start_free()
                continue
            if self.slots.lockstep:  # a process without rows of a version takes part with padding rows
                groups = {v: groups.get(v, []) for v in range(-neg_lo, hi + 1)}
            for version, slots in groups.items():
                model, play = models[version], self._play_of(slots)
                ext = [i for i in slots if self._live[i].phase == "extend"]
                if ext or self.slots.lockstep:
                    self._extend(model, ext)
                handle = self._dispatch(model, slots, play)
                self._receive(block=False)  # env results that came in while the device decodes
                self._take_actions(slots, handle, version)
            self._start_free()

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

    def versions_in_use(self) -> set[int]:
        """The policy versions that queued and live episodes are played by."""
        return set(self._versions.values()) | {x.version for x in self._live if x is not None}

    @property
    def busy(self) -> bool:
        """Whether episodes are queued or live."""
        return bool(self._queue) or any(x is not None for x in self._live)

    def adopt_version(self, version: int, *, stale_kv: str = "keep") -> int:
        """Every queued and live episode goes on with policy `version` (partial rollouts: the tokens it samples from
        now on are that version's). `stale_kv`: "keep" the keys and values already computed under the old policy,
        or "recompute" them (each live stream is prefilled again under the new one before it samples). Returns
        the positions to recompute."""
        if stale_kv not in ("keep", "recompute"):
            raise ValueError(f"stale_kv {stale_kv!r}; choose 'keep' or 'recompute'")
        for k in self._versions:
            self._versions[k] = version
        redo = 0
        for x in self._live:
            if x is None:
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
        self._queue: deque[tuple[EpisodeSpec, _Play]] = deque()
        self._live: list[_Live | None] = [None] * self.pool.num_envs
        self._versions: dict[tuple[int, int], int] = {}  # (stream, episode id) -> version, while queued

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

    # -- the loop's steps ------------------------------------------------------------------------------

    def _start_free(self) -> None:
        """Reset free envs onto the next specs."""
        free = [i for i, x in enumerate(self._live) if x is None][: len(self._queue)]
        if free:
            specs = [self._queue.popleft() for _ in free]
            for i, (s, play) in zip(free, specs):
                self._live[i] = _Live(s, play, version=self._versions.pop((play.stream, s.episode_id)))
            self.pool.reset(free, [s.seed for s, _ in specs])

    def _receive(self, *, block: bool, timeout: float | None = None) -> None:
        if not self.pool.num_in_flight:
            return
        b = self.pool.recv(timeout=timeout, at_least=1) if block else self.pool.recv(timeout=0.0)
        for j, i in enumerate(b.env_ids.tolist()):
            result = (b.obs[j], float(b.rewards[j]), bool(b.terminated[j]), bool(b.truncated[j]), b.infos[j])
            (self._on_reset if b.is_reset[j] else self._on_step)(i, *result)

    def _on_reset(self, i: int, obs: Any, reward: float, terminated: bool, truncated: bool, info: dict) -> None:
        ep = self._live[i]
        if "fault" in info:
            self.stats.faults += 1
            self._finish(i, info, truncated=True)
            return
        ep.stream, ep.num_messages = first_prompt(self.chat, self.cfg.view, obs)
        if len(ep.stream) + self.cfg.max_new_tokens > self.cfg.max_episode_tokens:
            new, budget = "--rollout.max-new-tokens", "--rollout.max-episode-tokens"
            env = f"{self.env_name}, " if self.env_name else ""
            raise PromptBudgetError(
                f"the first prompt of episode {ep.spec.episode_id} has {len(ep.stream)} tokens ({env}seed "
                f"{ep.spec.seed}), which leaves no room for {new} {self.cfg.max_new_tokens} within "
                f"{budget} {self.cfg.max_episode_tokens} (RolloutConfig.max_episode_tokens); raise {budget} (each "
                "later turn needs room too)"
            )
        ep.cached, ep.prefix_key = 0, None
        self._begin_turn(ep)

    def _on_step(self, i: int, obs: Any, reward: float, terminated: bool, truncated: bool, info: dict) -> None:
        cfg, chat, ep = self.cfg, self.chat, self._live[i]
        action = ep.action
        stopped = chat.ends_with_stop(action)
        per_turn = cfg.view != "chat"  # each turn owns its prompt (the per-turn views)
        ep.transitions.append(
            Transition(
                ep.spec.episode_id,
                len(ep.transitions),
                ep.prompt_len,
                np.asarray(action, np.int32),
                np.asarray(ep.logprobs, np.float32),
                reward,
                stopped=stopped,
                versions=np.asarray(ep.versions, np.int32),
                prompt_ids=np.asarray(ep.stream[: ep.prompt_len], np.int32) if per_turn else None,
            )
        )
        self.stats.turns += 1
        self.stats.action_tokens += len(action)
        if per_turn:
            self.stats.stream_tokens += ep.prompt_len + len(action)
        fault = "fault" in info
        self.stats.faults += fault
        done = terminated or truncated or fault
        if not done and len(ep.transitions) >= ep.play.max_turns:
            done, truncated = True, True
        next_prompt = None
        if not terminated and not fault:  # the state the episode goes on in (or was cut in)
            if per_turn:
                next_prompt = first_prompt(chat, cfg.view, obs)[0]
            else:  # appended in place (copying the stream every turn would be quadratic in its length)
                ep.stream += observation_suffix(chat, ep.num_messages, action, obs)
                next_prompt = ep.stream
        if not done:
            if cfg.view == "chat_per_turn":  # the slot keeps the keys and values up to the template's first change
                ep.cached = min(ep.cached, common_prefix(ep.stream, next_prompt), len(next_prompt) - 1)
                if ep.prefix_key is not None and ep.cached < len(ep.prefix_key[-1]):
                    ep.prefix_key = None
            elif per_turn:
                ep.cached, ep.prefix_key = 0, None
            ep.stream = next_prompt
            ep.num_messages = 0 if cfg.view == "per_turn" else len(obs)
            if len(ep.stream) + cfg.max_new_tokens > cfg.max_episode_tokens:
                self.stats.budget_truncations += 1
                done, truncated = True, True
            else:
                self._begin_turn(ep)
        if done:
            self._finish(i, info, truncated=truncated, next_prompt=next_prompt if truncated else None)

    def _begin_turn(self, ep: _Live) -> None:
        ep.prompt_len, ep.action, ep.logprobs, ep.versions, ep.phase = len(ep.stream), [], [], [], "extend"
        limit = self.cfg.max_new_tokens
        if self.turn_token_limit is not None:
            limit = max(1, min(limit, int(self.turn_token_limit(ep.spec, len(ep.transitions)))))
        ep.limit = limit

    def _finish(self, i: int, info: dict, *, truncated: bool, next_prompt: list[int] | None = None) -> None:
        ep = self._live[i]
        stream = None
        if self.cfg.view == "chat" and ep.transitions:
            last = ep.transitions[-1]
            stream = np.asarray(ep.stream[: last.prompt_len + last.action_ids.size], np.int32)
            self.stats.stream_tokens += stream.size
        self._finished[(ep.play.stream, ep.spec.episode_id)] = Episode(
            ep.spec.episode_id,
            ep.spec.group_id,
            self.env_name,
            ep.spec.seed,
            ep.transitions,
            success=bool(info.get("success", False)),
            truncated=truncated,
            fault=info.get("fault"),
            stream=stream,
            next_prompt=None if next_prompt is None or "fault" in info else np.asarray(next_prompt, np.int32),
        )
        self.stats.episodes += 1
        self._live[i] = None

    def _extend(self, model: Any, slots: list[int]) -> None:
        """Prefill each slot's new tokens (all but the last, which the decode chunk feeds); a group's first
        prompt is prefilled once and copied into its peers' slots."""
        items, copies = [], []
        shard = self.slots.shard_of  # a prompt is copied within a shard (a row never leaves its device)
        holders = {
            (x.prefix_key, shard(i)): i for i, x in enumerate(self._live) if x is not None and x.prefix_key is not None
        }
        for i in slots:
            ep = self._live[i]
            todo = ep.stream[ep.cached : -1]
            self.stats.recomputed_tokens += ep.redo  # the positions a publication dropped, computed again now
            ep.redo = 0
            if ep.cached == 0 and not ep.transitions and not ep.action and self.cfg.view != "per_turn":
                # the keys and values of one policy version's first prompt of a group (of one step's stream)
                ep.prefix_key = (ep.version, ep.play.stream, ep.spec.group_id, tuple(ep.stream))
                src = holders.get((ep.prefix_key, shard(i)))
                if src is not None and src != i:
                    copies.append((src, i))
                    self.stats.shared_prefix_tokens += len(todo)
                    todo = []
                else:
                    holders[(ep.prefix_key, shard(i))] = i
            if todo:
                items.append((i, todo, ep.cached))
            self.stats.prefill_tokens += 1  # the last token, fed by the decode chunk
            ep.cached, ep.phase = len(ep.stream) - 1, "decode"
        real, computed = self.slots.extend(model, items)
        self.slots.copy([s for s, _ in copies], [d for _, d in copies])
        self.stats.prefill_tokens += real
        self.stats.prefill_computed += computed

    def _dispatch(self, model: Any, slots: list[int], play: _Play) -> Any:
        eps = [self._live[i] for i in slots]
        handle, rows = self.slots.decode(
            model,
            slots,
            last=[e.stream[-1] for e in eps],
            pos=[len(e.stream) - 1 for e in eps],
            ntok=[len(e.action) for e in eps],
            limit=[e.limit for e in eps],
            episode=[e.spec.episode_id for e in eps],
            turn=[len(e.transitions) for e in eps],
            key=play.key,
            sampling=play.sampling,
            stream=[e.play.stream for e in eps],
        )
        self.stats.decode_chunks += 1
        return handle, rows

    def _take_actions(self, slots: list[int], dispatched: tuple[Any, int], version: int) -> None:
        """Append each slot's new tokens (sampled by policy `version`); send every action that ended to its env."""
        handle, rows = dispatched
        out = self.slots.fetch(handle)
        self.stats.decode_rows += rows * max((len(t) for t, _ in out), default=0)
        send_ids, texts = [], []
        for i, (toks, lps) in zip(slots, out):
            ep = self._live[i]
            self.stats.decode_active += len(toks)
            ep.action += toks.tolist()
            ep.logprobs += lps.tolist()
            ep.versions += [version] * len(toks)
            ep.stream += toks.tolist()
            ep.cached = len(ep.stream) - 1
            stopped = self.chat.ends_with_stop(ep.action)
            if stopped or len(ep.action) >= ep.limit:
                self.stats.truncated_actions += not stopped
                ep.phase = "env"
                send_ids.append(i)
                texts.append(self.chat.action_text(ep.action) if stopped else self.cfg.invalid_action)
        if send_ids:
            self.pool.send(send_ids, texts)
