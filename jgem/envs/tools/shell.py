"""Persistent shell sessions in the sandbox, and test runs on what they leave (`_shell_worker.py` says how).

A `ShellSession` is one bash process that lives for an episode, isolated as the Python sandbox is (a private network
namespace, a read-only system, an unprivileged uid of its own, rlimits, a memory cgroup over all its processes) and
chrooted into a small root where the task's directory (`/app` by default) is a writable copy of the task's files and
/tmp is private. Commands run one at a time (`run`); each returns its output (stdout and stderr interleaved, cut to a
head and a tail around a marker), its exit status and whether it timed out. The working directory, variables and files
persist between commands. A command past its wall limit is killed with everything the session started, and the shell
is restarted in the same directory with the same exported variables (the result's `note` says so). `grade` ends the
session and runs pytest on a tests directory, mounted read-only at /tests, in a fresh process tree with a fresh /tmp:
only the task directory carries over from the episode.

Workers (one process each, holding one session at a time) are kept per configuration in this process and reused by
the next session, so a session costs a fork of bash, not an interpreter start; the first grading of a worker imports
pytest, which later gradings inherit. The task's files travel to a worker as a tar (`pack_dir`) once: the worker keeps
the tree unpacked, and each session on it is an overlay whose upper layer holds only what the episode changes (a
reset copies nothing; `fork` copies the upper layer).
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import hashlib
import io
import json
import os
import select
import subprocess
import sys
import tarfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jgem.envs.tools.sandbox import _GRACE, _START_TIMEOUT, UID_LOCK_DIR, _announce, _kill_uid, _reserve_uid

WORKER = Path(__file__).with_name("_shell_worker.py")

SHELL_ENV = (
    ("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
    ("LANG", "C.UTF-8"),
    ("HOME", "/tmp"),
    ("TERM", "dumb"),
    ("PAGER", "cat"),
    ("GIT_PAGER", "cat"),
    ("PYTHONDONTWRITEBYTECODE", "1"),
    ("PYTHONIOENCODING", "utf-8"),
    ("OMP_NUM_THREADS", "1"),
    ("OPENBLAS_NUM_THREADS", "1"),
    ("MKL_NUM_THREADS", "1"),
)


# pytest plugins a grading run does without (each costs start-up time; none changes a test's outcome)
PYTEST_OFF = tuple(
    arg
    for name in ("cacheprovider", "doctest", "junitxml", "pastebin", "stepwise", "setuponly", "setupplan")
    for arg in ("-p", f"no:{name}")
)


@dataclass(frozen=True)
class ShellConfig:
    """Limits of a session. `memory_mb` bounds all the session's processes together (and each one's address space);
    `workdir_mb` and `tmpfs_mb` the sizes of what an episode may write in the task directory (the overlay's upper
    layer) and in /tmp (both in memory, so they count towards `memory_mb` too); `cpu_time` each process's CPU
    seconds. `copy_on_write`: the task directory is an overlay over the task's tree, unpacked once per worker and
    kept (up to `lower_cache_mb` MiB of trees per worker, least recently used dropped first); False: a full copy per
    session (as before copy-on-write; the benchmark's peer)."""

    command_timeout: float = 30.0
    memory_mb: int = 1024
    file_mb: int = 64
    max_processes: int = 64
    max_output: int = 8192
    tmpfs_mb: int = 64
    workdir_mb: int = 256
    cpu_time: int = 600
    copy_on_write: bool = True
    lower_cache_mb: int = 1024
    isolate_network: bool = True
    env: tuple[tuple[str, str], ...] = SHELL_ENV

    def __post_init__(self) -> None:
        if self.command_timeout <= 0:
            raise ValueError(f"command_timeout must be > 0 seconds, got {self.command_timeout}")
        if self.memory_mb < 64:
            raise ValueError(f"memory_mb {self.memory_mb} is too small for a shell and its tools; use >= 64")
        if self.max_processes < 4 or self.max_output < 64:
            raise ValueError("max_processes must be >= 4 and max_output >= 64")


@dataclass(frozen=True)
class CommandResult:
    """One command. `exit_code` is None when the command did not finish (timeout, killed, not run); `omitted`: bytes
    of output cut out of the middle; `note`: what the sandbox did (killed the command, restarted the shell)."""

    output: str
    exit_code: int | None
    timed_out: bool = False
    omitted: int = 0
    restarted: bool = False
    note: str | None = None
    wall: float = 0.0
    cwd: str = ""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def message(self) -> str:
        """The output, then one bracketed line: the exit status, or what stopped the command."""
        text = self.output
        if text and not text.endswith("\n"):
            text += "\n"
        status = f"exit code {self.exit_code}" if self.exit_code is not None else "no exit code"
        line = f"[{status}; {self.note}]" if self.note else f"[{status}]"
        return f"{text}{line}"


@dataclass(frozen=True)
class TestReport:
    """A test run: each test's outcome (passed, failed, skipped, error, not run), pytest's output (cut), `status`
    (ok, timeout, memory_limit, error, sandbox_error)."""

    results: dict[str, str] = field(default_factory=dict)
    status: str = "ok"
    output: str = ""
    wall: float = 0.0
    error: str | None = None

    @property
    def total(self) -> int:
        return len(self.results)

    @property
    def passed(self) -> int:
        return sum(v == "passed" for v in self.results.values())

    @property
    def fraction(self) -> float:
        """Tests passed over tests collected (a test module that cannot be collected counts as one failed test);
        0 when there are none."""
        return self.passed / self.total if self.total else 0.0

    @property
    def success(self) -> bool:
        return self.total > 0 and self.passed == self.total

    def summary(self) -> str:
        if self.error:
            return f"the tests could not run: {self.error}"
        text = f"{self.passed}/{self.total} tests passed"
        failed = [k for k, v in self.results.items() if v != "passed"]
        if failed:
            text += "; not passed: " + ", ".join(f"{k.rsplit('::', 1)[-1]} ({self.results[k]})" for k in failed[:8])
            if len(failed) > 8:
                text += f", and {len(failed) - 8} more"
        if self.status not in ("ok", "error"):
            text += f" [{self.status}]"
        return text


class Packed(bytes):
    """A tar of a task's files (`pack_dir`), with `key`: the hash of its bytes, which names the tree a worker keeps
    unpacked (so a session on it sends and copies nothing when the worker has it)."""

    key: str

    def __new__(cls, data: bytes, key: str | None = None) -> Packed:
        obj = super().__new__(cls, data)
        obj.key = key or _hash(data)
        return obj

    def __reduce__(self) -> tuple:
        return (Packed, (bytes(self), self.key))


def _hash(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


_PACKED: dict[tuple, tuple[tuple, Packed]] = {}
_PACKED_LOCK = threading.Lock()
MAX_PACKED = 64  # task tars kept in this process


def pack_dir(path: str | os.PathLike | None, files: tuple[tuple[str, str], ...] | None = None) -> Packed:
    """The task directory's copy, as a tar: all of `path`, or the (source under `path`, destination) pairs of
    `files`. Kept per (directory, files) while no file under them changes (size, time, mode: a walk of `stat`s), so
    a reset neither reads nor hashes the tree again."""
    if path is None:
        return Packed(b"", "0")
    root = Path(path)
    pairs = files if files is not None else tuple((p.name, p.name) for p in sorted(root.iterdir()))
    cache_key = (os.path.realpath(root), pairs)
    sig = _signature(root, pairs)
    with _PACKED_LOCK:
        hit = _PACKED.get(cache_key)
        if hit is not None and hit[0] == sig:
            return hit[1]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for src, dst in pairs:
            tar.add(root / src, arcname=dst.strip("/") or ".", filter=_reset_owner)
    packed = Packed(buf.getvalue())
    with _PACKED_LOCK:
        _PACKED.pop(cache_key, None)
        _PACKED[cache_key] = (sig, packed)
        while len(_PACKED) > MAX_PACKED:
            _PACKED.pop(next(iter(_PACKED)))
    return packed


def _signature(root: Path, pairs: tuple[tuple[str, str], ...]) -> tuple:
    out = []
    for src, _ in pairs:
        top = str(root / src)
        for base, dirs, names in os.walk(top):
            dirs.sort()
            for name in [base, *(os.path.join(base, n) for n in sorted(names))]:
                try:
                    st = os.lstat(name)
                except OSError:
                    continue
                out.append((name, st.st_size, st.st_mtime_ns, st.st_mode, st.st_ino))
        if not os.path.isdir(top):
            with contextlib.suppress(OSError):
                st = os.lstat(top)
                out.append((top, st.st_size, st.st_mtime_ns, st.st_mode, st.st_ino))
    return tuple(out)


def _reset_owner(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


class ShellError(RuntimeError):
    """The sandbox itself failed (its worker died or refused), not the command."""


class _ShellWorker:
    def __init__(self, cfg: ShellConfig, hide: tuple[str, ...]) -> None:
        import site

        self.uid, self._lock_fd = _reserve_uid()
        req_r, self._req_w = os.pipe()
        self._rep_r, rep_w = os.pipe()
        expose = {sys.prefix, sys.base_prefix, sys.exec_prefix, *site.getsitepackages()}
        wcfg = {
            "uid": self.uid,
            "memory_mb": cfg.memory_mb,
            "file_mb": cfg.file_mb,
            "max_processes": cfg.max_processes,
            "max_output": cfg.max_output,
            "tmpfs_mb": cfg.tmpfs_mb,
            "workdir_mb": cfg.workdir_mb,
            "lower_mb": cfg.lower_cache_mb,
            "copy_on_write": cfg.copy_on_write,
            "cpu_time": cfg.cpu_time,
            "isolate_network": cfg.isolate_network,
            "env": dict(cfg.env),
            "fd_in": req_r,
            "fd_out": rep_w,
            "cgroup": os.environ.get("JGEM_SANDBOX_CGROUP", "auto"),
            "expose": sorted(p for p in expose if os.path.isdir(p)),
            "hide": list(hide),
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-B", str(WORKER), json.dumps(wcfg)],
            env=dict(cfg.env),
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
            why = "; ".join(f"{k}: {v}" for k, v in (hello or {}).get("isolation", {}).items())
            raise ShellError(
                "the shell sandbox did not start"
                + (f" ({why})" if why else "")
                + "; it needs root (mount namespaces, to give the session its own root and task directory)"
            )
        self.isolation: dict[str, str] = hello["isolation"]
        self.lowers: set[str] = set()  # the keys of the task trees this worker holds unpacked

    def _recv(self, timeout: float) -> dict | None:
        """One reply (4-byte big-endian length + JSON), read in linear time (a fork's tree can be MiBs); None when the
        worker is gone or `timeout` passed."""
        deadline = time.monotonic() + timeout
        buf = bytearray()
        need = 4
        while len(buf) < need:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._rep_r], [], [], left)[0]:
                return None
            chunk = os.read(self._rep_r, max(1 << 16, need - len(buf)))
            if not chunk:
                return None
            buf += chunk
            if need == 4 and len(buf) >= 4:
                need = 4 + int.from_bytes(buf[:4], "big")
        return json.loads(bytes(buf[4:need]))

    def call(self, req: dict[str, Any], timeout: float) -> dict[str, Any]:
        data = json.dumps(req).encode()
        try:
            os.write(self._req_w, len(data).to_bytes(4, "big"))
            view = memoryview(data)
            while view:
                view = view[os.write(self._req_w, view) :]
        except OSError as e:
            raise ShellError(f"the shell sandbox's worker is gone ({e})") from None
        reply = self._recv(timeout + _GRACE)
        if reply is None:
            raise ShellError("the shell sandbox's worker did not answer in time, or died")
        if "error" in reply:
            raise ShellError(f"the shell sandbox refused {req.get('op')!r}: {reply['error']}")
        return reply

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self, kill: bool = False) -> None:
        for fd in (self._req_w, self._rep_r):
            with contextlib.suppress(OSError):
                os.close(fd)
        if kill or self.proc.poll() is None:
            try:
                self.proc.wait(timeout=0 if kill else 5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        _kill_uid(self.uid)
        with contextlib.suppress(OSError):
            os.unlink(UID_LOCK_DIR / str(self.uid))
        with contextlib.suppress(OSError):
            os.close(self._lock_fd)


_IDLE: dict[tuple[ShellConfig, tuple[str, ...]], list[_ShellWorker]] = {}
_IDLE_LOCK = threading.Lock()
_IDLE_PID = os.getpid()
MAX_IDLE = 64  # idle workers kept per configuration


def _acquire(cfg: ShellConfig, hide: tuple[str, ...], key: str | None = None) -> _ShellWorker:
    """An idle worker of this configuration (one holding the tree of `key` first), else a new one."""
    global _IDLE_PID
    with _IDLE_LOCK:
        if os.getpid() != _IDLE_PID:  # a forked process: the idle workers are its parent's
            _IDLE.clear()
            _IDLE_PID = os.getpid()
        idle = _IDLE.get((cfg, hide), [])
        for i in range(len(idle) - 1, -1, -1):
            if key in idle[i].lowers and idle[i].alive():
                return idle.pop(i)
        while idle:
            worker = idle.pop()
            if worker.alive():
                return worker
            worker.close(kill=True)
    worker = _ShellWorker(cfg, hide)
    _announce(worker.isolation)
    return worker


def _release(cfg: ShellConfig, hide: tuple[str, ...], worker: _ShellWorker) -> None:
    with _IDLE_LOCK:
        idle = _IDLE.setdefault((cfg, hide), [])
        if os.getpid() == _IDLE_PID and worker.alive() and len(idle) < MAX_IDLE:
            idle.append(worker)
            return
    worker.close(kill=True)


def _close_idle() -> None:
    with _IDLE_LOCK:
        workers = [w for ws in _IDLE.values() for w in ws] if os.getpid() == _IDLE_PID else []
        _IDLE.clear()
    for w in workers:
        w.close()


atexit.register(_close_idle)


@dataclass(frozen=True)
class ShellSnapshot:
    """A session's state at one moment, for `ShellSession.from_snapshot` (any number of times, in any process): the
    task's tar (`files`, shared, not copied), the tree of what the episode changed (the overlay's upper layer only),
    the working directory, the exported variables and the shell functions. Not in it: running processes, unexported
    variables, shell options, aliases, open file descriptors, /tmp."""

    files: bytes
    key: str
    config: ShellConfig
    workdir: str
    env: tuple[tuple[str, str], ...]
    hide: tuple[str, ...]
    state: dict[str, Any] = field(repr=False)

    @property
    def cwd(self) -> str:
        return self.state["cwd"]

    @property
    def bytes_changed(self) -> int:
        """Bytes of the regular files in the snapshot's tree (what a session opened from it writes)."""
        return int(self.state["bytes"])


class ShellSession:
    """A bash session in the sandbox on a writable view of `files` (a tar from `pack_dir`) at `workdir`.

    The view is copy-on-write: the worker keeps the task's tree unpacked (once, read-only) and the session writes to
    an overlay's upper layer, a fresh tmpfs of `config.workdir_mb`. `fork()` gives a second session whose files,
    working directory and exported variables (and functions) equal this one's now; the two then diverge.

    `hide`: host directories the session must not see even where they lie under what it sees (the task sources,
    with their tests and solutions). Close it (or use it as a context manager) to give its worker back.
    """

    def __init__(
        self,
        files: bytes = b"",
        *,
        config: ShellConfig | None = None,
        workdir: str = "/app",
        env: dict[str, str] | None = None,
        hide: tuple[str, ...] = (),
        _fork: dict[str, Any] | None = None,
    ) -> None:
        if not workdir.startswith("/") or workdir.rstrip("/") in ("", "/tmp", "/tests", "/proc", "/dev"):
            raise ValueError(f"workdir must be an absolute path of its own, such as /app; got {workdir!r}")
        self.config = config or ShellConfig()
        self.workdir = os.path.normpath(workdir)
        self.hide = tuple(sorted(os.path.realpath(h) for h in hide))
        self.files = files
        self.key = getattr(files, "key", None) or (_hash(files) if files else "0")
        self.env = {**dict(self.config.env), **(env or {})}
        self._worker: _ShellWorker | None = None
        self.closed = True
        worker = self._worker = _acquire(self.config, self.hide, self.key)
        self.isolation = worker.isolation
        cow = worker.isolation.get("task_directory", "").startswith("copy-on-write")
        req: dict[str, Any] = {"op": "open", "workdir": self.workdir, "env": self.env, "key": self.key, "fork": _fork}
        if (cow and self.key not in worker.lowers) or (not cow and _fork is None):
            req["files"] = base64.b64encode(files).decode()
        try:
            reply = worker.call(req, 60.0)
            if reply.get("need_files"):  # the worker dropped the tree meanwhile
                reply = worker.call({**req, "files": base64.b64encode(files).decode()}, 60.0)
        except ShellError:
            self._drop()
            raise
        worker.lowers = set(reply.get("lowers", ()))
        self.written: int = int(reply.get("written") or 0)
        """bytes the opening wrote: the task's tree when this worker did not hold it (or without copy-on-write), and a
        fork's changed files (`written_changes`)"""
        self.written_changes: int = int(reply.get("changes") or 0)
        self.closed = False

    def snapshot(self) -> ShellSnapshot:
        """This session's state now (see `ShellSnapshot`); the session goes on."""
        state = self._call({"op": "export"}, 30.0)
        return ShellSnapshot(
            files=self.files,
            key=self.key,
            config=self.config,
            workdir=self.workdir,
            env=tuple(self.env.items()),
            hide=self.hide,
            state=state,
        )

    @classmethod
    def from_snapshot(cls, snapshot: ShellSnapshot) -> ShellSession:
        """A new session in the state of `snapshot` (on another worker): its changed files copied into a fresh upper
        layer over the same task tree, bash (started at the first command) in its directory with its exports."""
        files = snapshot.files
        if getattr(files, "key", None) != snapshot.key:
            files = Packed(bytes(files), snapshot.key)
        return cls(
            files,
            config=snapshot.config,
            workdir=snapshot.workdir,
            env=dict(snapshot.env),
            hide=snapshot.hide,
            _fork=snapshot.state,
        )

    def fork(self) -> ShellSession:
        """A second session whose files, working directory, exported variables and functions equal this one's now;
        from then on each sees only its own writes. Copies only what this episode changed. Running processes,
        unexported variables, shell options and open file descriptors are not carried (nor /tmp)."""
        return ShellSession.from_snapshot(self.snapshot())

    def changed(self) -> dict[str, int]:
        """{"files", "bytes"}: the regular files in the session's upper layer (what the episode has written, with
        copy-on-write; the whole tree without)."""
        return self._call({"op": "changed"}, 30.0)

    def _call(self, req: dict[str, Any], timeout: float) -> dict[str, Any]:
        try:
            return self._live().call(req, timeout)
        except ShellError:
            self._drop()
            raise

    def _live(self) -> _ShellWorker:
        if self._worker is None:
            raise ShellError("this shell session is closed")
        return self._worker

    def _drop(self) -> None:
        if self._worker is not None:
            self._worker.close(kill=True)
            self._worker = None

    def run(self, command: str, timeout: float | None = None) -> CommandResult:
        """Run `command` (any bash text) in the session; `timeout` overrides the configured wall limit."""
        limit = self.config.command_timeout if timeout is None else timeout
        worker = self._live()
        try:
            reply = worker.call({"op": "run", "command": command, "timeout": limit}, limit + 15.0)
        except ShellError:
            self._drop()
            raise
        return CommandResult(**reply)

    def put_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        """Write a file into the session (under its directory or /tmp), owned by the session's user."""
        raw = data.encode() if isinstance(data, str) else data
        req = {"op": "put", "path": path, "data": base64.b64encode(raw).decode(), "mode": mode}
        try:
            self._live().call(req, 10.0)
        except ShellError:
            self._drop()
            raise

    def grade(self, tests: bytes, timeout: float = 60.0, pytest_args: tuple[str, ...] = ()) -> TestReport:
        """End the session and run pytest on `tests` (a tar from `pack_dir`, mounted read-only at /tests, with
        $TEST_DIR=/tests), in a fresh process tree with a fresh /tmp, from the task directory; then close."""
        args = ["-q", "-rfE", "--rootdir=/tests", "--color=no", "-o", "addopts=", "--continue-on-collection-errors"]
        args += [*PYTEST_OFF, *pytest_args]
        req = {"op": "grade", "tests": base64.b64encode(tests).decode(), "timeout": timeout, "args": args}
        try:
            reply = self._live().call(req, timeout + 30.0)
        except ShellError as e:
            self._drop()
            return TestReport(status="sandbox_error", error=str(e))
        finally:
            self.close()
        return TestReport(
            results=reply.get("results", {}),
            status=reply.get("status", "error"),
            output=reply.get("output", ""),
            wall=reply.get("wall", 0.0),
            error=reply.get("error"),
        )

    def close(self) -> None:
        """End the session (every process killed, its directory dropped) and give the worker back. Idempotent."""
        worker, self._worker = self._worker, None
        self.closed = True
        if worker is None:
            return
        try:
            worker.call({"op": "close"}, 10.0)
        except ShellError:
            worker.close(kill=True)
            return
        _release(self.config, self.hide, worker)

    def __deepcopy__(self, memo: dict) -> ShellSession:
        raise NotImplementedError("a shell session is a live process and cannot be deep-copied; use fork()")

    def __enter__(self) -> ShellSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()
