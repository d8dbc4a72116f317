"""EnvPool's process backend: worker processes, each hosting several envs, talking over pipes.

Workers start with forkserver (never plain fork: the parent may run JAX threads) and die with the
parent: PR_SET_PDEATHSIG on Linux, a parent-pid watchdog thread, and EOF on their pipe. A worker that
dies or hangs past `step_timeout` is killed and restarted; every env it hosted reports the fault
(envs with a command in flight at once, idle envs at their next step).
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing as mp
import os
import pickle
import signal
import sys
import threading
import time
import weakref
from collections.abc import Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

from jgem.core import EnvFault, JgemError
from jgem.envs.pool_commands import (
    EnvFactory,
    Result,
    close_quietly,
    describe,
    exception_fault,
    fault_result,
    run_command,
)

# A worker sends what it has when a command batch ends or this long after its last message, so a
# slow env does not hold back finished ones and the parent can tell progress from a hang.
FLUSH_INTERVAL = 0.002
START_TIMEOUT = 120.0


def _die_with_parent(parent_pid: int) -> None:
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    owner = parent_pid

    def watch() -> None:
        while True:
            time.sleep(0.5)
            try:
                os.kill(owner, 0)
            except ProcessLookupError:
                os._exit(1)
            except PermissionError:
                pass

    threading.Thread(target=watch, name="jgem-parent-watch", daemon=True).start()


def worker_main(conn: Connection, env_ids: list[int], factory: EnvFactory, owner_pid: int, running: Any) -> None:
    """Host `env_ids`; run commands from `conn` in order until told to close or the parent goes away.

    `running` is shared memory [start time, env id or -1] of the command in progress, so the parent
    can time out exactly the env that hangs.
    """
    _die_with_parent(owner_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it closes us
    try:
        envs: dict[int, Any] = {i: factory() for i in env_ids}
    except Exception as e:
        conn.send(("init_error", describe(e)))
        return
    conn.send(("ready", os.getpid()))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            break
        op = msg[0]
        if op in ("step", "reset"):
            _run_batch(conn, envs, factory, op, msg[1], running)
        elif op == "get_state":
            try:
                conn.send(("state", msg[1], envs[msg[1]].get_state(), None))
            except Exception as e:
                conn.send(("state", msg[1], None, describe(e)))
        elif op == "set_state":
            try:
                envs[msg[1]].set_state(msg[2])
                conn.send(("state", msg[1], None, None))
            except Exception as e:
                conn.send(("state", msg[1], None, describe(e)))
        elif op == "close":
            break
    for env in envs.values():
        close_quietly(env)


def _run_batch(conn: Connection, envs: dict[int, Any], factory: EnvFactory, op: str, cmds: list, running: Any) -> None:
    out: list[Result] = []
    last = time.monotonic()
    for i, arg in cmds:
        running[0] = time.monotonic()  # time before id: the parent reads id first, so never a stale start
        running[1] = i
        env = envs[i]
        try:
            if env is None:
                env = envs[i] = factory()
            out.append(run_command(env, i, op, arg))
        except BaseException as e:  # SystemExit from one env must not take its neighbours' worker down
            close_quietly(env)
            envs[i] = None  # rebuilt by its next command
            out.append(exception_fault(i, e, op == "reset"))
        now = time.monotonic()
        if now - last > FLUSH_INTERVAL:
            _send_results(conn, out)
            out, last = [], now
    running[1] = -1
    if out:
        _send_results(conn, out)


def _send_results(conn: Connection, out: list[Result]) -> None:
    try:
        conn.send(("results", out))
    except (pickle.PicklingError, TypeError, AttributeError):
        conn.send(("results", [_picklable(r) for r in out]))  # only the results that cannot travel are faults


def _picklable(r: Result) -> Result:
    try:
        pickle.dumps(r, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as e:
        reason = f"result could not be pickled ({type(e).__name__}: {e}); keep obs and infos picklable"
        return fault_result(r[0], "invalid_result", reason, r[6])
    return r


class _EnvWorker:
    def __init__(self, index: int, env_ids: list[int]) -> None:
        self.index = index
        self.env_ids = env_ids
        self.proc: Any = None
        self.conn: Connection | None = None
        self.outstanding: dict[int, str] = {}  # env id -> command kind
        self.running: Any = None  # shared [start time, env id or -1]
        self.ready = False


def _kill_all(procs: dict[int, Any]) -> None:
    for p in list(procs.values()):
        with contextlib.suppress(Exception):
            if p.is_alive():
                p.kill()
            p.join(timeout=1.0)


class ProcessBackend:
    """Runs envs in `num_workers` processes; env i lives in worker i % num_workers."""

    def __init__(self, factory: EnvFactory, num_envs: int, num_workers: int, step_timeout: float | None) -> None:
        method = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
        self.ctx = mp.get_context(method)
        if method == "forkserver":
            self.ctx.set_forkserver_preload(["jgem.envs.pool_workers"])
        self.factory = factory
        self.step_timeout = step_timeout
        num_workers = min(num_workers, num_envs)
        self.workers = [_EnvWorker(w, list(range(w, num_envs, num_workers))) for w in range(num_workers)]
        self.worker_of = [i % num_workers for i in range(num_envs)]
        self.lost: dict[int, str] = {}  # env id -> why its state was lost (worker restarted while it idled)
        self.inbox: dict[int, Result] = {}
        self.states: dict[int, tuple[Any, str | None]] = {}
        self.procs: dict[int, Any] = {}
        self._finalizer = weakref.finalize(self, _kill_all, self.procs)
        try:
            for w in self.workers:
                self._start(w)
            deadline = time.monotonic() + START_TIMEOUT
            while not all(w.ready for w in self.workers):
                if time.monotonic() > deadline:
                    raise JgemError(f"env workers did not start within {START_TIMEOUT}s")
                self._pump(deadline - time.monotonic())
        except BaseException:
            self.close()
            raise

    def _start(self, w: _EnvWorker) -> None:
        parent_conn, child_conn = self.ctx.Pipe()
        running = self.ctx.RawArray("d", [0.0, -1.0])
        proc = self.ctx.Process(
            target=worker_main,
            args=(child_conn, w.env_ids, self.factory, os.getpid(), running),
            name=f"jgem-pool-worker-{w.index}",
            daemon=True,
        )
        try:
            proc.start()
        except (pickle.PicklingError, AttributeError, TypeError) as e:
            raise ValueError(
                f"backend='process' could not send the env factory to a worker ({e}); the env callable and "
                "wrappers must be picklable: module-level classes or functions, or functools.partial of them"
            ) from e
        finally:
            child_conn.close()
        w.proc, w.conn, w.ready, w.running = proc, parent_conn, False, running
        w.outstanding = {}
        self.procs[w.index] = proc

    @property
    def pids(self) -> list[int]:
        """Worker process ids (for tests and monitoring)."""
        return [w.proc.pid for w in self.workers if w.proc is not None]

    # -- commands -------------------------------------------------------------------------------

    def submit(self, env_ids: Sequence[int], kind: str, args: Sequence[Any]) -> None:
        per_worker: dict[int, list] = {}
        worker_of, lost = self.worker_of, self.lost
        for i, a in zip(env_ids, args):
            if lost:
                if kind == "reset":
                    lost.pop(i, None)
                elif i in lost:
                    self.inbox[i] = fault_result(i, "worker_restart", lost.pop(i), False)
                    continue
            per_worker.setdefault(worker_of[i], []).append((i, a))
        for w_index, cmds in per_worker.items():
            w = self.workers[w_index]
            for i, _ in cmds:
                w.outstanding[i] = kind
            try:
                w.conn.send((kind, cmds))
            except (BrokenPipeError, OSError):
                self._restart(w, "worker_died", f"worker {w.index} pipe closed")

    def poll(self, ready: dict[int, Result], want: int, wait_s: float | None) -> None:
        if not self.inbox:
            self._pump(wait_s)
        ready.update(self.inbox)
        self.inbox.clear()

    def poll_ids(self, ready: dict[int, Result], env_ids: Sequence[int]) -> None:
        self.poll(ready, len(env_ids), None)

    def get_state(self, i: int) -> Any:
        self._check_lost(i)
        return self._request(i, ("get_state", i))

    def set_state(self, i: int, state: Any) -> None:
        self._request(i, ("set_state", i, state))
        self.lost.pop(i, None)

    def _check_lost(self, i: int) -> None:
        if i in self.lost:
            raise EnvFault(f"env {i} was lost ({self.lost[i]}); reset it before get_state")

    def _request(self, i: int, msg: tuple) -> Any:
        w = self.workers[self.worker_of[i]]
        w.conn.send(msg)
        proc = w.proc
        while i not in self.states:
            if w.proc is not proc:
                raise EnvFault(f"env {i}'s worker died while answering {msg[0]}; reset the env and retry")
            self._pump(None)
        value, err = self.states.pop(i)
        if err is not None:
            raise EnvFault(f"{msg[0]} of env {i} failed: {err}")
        return value

    # -- messages, deaths and timeouts ----------------------------------------------------------

    def _pump(self, wait_s: float | None) -> None:
        """Wait up to `wait_s` for worker messages and handle them; also detects deaths and hangs."""
        if self.step_timeout is not None:
            now = time.monotonic()
            for w in self.workers:
                if w.outstanding:
                    left = self.step_timeout
                    if w.running[1] >= 0:
                        left = w.running[0] + self.step_timeout - now
                    wait_s = left if wait_s is None else min(wait_s, left)
        by_obj: dict[Any, _EnvWorker] = {}
        for w in self.workers:
            by_obj[w.conn] = w
            by_obj[w.proc.sentinel] = w
        for obj in wait(list(by_obj), timeout=None if wait_s is None else max(0.0, wait_s)):
            w = by_obj[obj]
            if w.conn is obj or w.proc.sentinel is obj:  # skip if restarted while handling another object
                self._drain(w)
        if self.step_timeout is not None:
            for w in self.workers:
                culprit = int(w.running[1])
                if culprit >= 0 and w.outstanding and time.monotonic() - w.running[0] > self.step_timeout:
                    self._restart(
                        w,
                        "worker_restart",
                        f"worker {w.index} was restarted after env {culprit} ran past step_timeout",
                        culprit=culprit,
                    )

    def _drain(self, w: _EnvWorker) -> None:
        conn = w.conn
        try:
            while conn.poll():
                self._handle(w, conn.recv())
        except (EOFError, OSError):
            pass
        if not w.proc.is_alive():
            w.proc.join()
            self._restart(w, "worker_died", f"worker {w.index} (pid {w.proc.pid}) exited with code {w.proc.exitcode}")

    def _handle(self, w: _EnvWorker, msg: tuple) -> None:
        op = msg[0]
        if op == "results":
            inbox, outstanding = self.inbox, w.outstanding
            for res in msg[1]:
                outstanding.pop(res[0], None)
                inbox[res[0]] = res
        elif op == "state":
            self.states[msg[1]] = (msg[2], msg[3])
        elif op == "ready":
            w.ready = True
        elif op == "init_error":
            raise JgemError(f"worker {w.index} failed to build its envs: {msg[1]}")

    def _restart(self, w: _EnvWorker, kind: str, reason: str, culprit: int | None = None) -> None:
        if w.proc.is_alive():
            w.proc.kill()
        w.proc.join(timeout=5.0)
        w.conn.close()
        for i, cmd in w.outstanding.items():
            if i == culprit:
                k, r = "timeout", f"{cmd} ran longer than step_timeout={self.step_timeout}s"
            else:
                k, r = kind, reason
            self.inbox[i] = fault_result(i, k, r, cmd == "reset")
        for i in w.env_ids:
            if i not in w.outstanding:
                self.lost[i] = f"{reason}; this env's episode was lost"
        self._start(w)

    def close(self, timeout: float | None = None) -> None:
        """Ask workers to close their envs; kill those still running after `timeout` seconds."""
        for w in self.workers:
            if w.conn is not None and not w.conn.closed:
                with contextlib.suppress(Exception):
                    w.conn.send(("close",))
        deadline = time.monotonic() + (1.0 if timeout is None else min(timeout, 1.0))
        for w in self.workers:
            if w.proc is not None:
                w.proc.join(timeout=max(0.0, deadline - time.monotonic()))
                if w.proc.is_alive():
                    w.proc.kill()
                    w.proc.join(timeout=5.0)
            if w.conn is not None:
                w.conn.close()
        self.procs.clear()
        self._finalizer.detach()
