"""Copy-on-write sessions: a reset copies nothing and leaves no trace, the upper layer holds only what changed, and a
fork (of a session, and of a terminal env through get_state/set_state) diverges from its parent."""

from __future__ import annotations

import os
import pickle
import sys
from pathlib import Path

import pytest

import jgem
from jgem.envs.tools.shell import ShellConfig, ShellSession, pack_dir

pytestmark = [
    pytest.mark.xdist_group("terminal"),
    pytest.mark.skipif(not hasattr(os, "pidfd_open") or os.getuid() != 0, reason="the shell sandbox needs root"),
]


# the top directory of this interpreter's prefix when it lives under /tmp (a clone there), else a name never listed
_PREFIX = Path(os.path.realpath(sys.prefix))
_INTERPRETER_IN_TMP = _PREFIX.relative_to("/tmp").parts[0] if _PREFIX.is_relative_to("/tmp") else "/"


@pytest.fixture
def task_dir(tmp_path: Path) -> Path:
    (tmp_path / "notes.txt").write_text("alpha\n")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "main.py").write_text("print('hi')\n")
    (tmp_path / "src" / "old.py").write_text("x = 1\n")
    (tmp_path / "data").mkdir()
    for i in range(4):
        (tmp_path / "data" / f"blob{i}.bin").write_bytes(os.urandom(1 << 20))  # 4 MiB that no one changes
    return tmp_path


def test_a_fork_has_the_parents_state_and_then_diverges(task_dir: Path) -> None:
    with ShellSession(pack_dir(task_dir), config=ShellConfig(command_timeout=5)) as parent:
        setup = (
            "echo beta >> notes.txt && rm src/old.py && rm -r data && mkdir data && echo new > data/new.txt && "
            "mkdir -p work && cd work && export STAGE=forked && LOCAL=x && greet() { echo hello $1; }"
        )
        assert parent.run(setup).ok
        child = parent.fork()
        try:
            assert child.written_changes == len("alpha\nbeta\nnew\n")  # the changed files, not the tree
            r = child.run('pwd; echo "$STAGE|$LOCAL"; greet you; cat ../notes.txt; ls ../src; ls ../data')
            assert r.output == "/app/work\nforked|\nhello you\nalpha\nbeta\nmain.py\nnew.txt\n", r.output
            assert child.run("echo child > /app/c.txt && echo c >> /app/notes.txt && export SIDE=child && cd /app").ok
            assert parent.run("echo parent > /app/p.txt && rm /app/src/main.py && export SIDE=parent").ok
            r = parent.run("ls /app; cat /app/notes.txt; echo $SIDE; pwd")
            assert r.output == "data\nnotes.txt\np.txt\nsrc\nwork\nalpha\nbeta\nparent\n/app/work\n", r.output
            r = child.run("ls /app; ls /app/src; cat /app/notes.txt; echo $SIDE; pwd")
            assert r.output == "c.txt\ndata\nnotes.txt\nsrc\nwork\nmain.py\nalpha\nbeta\nc\nchild\n/app\n", r.output
            grandchild = child.fork()  # a fork of a fork, before its bash ran, carries the same state
            with grandchild:
                assert (
                    grandchild.run("echo $SIDE; pwd; cat /app/c.txt; ls /app/data").output
                    == "child\n/app\nchild\nnew.txt\n"
                )
        finally:
            child.close()


def test_a_reset_leaves_no_trace_and_the_upper_holds_only_changes(task_dir: Path) -> None:
    cfg = ShellConfig(command_timeout=5, workdir_mb=2)
    files = pack_dir(task_dir)
    tree = sum(p.stat().st_size for p in task_dir.rglob("*") if p.is_file())
    with ShellSession(files, config=cfg) as s:
        assert s.run("echo beta >> notes.txt; rm data/blob0.bin; mkdir made; echo x > made/f; touch /tmp/left").ok
        changed = s.changed()
        assert changed == {"files": 2, "bytes": len("alpha\nbeta\n") + 2}  # notes.txt copied up, made/f; no blob
        assert changed["bytes"] < tree / 1000
        r = s.run("head -c 3000000 /dev/zero > big 2>&1; echo $?; ls -l data | wc -l")
        assert r.output.split() == ["1", "4"]  # the episode may write workdir_mb (2 MiB), whatever the tree's size
    with ShellSession(files, config=cfg) as s:  # the same worker: the tree is not sent or unpacked again
        assert s.written == 0
        # /tmp is fresh: empty, but for the interpreter's directory where it lives under /tmp (bound back, read-only)
        r = s.run(f"cat notes.txt; ls; ls data; ls /tmp | grep -vxF '{_INTERPRETER_IN_TMP}'; ls big made 2>&1 | wc -l")
        assert r.output == "alpha\ndata\nnotes.txt\nsrc\nblob0.bin\nblob1.bin\nblob2.bin\nblob3.bin\n2\n", r.output
        assert s.changed() == {"files": 0, "bytes": 0}
        assert s.run("md5sum data/blob1.bin").output.split()[0] == _md5(task_dir / "data" / "blob1.bin")


def _md5(path: Path) -> str:
    import hashlib

    return hashlib.md5(path.read_bytes()).hexdigest()


def test_a_terminal_env_forks_through_its_state() -> None:
    env = jgem.make("terminal:hello-file")
    other = jgem.make("terminal:hello-file")
    try:
        env.reset(seed=0)
        obs, *_ = env.step("<bash>cd /tmp && export WHO=trunk && echo draft > /app/hello.txt</bash>")
        state = pickle.loads(pickle.dumps(env.get_state()))  # as a process pool carries it
        other.set_state(state)
        branch = env.spawn(same_state=True)
        try:
            assert other.run("pwd; echo $WHO; cat /app/hello.txt").output == "/tmp\ntrunk\ndraft\n"
            obs, reward, term, _, info = other.step('<bash>echo "Hello, terminal!" > /app/hello.txt</bash><submit/>')
            assert (reward, term, info["success"]) == (1.0, True, True)
            _, reward, term, _, info = branch.step("<submit/>")  # the branch still holds the draft
            assert (term, info["success"], info["turn"]) == (True, False, 2)
            assert env.run("cat /app/hello.txt").output == "draft\n" and not env.done
        finally:
            branch.close()
    finally:
        env.close()
        other.close()
