"""The terminal env: actions in every tool format, the ways an episode ends, malformed calls, and terminal-bench's
task directories read from a local checkout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import jgem
from jgem.envs.terminal.task import discover, load_task

pytestmark = pytest.mark.xdist_group("terminal")

HELLO = 'echo "Hello, terminal!" > /app/hello.txt'


def _call(fmt: str, name: str, **arguments: str) -> str:
    if fmt == "gem_tags":
        return f"<bash>{arguments['command']}</bash>" if name == "bash" else "<submit/>"
    if fmt == "hermes":
        return f"Let me act.\n<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"
    return json.dumps({"name": name, "parameters": arguments})


@pytest.mark.parametrize("fmt", ["gem_tags", "hermes", "llama3_json"])
def test_a_command_then_submit_in_every_tool_format(fmt: str) -> None:
    env = jgem.make("terminal:hello-file", tool_format=fmt)
    try:
        obs, info = env.reset(seed=0)
        assert obs.startswith("Create a file /app/hello.txt") and info["task"] == "hello-file"
        assert ("<bash>" in obs) == (fmt == "gem_tags")
        assert (env.tool_schemas is None) == (fmt == "gem_tags")
        if env.tool_schemas:
            assert [s["function"]["name"] for s in env.tool_schemas] == ["bash", "submit"]
        obs, reward, term, trunc, info = env.step(_call(fmt, "bash", command=f"{HELLO}; cat hello.txt"))
        assert (reward, term, trunc) == (0.0, False, False) and "Hello, terminal!\n[exit code 0]" in obs
        if fmt != "gem_tags":
            assert info["tool_messages"][0]["content"] == "Hello, terminal!\n[exit code 0]"
            assert info["tool_messages"][0]["role"] == ("tool" if fmt == "hermes" else "ipython")
        obs, reward, term, trunc, info = env.step(_call(fmt, "submit"))
        assert (reward, term, trunc, info["success"], info["ended_by"]) == (1.0, True, False, True, "submit")
        assert "2/2 tests passed" in obs
        with pytest.raises(jgem.JgemError, match="call reset"):
            env.step(_call(fmt, "submit"))
    finally:
        env.close()


def test_malformed_calls_are_answered_and_the_episode_ends_without_a_call() -> None:
    env = jgem.make("terminal:hello-file", tool_format="hermes", max_turns=5)
    try:
        env.reset(seed=0)
        obs, reward, term, _, info = env.step("<tool_call>{not json}</tool_call>")
        assert not term and reward == 0.0 and "is not valid JSON" in obs and info["tool_call_errors"] == 1
        obs, *_ = env.step('<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>')
        assert "unknown function 'rm_rf'; the functions are bash and submit" in obs
        obs, *_ = env.step('<tool_call>{"name": "bash", "arguments": {"cmd": "ls"}}</tool_call>')
        assert 'bash takes one argument, "command"' in obs
        obs, reward, term, trunc, info = env.step("I am done.")
        assert (term, trunc, info["ended_by"], reward) == (True, False, "no_call", 0.0)
        assert info["total"] == 2 and not info["success"]
    finally:
        env.close()


def test_turn_limit_unclosed_tags_and_a_reply_without_a_command() -> None:
    env = jgem.make("terminal:hello-file", max_turns=3, finish_without_call=False)
    try:
        env.reset(seed=0)
        obs, *_ = env.step("<bash>ls")
        assert "not closed with </bash>" in obs
        obs, reward, term, *_ = env.step("thinking...")
        assert not term and obs.startswith("No command found.")
        obs, reward, term, trunc, info = env.step(f"<think><submit/></think><bash>{HELLO}</bash>")
        assert (term, trunc, info["ended_by"], reward) == (True, True, "max_turns", 1.0)  # the think block is not read
    finally:
        env.close()


def test_the_task_set_is_drawn_per_seed() -> None:
    env = jgem.make("terminal:shipped", tasks=["count-lines", "hello-file", "tsv-to-csv"], index_seeds=True)
    other = jgem.make("terminal:shipped", tasks=["count-lines", "hello-file", "tsv-to-csv"])
    try:
        assert [env.reset(seed=s)[1]["task"] for s in (0, 1, 2, 3)] == [
            "count-lines",
            "hello-file",
            "tsv-to-csv",
            "count-lines",
        ]
        drawn = [other.reset(seed=s)[1]["task"] for s in (5, 6, 5)]
        assert drawn[0] == drawn[2]
        spawned = env.spawn()
        assert spawned.session is None and spawned.tasks == env.tasks
        assert env.get_state()["task"].name == "count-lines"  # forks: tests/envs/terminal/test_fork.py
    finally:
        env.close()
        other.close()


def _tb_task(root: Path, name: str, **files: str) -> Path:
    d = root / name
    for rel, text in files.items():
        p = d / rel.replace("__", "/")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return d


def test_a_terminal_bench_checkout_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "terminal-bench" / "tasks"
    test = "from pathlib import Path\n\ndef test_out():\n    assert Path('/srv/out.txt').read_text() == 'seed-42\\n'\n"
    _tb_task(
        root,
        "copy-seed",
        **{
            "task.yaml": "descriptions:\n  - key: base\n    description: Copy the seed.\ndifficulty: easy\n"
            "max_test_timeout_sec: 30\n",
            "Dockerfile": "FROM ubuntu:24.04\nWORKDIR /srv\nCOPY data/ /srv/data/\nCOPY seed.txt ./\n"
            "COPY helper.sh /usr/local/bin/\nENV SEED_NAME=seed\nRUN apt-get install -y cowsay \\\n    && true\n"
            'RUN ["sh", "-c", "echo $SEED_NAME > made-by-run.txt"]\n',
            "seed.txt": "seed-42\n",
            "helper.sh": "true\n",
            "data__a.txt": "a\n",
            "solution.sh": "cp seed.txt out.txt\n",
            "run-tests.sh": "pip install pytest && pytest $TEST_DIR/test_outputs.py\n",
            "tests__test_outputs.py": test,
        },
    )
    _tb_task(
        root,
        "needs-db",
        **{
            "task.yaml": "instruction: Query the database.\n",
            "docker-compose.yaml": "services:\n  client:\n    build: .\n  db:\n    image: postgres\n",
            "tests__test_outputs.py": "def test_x():\n    pass\n",
        },
    )
    _tb_task(root, "no-tests", **{"task.yaml": "instruction: x\n"})
    tasks, skipped = discover(root)
    assert list(tasks) == ["copy-seed"]
    assert skipped == {
        "needs-db": "needs docker services (client, db): jgem runs no docker",
        "no-tests": "no tests/test*.py",
    }
    task = load_task(root / "copy-seed")
    assert (task.instruction, task.workdir, task.env) == ("Copy the seed.", "/srv", (("SEED_NAME", "seed"),))
    assert task.files == (("data", "data"), ("seed.txt", "seed.txt"))
    assert task.notes == ("COPY to /usr/local/bin/ is outside the working directory /srv: not done",)
    assert task.max_test_timeout_sec == 30.0 and len(task.setup) == 2

    monkeypatch.setenv("JGEM_DATA", str(tmp_path))
    env = jgem.make("terminal:tb", task="copy-seed")
    try:
        obs, info = env.reset(seed=0)
        assert obs.startswith("Copy the seed.") and info["workdir"] == "/srv"
        assert [f["step"].split("&&")[1].strip() for f in info["setup_failed"]] == ["apt-get install -y cowsay"]
        obs, *_ = env.step("<bash>pwd; ls; cat made-by-run.txt; echo $SEED_NAME</bash>")
        assert obs == "/srv\ndata\nmade-by-run.txt\nseed.txt\nseed\nseed\n[exit code 0]"
        assert env.run_solution().ok
        assert env.step("<submit/>")[1] == 1.0
    finally:
        env.close()
    with pytest.raises(ValueError, match="needs docker services"):
        jgem.make("terminal:tb", task="needs-db", data_dir=str(root.parent))
