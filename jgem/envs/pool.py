"""EnvPool: steps many envs asynchronously and returns results in partial batches.

`send(env_ids, actions)` queues steps; `recv()` returns the first `batch_size` results to finish, in
arrival order, so a slow env never holds up the others. There is no auto-reset: the caller resets
envs explicitly and always sees terminal observations and infos.

Backends: `inline` (steps run in the caller's thread inside `recv`; deterministic), `thread` (a thread
per worker; good for envs that wait on I/O or sleep), `process` (worker processes hosting several
envs each; see `pool_workers.py`), `remote` (HTTP envs driven by the thread backend).

A fault (the env raised, ran past `step_timeout`, returned a malformed result, or its worker process
died) never stops the pool: the env's result is `truncated=True, terminated=False` with
`infos[i]["fault"] = "<kind>: <reason>"`, the env is rebuilt fresh (reset it next), and `num_faults`
counts it. Every result is checked where it leaves the env (`pool_commands.check_result`): a finite real reward,
bool flags, a dict info, and an observation of the type the env's reset returned; anything else is an
`invalid_result` fault of that env only.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any, Literal

import numpy as np

from jgem.core import Env
from jgem.envs.multiagent.base import check_actions
from jgem.envs.pool_commands import EnvFactory, Result, close_quietly, exception_fault, fault_result, run_command
from jgem.envs.pool_workers import ProcessBackend
from jgem.registry import import_modules, spec

Backend = Literal["inline", "thread", "process", "remote"]


@dataclass(frozen=True)
class EnvResults:
    """Results of one `recv`/`step`; row i belongs to env `env_ids[i]`."""

    env_ids: np.ndarray  # [n] int32
    obs: list
    rewards: np.ndarray  # [n] float32
    terminated: np.ndarray  # [n] bool
    truncated: np.ndarray  # [n] bool
    infos: list[dict]
    is_reset: np.ndarray  # [n] bool: the row answers a reset, not a step

    def __len__(self) -> int:
        return len(self.obs)

    @staticmethod
    def from_results(results: Sequence[Result]) -> EnvResults:
        if not results:
            e = np.zeros(0, np.bool_)
            return EnvResults(np.zeros(0, np.int32), [], np.zeros(0, np.float32), e, e.copy(), [], e.copy())
        ids, obs, rew, term, trunc, infos, is_reset = zip(*results)
        return EnvResults(
            np.array(ids, np.int32),
            list(obs),
            np.array(rew, np.float32),
            np.array(term, np.bool_),
            np.array(trunc, np.bool_),
            list(infos),
            np.array(is_reset, np.bool_),
        )


CLOSE_TIMEOUT = 10.0


def close_all(envs: Sequence[Env | None], timeout: float | None = None, *, deadline: float | None = None) -> list[int]:
    """Close `envs` in daemon threads, waiting at most `timeout` seconds in all (or until `deadline`).

    Returns the indices of envs whose `close()` had not returned by then (left running in the background)
    and warns naming them."""
    timeout = CLOSE_TIMEOUT if timeout is None else timeout
    todo = [(i, env) for i, env in enumerate(envs) if env is not None]
    if not todo:
        return []
    jobs: queue.SimpleQueue = queue.SimpleQueue()
    for item in todo:
        jobs.put(item)
    done: set[int] = set()

    def work() -> None:
        while True:
            try:
                i, env = jobs.get_nowait()
            except queue.Empty:
                return
            close_quietly(env)
            done.add(i)

    threads = [threading.Thread(target=work, name="jgem-pool-close", daemon=True) for _ in range(min(len(todo), 8))]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout if deadline is None else deadline
    for t in threads:
        t.join(timeout=max(0.0, deadline - time.monotonic()))
    hung = [i for i, _ in todo if i not in done]
    if hung:
        names = ", ".join(f"env {i} ({envs[i]!r})" for i in hung[:8]) + (" ..." if len(hung) > 8 else "")
        warnings.warn(
            f"EnvPool.close: {len(hung)} env(s) did not close within {timeout}s and were left behind: {names}",
            RuntimeWarning,
            stacklevel=3,
        )
    return hung


class _InlineBackend:
    """Runs queued commands in the caller's thread when results are asked for (FIFO, deterministic)."""

    def __init__(self, factories: Sequence[Callable[[], Env]]) -> None:
        self.factories = list(factories)
        self.envs: list[Env | None] = [f() for f in self.factories]
        self.pending: dict[int, tuple[str, Any]] = {}

    def submit(self, env_ids: Sequence[int], kind: str, args: Sequence[Any]) -> None:
        for i, a in zip(env_ids, args):
            self.pending[i] = (kind, a)

    def _run(self, i: int) -> Result:
        kind, arg = self.pending.pop(i)
        env = self.envs[i]
        try:
            if env is None:
                env = self.envs[i] = self.factories[i]()
            return run_command(env, i, kind, arg)
        except (Exception, SystemExit) as e:  # Ctrl-C still stops the caller
            close_quietly(env)
            self.envs[i] = None  # rebuilt by the next command
            return exception_fault(i, e, kind == "reset")

    def poll(self, ready: dict[int, Result], want: int, wait: float | None) -> None:
        run = self._run
        for i in list(islice(self.pending, want)):
            ready[i] = run(i)

    def poll_ids(self, ready: dict[int, Result], env_ids: Sequence[int]) -> None:
        for i in env_ids:
            if i in self.pending:
                ready[i] = self._run(i)

    def get_state(self, i: int) -> Any:
        return self._env(i).get_state()

    def set_state(self, i: int, state: Any) -> None:
        self._env(i).set_state(state)

    def _env(self, i: int) -> Env:
        if self.envs[i] is None:
            self.envs[i] = self.factories[i]()
        return self.envs[i]

    def close(self, timeout: float | None = None) -> None:
        envs, self.envs = self.envs, []
        close_all(envs, timeout)


class _ThreadBackend(_InlineBackend):
    """Worker threads pull commands from one queue. A step past `step_timeout` cannot be killed in
    Python: its env is marked faulted and replaced, its thread abandoned (daemon) and a new worker
    started; the late result is dropped (generation check). The abandoned env's `close()` runs on a
    daemon thread at once, so what it owns (a browser, a sandbox) does not outlive the fault; an env
    whose close cannot run beside a hung step must make close safe for that."""

    def __init__(self, factories: Sequence[Callable[[], Env]], num_workers: int, step_timeout: float | None) -> None:
        super().__init__(factories)
        num_envs = len(self.factories)
        self.step_timeout = step_timeout
        self.tasks: queue.SimpleQueue = queue.SimpleQueue()
        self.results: queue.SimpleQueue = queue.SimpleQueue()
        self.gen = [0] * num_envs  # bumped when a command is abandoned, so its late result is ignored
        self.started = [0.0] * num_envs  # monotonic start of the running command, 0 while queued
        self.runner = [-1] * num_envs
        self.kind: dict[int, str] = {}  # in-flight env -> command kind
        self.abandoned: set[int] = set()
        self.threads: dict[int, threading.Thread] = {}
        self.next_worker = 0
        for _ in range(num_workers):
            self._start_worker()

    def _start_worker(self) -> None:
        w = self.next_worker
        self.next_worker += 1
        t = threading.Thread(target=self._work, args=(w,), name=f"jgem-pool-{w}", daemon=True)
        self.threads[w] = t
        t.start()

    def _work(self, w: int) -> None:
        tasks, results, envs, gen = self.tasks, self.results, self.envs, self.gen
        while True:
            task = tasks.get()
            if task is None:
                return
            i, g, kind, arg = task
            self.runner[i] = w
            self.started[i] = time.monotonic()
            env = envs[i]
            try:
                if env is None:
                    env = self.factories[i]()
                    if gen[i] == g:
                        envs[i] = env
                item = (g, run_command(env, i, kind, arg))
            except BaseException as e:  # SystemExit from an env must not take the worker thread with it
                if gen[i] == g:
                    envs[i] = None
                close_quietly(env)
                item = (g, exception_fault(i, e, kind == "reset"))
            results.put(item)
            if w in self.abandoned:
                return

    def submit(self, env_ids: Sequence[int], kind: str, args: Sequence[Any]) -> None:
        put, gen, started = self.tasks.put, self.gen, self.started
        for i, a in zip(env_ids, args):
            started[i] = 0.0
            self.kind[i] = kind
            put((i, gen[i], kind, a))

    def _deliver(self, ready: dict[int, Result], item: tuple[int, Result]) -> None:
        g, res = item
        i = res[0]
        if g != self.gen[i] or i not in self.kind:
            return  # late result of an abandoned command
        del self.kind[i]
        ready[i] = res

    def _check_timeouts(self, ready: dict[int, Result]) -> float | None:
        """Fault commands running past the timeout; return seconds until the next could expire."""
        now = time.monotonic()
        nearest = self.step_timeout
        for i in list(self.kind):
            t0 = self.started[i]
            if t0 == 0.0:
                continue
            left = t0 + self.step_timeout - now
            if left > 0:
                nearest = min(nearest, left)
                continue
            kind = self.kind.pop(i)
            self.gen[i] += 1
            hung, self.envs[i] = self.envs[i], None  # the hung thread keeps its own reference
            if hung is not None:  # release its processes (a browser, a sandbox) without waiting for the hung call
                threading.Thread(target=close_quietly, args=(hung,), name="jgem-pool-close-hung", daemon=True).start()
            self.abandoned.add(self.runner[i])
            self._start_worker()
            reason = f"{kind} ran longer than step_timeout={self.step_timeout}s"
            ready[i] = fault_result(i, "timeout", reason, kind == "reset")
        return nearest

    def poll(self, ready: dict[int, Result], want: int, wait: float | None) -> None:
        get = self.results.get
        if self.step_timeout is not None:
            nearest = self._check_timeouts(ready)
            wait = nearest if wait is None else min(wait, nearest)
        with contextlib.suppress(queue.Empty):
            self._deliver(ready, get(timeout=wait) if wait is None or wait > 0 else self.results.get_nowait())
        while True:  # drain what is already there without blocking
            try:
                self._deliver(ready, self.results.get_nowait())
            except queue.Empty:
                break
        if self.step_timeout is not None:
            self._check_timeouts(ready)

    def poll_ids(self, ready: dict[int, Result], env_ids: Sequence[int]) -> None:
        self.poll(ready, len(env_ids), None)

    def close(self, timeout: float | None = None) -> None:
        timeout = CLOSE_TIMEOUT if timeout is None else timeout
        for _ in self.threads:
            self.tasks.put(None)
        start = time.monotonic()
        for w, t in self.threads.items():
            if w not in self.abandoned:
                t.join(timeout=max(0.0, start + min(2.0, timeout / 2) - time.monotonic()))
        self.threads = {}
        envs, self.envs = self.envs, []
        close_all(envs, timeout, deadline=start + timeout)


class EnvPool:
    """A pool of `num_envs` envs stepped asynchronously; see the module docstring for the contract."""

    def __init__(
        self,
        env: str | Callable[[], Env],
        num_envs: int,
        *,
        batch_size: int | None = None,
        backend: Backend = "thread",
        num_workers: int | None = None,
        step_timeout: float | None = None,
        env_kwargs: dict | None = None,
        wrappers: Sequence[Callable[[Env], Env]] = (),
        remote_urls: Sequence[str] = (),
        remote_token: str | None = None,
        imports: Sequence[str] = (),
    ) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        batch_size = num_envs if batch_size is None else batch_size
        if not 1 <= batch_size <= num_envs:
            raise ValueError(f"batch_size must be in 1..num_envs={num_envs}, got {batch_size}")
        if step_timeout is not None and step_timeout <= 0:
            raise ValueError(f"step_timeout must be positive seconds or None, got {step_timeout}")
        if num_workers is not None and num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        imports = tuple(imports)
        if isinstance(env, str) and backend != "remote":
            import_modules(imports)
            spec(env)  # unknown ids fail here, with suggestions, not inside a worker
        self.num_envs = num_envs
        self.batch_size = batch_size
        self.backend = backend
        self._busy = np.zeros(num_envs, np.bool_)
        self._in_flight = 0
        self._num_faults = 0
        self._ready: dict[int, Result] = {}  # insertion order is arrival order
        self._closed = False
        wrappers = tuple(wrappers)
        env_kwargs = dict(env_kwargs or {})
        if backend == "inline":
            if step_timeout is not None:
                raise ValueError("the inline backend cannot time out a step; use backend='thread' or 'process'")
            self._backend: Any = _InlineBackend([EnvFactory(env, env_kwargs, wrappers, imports=imports)] * num_envs)
        elif backend == "thread":
            factories = [EnvFactory(env, env_kwargs, wrappers, imports=imports)] * num_envs
            self._backend = _ThreadBackend(factories, num_workers or num_envs, step_timeout)
        elif backend == "remote":
            if not isinstance(env, str):
                raise ValueError("the remote backend needs an env id string, not a callable")
            if not remote_urls:
                raise ValueError("backend='remote' needs remote_urls=[...] (one or more env server base URLs)")
            # Round-robin over servers; a rebuilt env reconnects to its own server, or to another when it is
            # gone. HTTP requests time out with the step, so a thread abandoned on a hung server does not linger.
            urls, http_timeout = list(remote_urls), step_timeout or 30.0
            factories = [
                EnvFactory(
                    env,
                    env_kwargs,
                    wrappers,
                    urls[i % len(urls)],
                    remote_token,
                    http_timeout,
                    tuple(u for u in urls if u != urls[i % len(urls)]),
                )
                for i in range(num_envs)
            ]
            self._backend = _ThreadBackend(factories, num_workers or num_envs, step_timeout)
        elif backend == "process":
            factory = EnvFactory(env, env_kwargs, wrappers, imports=imports)
            self._backend = ProcessBackend(factory, num_envs, num_workers or _default_processes(num_envs), step_timeout)
        else:
            raise ValueError(f"unknown backend {backend!r}; choose 'inline', 'thread', 'process' or 'remote'")
        # A pool dropped without close() still stops its threads and processes (at GC or exit).
        self._finalizer = weakref.finalize(self, self._backend.close)

    # -- the async API --------------------------------------------------------------------------

    def reset(self, env_ids: Sequence[int] | None = None, seeds: Sequence[int | None] | None = None) -> None:
        """Queue resets (all envs when `env_ids` is None); results arrive via `recv` with `is_reset=True`."""
        ids = list(range(self.num_envs)) if env_ids is None else self._check_ids(env_ids, "reset")
        if seeds is None:
            seeds = [None] * len(ids)
        elif len(seeds) != len(ids):
            raise ValueError(f"reset got {len(seeds)} seeds for {len(ids)} envs; pass one seed (or None) per env")
        self._mark_busy(ids, "reset")
        self._backend.submit(ids, "reset", seeds)

    def send(self, env_ids: Sequence[int], actions: Sequence[str | dict[str, str]]) -> None:
        """Queue one action per env (a str; a multi-agent env's: a dict of agent name -> str); each env must have
        no command in flight."""
        ids = self._check_ids(env_ids, "send")
        if len(actions) != len(ids):
            raise ValueError(f"send got {len(actions)} actions for {len(ids)} env ids; pass exactly one action per env")
        for k, a in enumerate(actions):
            if isinstance(a, dict):
                check_actions(a, f"send: action {k} (env {ids[k]})")
            elif not isinstance(a, str):
                raise TypeError(
                    f"send: action {k} (env {ids[k]}) must be a str (a dict of str for a multi-agent env), got "
                    f"{type(a).__name__} {a!r:.60}"
                )
        self._mark_busy(ids, "send")
        self._backend.submit(ids, "step", actions)

    def recv(self, timeout: float | None = None, *, at_least: int | None = None) -> EnvResults:
        """The first `batch_size` results to finish (all in flight if fewer), in arrival order.

        With `at_least`, returns as soon as that many have finished, with every result ready by then (up to
        `batch_size`). With a `timeout`, returns what finished by then (possibly an empty batch); `timeout=0` looks
        once without waiting (the inline backend runs its queued commands then).
        """
        self._check_open()
        n = min(self.batch_size, self._in_flight)
        if n == 0:
            raise ValueError("recv() with no command in flight; call send() or reset() first")
        if at_least is not None and at_least < 1:
            raise ValueError(f"recv(at_least={at_least}): need at least 1")
        need = n if at_least is None else min(at_least, n)
        ready = self._ready
        deadline = None if timeout is None else time.monotonic() + timeout
        while len(ready) < need:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            self._backend.poll(ready, n - len(ready), wait)
            if deadline is not None and time.monotonic() >= deadline:
                break
        if len(ready) < n:
            self._backend.poll(ready, 0, 0.0)  # whatever else has finished by now comes along
        return self._take(list(islice(ready, n)))

    def step(self, env_ids: Sequence[int], actions: Sequence[str | dict[str, str]]) -> EnvResults:
        """Send, then wait for exactly these envs; rows are ordered as `env_ids`."""
        self.send(env_ids, actions)
        ids = [int(i) for i in env_ids]
        ready = self._ready
        while True:
            missing = [i for i in ids if i not in ready]
            if not missing:
                return self._take(ids)
            self._backend.poll_ids(ready, missing)

    def get_state(self, env_id: int) -> Any:
        """A snapshot of env `env_id` (not in flight) for `set_state` on any env of this pool."""
        (i,) = self._check_ids([env_id], "get_state")
        self._check_idle(i, "get_state")
        return self._backend.get_state(i)

    def set_state(self, env_id: int, state: Any) -> None:
        (i,) = self._check_ids([env_id], "set_state")
        self._check_idle(i, "set_state")
        self._backend.set_state(i, state)

    @property
    def num_faults(self) -> int:
        """Faults returned so far: results carrying `info["fault"]`, whether the pool or the env (e.g. a
        `RemoteEnv` whose server died) put it there."""
        return self._num_faults

    @property
    def num_in_flight(self) -> int:
        """Commands sent whose results have not been returned by `recv`/`step` yet."""
        return self._in_flight

    def close(self, timeout: float | None = None) -> None:
        """Stop workers and close envs, waiting at most about `timeout` seconds (default `CLOSE_TIMEOUT`) for
        the envs' `close()`; one that hangs is left behind and named in a `RuntimeWarning`. Idempotent."""
        if not self._closed:
            self._closed = True
            if self._finalizer.detach() is not None:
                self._backend.close() if timeout is None else self._backend.close(timeout)

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __len__(self) -> int:
        return self.num_envs

    def __repr__(self) -> str:
        return f"EnvPool(num_envs={self.num_envs}, batch_size={self.batch_size}, backend={self.backend!r})"

    # -- bookkeeping ----------------------------------------------------------------------------

    def _take(self, ids: list[int]) -> EnvResults:
        ready = self._ready
        results = [ready.pop(i) for i in ids]
        self._busy[ids] = False
        self._in_flight -= len(ids)
        batch = EnvResults.from_results(results)
        self._num_faults += sum("fault" in info for info in batch.infos)
        return batch

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("this EnvPool is closed; create a new one")

    def _check_ids(self, env_ids: Sequence[int], what: str) -> list[int]:
        self._check_open()
        ids = list(map(int, env_ids))
        if ids and (min(ids) < 0 or max(ids) >= self.num_envs):
            bad = next(i for i in ids if not 0 <= i < self.num_envs)
            raise ValueError(f"{what}: unknown env id {bad}; valid ids are 0..{self.num_envs - 1}")
        if len(set(ids)) != len(ids):
            raise ValueError(f"{what}: env ids repeat in {ids}; each env takes one command at a time")
        return ids

    def _check_idle(self, i: int, what: str) -> None:
        if self._busy[i]:
            raise ValueError(f"{what}: env {i} has a command in flight; recv() its result first")

    def _mark_busy(self, ids: list[int], what: str) -> None:
        busy = self._busy[ids]
        if busy.any():
            bad = [i for i, b in zip(ids, busy) if b]
            raise ValueError(f"{what}: envs {bad} already have a command in flight; recv() their results first")
        self._busy[ids] = True
        self._in_flight += len(ids)


def _default_processes(num_envs: int) -> int:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(num_envs, cpus))
