"""Sandbox worker: a pre-started interpreter that forks a fresh child per execution (stdlib only).

Started by `jgem.envs.tools.sandbox` as `python -I -B <this file> <config json>` with a scrubbed
environment. Once at start it isolates itself (new network and mount namespaces where the kernel
allows: read-only filesystem, private tmpfs on /tmp and /dev/shm with the interpreter's own dirs there
bound back read-only, a private /proc with hidepid) and reports what is in effect.
Per job it forks a child that drops to an unprivileged uid of its own, sets resource limits, runs
the code in a fresh temporary directory and exits; the worker enforces the wall timeout, truncates
output, kills every leftover process of that uid and removes the directory. Nothing the code does
survives into the next job.

Protocol on the config's fd_in (requests) and fd_out (replies): 4-byte big-endian length + JSON.
"""

import contextlib
import ctypes
import json
import os
import resource
import selectors
import shutil
import signal
import struct
import sys
import tempfile
import time
import traceback

CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
TMP_DIRS = ("/tmp", "/dev/shm")  # covered by a fresh tmpfs
MEMORY_POLL_S = 0.05  # how often the run's total memory is measured
PAGE = os.sysconf("SC_PAGE_SIZE")
PR_SET_NO_NEW_PRIVS, PR_SET_CHILD_SUBREAPER = 38, 36
MNT_DETACH = 2

_libc = ctypes.CDLL(None, use_errno=True)


def _call(fn, *args):
    if fn(*args) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))


def _isolate(cfg):
    """Isolate this worker once; returns a dict describing what is in effect."""
    iso = {
        "network": "host (not isolated)",
        "filesystem": "host",
        "uid": "same as host",
        "processes": "all visible in /proc (not isolated: a private /proc needs root)",
    }
    if cfg["isolate_network"]:
        try:
            _call(_libc.unshare, CLONE_NEWNET)
            iso["network"] = "none (private network namespace)"
        except OSError as e:
            iso["network"] = f"host (not isolated: unshare(CLONE_NEWNET) failed: {e.strerror})"
    try:
        _call(_libc.unshare, CLONE_NEWNS)
        _call(_libc.mount, b"none", b"/", None, MS_REC | MS_PRIVATE, None)
        # An interpreter or venv under /tmp or /dev/shm would vanish under the fresh tmpfs: keep a handle on
        # the host directory and bind those paths back (read-only) after every tmpfs mount.
        cfg["tmp_binds"] = _tmp_binds(cfg["expose"])
        opts = f"size={cfg['tmpfs_mb']}m,mode=1777".encode()
        for p in (b"/tmp", b"/dev/shm"):
            if os.path.isdir(p):
                _call(_libc.mount, b"tmpfs", p, b"tmpfs", 0, opts)
        _bind_back(cfg["tmp_binds"])
        if os.getuid() == 0:
            _expose([p for p in cfg["expose"] if not _in_tmp(os.path.realpath(p))])
            iso["processes"] = _hide_pids()
        with open("/proc/self/mountinfo") as f:
            points = [line.split()[4] for line in f]
        for p in points:  # read-only everywhere; device files (/dev/null) stay usable on a ro mount
            if p not in ("/tmp", "/dev/shm"):
                _libc.mount(b"none", p.encode(), None, MS_REMOUNT | MS_BIND | MS_RDONLY, None)
        iso["filesystem"] = f"read-only, fresh {cfg['tmpfs_mb']} MiB tmpfs on /tmp and /dev/shm per execution"
        cfg["fresh_tmp"] = True
    except OSError as e:
        iso["filesystem"] = f"host (not isolated: mount namespace failed: {e.strerror})"
    iso["uid"] = f"unprivileged uid {cfg['uid']}" if os.getuid() == 0 else f"host uid {os.getuid()} (not root)"
    _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)  # orphans of the code come back to us to reap
    return iso


def _hide_pids():
    """A private /proc where the unprivileged uid sees only its own processes (no other command lines)."""
    for opt in (b"hidepid=invisible", b"hidepid=2"):  # the first name needs Linux 5.8
        if _libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, opt) == 0:
            return f"only its own (private /proc, {opt.decode()})"
    e = ctypes.get_errno()
    return f"all visible in /proc (not isolated: mounting a private /proc failed: {os.strerror(e)})"


def _in_tmp(path):
    return any(path == d or path.startswith(d + "/") for d in TMP_DIRS)


def _tmp_binds(paths):
    """(fd of the host dir, path relative to it, path) for each of `paths` under /tmp or /dev/shm."""
    paths = sorted({os.path.realpath(p) for p in paths if os.path.isdir(p)})
    paths = [p for p in paths if _in_tmp(p) and not any(p != q and p.startswith(q + "/") for q in paths)]
    fds, binds = {}, []
    for p in paths:
        top = next(d for d in TMP_DIRS if p == d or p.startswith(d + "/"))
        if p == top:
            continue  # the whole /tmp cannot be exposed: that is what the tmpfs hides
        if top not in fds:
            fds[top] = os.open(top, os.O_PATH | os.O_DIRECTORY)
        binds.append((fds[top], os.path.relpath(p, top), p))
    return binds


def _bind_back(binds):
    """Bind each path of `_tmp_binds` from the host directory into the tmpfs now covering it, read-only."""
    for fd, rel, path in binds:
        os.makedirs(path, mode=0o755, exist_ok=True)
        _call(_libc.mount, f"/proc/self/fd/{fd}/{rel}".encode(), path.encode(), None, MS_BIND | MS_REC, None)
        _call(_libc.mount, b"none", path.encode(), None, MS_REMOUNT | MS_BIND | MS_RDONLY, None)


def _closed_ancestor(path):
    """The first directory on the way to `path` that other users cannot enter, or None."""
    parts = path.strip("/").split("/")
    for i in range(1, len(parts) + 1):
        d = "/" + "/".join(parts[:i])
        if not os.stat(d).st_mode & 0o001:
            return d
    return None


def _expose(paths):
    """Make `paths` (the interpreter's stdlib and site dirs) readable by the unprivileged uid.

    When a directory above them is closed (pyenv under /root, mode 700), cover that directory with an
    empty tmpfs and bind only `paths` back into it: the code sees the stdlib and nothing else there.
    """
    paths = sorted({os.path.realpath(p) for p in paths if os.path.isdir(p)})
    paths = [p for p in paths if not any(p != q and p.startswith(q + "/") for q in paths)]
    blocked = {}
    for p in paths:
        a = _closed_ancestor(p)
        if a is not None:
            blocked.setdefault(a, []).append(p)
    for n, (top, inner) in enumerate(blocked.items()):
        stages = []
        for i, p in enumerate(inner):
            stage = f"/tmp/.expose-{n}-{i}"
            os.mkdir(stage)
            _call(_libc.mount, p.encode(), stage.encode(), None, MS_BIND | MS_REC, None)
            stages.append(stage)
        _call(_libc.mount, b"tmpfs", top.encode(), b"tmpfs", 0, b"size=1m,mode=755")
        for p, stage in zip(inner, stages):
            os.makedirs(p, mode=0o755, exist_ok=True)
            _call(_libc.mount, stage.encode(), p.encode(), None, MS_BIND | MS_REC, None)
            _call(_libc.umount2, stage.encode(), MNT_DETACH)
            os.rmdir(stage)


def _child(cfg, job, workdir, out_w, err_w, stdin_fd, cg_procs=None):
    """In the forked child: cgroup, limits, identity, fds, then run the code. Never returns."""
    try:
        os.setsid()
        if cg_procs is not None:  # into the run's memory cgroup before anything else: all it forks follows
            os.write(cg_procs, str(os.getpid()).encode())
        os.dup2(stdin_fd, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.closerange(3, 65536)  # the worker's protocol pipes must not be reachable from user code
        os.chdir(workdir)
        cpu = int(job["cpu_time"])
        mem = cfg["memory_mb"] << 20
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_FSIZE, (cfg["file_mb"] << 20, cfg["file_mb"] << 20))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        nproc = cfg["max_processes"]
        if os.getuid() == 0:
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
            os.setgroups([])
            os.setgid(cfg["uid"])
            os.setuid(cfg["uid"])
        else:  # RLIMIT_NPROC counts all of this uid's processes; allow ours on top of those running
            running = sum(1 for d in os.listdir("/proc") if d.isdigit())
            resource.setrlimit(resource.RLIMIT_NPROC, (running + nproc, running + nproc))
        _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        os.environ.clear()
        os.environ.update(cfg["env"])
        os.environ["HOME"] = workdir
        os.environ["TMPDIR"] = workdir
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        sys.argv = ["main.py"]
        sys.path[:0] = [workdir]
    except BaseException:
        traceback.print_exc()
        os._exit(70)
    code = 0
    try:
        exec(compile(job["code"], "main.py", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, int) and e.code is not None:
            print(e.code, file=sys.stderr)
    except BaseException as e:
        tb = e.__traceback__.tb_next if e.__traceback__ is not None else None  # drop this frame
        traceback.print_exception(type(e), e, tb)
        code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        pass
    os._exit(code)


def _kill_uid(uid):
    """SIGKILL every process of `uid` (kill(-1) from a helper of that uid spares only itself).

    Without root there is no uid of our own: kill our children instead (as a subreaper, the job's
    orphans are our children too).
    """
    if os.getuid() != 0:
        me = str(os.getpid())
        for d in os.listdir("/proc"):
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = f.read().rsplit(")", 1)[1].split()[1]
                if ppid == me:
                    os.kill(int(d), signal.SIGKILL)
            except (OSError, IndexError, ValueError):
                pass
        return
    pid = os.fork()
    if pid == 0:
        try:
            os.setgid(uid)
            os.setuid(uid)
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
        os._exit(0)
    os.waitpid(pid, 0)


def _job_pids(uid):
    """The job's processes: those of its uid (root), else the worker's descendants."""
    me, pids, parents = os.getpid(), [], {}
    for d in os.listdir("/proc"):
        if not d.isdigit() or d == str(me):
            continue
        try:
            if os.getuid() == 0:
                if os.stat(f"/proc/{d}").st_uid == uid:
                    pids.append(d)
                continue
            with open(f"/proc/{d}/stat") as f:
                parents[d] = f.read().rsplit(")", 1)[1].split()[1]
        except (OSError, IndexError):
            pass
    if os.getuid() != 0:
        frontier = {str(me)}
        while frontier:
            frontier = {d for d, ppid in parents.items() if ppid in frontier}
            pids.extend(frontier)
    return pids


def _run_memory(uid):
    """Bytes the job's processes use together: proportional set size (shared pages split between
    sharers, so forked interpreters are not counted many times), or resident size without smaps."""
    total = 0
    for d in _job_pids(uid):
        try:
            with open(f"/proc/{d}/smaps_rollup") as f:
                total += next(int(line.split()[1]) << 10 for line in f if line.startswith("Pss:"))
        except (OSError, StopIteration, ValueError):
            try:
                with open(f"/proc/{d}/statm") as f:
                    total += int(f.read().split()[1]) * PAGE
            except (OSError, IndexError, ValueError):
                pass
    return total


# --- memory cgroup per run -------------------------------------------------------------------------
CGROUP_PREFIX = "jgem-run-"


def _mounts(mountinfo):
    """(mount root, mount point, fstype, super options) of each mount in /proc/self/mountinfo's text."""
    out = []
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        a, b = left.split(), right.split()
        if len(a) >= 5 and len(b) >= 3:
            out.append((a[3], a[4], b[0], b[2].split(",")))
    return out


def _cgroup_parent(setting, proc_cgroup=None, mountinfo=None):
    """(version, directory) where the run's cgroups are made: `setting` if it is a path, else the
    worker's own memory cgroup (v2 where the unified hierarchy has the memory controller, else v1).
    `proc_cgroup` and `mountinfo`: the texts of /proc/self/cgroup and /proc/self/mountinfo (tests)."""
    if setting not in ("", "auto"):
        if os.path.exists(os.path.join(setting, "cgroup.subtree_control")):
            return 2, setting
        if os.path.exists(os.path.join(setting, "memory.limit_in_bytes")):
            return 1, setting
        raise OSError(f"{setting} is not a cgroup v2 directory or a cgroup v1 memory directory")
    if proc_cgroup is None:
        with open("/proc/self/cgroup") as f:
            proc_cgroup = f.read()
    if mountinfo is None:
        with open("/proc/self/mountinfo") as f:
            mountinfo = f.read()
    own = [line.split(":", 2) for line in proc_cgroup.splitlines() if line.count(":") >= 2]
    mounts = _mounts(mountinfo)
    for version, fstype, ctrl in ((2, "cgroup2", ""), (1, "cgroup", "memory")):
        path = next((p for _, c, p in own if (c == "" if version == 2 else ctrl in c.split(","))), None)
        mount = next((m for m in mounts if m[2] == fstype and (version == 2 or ctrl in m[3])), None)
        if path is None or mount is None:
            continue
        root, point = mount[0], mount[1]
        rel = os.path.relpath(path, root) if path == root or path.startswith(root.rstrip("/") + "/") else "."
        directory = os.path.normpath(os.path.join(point, rel))
        if version == 2:
            try:
                with open(os.path.join(point, "cgroup.controllers")) as f:
                    if "memory" not in f.read().split():
                        continue  # a hybrid host: memory is on the v1 hierarchy
            except OSError:
                continue
        return version, directory
    raise OSError("no cgroup memory controller mounted")


def _cg_write(cg, name, value):
    fd = os.open(name, os.O_WRONLY, dir_fd=cg["fd"])
    try:
        os.write(fd, str(value).encode())
    finally:
        os.close(fd)


def _cg_read(cg, name):
    fd = os.open(name, os.O_RDONLY, dir_fd=cg["fd"])
    try:
        return os.read(fd, 65536).decode()
    finally:
        os.close(fd)


def _cgroup_setup(cfg):
    """Once, before the mount namespace (the cgroup files go read-only in it): a handle on a memory
    cgroup under which a child per run can be made. Returns (handle or None, what limits the run)."""
    polled = f"polled: Pss of all the run's processes summed every {int(MEMORY_POLL_S * 1000)} ms"
    setting = cfg.get("cgroup", "auto")
    if setting in ("off", "0", "no", "none", "polled"):
        return None, f"{polled} (cgroup turned off by JGEM_SANDBOX_CGROUP={setting})"
    try:
        version, parent = _cgroup_parent(setting)
        cg = {"version": version, "parent": parent, "fd": os.open(parent, os.O_RDONLY | os.O_DIRECTORY), "n": 0}
        if version == 2:
            with open(os.path.join(parent, "cgroup.subtree_control")) as f:
                enabled = "memory" in f.read().split()
            if not enabled:
                try:
                    _cg_write(cg, "cgroup.subtree_control", "+memory")
                except OSError as e:
                    os.close(cg["fd"])
                    raise OSError(
                        f"cannot enable memory in {parent}/cgroup.subtree_control ({e.strerror}); "
                        "name an empty delegated cgroup with JGEM_SANDBOX_CGROUP=<dir>"
                    ) from None
        _cgroup_sweep(cg)
        probe = _cgroup_make(cg, cfg["memory_mb"] << 20)  # can we make one, with a limit? then drop it
        os.close(probe["procs"])
        _cgroup_remove(cg, probe)
    except OSError as e:
        return None, f"{polled} (no cgroup: {e.strerror or e})"
    return cg, f"cgroup v{version}: a memory cgroup per run under {parent}, removed after it"


def _cgroup_sweep(cg):
    """Remove run cgroups left by workers that died (their names carry the worker's pid)."""
    for name in os.listdir(cg["parent"]):
        if not name.startswith(CGROUP_PREFIX):
            continue
        try:
            pid = int(name[len(CGROUP_PREFIX) :].split("-")[0])
            if pid != os.getpid():
                os.kill(pid, 0)
                continue  # a live worker's
        except (ValueError, PermissionError):
            continue
        except ProcessLookupError:
            pass
        with contextlib.suppress(OSError):
            os.rmdir(name, dir_fd=cg["fd"])


def _cgroup_make(cg, limit):
    """A fresh child cgroup with `limit` bytes (swap off where the kernel accounts it) and an open
    fd on its cgroup.procs, which the forked child writes its pid to."""
    cg["n"] += 1
    name = f"{CGROUP_PREFIX}{os.getpid()}-{cg['n']}"
    os.mkdir(name, 0o755, dir_fd=cg["fd"])
    run = {"name": name}
    try:
        if cg["version"] == 2:
            _cg_write(cg, f"{name}/memory.max", limit)
            for extra, value in (("memory.swap.max", 0), ("memory.oom.group", 1)):
                with contextlib.suppress(FileNotFoundError):
                    _cg_write(cg, f"{name}/{extra}", value)
        else:
            _cg_write(cg, f"{name}/memory.limit_in_bytes", limit)
            with contextlib.suppress(FileNotFoundError):  # only with swap accounting (after the limit)
                _cg_write(cg, f"{name}/memory.memsw.limit_in_bytes", limit)
        run["procs"] = os.open(f"{name}/cgroup.procs", os.O_WRONLY, dir_fd=cg["fd"])
    except OSError:
        with contextlib.suppress(OSError):
            os.rmdir(name, dir_fd=cg["fd"])
        raise
    return run


def _cgroup_oom(cg, run):
    """Whether the kernel's OOM killer killed a process of the run (it hit the cgroup's limit)."""
    try:
        if cg["version"] == 2:
            text = _cg_read(cg, f"{run['name']}/memory.events")
        else:
            text = _cg_read(cg, f"{run['name']}/memory.oom_control")
    except OSError:
        return False
    fields = dict(line.split() for line in text.splitlines() if len(line.split()) == 2)
    if "oom_kill" in fields:
        return int(fields["oom_kill"]) > 0
    return fields.get("under_oom") == "1"  # old v1 kernels: no oom_kill count


def _cgroup_failcnt(cg, run):
    """v1 only: how often the run hit its limit (with reclaim that is not always an OOM)."""
    if cg["version"] != 1:
        return 0
    try:
        return int(_cg_read(cg, f"{run['name']}/memory.failcnt"))
    except (OSError, ValueError):
        return 0


def _cgroup_remove(cg, run):
    """rmdir the run's cgroup; its processes are all gone (killed and reaped) by now."""
    if cg["version"] == 2:
        with contextlib.suppress(OSError):
            _cg_write(cg, f"{run['name']}/cgroup.kill", 1)
    for _ in range(100):
        try:
            os.rmdir(run["name"], dir_fd=cg["fd"])
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.01)
    print(f"jgem sandbox: could not remove cgroup {cg['parent']}/{run['name']}", file=sys.stderr)


def _drain(fd, bufs, sel, limit):
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return
        if not chunk:
            sel.unregister(fd)
            return
        bufs[fd] += chunk
        if len(bufs[fd]) > limit:  # a flood: the caller stops the child
            return


def _cleanup(uid):
    """Kill and reap every process the job left behind (fork-bomb remnants, daemons).

    The worker is a child subreaper, so all of them are its descendants; when waitpid says there are
    no children left, nothing of the job survives. Kill again while some remain: a process may have
    forked while the previous kill swept the process table.
    """
    for _ in range(200):
        _kill_uid(uid)
        deadline = time.monotonic() + 0.05
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.001)


def _mount_tmp(cfg):
    """A fresh tmpfs over /tmp and /dev/shm for one job: files one execution leaves there are gone
    for the next (the mounts stack on the worker's private ones and are detached after the job)."""
    opts = f"size={cfg['tmpfs_mb']}m,mode=1777".encode()
    for p in (b"/tmp", b"/dev/shm"):
        if os.path.isdir(p):
            _call(_libc.mount, b"tmpfs", p, b"tmpfs", 0, opts)
    _bind_back(cfg.get("tmp_binds", ()))


def _umount_tmp():
    for p in (b"/dev/shm", b"/tmp"):
        if os.path.isdir(p):
            _libc.umount2(p, MNT_DETACH)


def run_job(cfg, job):
    if cfg.get("fresh_tmp"):
        _mount_tmp(cfg)
        try:
            return _run_job(cfg, job, "/tmp")
        finally:
            _umount_tmp()
    return _run_job(cfg, job, cfg["workroot"])


def _run_job(cfg, job, root):
    start = time.monotonic()
    workdir = tempfile.mkdtemp(prefix="run-", dir=root)
    if os.getuid() == 0:
        os.chown(workdir, cfg["uid"], cfg["uid"])
    os.chmod(workdir, 0o700)
    stdin_file = tempfile.TemporaryFile(dir=root)  # noqa: SIM115 (closed after the fork)
    stdin_file.write(job.get("stdin", "").encode())
    stdin_file.seek(0)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    cg, run_cg = cfg.get("cgroup_handle"), None
    if cg is not None:
        try:
            run_cg = _cgroup_make(cg, cfg["memory_mb"] << 20)
        except OSError as e:  # this run falls back to polling
            print(f"jgem sandbox: no cgroup for this run ({e}); memory is polled", file=sys.stderr)
    pid = os.fork()
    if pid == 0:
        _child(cfg, job, workdir, out_w, err_w, stdin_file.fileno(), run_cg and run_cg["procs"])
    if run_cg is not None:
        os.close(run_cg["procs"])
    os.close(out_w)
    os.close(err_w)
    stdin_file.close()
    limit = cfg["max_output"]
    bufs = {out_r: bytearray(), err_r: bytearray()}
    sel = selectors.DefaultSelector()
    for fd in bufs:
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    pidfd = os.pidfd_open(pid)  # readable when the child exits, even if its orphans hold the pipes
    sel.register(pidfd, selectors.EVENT_READ)
    deadline = start + job["timeout"]
    timed_out = over = exited = over_memory = False
    next_memory_check = start + MEMORY_POLL_S
    while not exited and len(sel.get_map()) > 1:
        now = time.monotonic()
        left = deadline - now
        if left <= 0:
            timed_out = True
            break
        if now >= next_memory_check:
            next_memory_check = now + MEMORY_POLL_S
            if run_cg is not None:
                if _cgroup_oom(cg, run_cg):  # the kernel killed one of its processes: stop the rest too
                    over_memory = True
                    break
            elif _run_memory(cfg["uid"]) > cfg["memory_mb"] << 20:
                over_memory = True  # the run's processes together are over the limit
                break
        for key, _ in sel.select(min(left, MEMORY_POLL_S)):
            if key.fd == pidfd:
                exited = True
                continue
            _drain(key.fd, bufs, sel, limit)
        if sum(len(b) for b in bufs.values()) > limit:
            over = True  # no reason to let it run on: everything past the limit is dropped
            break
    if exited:  # collect what is still buffered in the pipes
        for fd in list(bufs):
            if fd in sel.get_map():
                _drain(fd, bufs, sel, limit)
    if timed_out or over or over_memory:
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)
        if over_memory:
            _kill_uid(cfg["uid"])  # processes that left the group too
    # Bounded: the child has exited or was just killed.
    _, status, usage = os.wait4(pid, 0)
    wall = time.monotonic() - start
    sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
    if run_cg is not None and not over_memory:
        # OOM-killed at the end, or (old v1 kernels without an oom_kill count) SIGKILLed at the limit
        over_memory = _cgroup_oom(cg, run_cg) or (sig == signal.SIGKILL and _cgroup_failcnt(cg, run_cg) > 0)
    _cleanup(cfg["uid"])
    if run_cg is not None:
        _cgroup_remove(cg, run_cg)
    sel.close()
    for fd in (*bufs, pidfd):
        os.close(fd)
    shutil.rmtree(workdir, ignore_errors=True)
    stdout, stderr = bytes(bufs[out_r]), bytes(bufs[err_r])
    truncated = len(stdout) + len(stderr) > limit
    stdout = stdout[:limit]
    stderr = stderr[: max(0, limit - len(stdout))]
    rc = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -sig
    if timed_out:
        state = "timeout"
    elif over:
        state = "output_limit"
    elif over_memory:  # measured or OOM-killed: the run as a whole was over `memory_mb`
        state = "memory_limit"
    elif sig == signal.SIGXCPU or (sig == signal.SIGKILL and usage.ru_utime + usage.ru_stime >= job["cpu_time"]):
        state = "cpu_limit"
    elif b"MemoryError" in stderr[-2000:]:
        state = "memory_limit"
    elif sig:
        state = "killed"
    else:
        state = "ok" if rc == 0 else "error"
    return {
        "status": state,
        "exit_code": rc,
        "stdout": stdout.decode("utf-8", "replace"),
        "stderr": stderr.decode("utf-8", "replace"),
        "wall": wall,
        "truncated": truncated,
    }


def _read_exact(fd, n):
    buf = b""
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def _send_all(fd, obj):
    data = json.dumps(obj).encode()
    data = struct.pack(">I", len(data)) + data
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def main():
    cfg = json.loads(sys.argv[1])
    for name in cfg.get("preimport", []):
        __import__(name)
    cg, memory = _cgroup_setup(cfg)  # before _isolate: cgroupfs is read-only in the new mount namespace
    iso = _isolate(cfg)
    iso["memory"] = memory
    cfg["cgroup_handle"] = cg
    cfg["workroot"] = tempfile.mkdtemp(prefix="jgem-sandbox-")
    os.chmod(cfg["workroot"], 0o711)
    _send_all(cfg["fd_out"], {"ready": True, "isolation": iso, "pid": os.getpid()})
    jobs = cfg.get("jobs")  # None: serve until stdin closes; n: serve n jobs then exit (fresh mode)
    while jobs is None or jobs > 0:
        head = _read_exact(cfg["fd_in"], 4)
        if head is None:
            break
        body = _read_exact(cfg["fd_in"], struct.unpack(">I", head)[0])
        if body is None:
            break
        try:
            reply = run_job(cfg, json.loads(body))
        except Exception as e:  # a worker bug, not the code's fault: report it, keep serving
            reply = {
                "status": "sandbox_error",
                "exit_code": -1,
                "stdout": "",
                "stderr": repr(e),
                "wall": 0.0,
                "truncated": False,
            }
        _send_all(cfg["fd_out"], reply)
        if jobs is not None:
            jobs -= 1
    shutil.rmtree(cfg["workroot"], ignore_errors=True)


if __name__ == "__main__":
    main()
