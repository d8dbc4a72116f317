"""Process sandbox for untrusted Python: a pool of pre-started workers, one fresh child per execution.

Isolation (see `_sandbox_worker.py` for how, and `Sandbox.isolation` for what is in effect here):
a private network namespace (no network), a read-only filesystem with private tmpfs /tmp, a private
/proc showing only the code's own processes, an unprivileged uid per worker, RLIMIT_CPU/AS/FSIZE/NPROC,
`memory_mb` over all of a run's processes together (a fresh memory cgroup per run where one can be made,
else polled; `Sandbox.isolation["memory"]` says which), a wall timeout honoured as configured, a
temporary working directory removed afterwards, a scrubbed environment and truncated output.
The environment variable JGEM_SANDBOX_CGROUP picks the cgroup parent: unset or `auto` (the worker's own
memory cgroup, v2 or v1), `off` (always poll), or a directory (a delegated, empty cgroup v2 directory).
Where the kernel or the user does not allow a layer, start-up says so (a warning) and the rest holds.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import logging
import math
import os
import queue
import random
import select
import struct
import subprocess
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

WORKER = Path(__file__).with_name("_sandbox_worker.py")
UID_LOCK_DIR = Path("/tmp/jgem-sandbox-uids")
UID_RANGE = (200_000, 1_200_000)
_START_TIMEOUT = 30.0
_GRACE = 5.0  # extra seconds the host waits past the wall timeout before it declares the worker dead

DEFAULT_ENV = (
    ("PATH", "/usr/local/bin:/usr/bin:/bin"),
    ("LANG", "C.UTF-8"),
    ("PYTHONIOENCODING", "utf-8"),
    ("PYTHONDONTWRITEBYTECODE", "1"),
    ("OMP_NUM_THREADS", "1"),
    ("OPENBLAS_NUM_THREADS", "1"),
    ("MKL_NUM_THREADS", "1"),
)


@dataclass(frozen=True)
class SandboxConfig:
    """Limits of one execution. `cpu_time` defaults to the wall timeout rounded up."""

    timeout: float = 5.0
    cpu_time: float | None = None
    memory_mb: int = 512
    file_mb: int = 16
    max_processes: int = 32
    max_output: int = 8192
    tmpfs_mb: int = 64
    isolate_network: bool = True
    preimport: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = DEFAULT_ENV

    def __post_init__(self) -> None:
        if self.timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {self.timeout}")
        if self.memory_mb < 64:
            raise ValueError(f"memory_mb {self.memory_mb} is too small for a Python interpreter; use >= 64")
        if self.max_processes < 1 or self.max_output < 1:
            raise ValueError("max_processes and max_output must be >= 1")


@dataclass(frozen=True)
class ExecResult:
    """One execution. `status`: ok, error, timeout, cpu_limit, memory_limit, output_limit, killed,
    sandbox_error."""

    status: str
    exit_code: int
    stdout: str
    stderr: str
    wall: float
    truncated: bool = False
    limits: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def message(self) -> str:
        """stdout, then stderr, then a line that says which limit stopped the program (if one did)."""
        text = self.stdout
        if self.stderr:
            text = f"{text}\n{self.stderr}" if text else self.stderr
        note = {
            "timeout": f"killed: wall-clock timeout of {self.limits.get('timeout')} s exceeded",
            "cpu_limit": f"killed: CPU time limit of {self.limits.get('cpu_time')} s exceeded",
            "memory_limit": f"stopped: memory limit of {self.limits.get('memory_mb')} MiB exceeded",
            "output_limit": f"stopped: output over {self.limits.get('max_output')} bytes (truncated)",
            "killed": f"killed by signal {-self.exit_code}",
            "sandbox_error": "the sandbox failed (not the program's fault)",
        }.get(self.status)
        if self.truncated and self.status != "output_limit":
            note = (note + "; " if note else "") + f"output truncated to {self.limits.get('max_output')} bytes"
        return f"{text}\n[sandbox: {note}]" if note else text


def _reserve_uid() -> tuple[int, int]:
    """A uid no other sandbox on this machine uses, held by an flock for the worker's lifetime."""
    UID_LOCK_DIR.mkdir(mode=0o700, exist_ok=True)
    while True:
        uid = random.randrange(*UID_RANGE)
        fd = os.open(UID_LOCK_DIR / str(uid), os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return uid, fd
        except BlockingIOError:
            os.close(fd)


def _kill_uid(uid: int) -> None:
    """Last resort when a worker died: kill whatever still runs under its uid."""
    if os.getuid() == 0:
        code = f"import os,signal\nos.setgid({uid});os.setuid({uid});os.kill(-1,signal.SIGKILL)"
        subprocess.run([sys.executable, "-I", "-c", code], timeout=10, check=False, capture_output=True)


class _SandboxWorker:
    def __init__(self, cfg: SandboxConfig, jobs: int | None) -> None:
        self.uid, self._lock_fd = _reserve_uid()
        req_r, self._req_w = os.pipe()
        self._rep_r, rep_w = os.pipe()
        wcfg = {
            "uid": self.uid,
            "memory_mb": cfg.memory_mb,
            "file_mb": cfg.file_mb,
            "max_processes": cfg.max_processes,
            "max_output": cfg.max_output,
            "tmpfs_mb": cfg.tmpfs_mb,
            "isolate_network": cfg.isolate_network,
            "preimport": list(cfg.preimport),
            "env": dict(cfg.env),
            "fd_in": req_r,
            "fd_out": rep_w,
            "jobs": jobs,
            # where the run's memory cgroups go: auto (the worker's own cgroup), off (polled), or a directory
            "cgroup": os.environ.get("JGEM_SANDBOX_CGROUP", "auto"),
            # what sandboxed code must be able to import from (stdlib, site-packages)
            "expose": sorted({sys.prefix, sys.base_prefix, sys.exec_prefix, *filter(os.path.isdir, sys.path)}),
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-B", str(WORKER), json.dumps(wcfg)],
            env=dict(cfg.env),  # the worker itself never sees the host's environment
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            pass_fds=(req_r, rep_w),
            start_new_session=True,
            cwd="/",
        )
        os.close(req_r)
        os.close(rep_w)
        hello = self._recv(_START_TIMEOUT)
        if hello is None or not hello.get("ready"):
            self.close()
            raise RuntimeError("the sandbox worker did not start; run with logging at DEBUG and check stderr")
        self.isolation: dict[str, str] = hello["isolation"]

    def _recv(self, timeout: float) -> dict | None:
        deadline = time.monotonic() + timeout
        buf = b""
        need = 4
        size = None
        while len(buf) < need:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._rep_r], [], [], left)[0]:
                return None
            chunk = os.read(self._rep_r, 1 << 20)
            if not chunk:
                return None
            buf += chunk
            if size is None and len(buf) >= 4:
                size = struct.unpack(">I", buf[:4])[0]
                need = 4 + size
        return json.loads(buf[4:need])

    def run(self, job: dict[str, Any]) -> dict | None:
        data = json.dumps(job).encode()
        try:
            os.write(self._req_w, struct.pack(">I", len(data)))
            view = memoryview(data)
            while view:
                view = view[os.write(self._req_w, view) :]
        except OSError:
            return None
        return self._recv(job["timeout"] + _GRACE)

    def close(self, kill: bool = False) -> None:
        for fd in (self._req_w, self._rep_r):
            with contextlib.suppress(OSError):
                os.close(fd)
        if kill or self.proc.poll() is None:
            try:
                self.proc.wait(timeout=0 if kill else 2)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                _kill_uid(self.uid)
        # Unlinking while locked can race with a new reservation of the same uid; with uids drawn at
        # random from a million, that needs two draws of one number at the same instant.
        with contextlib.suppress(OSError):
            os.unlink(UID_LOCK_DIR / str(self.uid))
        os.close(self._lock_fd)


_ANNOUNCED = False


def _announce(isolation: dict[str, str]) -> None:
    global _ANNOUNCED
    if _ANNOUNCED:
        return
    _ANNOUNCED = True
    line = "; ".join(f"{k}: {v}" for k, v in isolation.items())
    logger.info("jgem sandbox isolation: %s", line)
    if any("not isolated" in v or "not root" in v for v in isolation.values()):
        warnings.warn(f"jgem sandbox runs with reduced isolation: {line}", RuntimeWarning, stacklevel=3)


class Sandbox:
    """Runs Python code in isolated processes. Thread-safe; `workers` executions run concurrently.

    mode="pool": pre-started workers fork a fresh child per execution (fast).
    mode="fresh": a new interpreter per execution (slow; the benchmark's baseline).
    """

    def __init__(self, config: SandboxConfig | None = None, workers: int = 1, mode: str = "pool") -> None:
        if mode not in ("pool", "fresh"):
            raise ValueError(f"mode must be 'pool' or 'fresh', got {mode!r}")
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.config = config or SandboxConfig()
        self.mode = mode
        self.workers = workers
        self._pid = os.getpid()  # workers belong to the process that started them (see `local`)
        self._idle: queue.Queue[_SandboxWorker] = queue.Queue()
        self._closed = False
        self._slots = threading.Semaphore(workers)
        if mode == "pool":
            for _ in range(workers):
                self._idle.put(_SandboxWorker(self.config, jobs=None))
            self.isolation = self._idle.queue[0].isolation
        else:
            probe = _SandboxWorker(self.config, jobs=0)
            self.isolation = probe.isolation
            probe.close()
        _announce(self.isolation)

    def run(self, code: str, stdin: str = "", timeout: float | None = None) -> ExecResult:
        """Execute `code` as a script with `stdin`; `timeout` overrides the configured wall timeout."""
        if self._closed:
            raise RuntimeError("this Sandbox is closed; create a new one")
        if self._pid != os.getpid():
            raise RuntimeError("this Sandbox was started by another process (before a fork); use local(sandbox)")
        cfg = self.config if timeout is None else replace(self.config, timeout=timeout)
        cpu = cfg.cpu_time if cfg.cpu_time is not None else math.ceil(cfg.timeout)
        job = {"code": code, "stdin": stdin, "timeout": cfg.timeout, "cpu_time": max(1, math.ceil(cpu))}
        limits = {
            "timeout": cfg.timeout,
            "cpu_time": job["cpu_time"],
            "memory_mb": cfg.memory_mb,
            "max_output": cfg.max_output,
        }
        with self._slots:
            if self.mode == "fresh":
                worker = _SandboxWorker(self.config, jobs=1)
                reply = worker.run(job)
                worker.close(kill=reply is None)
            else:
                worker = self._idle.get()
                reply = worker.run(job)
                if reply is None:  # the worker died or hung: replace it
                    worker.close(kill=True)
                    worker = _SandboxWorker(self.config, jobs=None)
                self._idle.put(worker)
        if reply is None:
            return ExecResult("sandbox_error", -1, "", "sandbox worker died", cfg.timeout, limits=limits)
        return ExecResult(limits=limits, **reply)

    def close(self) -> None:
        """Stop all workers. Idempotent."""
        self._closed = True
        if self._pid != os.getpid():  # a forked copy: the workers are the parent's to stop
            return
        while True:
            try:
                self._idle.get_nowait().close()
            except queue.Empty:
                return

    def __enter__(self) -> Sandbox:
        return self

    def __deepcopy__(self, memo: dict) -> Sandbox:
        # A pool of processes is a shared service: env clones use the same one.
        return self

    def __reduce__(self) -> tuple:
        # Pickled into another process (a process-backed env pool): that process's shared sandbox.
        return (shared_sandbox, (self.config, self.workers))

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


_SHARED: dict[tuple[SandboxConfig, int], Sandbox] = {}
_SHARED_LOCK = threading.Lock()


def shared_sandbox(config: SandboxConfig | None = None, workers: int = 2) -> Sandbox:
    """One Sandbox per (config, workers) in this process, shared by every env and tool that asks."""
    key = (config or SandboxConfig(), workers)
    with _SHARED_LOCK:
        sb = _SHARED.get(key)
        if sb is None or sb._closed or sb._pid != os.getpid():
            sb = _SHARED[key] = Sandbox(key[0], workers=workers)
            if len(_SHARED) == 1:
                atexit.register(_close_shared)
        return sb


def local(sandbox: Sandbox) -> Sandbox:
    """`sandbox` in the process that started it; in a forked child, that child's shared equivalent."""
    return sandbox if sandbox._pid == os.getpid() else shared_sandbox(sandbox.config, sandbox.workers)


def _close_shared() -> None:
    with _SHARED_LOCK:
        for sb in _SHARED.values():
            sb.close()
        _SHARED.clear()
