"""The shell session in the sandbox: state that persists, limits that stop a command and not the session, and
grading in a fresh process tree that sees only the task directory."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from jgem.envs.tools.shell import ShellConfig, ShellSession, pack_dir

pytestmark = [
    pytest.mark.xdist_group("terminal"),
    pytest.mark.skipif(not hasattr(os, "pidfd_open") or os.getuid() != 0, reason="the shell sandbox needs root"),
]


@pytest.fixture
def task_dir(tmp_path: Path) -> Path:
    (tmp_path / "notes.txt").write_text("alpha\nbeta\n")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "hi.sh").write_text("#!/bin/sh\necho hi from script\n")
    (tmp_path / "bin" / "hi.sh").chmod(0o755)
    return tmp_path


def test_state_persists_and_results_are_reported(task_dir: Path) -> None:
    with ShellSession(pack_dir(task_dir), config=ShellConfig(command_timeout=5)) as s:
        r = s.run("pwd; cat notes.txt; ./bin/hi.sh")
        assert r.ok and r.output == "/app\nalpha\nbeta\nhi from script\n" and r.message().endswith("[exit code 0]")
        assert s.run("cd bin && export GREETING='a b' && COUNT=3 && f() { echo fn; }").ok
        r = s.run('pwd; echo "$GREETING $COUNT"; f; echo out; echo err >&2; false')
        assert r.output == "/app/bin\na b 3\nfn\nout\nerr\n" and r.exit_code == 1 and r.cwd == "/app/bin"
        r = s.run("if then")  # a syntax error is the command's, not the session's
        assert r.exit_code == 2 and "syntax error" in r.output and not r.restarted
        assert s.run("cat; echo done").output == "done\n"  # stdin is empty: nothing waits for input
        r = s.run("seq 1 20000")
        assert r.omitted > 0 and "bytes of output omitted" in r.output and r.output.rstrip().endswith("20000")
        assert r.output.startswith("1\n2\n") and len(r.output) < s.config.max_output + 100


def test_a_hung_command_is_killed_and_the_session_goes_on(task_dir: Path) -> None:
    with ShellSession(pack_dir(task_dir), config=ShellConfig(command_timeout=5)) as s:
        s.run("cd bin; export KEPT=yes; sleep 300 & echo started")
        r = s.run("echo before; sleep 30", timeout=0.5)
        assert r.timed_out and r.exit_code is None and r.output == "before\n" and r.restarted
        assert "wall-clock limit of 0.5 s" in r.note and "new shell was started in /app/bin" in r.note
        r = s.run('pwd; echo "$KEPT"; pgrep -c sleep || true')
        assert r.output == "/app/bin\nyes\n0\n"  # the directory and exports survive, the background sleep does not
        r = s.run("exit 4")
        assert r.exit_code == 4 and r.restarted and "the shell exited (status 4)" in r.note
        assert s.run("echo $KEPT").output == "yes\n"


def test_the_sandbox_holds(task_dir: Path) -> None:
    cfg = ShellConfig(command_timeout=10, memory_mb=256, max_processes=32)
    venv_lib = Path(sys.prefix) / "lib"
    with ShellSession(pack_dir(task_dir), config=cfg, hide=(str(venv_lib),)) as s:
        r = s.run("id -u; touch /usr/x 2>&1; touch /tmp/x /app/y && echo writable; ls /home /root/.ssh 2>&1 | wc -l")
        lines = r.output.splitlines()
        assert int(lines[0]) != 0 and "Read-only file system" in lines[1] and lines[2] == "writable"
        assert s.run(f"ls -A {venv_lib} | wc -l").output.strip() == "0"  # hidden under an empty tmpfs
        r = s.run("python3 -c \"import socket; socket.create_connection(('1.1.1.1', 80), timeout=2)\" 2>&1 | tail -1")
        assert "unreachable" in r.output or "Errno" in r.output
        r = s.run("python3 -c 'x = bytearray(1 << 30)' 2>&1 | tail -1")
        assert "MemoryError" in r.output
        r = s.run(":(){ :|:& };: 2>/dev/null; sleep 0.5; echo survived", timeout=5)
        assert "survived" in r.output or r.restarted
        assert s.run("echo still here").output == "still here\n"


def test_grading_runs_pytest_on_the_final_directory_only(task_dir: Path, tmp_path_factory) -> None:
    tests = tmp_path_factory.mktemp("tests")
    (tests / "test_outputs.py").write_text(
        "import os\nfrom pathlib import Path\n\n"
        "def test_made():\n    assert Path('/app/made.txt').read_text() == 'yes\\n'\n\n"
        "def test_tmp_is_fresh():\n    assert not Path('/tmp/left-behind').exists()\n\n"
        "def test_env():\n    assert os.environ['TEST_DIR'] == '/tests' and os.getcwd() == '/app'\n\n"
        "def test_fails():\n    assert False\n"
    )
    (tests / "test_broken.py").write_text("import no_such_module\n")
    s = ShellSession(pack_dir(task_dir))
    s.run("echo yes > made.txt; touch /tmp/left-behind; (sleep 100 &)")
    assert not s.run("ls /tests 2>/dev/null").output  # the tests are not there during the episode
    report = s.grade(pack_dir(tests), timeout=30)
    assert report.status == "ok", report
    assert report.results == {
        "test_broken.py": "error",
        "test_outputs.py::test_made": "passed",
        "test_outputs.py::test_tmp_is_fresh": "passed",
        "test_outputs.py::test_env": "passed",
        "test_outputs.py::test_fails": "failed",
    }
    assert (report.passed, report.total, report.success) == (3, 5, False) and report.fraction == 0.6
    assert "no_such_module" in report.output
    with pytest.raises(RuntimeError, match="closed"):
        s.run("true")
