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
import collections
import contextlib
import importlib.util
import io
import json
import os
import resource
import selectors
import shutil
import signal
import stat
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
LOWER = "/tmp/.jgem-lower"  # the cached task trees (overlay lower layers), outside the sessions' root
UPPER = "/tmp/.jgem-upper"  # the session's tmpfs holding the overlay's upper and work dirs, outside the root
OVERLAY_OPTS = "redirect_dir=off,index=off,metacopy=off"  # the plain upper format `_pack_tree` reads (as docker's)
OPAQUE = "trusted.overlay.opaque"
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


def _read_exact(fd, n):
    """`n` bytes from `fd` (None at end of file), in linear time (a task's tar can be tens of MiB)."""
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = os.readv(fd, [view[got:]])
        if not k:
            return None
        got += k
    return bytes(buf)


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


def _probe_overlay():
    """None when an overlay with a tmpfs upper mounts here, else why not."""
    top = "/tmp/.jgem-probe"
    try:
        os.makedirs(top, exist_ok=True)
        _mount("tmpfs", top, "tmpfs", 0, "size=64k")
        try:
            for d in ("l", "u", "w", "m"):
                os.mkdir(f"{top}/{d}")
            _mount(
                "overlay", f"{top}/m", "overlay", 0, f"lowerdir={top}/l,upperdir={top}/u,workdir={top}/w,{OVERLAY_OPTS}"
            )
            _umount(f"{top}/m")
        finally:
            _umount(top)
        return None
    except OSError as e:
        return e.strerror or str(e)


class _Lowers:
    """The task trees unpacked once per worker (owned by its uid, never written: the overlays' lower layers), by the
    key of their tar, least recently used dropped first past `cap` bytes."""

    def __init__(self, cfg):
        self.cap = max(cfg["lower_mb"], cfg["workdir_mb"]) << 20
        self.uid = cfg["uid"]
        self.sizes = collections.OrderedDict()  # key -> bytes
        os.makedirs(LOWER, exist_ok=True)
        _mount("tmpfs", LOWER, "tmpfs", sw.MS_NOSUID | sw.MS_NODEV, f"size={self.cap >> 20}m,mode=700")

    def get(self, key, files):
        """(path of the tree, bytes written to make it now); (None, 0) when it is not here and `files` is None."""
        if not key or not all(c in "0123456789abcdef" for c in key):
            raise ValueError(f"bad lower key {key!r}")
        path = f"{LOWER}/{key}"
        if key in self.sizes:
            self.sizes.move_to_end(key)
            return path, 0
        if files is None:
            return None, 0
        raw = base64.b64decode(files) if files else b""
        self._room(len(raw))
        part = path + ".part"
        shutil.rmtree(part, ignore_errors=True)
        os.mkdir(part, 0o755)
        try:
            _unpack_raw(raw, part, self.uid)
        except OSError:
            shutil.rmtree(part, ignore_errors=True)
            raise
        size = _tree_bytes(part)
        os.rename(part, path)
        self.sizes[key] = size
        return path, size

    def _room(self, need):
        while self.sizes and sum(self.sizes.values()) + need > self.cap:
            key, _ = self.sizes.popitem(last=False)
            shutil.rmtree(f"{LOWER}/{key}", ignore_errors=True)


def _tree_bytes(top):
    total = 0
    for base, _, files in os.walk(top):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(base, name)).st_size
    return total


def _pack_tree(top):
    """What is under `top` (an overlay's upper: changed files, whiteouts, opaque directories), as (entries, data):
    each entry [path, kind, mode, mtime_ns, size or link target, opaque]; the regular files' bytes concatenated."""
    entries, chunks, inodes = [], [], {}
    skipped = 0

    def walk(rel):
        nonlocal skipped
        with os.scandir(os.path.join(top, rel) if rel else top) as it:
            items = sorted(it, key=lambda e: e.name)
        for e in items:
            path = f"{rel}/{e.name}" if rel else e.name
            st = e.stat(follow_symlinks=False)
            mode, perm = st.st_mode, stat.S_IMODE(st.st_mode)
            if stat.S_ISDIR(mode):
                try:
                    opaque = os.getxattr(e.path, OPAQUE, follow_symlinks=False) == b"y"
                except OSError:
                    opaque = False
                entries.append([path, "d", perm, st.st_mtime_ns, 0, opaque])
                walk(path)
            elif stat.S_ISREG(mode):
                if st.st_nlink > 1 and st.st_ino in inodes:
                    entries.append([path, "h", perm, st.st_mtime_ns, inodes[st.st_ino], False])
                    continue
                inodes[st.st_ino] = path
                with open(e.path, "rb") as f:
                    data = f.read()
                chunks.append(data)
                entries.append([path, "f", perm, st.st_mtime_ns, len(data), False])
            elif stat.S_ISLNK(mode):
                entries.append([path, "l", perm, st.st_mtime_ns, os.readlink(e.path), False])
            elif stat.S_ISCHR(mode) and st.st_rdev == 0:  # a whiteout: deleted from the lower layer
                entries.append([path, "w", 0, st.st_mtime_ns, 0, False])
            elif stat.S_ISFIFO(mode):
                entries.append([path, "p", perm, st.st_mtime_ns, 0, False])
            else:  # sockets (they need a live process)
                skipped += 1

    st = os.stat(top)
    walk("")
    return {"root": [stat.S_IMODE(st.st_mode), st.st_mtime_ns], "entries": entries, "skipped": skipped}, b"".join(
        chunks
    )


def _load_tree(top, tree, data, uid):
    """Recreate `_pack_tree`'s entries under `top` (an empty directory), owned by `uid`; the bytes written."""
    dirs, offset, made, regular = [], 0, {""}, set()
    for path, kind, perm, mtime, extra, opaque in tree["entries"]:
        parent, _, name = path.rpartition("/")
        if parent not in made or name in ("", ".", "..") or "/" in name or "\0" in path:
            raise ValueError(f"bad entry {path!r} in a forked tree")
        host = os.path.join(top, path)
        if kind == "d":
            os.mkdir(host, 0o700)
            if opaque:
                os.setxattr(host, OPAQUE, b"y")
            made.add(path)
            dirs.append((host, perm, mtime))
            os.lchown(host, uid, uid)
            continue
        if kind == "f":
            fd = os.open(host, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            try:
                view = memoryview(data)[offset : offset + extra]
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
            offset += extra
            regular.add(path)
        elif kind == "h":
            if extra not in regular:
                raise ValueError(f"bad hard link {path!r} in a forked tree")
            os.link(os.path.join(top, extra), host, follow_symlinks=False)
            continue
        elif kind == "l":
            os.symlink(extra, host)
        elif kind == "w":
            os.mknod(host, stat.S_IFCHR | 0o000, os.makedev(0, 0))
            continue
        elif kind == "p":
            os.mkfifo(host, 0o600)
        else:
            raise ValueError(f"bad entry kind {kind!r} in a forked tree")
        os.lchown(host, uid, uid)
        if kind != "l":
            os.chmod(host, perm)
        os.utime(host, ns=(mtime, mtime), follow_symlinks=False)
    for host, perm, mtime in reversed(dirs):  # after their contents, which touch them
        os.chmod(host, perm)
        os.utime(host, ns=(mtime, mtime))
    perm, mtime = tree["root"]
    os.chmod(top, perm)
    os.utime(top, ns=(mtime, mtime))
    return offset


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
    def __init__(self, cfg, cg, workdir, env, lowers=None):
        self.cfg = cfg
        self.cg = cg
        self.workdir = workdir
        self.env = env
        self.lowers = lowers  # None: the task directory is a full copy (no overlay here)
        self.upper = None  # the directory holding what the episode changed (the overlay's upper, or the copy)
        self.cwd = workdir
        self.exports = ""
        self.functions = ""  # a fork's functions, defined when bash starts
        self.written = 0  # bytes of the task's tree written to open the session (0 when the worker holds it)
        self.written_changes = 0  # bytes of a fork's changed files written
        self.pid = None
        self.pidfd = None
        self.fds = {}
        self.run_cg = None
        self.mounts = []
        self.restarts = 0
        self.started = False  # whether bash ever ran (then processes of the session may be left to kill)

    # -- set up and tear down ---------------------------------------------------------------------------
    def open(self, files, key=None, fork=None):
        """The task directory: an overlay of the cached tree of `key` (unpacked from `files` when not cached) under
        a fresh tmpfs upper, or a fresh tmpfs filled from `files` (no overlay); `fork`: a parent's state (its tree
        of changes, working directory, exports, functions). False when the tree is not cached and `files` is None."""
        uid = self.cfg["uid"]
        app = ROOT + self.workdir
        size = f"size={self.cfg['workdir_mb']}m,mode=755"
        lower = None
        if self.lowers is not None:
            lower, self.written = self.lowers.get(key, files)
            if lower is None:
                return False
        if not os.path.isdir(app):
            os.makedirs(app, mode=0o755)  # the root tmpfs is read-only to the session's uid, not to the worker
        if lower is not None:
            os.makedirs(UPPER, exist_ok=True)
            _mount("tmpfs", UPPER, "tmpfs", sw.MS_NOSUID | sw.MS_NODEV, size)
            self.mounts.append(UPPER)
            self.upper = UPPER + "/u"
            os.mkdir(self.upper, 0o755)
            os.mkdir(UPPER + "/w", 0o700)
            os.chown(self.upper, uid, uid)
        else:
            _mount("tmpfs", app, "tmpfs", sw.MS_NOSUID | sw.MS_NODEV, size)
            self.mounts.append(app)
            self.upper = app
        if fork is not None:
            if fork["tree"].get("overlay", False) != (lower is not None):
                raise ValueError("a fork between a copy-on-write session and a full copy")
            self.written_changes = _load_tree(self.upper, fork["tree"], base64.b64decode(fork["data"]), uid)
            os.chown(self.upper, uid, uid)
            self.cwd = fork["cwd"] or self.workdir
            self.exports = fork["exports"]
            self.functions = fork["functions"]
        elif lower is None:
            _unpack(files, app, uid)
            self.written = _tree_bytes(app)
        if lower is not None:
            opts = f"lowerdir={lower},upperdir={self.upper},workdir={UPPER}/w,{OVERLAY_OPTS}"
            _mount("overlay", app, "overlay", sw.MS_NOSUID | sw.MS_NODEV, opts)
            self.mounts.append(app)
        self._fresh_tmp()
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
        return True

    def export(self):
        """This session's state for a fork: the tree of what changed (the overlay's upper, or the whole copy), the
        working directory, the exported variables and the functions (asked of bash when it runs)."""
        functions = self.functions
        if self.pid is not None:
            res = self._command("declare -f", 10.0, hidden=True, limit=1 << 22)
            if res["exit_code"] == 0 and not res["omitted"]:
                functions = res["output"]
        tree, data = _pack_tree(self.upper)
        tree["overlay"] = self.upper != ROOT + self.workdir
        return {
            "tree": tree,
            "data": base64.b64encode(data).decode(),
            "bytes": len(data),
            "cwd": self.cwd,
            "exports": self.exports,
            "functions": functions,
        }

    def changed(self):
        """(files, bytes) in the upper layer: what the episode wrote (the whole copy without an overlay)."""
        n = total = 0
        for base, _, files in os.walk(self.upper):
            for name in files:
                st = os.lstat(os.path.join(base, name))
                if stat.S_ISREG(st.st_mode):
                    n += 1
                    total += st.st_size
        return {"files": n, "bytes": total}

    def _fresh_tmp(self):
        for d, size in (("/tmp", self.cfg["tmpfs_mb"]), ("/dev/shm", self.cfg["tmpfs_mb"])):
            target = ROOT + d
            if target in self.mounts:
                _umount(target)
                self.mounts.remove(target)
            if os.path.isdir(target):
                _mount("tmpfs", target, "tmpfs", sw.MS_NOSUID | sw.MS_NODEV, f"size={size}m,mode=1777")
                self.mounts.append(target)
                back = []
                for p in self.cfg["expose"]:  # an interpreter under /tmp: bound back (read-only) over the tmpfs
                    p = os.path.realpath(p)
                    if _under(p, d) and p != d and os.path.isdir(p):
                        os.makedirs(ROOT + p, mode=0o755, exist_ok=True)
                        _mount(p, ROOT + p, None, sw.MS_BIND | sw.MS_REC)
                        _libc.mount(b"none", (ROOT + p).encode(), None, sw.MS_REMOUNT | sw.MS_BIND | sw.MS_RDONLY, None)
                        back.append(p)
                for h in self.cfg.get("hide", ()):  # and what `hide` covers there, covered again (as `_build_root`)
                    h = os.path.realpath(h)
                    if any(_under(h, p) for p in back) and os.path.isdir(ROOT + h):
                        _mount("tmpfs", ROOT + h, "tmpfs", sw.MS_NOSUID | sw.MS_NODEV, "size=4k,mode=755")
                        _libc.mount(b"none", (ROOT + h).encode(), None, sw.MS_REMOUNT | sw.MS_BIND | sw.MS_RDONLY, None)

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
        if self.exports or self.cwd != self.workdir or self.functions:  # a restart or a fork: exports come back
            unset = "unset $(compgen -e) 2>/dev/null\n" if self.exports else ""  # unexported stay unexported
            restore = f"{unset}{self.exports}\n{self.functions}"
            self.functions = ""
            self._command(restore, 10.0, hidden=True)

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

    def _command(self, command, timeout, hidden=False, limit=None):
        start = time.monotonic()
        out = _Output(limit or self.cfg["max_output"])
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
    _unpack_raw(base64.b64decode(data) if data else b"", target, uid)


def _unpack_raw(raw, target, uid):
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
    lowers = None
    if ok:
        try:
            _build_root(cfg)
            iso["root"] = "system directories and the interpreter, read-only; the task directory and /tmp writable"
        except OSError as e:
            ok = False
            iso["root"] = f"none: building the session root failed ({e.strerror or e})"
    if ok:
        why = _probe_overlay() if cfg.get("copy_on_write", True) else "copy_on_write=False"
        if why is None:
            lowers = _Lowers(cfg)
            iso["task_directory"] = (
                "copy-on-write: an overlay of the task's tree (unpacked once per worker, read-only) under a fresh "
                f"{cfg['workdir_mb']} MiB tmpfs per session"
            )
        else:
            iso["task_directory"] = f"a full copy per session in a {cfg['workdir_mb']} MiB tmpfs (no overlay: {why})"
    sw._send_all(cfg["fd_out"], {"ready": ok, "isolation": iso, "pid": os.getpid()})
    if not ok:
        return
    session = None
    while True:
        head = _read_exact(cfg["fd_in"], 4)
        if head is None:
            break
        body = _read_exact(cfg["fd_in"], struct.unpack(">I", head)[0])
        if body is None:
            break
        req = json.loads(body)
        op = req.get("op")
        try:
            if op == "open":
                if session is not None:
                    session.close()
                session = Session(cfg, cg, req["workdir"], req["env"], lowers)
                try:
                    opened = session.open(req.get("files"), req.get("key"), req.get("fork"))
                except BaseException:
                    session.close()
                    session = None
                    raise
                if not opened:
                    session.close()
                    session = None
                cached = list(lowers.sizes) if lowers is not None else []
                reply = {"ok": opened, "need_files": not opened, "lowers": cached}
                if opened:
                    reply.update(written=session.written + session.written_changes, changes=session.written_changes)
            elif session is None:
                reply = {"error": f"no open session for {op!r}"}
            elif op == "run":
                reply = session.run(req["command"], req["timeout"])
            elif op == "put":
                session.put(req["path"], base64.b64decode(req["data"]), req.get("mode", 0o644))
                reply = {"ok": True}
            elif op == "export":
                reply = session.export()
            elif op == "changed":
                reply = session.changed()
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
