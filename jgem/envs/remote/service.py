"""The env table behind the HTTP server: create, reset, step, snapshot, close and reap envs by integer id.

Kept free of FastAPI so it can be tested and reused directly; `server.py` puts HTTP in front of it.
Thread-safe: a table lock guards the id map, and each env has its own lock so two requests for one env
never interleave (requests for different envs run in parallel in the server's thread pool).
"""

from __future__ import annotations

import copy
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from jgem.envs.remote.policy import KwargPolicy, KwargRefused
from jgem.envs.remote.protocol import DEFAULT_MAX_BODY_BYTES, step_payload


@dataclass(frozen=True)
class ServeConfig:
    """What a server serves and its limits. `envs` holds env ids or id prefixes (e.g. "agentgym:BabyAI").

    `allow_kwargs` names the env kwargs clients may pass (none by default; `"*"` any), `data_roots` the
    directories a data path among them may name, `allow_urls` the prefixes a URL among them may start with
    (see `jgem.envs.remote.policy`)."""

    envs: tuple[str, ...]
    token: str | None = None
    max_envs: int = 4096
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_batch: int = 4096
    idle_timeout_s: float = 900.0
    reap_interval_s: float = 30.0
    max_snapshots: int = 4096
    allow_kwargs: tuple[str, ...] = ()
    data_roots: tuple[str, ...] = ()
    allow_urls: tuple[str, ...] = ()


class ServiceError(Exception):
    """A request the service refuses; `status` is the HTTP status the server answers with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class _Slot:
    env: Any
    env_id: str
    lock: threading.Lock = field(default_factory=threading.Lock)
    last_used: float = field(default_factory=time.monotonic)
    seq: int = 0  # steps applied since the last reset/restore
    last_result: dict | None = None
    needs_reset: bool = True
    score: float = 0.0
    last_obs: Any = ""
    # a multi-agent env: each agent's view of the last reset/step, and the actions of a step being gathered
    views: dict[str, dict] = field(default_factory=dict)
    pending: dict[str, str] = field(default_factory=dict)
    acted: dict[str, tuple[int, dict]] = field(default_factory=dict)  # agent -> (step, its view) of its last action


def resolve_env_ids(patterns: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """Registered ids matching each pattern exactly or as a prefix; a pattern matching nothing is an error."""
    from jgem.registry import list_envs

    ids: list[str] = []
    for p in patterns:
        found = [p] if p in list_envs() else list_envs(p)
        if not found:
            raise ValueError(f"no registered env id is or starts with {p!r}; see jgem.list_envs()")
        ids.extend(i for i in found if i not in ids)
    return tuple(ids)


class EnvService:
    """Envs keyed by integer ids. Every method raises `ServiceError` for requests it refuses."""

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self.env_ids = resolve_env_ids(config.envs)
        self.policy = KwargPolicy(config.allow_kwargs, config.data_roots, config.allow_urls)
        self.instance = uuid.uuid4().hex  # clients see a new value after a restart
        self.started = time.time()
        self._slots: dict[int, _Slot] = {}
        self._next_id = 0
        self._lock = threading.Lock()
        self._snapshots: OrderedDict[str, tuple[str, Any]] = OrderedDict()
        self.counters = {k: 0 for k in ("created", "closed", "reaped", "resets", "steps", "replayed_steps", "faults")}

    # -- table -------------------------------------------------------------------------------------
    def _slot(self, idx: int) -> _Slot:
        with self._lock:
            slot = self._slots.get(idx)
        if slot is None:
            raise ServiceError(
                404,
                f"env {idx} does not exist on this server (closed, reaped after idling, or the "
                "server restarted); create a new one with POST /create",
            )
        slot.last_used = time.monotonic()
        return slot

    def create(self, env_id: str | None = None, env_kwargs: dict | None = None) -> int:
        from jgem.registry import make

        if env_id is None:
            if len(self.env_ids) != 1:
                raise ServiceError(
                    400,
                    f"this server serves {len(self.env_ids)} env ids; name one in 'env_id' "
                    f"(one of {', '.join(self.env_ids[:20])})",
                )
            env_id = self.env_ids[0]
        if env_id not in self.env_ids:
            raise ServiceError(400, f"env id {env_id!r} is not served here; served: {', '.join(self.env_ids[:20])}")
        with self._lock:
            if len(self._slots) >= self.config.max_envs:
                raise ServiceError(
                    429,
                    f"server holds its maximum of {self.config.max_envs} envs; close some "
                    "(POST /close) or start the server with a larger --max-envs",
                )
        try:
            self.policy.check(env_kwargs)
        except KwargRefused as e:
            raise ServiceError(403, str(e)) from e
        try:
            env = make(env_id, **(env_kwargs or {}))
        except OSError as e:
            # One message for missing, unreadable and existing-but-wrong files: no probing the server's disk.
            raise ServiceError(
                400, f"cannot make {env_id!r} with kwargs {env_kwargs!r}: a file or resource it names cannot be used"
            ) from e
        except (TypeError, ValueError, KeyError) as e:
            raise ServiceError(400, f"cannot make {env_id!r} with kwargs {env_kwargs!r}: {e}") from e
        with self._lock:
            idx = self._next_id
            self._next_id += 1
            self._slots[idx] = _Slot(env=env, env_id=env_id)
            self.counters["created"] += 1
        return idx

    def create_many(self, count: int, env_id: str | None = None, env_kwargs: dict | None = None) -> list[int]:
        """All or nothing: if one creation fails, the ones made before it are closed."""
        ids: list[int] = []
        try:
            for _ in range(count):
                ids.append(self.create(env_id, env_kwargs))
        except ServiceError:
            for i in ids:
                self.close(i)
            raise
        return ids

    def close(self, idx: int) -> None:
        with self._lock:
            slot = self._slots.pop(idx, None)
            if slot is None:
                raise ServiceError(404, f"env {idx} does not exist on this server; nothing to close")
            self.counters["closed"] += 1
        with slot.lock:
            slot.env.close()

    def close_all(self) -> None:
        with self._lock:
            slots = list(self._slots.values())
            self._slots.clear()
        for slot in slots:
            with slot.lock:
                slot.env.close()

    def reap(self, now: float | None = None) -> int:
        """Close envs idle for longer than `idle_timeout_s`; returns how many."""
        now = time.monotonic() if now is None else now
        with self._lock:
            stale = [i for i, s in self._slots.items() if now - s.last_used > self.config.idle_timeout_s]
            slots = [self._slots.pop(i) for i in stale]
            self.counters["reaped"] += len(slots)
        for slot in slots:
            with slot.lock:
                slot.env.close()
        return len(slots)

    def __len__(self) -> int:
        return len(self._slots)

    # -- episodes ----------------------------------------------------------------------------------
    def _fault(self, slot: _Slot, idx: int, what: str, e: Exception) -> ServiceError:
        slot.needs_reset = True
        with self._lock:
            self.counters["faults"] += 1
        return ServiceError(
            500,
            f"env {idx} ({slot.env_id}) raised during {what}: {type(e).__name__}: {e}; "
            "the episode is over, call /reset",
        )

    def reset(self, idx: int, seed: int | None = None, agent: str | None = None) -> dict:
        """A new episode; of a multi-agent env, the packed payload, or with `agent` that agent's view only."""
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            raise ServiceError(400, f"seed {seed!r} is not a non-negative integer; pass a seed >= 0 or none")
        slot = self._slot(idx)
        with slot.lock:
            try:
                obs, info = slot.env.reset(seed=seed)
            except Exception as e:
                raise self._fault(slot, idx, "reset", e) from e
            slot.seq, slot.score, slot.needs_reset, slot.last_obs = 0, 0.0, False, obs
            slot.last_result, slot.pending, slot.views, slot.acted = None, {}, {}, {}
            with self._lock:
                self.counters["resets"] += 1
            if isinstance(obs, dict):  # a multi-agent env
                payload = self._agents_payload(slot, idx, "reset", (obs, None, None, None, info))
                return payload if agent is None else self._view(slot, idx, agent)
            return step_payload(obs, 0.0, False, False, info, 0.0)

    def step(self, idx: int, action: str | dict[str, str], seq: int | None = None, agent: str | None = None) -> dict:
        """One step: `action` a str, or for a multi-agent env the joint action (a dict of agent -> str). With
        `agent`, `action` is that agent's alone: the env steps once every active agent has sent its own, and the
        answer is the agent's view of that step (or `{"waiting_for": [...]}` until then)."""
        slot = self._slot(idx)
        if agent is not None:
            return self._agent_step(slot, idx, agent, action, seq)
        with slot.lock:
            if seq is not None and seq == slot.seq and slot.last_result is not None:
                with self._lock:
                    self.counters["replayed_steps"] += 1
                return slot.last_result  # a client retry of a step that was applied: answer it again
            if slot.needs_reset:
                raise ServiceError(
                    409, f"env {idx} has no running episode (not reset yet, or its episode ended); call /reset first"
                )
            if seq is not None and seq != slot.seq + 1:
                raise ServiceError(
                    409,
                    f"step seq {seq} for env {idx} is out of order: the last applied step is "
                    f"{slot.seq}, so the next must be {slot.seq + 1}",
                )
            return self._apply(slot, idx, action)

    def _apply(self, slot: _Slot, idx: int, action: str | dict[str, str]) -> dict:
        """Step the env (the slot's lock held) and record the result."""
        if isinstance(action, dict) != isinstance(slot.last_obs, dict):
            what = "a dict of agent -> text" if isinstance(slot.last_obs, dict) else "a str"
            raise ServiceError(400, f"env {idx} ({slot.env_id}) takes {what} as its action")
        try:
            result = slot.env.step(action)
        except (TypeError, ValueError) as e:
            if isinstance(action, dict):  # a wrong joint action (a missing or extra agent) is the client's error
                raise ServiceError(400, f"env {idx} ({slot.env_id}) refused the joint action: {e}") from e
            raise self._fault(slot, idx, "step", e) from e
        except Exception as e:
            raise self._fault(slot, idx, "step", e) from e
        with self._lock:
            self.counters["steps"] += 1
        if isinstance(action, dict):  # checked and packed before the step counts (a malformed one faults it)
            slot.last_result = self._agents_payload(slot, idx, "step", result, step=slot.seq + 1)
            slot.seq += 1
            slot.pending = {}
            slot.acted.update({a: (slot.seq, slot.views[a]) for a in action if a in slot.views})
            return slot.last_result
        slot.seq += 1
        obs, reward, terminated, truncated, info = result
        slot.score += float(reward)
        slot.last_obs = obs
        slot.needs_reset = bool(terminated or truncated)
        slot.last_result = step_payload(obs, reward, terminated, truncated, info, slot.score)
        return slot.last_result

    def _agents_payload(self, slot: _Slot, idx: int, kind: str, result: tuple, step: int = 0) -> dict:
        """A multi-agent result checked and packed (one payload, the observation a dict per agent), and each
        agent's own view of it kept for `/observation?agent=`."""
        from jgem.envs.multiagent.base import pack

        try:
            obs, reward, over, truncated, info = pack(kind, *result, f"env {idx} ({slot.env_id}).{kind}")
        except ValueError as e:
            raise self._fault(slot, idx, kind, e) from e
        slot.score += reward
        slot.last_obs, slot.needs_reset = obs, over
        for a in obs:
            before = slot.views.get(a, {}).get("score", 0.0) if kind == "step" else 0.0
            r = info["rewards"][a]
            view = step_payload(
                obs[a], r, info["terminations"][a], info["truncations"][a], info["agents"][a], before + r
            )
            slot.views[a] = {**view, "agent": a, "seq": step}
        return step_payload(obs, reward, over, truncated, info, slot.score)

    def _view(self, slot: _Slot, idx: int, agent: str) -> dict:
        if agent not in slot.views:
            raise ServiceError(404, f"env {idx} has no agent {agent!r} (its agents: {sorted(slot.views)})")
        return slot.views[agent]

    def _agent_step(self, slot: _Slot, idx: int, agent: str, action: Any, seq: int | None) -> dict:
        if not isinstance(action, str):
            raise ServiceError(
                400, f"with 'agent', the action is that agent's text (a str), got {type(action).__name__}"
            )
        with slot.lock:
            done = slot.acted.get(agent)
            if seq is not None and done is not None and done[0] == seq:
                with self._lock:
                    self.counters["replayed_steps"] += 1
                return done[1]  # a retry of this agent's action, whose step was applied: its view of that step
            if slot.needs_reset:
                raise ServiceError(409, f"env {idx} has no running episode (not reset yet, or it ended); call /reset")
            if not isinstance(slot.last_obs, dict):
                raise ServiceError(400, f"env {idx} ({slot.env_id}) is not a multi-agent env; send no 'agent'")
            if seq is not None and seq != slot.seq + 1:
                raise ServiceError(
                    409, f"step seq {seq} for env {idx} is out of order: the next step is {slot.seq + 1}"
                )
            active = slot.env.active_agents()
            if agent not in active:
                raise ServiceError(400, f"agent {agent!r} may not act now in env {idx}; the active agents: {active}")
            slot.pending[agent] = action
            waiting = [a for a in active if a not in slot.pending]
            if waiting:
                return {"waiting_for": waiting, "seq": slot.seq + 1, "agent": agent}
            self._apply(slot, idx, dict(slot.pending))
            return slot.views[agent]

    def observation(self, idx: int, agent: str | None = None) -> Any:
        """The last observation; of a multi-agent env, `agent`'s whole view of the last step (observation, reward,
        done, info with `active`), or without `agent` the observations of all."""
        slot = self._slot(idx)
        with slot.lock:
            return slot.last_obs if agent is None else self._view(slot, idx, agent)

    # -- clones ------------------------------------------------------------------------------------
    def snapshot(self, idx: int) -> str:
        """Store the env's state server-side; the key restores it into any env of the same id."""
        slot = self._slot(idx)
        with slot.lock:
            try:
                env_state = slot.env.get_state()
            except NotImplementedError as e:
                raise ServiceError(501, f"{slot.env_id} cannot snapshot its state: {e}") from e
            views = copy.deepcopy(slot.views)
            state = (slot.env_id, (env_state, slot.score, slot.last_obs, slot.needs_reset, views))
        key = uuid.uuid4().hex
        with self._lock:
            self._snapshots[key] = state
            while len(self._snapshots) > self.config.max_snapshots:
                self._snapshots.popitem(last=False)  # oldest first: bounded memory
        return key

    def restore(self, idx: int, key: str) -> None:
        slot = self._slot(idx)
        with self._lock:
            snap = self._snapshots.get(key)
        if snap is None:
            raise ServiceError(
                404,
                f"snapshot {key!r} is unknown (evicted after {self.config.max_snapshots} newer "
                "ones, or the server restarted); take a new one with POST /snapshot",
            )
        env_id, (state, score, last_obs, needs_reset, views) = snap
        if env_id != slot.env_id:
            raise ServiceError(400, f"snapshot {key!r} is of {env_id!r}, env {idx} is {slot.env_id!r}")
        with slot.lock:
            try:
                slot.env.set_state(state)
            except Exception as e:
                raise self._fault(slot, idx, "restore", e) from e
            slot.seq, slot.score, slot.last_obs, slot.needs_reset = 0, score, last_obs, needs_reset
            slot.last_result, slot.pending, slot.acted = None, {}, {}
            slot.views = {a: {**v, "seq": 0} for a, v in copy.deepcopy(views).items()}

    def metrics(self) -> dict[str, float]:
        with self._lock:
            return {
                "envs_active": len(self._slots),
                "snapshots": len(self._snapshots),
                "uptime_seconds": time.time() - self.started,
                **self.counters,
            }
