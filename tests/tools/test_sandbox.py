"""The sandbox against hostile code: each attack is contained, reported, and leaves no trace."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from jgem.envs.tools.sandbox import Sandbox, SandboxConfig

pytestmark = pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="the sandbox needs Linux pidfds")


def _uid_processes(uid: int) -> list[int]:
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if os.stat(f"/proc/{d}").st_uid == uid:
                    pids.append(int(d))
            except FileNotFoundError:
                pass
    return pids


def test_runs_code_with_stdin_and_reports_isolation(sandbox):
    res = sandbox.run("import sys\nprint('got', sys.stdin.read().strip())", stdin="42\n")
    assert res.ok and res.stdout == "got 42\n"
    assert set(sandbox.isolation) == {"network", "filesystem", "uid", "processes", "memory"}
    assert sandbox.isolation["memory"].startswith(("cgroup v2", "cgroup v1", "polled"))


def test_error_is_reported_with_traceback(sandbox):
    res = sandbox.run("x = 1\n1 / 0")
    assert res.status == "error" and res.exit_code == 1
    assert "ZeroDivisionError" in res.stderr and 'File "main.py", line 2' in res.stderr
    assert "_sandbox_worker" not in res.stderr  # the sandbox's own frames are not shown


def test_infinite_loop_stops_at_the_wall_timeout(sandbox):
    t = time.monotonic()
    res = sandbox.run("while True:\n    pass", timeout=0.5)
    elapsed = time.monotonic() - t
    assert res.status == "timeout"
    assert 0.5 <= res.wall < 1.2 and elapsed < 3.0  # loose upper bounds: CI shares 2 cores with other workers
    assert "wall-clock timeout of 0.5 s" in res.message()


def test_sleep_is_bounded_by_the_wall_timeout_not_cpu(sandbox):
    res = sandbox.run("import time\ntime.sleep(30)", timeout=0.4)
    assert res.status == "timeout" and res.wall < 0.8


def test_cpu_limit():
    with Sandbox(SandboxConfig(timeout=10.0, cpu_time=1)) as sb:
        res = sb.run("while True:\n    pass")
    assert res.status == "cpu_limit" and res.wall < 5
    assert "CPU time limit of 1 s" in res.message()


def test_memory_bomb_is_contained(sandbox):
    res = sandbox.run("x = bytearray(8 * 2**30)")
    assert res.status == "memory_limit" and "MemoryError" in res.stderr
    with Sandbox(SandboxConfig(timeout=10.0, memory_mb=128)) as sb:  # small, so the bomb hits it fast
        res = sb.run("chunks = []\nwhile True:\n    chunks.append(bytearray(16 * 2**20))")
    assert res.status == "memory_limit", res
    assert "memory limit of 128 MiB" in res.message()
    assert sandbox.run("print('alive')").ok


@pytest.mark.parametrize("mechanism", ["auto", "off"])
def test_memory_is_bounded_over_the_whole_run(mechanism, monkeypatch):
    """Four processes of 100 MiB each stay under a 192 MiB per-process limit but not under the run's:
    with a cgroup where one can be made (auto), and with the polled fallback (JGEM_SANDBOX_CGROUP=off)."""
    monkeypatch.setenv("JGEM_SANDBOX_CGROUP", mechanism)
    code = (
        "import os, time\n"
        "for _ in range(3):\n"
        "    if os.fork() == 0:\n"
        "        break\n"
        "block = b'x' * (100 * 2**20)\n"  # written, so resident
        "time.sleep(4)\n"
        "print('survived')\n"
    )
    with Sandbox(SandboxConfig(timeout=8.0, memory_mb=192)) as sb:
        if mechanism == "off":
            assert sb.isolation["memory"].startswith("polled"), sb.isolation["memory"]
        start = time.monotonic()
        res = sb.run(code)
        assert res.status == "memory_limit", res
        assert "survived" not in res.stdout and time.monotonic() - start < 4
        assert "memory limit of 192 MiB" in res.message()
        assert _uid_processes(sb._idle.queue[0].uid) == []  # every process of the run is gone
        assert sb.run("block = b'x' * (100 * 2**20); print('one is fine')").stdout == "one is fine\n"


def test_memory_cgroup_per_run_is_used_and_removed(monkeypatch):
    """Where a memory cgroup can be made, each run is in a fresh one limited to memory_mb, gone afterwards."""
    monkeypatch.delenv("JGEM_SANDBOX_CGROUP", raising=False)
    with Sandbox(SandboxConfig(timeout=5.0, memory_mb=160)) as sb:
        mechanism = sb.isolation["memory"]
        if not mechanism.startswith("cgroup"):
            pytest.skip(f"no memory cgroup on this host: {mechanism}")
        parent = mechanism.split(" under ", 1)[1].split(", ", 1)[0]
        assert os.path.isdir(parent), mechanism
        v2 = mechanism.startswith("cgroup v2")
        limit = "memory.max" if v2 else "memory.limit_in_bytes"
        mine = "n == '0'" if v2 else "'memory' in ctrl.split(',')"
        code = (  # the run finds its own cgroup and reads its limit
            "for line in open('/proc/self/cgroup').read().splitlines():\n"
            "    n, ctrl, path = line.split(':', 2)\n"
            f"    if {mine}:\n"
            "        name = path.rsplit('/', 1)[1]\n"
            f"        print(name, open({parent!r} + '/' + name + '/{limit}').read().strip())\n"
        )
        names = []
        for _ in range(2):
            res = sb.run(code)
            assert res.ok, res.message()
            name, value = res.stdout.split()
            assert name.startswith("jgem-run-") and value == str(160 << 20), res.stdout  # limited to memory_mb
            names.append(name)
        assert names[0] != names[1]  # a fresh one per run
        assert not [n for n in names if os.path.exists(os.path.join(parent, n))]  # removed after each run
        res = sb.run("import time\ntime.sleep(30)", timeout=0.3)  # a killed run's cgroup goes too
        assert res.status == "timeout"
        assert not [n for n in os.listdir(parent) if n.startswith(f"jgem-run-{sb._idle.queue[0].proc.pid}-")]


def test_fork_bomb_is_contained_and_cleaned_up(sandbox):
    code = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    res = sandbox.run(code, timeout=1.0)
    assert res.status == "timeout"
    if os.getuid() == 0:
        uids = [w.uid for w in list(sandbox._idle.queue)]
        assert not any(_uid_processes(u) for u in uids)  # every bomb process is gone
    assert sandbox.run("print('alive')").stdout == "alive\n"


def test_huge_output_is_truncated(sandbox):
    res = sandbox.run("while True:\n    print('x' * 1000)")
    assert res.status == "output_limit" and res.truncated
    assert len(res.stdout) + len(res.stderr) <= 4096 and res.wall < 0.9
    assert "truncated" in res.message()


def test_no_network():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    srv.settimeout(0.2)
    port = srv.getsockname()[1]
    code = f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=1)\nprint('connected')"
    with Sandbox(SandboxConfig(timeout=2.0)) as sb:
        res = sb.run(code)
        isolated = sb.isolation["network"].startswith("none")
    if not isolated:
        pytest.skip("this kernel does not allow a private network namespace")
    assert res.status == "error" and "connected" not in res.stdout
    assert "Network is unreachable" in res.stderr or "Connection refused" in res.stderr
    with pytest.raises(TimeoutError):
        srv.accept()  # nothing reached the host's listener
    srv.close()


def test_cannot_write_outside_the_working_directory(sandbox, tmp_path):
    target = tmp_path / "escaped.txt"
    os.chmod(tmp_path, 0o777)
    res = sandbox.run(f"open({str(target)!r}, 'w').write('x')")
    assert res.status == "error" and not target.exists()
    res = sandbox.run("open('/work_escape_probe', 'w').write('x')")
    assert res.status == "error" and not os.path.exists("/work_escape_probe")
    res = sandbox.run("open('inside.txt', 'w').write('ok')\nprint(open('inside.txt').read())")
    assert res.ok and res.stdout == "ok\n"


def test_parent_environment_is_not_visible(monkeypatch):
    monkeypatch.setenv("JGEM_TEST_SECRET", "hunter2")
    code = (
        "import os\nprint(sorted(os.environ))\n"
        f"for pid in (os.getppid(), {os.getpid()}):\n"
        "    try:\n        print(open(f'/proc/{pid}/environ').read())\n"
        "    except OSError as e:\n        print('denied', e.errno)\n"
    )
    with Sandbox(SandboxConfig(timeout=2.0)) as sb:
        res = sb.run(code)
    assert "hunter2" not in res.stdout and "JGEM_TEST_SECRET" not in res.stdout
    if os.getuid() == 0:
        assert res.stdout.count("denied") == 2


def test_no_state_leaks_between_executions(sandbox):
    first = (
        "import os, sys, math\nmath.pi = 3\nopen('/tmp/leak', 'w').write('x')\nopen('here.txt', 'w').write('x')\n"
        "if os.fork() == 0:\n    import time\n    time.sleep(30)\n"
        "print(os.getcwd())"
    )
    for _ in range(2):  # twice: both workers of the pool see the first program
        res = sandbox.run(first)
        assert res.ok, res
    res = sandbox.run("import math, os\nprint(math.pi > 3.1, os.path.exists('/tmp/leak'), os.listdir('.'))")
    assert res.stdout == "True False []\n"


def test_host_is_unaffected_and_runs_are_concurrent(sandbox):
    t = time.monotonic()
    results = []
    threads = [
        threading.Thread(
            target=lambda: results.append(sandbox.run("import time\ntime.sleep(1.0)\nprint(1)", timeout=3.0))
        )
        for _ in range(2)
    ]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert [r.stdout for r in results] == ["1\n", "1\n"]
    assert time.monotonic() - t < 1.8  # two workers ran them side by side (one after the other takes >= 2 s)


def test_fresh_mode_matches_pool_mode():
    with Sandbox(SandboxConfig(timeout=2.0), mode="fresh") as sb:
        res = sb.run("print(sum(range(10)))")
    assert res.ok and res.stdout == "45\n"


def test_config_errors_say_what_to_do():
    with pytest.raises(ValueError, match="timeout must be > 0"):
        SandboxConfig(timeout=0)
    with pytest.raises(ValueError, match="mode must be"):
        Sandbox(mode="docker")


def test_forked_child_gets_its_own_sandbox(sandbox):
    from jgem.envs.tools.sandbox import local

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # a forked host process (e.g. a fork-based env pool) must not talk to the parent's workers
        try:
            try:
                sandbox.run("print(1)")
                msg = b"used parent's workers"
            except RuntimeError:
                mine = local(sandbox)
                msg = mine.run("print(7)").stdout.encode() if mine is not sandbox else b"same"
                mine.close()
            os.write(w, msg)
        finally:
            os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    assert os.read(r, 100) == b"7\n"
    os.close(r)
    assert sandbox.run("print(8)").stdout == "8\n"  # the parent's pool is intact


ROOT = Path(__file__).resolve().parents[2]
needs_root = pytest.mark.skipif(os.getuid() != 0, reason="mount namespaces and a private /proc need root")


@needs_root
def test_other_processes_command_lines_are_hidden(sandbox):
    secret = "S3CRET-" + os.urandom(4).hex()
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "--token", secret])
    try:
        code = (
            "import os\n"
            f"print(os.getpid() > 0, os.path.exists('/proc/{proc.pid}'))\n"
            "seen = []\n"
            "for d in os.listdir('/proc'):\n"
            "    try:\n"
            "        seen.append(open(f'/proc/{d}/cmdline', 'rb').read())\n"
            "    except OSError:\n"
            "        pass\n"
            f"print(any(b'{secret}' in c for c in seen), len(seen))\n"
        )
        res = sandbox.run(code)
        assert res.ok, res.message()
        assert res.stdout.split("\n")[0] == "True False"
        found, count = res.stdout.split("\n")[1].split()
        assert found == "False" and int(count) >= 1  # its own processes are still there
        assert sandbox.isolation["processes"].startswith("only its own")
    finally:
        proc.kill()
        proc.wait()


@needs_root
@pytest.mark.skipif(shutil.which("true") is None, reason="needs a POSIX userland")
def test_a_venv_under_tmp_stays_importable():
    """The venv's site-packages is bound back read-only over the fresh /tmp (it used to vanish)."""
    base = tempfile.mkdtemp(dir="/tmp", prefix="jgem-venv-test-")
    try:
        venv = Path(base) / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
        site = next(venv.glob("lib/python*/site-packages"))
        (site / "jgem_probe_mod.py").write_text("VALUE = 42\n")
        host_site = next(p for p in sys.path if p.endswith("site-packages") and os.path.isdir(p))
        (site / "host.pth").write_text(host_site + "\n")  # jgem's own dependencies, for the driver below
        driver = (
            "import json\n"
            "from jgem.envs.tools.sandbox import Sandbox, SandboxConfig\n"
            "sb = Sandbox(SandboxConfig(timeout=5.0), workers=1)\n"
            "r = sb.run('import jgem_probe_mod, sys; print(jgem_probe_mod.VALUE, sys.prefix)')\n"
            "w = sb.run('import jgem_probe_mod; open(jgem_probe_mod.__file__, \"a\")')\n"
            "print(json.dumps([r.stdout, r.stderr[-500:], w.stderr[-500:], sb.isolation['filesystem']]))\n"
            "sb.close()\n"
        )
        out = subprocess.run(
            [str(venv / "bin" / "python"), "-c", driver],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr[-2000:]
        stdout, stderr, write_err, filesystem = json.loads(out.stdout)
        assert filesystem.startswith("read-only"), filesystem  # the venv did not cost the isolation
        assert stdout == f"42 {venv}\n", stderr
        assert "Read-only file system" in write_err or "Permission denied" in write_err, write_err
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_memory_cgroup_parent_is_found_on_v2_v1_and_hybrid_hosts(tmp_path):
    """Which hierarchy and directory the run cgroups go under, from /proc/self/{cgroup,mountinfo}."""
    from jgem.envs.tools import _sandbox_worker as w

    unified, v1 = tmp_path / "unified", tmp_path / "memory"
    (unified / "user.slice" / "svc").mkdir(parents=True)
    (v1 / "docker" / "abc").mkdir(parents=True)
    mountinfo = (
        f"30 25 0:26 / {unified} rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
        f"35 25 0:32 /docker {v1} rw,relatime - cgroup cgroup rw,memory\n"
        "36 25 0:33 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    )
    v2_only = "0::/user.slice/svc\n"
    hybrid = "4:memory:/docker/abc\n1:cpu:/\n0::/user.slice/svc\n"
    (unified / "cgroup.controllers").write_text("cpu io memory pids\n")
    assert w._cgroup_parent("auto", v2_only, mountinfo) == (2, str(unified / "user.slice" / "svc"))
    assert w._cgroup_parent("auto", "0::/\n", mountinfo) == (2, str(unified))  # a container's own root
    (unified / "cgroup.controllers").write_text("\n")  # hybrid: memory is on the v1 hierarchy
    assert w._cgroup_parent("auto", hybrid, mountinfo) == (1, str(v1 / "abc"))  # mount root /docker
    with pytest.raises(OSError, match="no cgroup memory controller"):
        w._cgroup_parent("auto", v2_only, mountinfo)
    (tmp_path / "given").mkdir()
    (tmp_path / "given" / "cgroup.subtree_control").write_text("memory\n")
    assert w._cgroup_parent(str(tmp_path / "given")) == (2, str(tmp_path / "given"))
    with pytest.raises(OSError, match="not a cgroup"):
        w._cgroup_parent(str(tmp_path))


def test_polled_fallback_says_why(monkeypatch):
    monkeypatch.setenv("JGEM_SANDBOX_CGROUP", "off")
    with Sandbox(SandboxConfig(timeout=2.0)) as sb:
        assert sb.isolation["memory"].startswith("polled") and "JGEM_SANDBOX_CGROUP=off" in sb.isolation["memory"]
        assert sb.run("print(1)").stdout == "1\n"
