"""Shell worker: persistent bash sessions and test runs in the sandbox (stdlib only; `jgem.envs.tools.shell`).

Started like `_sandbox_worker.py` (`python -I -B <this file> <config json>`, scrubbed environment) and isolated the
same way once at start (its `_isolate`: private network and mount namespaces, a private /proc with hidepid, the
interpreter's dirs exposed, everything read-only). Then it builds a small root for the sessions: a tmpfs holding
read-only binds of the system directories (/usr, /etc, /bin, ...), /proc, /dev and the interpreter's prefixes (the
test runner's Python), with the task source directories named in `hide` covered by empty tmpfs. Nothing else of the
host (/root, /home, /work, the host's /tmp) is in it.

A session (`open`) gets a fresh tmpfs at the task's working directory (`/app`), filled from the tar the host sends,
fresh tmpfs on /tmp and /dev/shm, a memory cgroup of its own, and one bash process chrooted into that root as the
worker's unprivileged uid with rlimits. Commands go to bash one at a time on a pipe (fd 3, NUL-terminated); bash
`eval`s each in its own process, so the working directory, variables and functions persist, and answers on fd 4 with
the exit status, its working directory and `export -p`. Output (stdout and stderr on one pipe) is cut to a head and a
tail around a marker. A command past its wall limit is killed with everything the session started, and bash is
restarted in the last working directory with the last exported variables. `grade` kills the session, mounts the tests
read-only at /tests, mounts a fresh /tmp, and runs pytest in a forked child (pytest is imported once per worker), in a
new memory cgroup, reporting each test's outcome. `close` unmounts everything; the worker then serves the next session.

Protocol on fd_in / fd_out: 4-byte big-endian length + JSON, as `_sandbox_worker.py`.
"""

import base64
import contextlib
import importlib.util
import io
import json
import os
import resource
import selectors
import signal
import struct
import sys
import tarfile
import time
import traceback

_spec = importlib.util.spec_from_file_location(
    "_jgem_sandbox_worker", os.path.join(os.path.dirname(os.path.abspath(__file__)), "_sandbox_worker.py")
)
sw = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sw)

ROOT = "/tmp/.jgem-root"  # the sessions' root, inside the worker's private /tmp
ROOT_DIRS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc", "opt", "var")
MAX_COMMAND = 60000  # bytes: a command fits in the pipe in one write
DRIVER = r"""
while IFS= read -r -d '' -u 3 __jgem_cmd; do
  eval "$__jgem_cmd" 3<&- 4>&-
  __jgem_rc=$?
  printf '%s\0%s\0' "$__jgem_rc" "$PWD" >&4
  export -p >&4
  printf '\0' >&4
done
"""
_libc = sw._libc


def _mount(src, target, fstype=None, flags=0, data=None):
    sw._call(
        _libc.mount,
        src.encode() if isinstance(src, str) else src,
        target.encode(),
        fstype.encode() if fstype else None,
        flags,
        data.encode() if data else None,
    )


def _umount(target):
    _libc.umount2(target.encode(), sw.MNT_DETACH)


def _under(path, top):
    return path == top or path.startswith(top.rstrip("/") + "/")


def _build_root(cfg):
    """The sessions' root: read-only binds of the system dirs, /proc, /dev and the interpreter's dirs."""
    os.makedirs(ROOT, exist_ok=True)
    _mount("tmpfs", ROOT, "tmpfs", 0, "size=1m,mode=755")
    bound = []
    for name in sorted(os.listdir("/")):
        src = "/" + name
        dst = ROOT + src
        if os.path.islink(src):
            if name in ROOT_DIRS:
                os.symlink(os.readlink(src), dst)
            continue
        if (name in ROOT_DIRS or name in ("proc", "dev")) and os.path.isdir(src):
            os.mkdir(dst, 0o755)
            _mount(src, dst, None, sw.MS_BIND | sw.MS_REC)
            if name in ROOT_DIRS:
                bound.append(src)
    for p in cfg["expose"]:
        p = os.path.realpath(p)
        if not os.path.isdir(p) or any(_under(p, b) for b in bound):
            continue
        os.makedirs(ROOT + p, mode=0o755, exist_ok=True)
        _mount(p, ROOT + p, None, sw.MS_BIND | sw.MS_REC)
        bound.append(p)
    for p in cfg.get("hide", ()):
        p = os.path.realpath(p)
        if os.path.isdir(ROOT + p) and any(_under(p, b) for b in bound):
            _mount("tmpfs", ROOT + p, "tmpfs", sw.MS_NOSUID | sw.MS_NODEV, "size=4k,mode=755")
    for d in ("tmp", "tests"):
        os.makedirs(ROOT + "/" + d, mode=0o755, exist_ok=True)
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4] for line in f]
    for p in points:  # read-only, all of it (device files stay usable on a read-only mount)
        if _under(p, ROOT) and p != ROOT:
            _libc.mount(b"none", p.encode(), None, sw.MS_REMOUNT | sw.MS_BIND | sw.MS_RDONLY, None)


class _Output:
    """The first `head` and the last `tail` bytes of a stream, and how many bytes came in all."""

    def __init__(self, limit):
        self.head_max = limit // 2
        self.tail_max = limit - self.head_max
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk):
        self.total += len(chunk)
        room = self.head_max - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > 2 * self.tail_max:
                del self.tail[: len(self.tail) - self.tail_max]

    def text(self):
        tail = bytes(self.tail[-self.tail_max :]) if self.tail_max else b""
        omitted = self.total - len(self.head) - len(tail)
        if omitted <= 0:
            return (bytes(self.head) + tail).decode("utf-8", "replace"), 0
        mark = f"\n[... {omitted} bytes of output omitted ...]\n".encode()
        return (bytes(self.head) + mark + tail).decode("utf-8", "replace"), omitted


def _read_into(fd, sink):
    """Read what `fd` has now into `sink` (a callable); False at end of file."""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return True
        except OSError:
            return False
        if not chunk:
            return False
        sink(chunk)


def _oom_kills(cg, run):
    """How many processes the kernel's OOM killer killed in the run's cgroup so far."""
    if cg is None or run is None:
        return 0
    try:
        name = "memory.events" if cg["version"] == 2 else "memory.oom_control"
        text = sw._cg_read(cg, f"{run['name']}/{name}")
    except OSError:
        return 0
    fields = dict(line.split() for line in text.splitlines() if len(line.split()) == 2)
    try:
        return int(fields.get("oom_kill", 0))
    except ValueError:
        return 0


def _limits(cfg, cpu):
    mem = cfg["memory_mb"] << 20
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    resource.setrlimit(resource.RLIMIT_FSIZE, (cfg["file_mb"] << 20, cfg["file_mb"] << 20))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    nproc = cfg["max_processes"]
    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    os.setgroups([])
    os.setgid(cfg["uid"])
    os.setuid(cfg["uid"])
    _libc.prctl(sw.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)


class Session:
    def __init__(self, cfg, cg, workdir, env):
        self.cfg = cfg
        self.cg = cg
        self.workdir = workdir
        self.env = env
        self.cwd = workdir
        self.exports = ""
        self.pid = None
        self.pidfd = None
        self.fds = {}
        self.run_cg = None
        self.mounts = []
        self.restarts = 0
        self.started = False  # whether bash ever ran (then processes of the session may be left to kill)

    # -- set up and tear down ---------------------------------------------------------------------------
    def open(self, files):
        uid = self.cfg["uid"]
        app = ROOT + self.workdir
        if not os.path.isdir(app):
            os.makedirs(app, mode=0o755)  # the root tmpfs is read-only to the session's uid, not to the worker
        _mount("tmpfs", app, "tmpfs", sw.MS_NOSUID | sw.MS_NODEV, f"size={self.cfg['workdir_mb']}m,mode=755")
        self.mounts.append(app)
        self._fresh_tmp()
        _unpack(files, app, uid)
        if self.cg is not None:
            try:
                self.run_cg = sw._cgroup_make(self.cg, self.cfg["memory_mb"] << 20)
                os.close(self.run_cg.pop("procs"))
                if self.cg["version"] == 2:  # the kernel kills the largest process, not the whole session
                    with contextlib.suppress(OSError):
                        sw._cg_write(self.cg, f"{self.run_cg['name']}/memory.oom.group", 0)
            except OSError as e:
                print(f"jgem shell: no cgroup for this session ({e}); memory is polled", file=sys.stderr)
                self.run_cg = None
        # bash starts at the first command: a session graded untouched never pays for it

    def _fresh_tmp(self):
        for d, size in (("/tmp", self.cfg["tmpfs_mb"]), ("/dev/shm", self.cfg["tmpfs_mb"])):
            target = ROOT + d
            if target in self.mounts:
                _umount(target)
                self.mounts.remove(target)
            if os.path.isdir(target):
                _mount("tmpfs", target, "tmpfs", sw.MS_NOSUID | sw.MS_NODEV, f"size={size}m,mode=1777")
                self.mounts.append(target)
                for p in self.cfg["expose"]:  # an interpreter under /tmp: bound back (read-only) over the tmpfs
                    p = os.path.realpath(p)
                    if _under(p, d) and p != d and os.path.isdir(p):
                        os.makedirs(ROOT + p, mode=0o755, exist_ok=True)
                        _mount(p, ROOT + p, None, sw.MS_BIND | sw.MS_REC)
                        _libc.mount(b"none", (ROOT + p).encode(), None, sw.MS_REMOUNT | sw.MS_BIND | sw.MS_RDONLY, None)

    def _procs_fd(self):
        if self.run_cg is None:
            return None
        return os.open(f"{self.run_cg['name']}/cgroup.procs", os.O_WRONLY, dir_fd=self.cg["fd"])

    def _start(self):
        """Fork bash: chrooted, unprivileged, limited, in the last working directory."""
        self._close_fds()
        out_r, out_w = os.pipe()
        cmd_r, cmd_w = os.pipe()
        st_r, st_w = os.pipe()
        procs = self._procs_fd()
        env = dict(self.env)
        pid = os.fork()
        if pid == 0:
            try:
                os.setsid()
                if procs is not None:
                    os.write(procs, str(os.getpid()).encode())
                null = os.open("/dev/null", os.O_RDONLY)
                os.dup2(null, 0)
                os.dup2(out_w, 1)
                os.dup2(out_w, 2)
                os.dup2(cmd_r, 3)
                os.dup2(st_w, 4)
                os.closerange(5, 65536)
                os.chroot(ROOT)
                try:
                    os.chdir(self.cwd)
                except OSError:
                    os.chdir(self.workdir)
                _limits(self.cfg, int(self.cfg["cpu_time"]))
                signal.signal(signal.SIGPIPE, signal.SIG_DFL)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                os.execve("/bin/bash", ["bash", "--noprofile", "--norc", "-c", DRIVER], env)
            except BaseException:
                traceback.print_exc()
            os._exit(70)
        if procs is not None:
            os.close(procs)
        for fd in (out_w, cmd_r, st_w):
            os.close(fd)
        for fd in (out_r, st_r):
            os.set_blocking(fd, False)
        self.pid = pid
        self.started = True
        self.pidfd = os.pidfd_open(pid)
        self.fds = {"out": out_r, "cmd": cmd_w, "st": st_r}
        if self.exports or self.cwd != self.workdir:  # a restart: the last exported variables come back
            self._command(self.exports, 10.0, hidden=True)

    def _close_fds(self):
        for fd in [*self.fds.values(), self.pidfd]:
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.fds, self.pidfd = {}, None

    def kill(self):
        """Every process of the session, killed and reaped."""
        if self.pid is not None or self.started:
            sw._cleanup(self.cfg["uid"])
        self._close_fds()
        self.pid = None
        self.started = False

    def close(self):
        self.kill()
        for target in reversed(self.mounts):
            _umount(target)
        self.mounts = []
        if self.run_cg is not None:
            sw._cgroup_remove(self.cg, self.run_cg)
            self.run_cg = None

    # -- commands -----------------------------------------------------------------------------------------
    def run(self, command, timeout):
        start = time.monotonic()
        raw = command.replace("\0", "").encode("utf-8", "replace")
        if len(raw) > MAX_COMMAND:
            note = f"not run: the command is {len(raw)} bytes, over the limit of {MAX_COMMAND}"
            return self._reply("", None, start, note=note)
        if self.pid is None:
            self._start()
        oom_before = _oom_kills(self.cg, self.run_cg)
        res = self._command(command, timeout)
        note = res.get("note")
        if _oom_kills(self.cg, self.run_cg) > oom_before:
            mem = f"a process was killed: the session's memory limit of {self.cfg['memory_mb']} MiB was reached"
            note = f"{note}; {mem}" if note else mem
        res["note"] = note
        res["wall"] = time.monotonic() - start
        res["cwd"] = self.cwd
        return res

    def _reply(self, output, rc, start, note=None, omitted=0, timed_out=False, restarted=False):
        return {
            "output": output,
            "exit_code": rc,
            "timed_out": timed_out,
            "omitted": omitted,
            "restarted": restarted,
            "note": note,
            "wall": time.monotonic() - start,
            "cwd": self.cwd,
        }

    def _command(self, command, timeout, hidden=False):
        start = time.monotonic()
        out = _Output(self.cfg["max_output"])
        status = bytearray()
        with contextlib.suppress(OSError):  # bash is gone: seen below
            os.write(self.fds["cmd"], command.replace("\0", "").encode("utf-8", "replace") + b"\0")
        sel = selectors.DefaultSelector()
        sel.register(self.fds["out"], selectors.EVENT_READ, "out")
        sel.register(self.fds["st"], selectors.EVENT_READ, "st")
        sel.register(self.pidfd, selectors.EVENT_READ, "exit")
        deadline = start + timeout
        next_memory_check = start + sw.MEMORY_POLL_S
        done = exited = timed_out = over_memory = False
        try:
            while not done and not exited:
                now = time.monotonic()
                if now >= deadline:
                    timed_out = True
                    break
                if self.run_cg is None and now >= next_memory_check:
                    next_memory_check = now + sw.MEMORY_POLL_S
                    if sw._run_memory(self.cfg["uid"]) > self.cfg["memory_mb"] << 20:
                        over_memory = True
                        break
                for key, _ in sel.select(min(deadline - now, sw.MEMORY_POLL_S)):
                    if key.data == "out":
                        if not _read_into(key.fd, out.add):
                            sel.unregister(key.fd)
                    elif key.data == "st":
                        if not _read_into(key.fd, status.extend):
                            sel.unregister(key.fd)
                        if status.count(0) >= 3:
                            done = True
                    else:
                        exited = True
        finally:
            sel.close()
        _read_into(self.fds["out"], out.add)  # what the command wrote before it reported
        if exited and status.count(0) < 3:
            _read_into(self.fds["st"], status.extend)
            done = status.count(0) >= 3
        if done:
            rc_text, cwd, exports = bytes(status).split(b"\0")[:3]
            self.cwd = cwd.decode("utf-8", "replace") or self.cwd
            self.exports = exports.decode("utf-8", "replace")
            try:
                rc = int(rc_text)
            except ValueError:
                rc = None
            text, omitted = out.text()
            return self._reply(text, rc, start, omitted=omitted)
        # timed out, over memory, or bash exited: kill whatever is left and start bash again
        rc = None
        if exited:
            _, wstatus = os.waitpid(self.pid, 0)
            rc = os.WEXITSTATUS(wstatus) if os.WIFEXITED(wstatus) else -os.WTERMSIG(wstatus)
        self.kill()
        text, omitted = out.text()
        if hidden:
            return self._reply(text, rc, start, omitted=omitted)
        if timed_out:
            note = f"killed: the command ran past its wall-clock limit of {timeout:g} s"
        elif over_memory:
            note = f"killed: the session's processes went over the memory limit of {self.cfg['memory_mb']} MiB"
        else:
            note = f"the shell exited (status {rc})"
        restarted = True
        self.restarts += 1
        try:
            self._start()
            note += (
                f"; a new shell was started in {self.cwd} with the exported variables; shell variables, functions "
                "and background processes are gone"
            )
        except Exception as e:  # noqa: BLE001 - reported, the host ends the episode
            note += f"; the shell could not be restarted ({e})"
            self.pid = None
        return self._reply(text, rc, start, note=note, omitted=omitted, timed_out=timed_out, restarted=restarted)

    def put(self, path, data, mode):
        target = os.path.normpath(path)
        if not (_under(target, self.workdir) or _under(target, "/tmp")):
            raise ValueError(f"put: {path} is outside {self.workdir} and /tmp")
        host = ROOT + target
        os.makedirs(os.path.dirname(host), exist_ok=True)
        with open(host, "wb") as f:
            f.write(data)
        os.chmod(host, mode)
        os.chown(host, self.cfg["uid"], self.cfg["uid"])

    # -- grading ------------------------------------------------------------------------------------------
    def grade(self, tests, timeout, args):
        """Kill the session, then run pytest on the tests (mounted read-only at /tests) in a fresh child."""
        start = time.monotonic()
        self.kill()
        try:
            _import_pytest()
        except ImportError as e:
            return {"status": "sandbox_error", "error": f"pytest cannot be imported: {e}", "results": {}}
        self._fresh_tmp()
        tests_dir = ROOT + "/tests"
        _mount("tmpfs", tests_dir, "tmpfs", sw.MS_NOSUID | sw.MS_NODEV, "size=64m,mode=755")
        self.mounts.append(tests_dir)
        _unpack(tests, tests_dir, None)
        _libc.mount(b"none", tests_dir.encode(), None, sw.MS_REMOUNT | sw.MS_BIND | sw.MS_RDONLY, None)
        run_cg = None
        if self.cg is not None:
            with contextlib.suppress(OSError):
                run_cg = sw._cgroup_make(self.cg, self.cfg["memory_mb"] << 20)
        out_r, out_w = os.pipe()
        res_r, res_w = os.pipe()
        env = {**self.env, "TEST_DIR": "/tests", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
        pid = os.fork()
        if pid == 0:
            _grade_child(self.cfg, self.workdir, env, args, out_w, res_w, run_cg and run_cg["procs"])
        if run_cg is not None:
            os.close(run_cg.pop("procs"))
        os.close(out_w)
        os.close(res_w)
        out = _Output(self.cfg["max_output"])
        lines = bytearray()
        sel = selectors.DefaultSelector()
        for fd, sink in ((out_r, out.add), (res_r, lines.extend)):
            os.set_blocking(fd, False)
            sel.register(fd, selectors.EVENT_READ, sink)
        pidfd = os.pidfd_open(pid)
        sel.register(pidfd, selectors.EVENT_READ, None)
        deadline = start + timeout
        timed_out = exited = False
        while not exited:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            for key, _ in sel.select(left):
                if key.data is None:
                    exited = True
                elif not _read_into(key.fd, key.data):
                    sel.unregister(key.fd)
        _read_into(out_r, out.add)
        _read_into(res_r, lines.extend)
        sel.close()
        sw._cleanup(self.cfg["uid"])  # reaps the child too
        oom = run_cg is not None and _oom_kills(self.cg, run_cg) > 0
        if run_cg is not None:
            sw._cgroup_remove(self.cg, run_cg)
        for fd in (out_r, res_r, pidfd):
            os.close(fd)
        _umount(tests_dir)
        self.mounts.remove(tests_dir)
        collected, errors, phases, exit_code = [], [], {}, None
        for line in bytes(lines).splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if "collected" in rec:
                collected = rec["collected"]
            elif "collect_error" in rec:
                errors.append(rec["collect_error"])
            elif "exit" in rec:
                exit_code = rec["exit"]
            elif "id" in rec:
                phases.setdefault(rec["id"], []).append(rec["outcome"])
        results = {}
        for name in collected:
            got = phases.get(name, [])
            if "failed" in got:
                results[name] = "failed"
            elif "skipped" in got:
                results[name] = "skipped"
            elif "passed" in got:
                results[name] = "passed"
            else:
                results[name] = "not run"
        for name in errors:
            results[name or "<collection>"] = "error"
        text, _ = out.text()
        status = "timeout" if timed_out else "memory_limit" if oom else "ok" if exit_code is not None else "error"
        return {
            "status": status,
            "results": results,
            "exit_code": exit_code,
            "output": text,
            "wall": time.monotonic() - start,
        }


def _import_pytest():
    """pytest and its default plugins, once per worker: every grading child inherits them (a child's pytest.main
    then costs a third of a cold one)."""
    import importlib

    import pytest  # noqa: F401
    from _pytest.config import default_plugins

    for name in default_plugins:
        with contextlib.suppress(ImportError):
            importlib.import_module(f"_pytest.{name}")


def _grade_child(cfg, workdir, env, args, out_w, res_w, cg_procs):
    try:
        os.setsid()
        if cg_procs is not None:
            os.write(cg_procs, str(os.getpid()).encode())
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_w, 1)
        os.dup2(out_w, 2)
        os.dup2(res_w, 3)
        os.closerange(4, 65536)
        os.chroot(ROOT)
        os.chdir(workdir)
        _limits(cfg, int(cfg["cpu_time"]))
        os.environ.clear()
        os.environ.update(env)
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        sys.dont_write_bytecode = True
        sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", closefd=False), line_buffering=True)
        sys.stderr = sys.stdout
        import pytest

        class Report:
            def _send(self, rec):
                os.write(3, (json.dumps(rec) + "\n").encode())

            def pytest_collection_finish(self, session):
                self._send({"collected": [item.nodeid for item in session.items]})

            def pytest_collectreport(self, report):
                if report.failed:
                    self._send({"collect_error": report.nodeid})

            def pytest_runtest_logreport(self, report):
                self._send({"id": report.nodeid, "outcome": report.outcome})

        reporter = Report()
        code = pytest.main(["/tests", *args], plugins=[reporter])
        sys.stdout.flush()
        reporter._send({"exit": int(code)})
    except BaseException:
        traceback.print_exc()
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        os._exit(70)
    os._exit(0)


def _unpack(data, target, uid):
    """Extract the base64 tar `data` into `target`, owned by `uid` (None: root, readable by all)."""
    raw = base64.b64decode(data) if data else b""
    if raw:
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r:*") as tar:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(target, filter="data")
            else:  # Python < 3.11.4: refuse what the data filter would
                members = [
                    m
                    for m in tar.getmembers()
                    if (m.isfile() or m.isdir() or m.issym())
                    and not os.path.isabs(m.name)
                    and ".." not in m.name.split("/")
                ]
                tar.extractall(target, members=members)
    for base, dirs, files in os.walk(target):
        for name in [*dirs, *files]:
            p = os.path.join(base, name)
            if uid is not None:
                os.lchown(p, uid, uid)
            elif not os.path.islink(p):
                os.chmod(p, os.stat(p).st_mode | 0o444 | (0o111 if os.path.isdir(p) else 0))
    if uid is not None:
        os.chown(target, uid, uid)


def main():
    cfg = json.loads(sys.argv[1])
    cg, memory = sw._cgroup_setup(cfg)
    iso = sw._isolate(cfg)
    iso["memory"] = memory.replace("per run", "per session and per test run")
    ok = iso["filesystem"].startswith("read-only")
    if ok:
        iso["filesystem"] = (
            "read-only system; fresh tmpfs on the task directory, /tmp and /dev/shm per session (and /tmp per test run)"
        )
    if ok:
        try:
            _build_root(cfg)
            iso["root"] = "system directories and the interpreter, read-only; the task directory and /tmp writable"
        except OSError as e:
            ok = False
            iso["root"] = f"none: building the session root failed ({e.strerror or e})"
    sw._send_all(cfg["fd_out"], {"ready": ok, "isolation": iso, "pid": os.getpid()})
    if not ok:
        return
    session = None
    while True:
        head = sw._read_exact(cfg["fd_in"], 4)
        if head is None:
            break
        body = sw._read_exact(cfg["fd_in"], struct.unpack(">I", head)[0])
        if body is None:
            break
        req = json.loads(body)
        op = req.get("op")
        try:
            if op == "open":
                if session is not None:
                    session.close()
                session = Session(cfg, cg, req["workdir"], req["env"])
                session.open(req.get("files"))
                reply = {"ok": True}
            elif session is None:
                reply = {"error": f"no open session for {op!r}"}
            elif op == "run":
                reply = session.run(req["command"], req["timeout"])
            elif op == "put":
                session.put(req["path"], base64.b64decode(req["data"]), req.get("mode", 0o644))
                reply = {"ok": True}
            elif op == "grade":
                reply = session.grade(req.get("tests"), req["timeout"], req.get("args", []))
            elif op == "close":
                session.close()
                session = None
                reply = {"ok": True}
            else:
                reply = {"error": f"unknown op {op!r}"}
        except Exception as e:
            reply = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()[-2000:]}
        sw._send_all(cfg["fd_out"], reply)
    if session is not None:
        session.close()


if __name__ == "__main__":
    main()
