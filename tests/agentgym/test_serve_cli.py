"""`jgem-serve` from the command line (issue 31 D, C): it says where it listens, and a training run reaches it with
the token from `--env.remote-token-file` (tests/test_config.py checks the token is never written to the run)."""

from __future__ import annotations

import dataclasses
import os
import queue
import re
import subprocess
import sys
import threading
import time

import httpx
import pytest

pytest.importorskip("uvicorn")

from tests.agentgym.conftest import ROOT  # noqa: E402


def test_jgem_serve_prints_the_url_it_listens_on() -> None:
    cmd = [sys.executable, "-m", "jgem.envs.remote.server", "--env", "test:Count", "--import"]
    cmd += ["tests.agentgym.remote_envs", "--port", "0"]  # port 0: the line must name the port it really got
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stderr], daemon=True).start()
    try:
        deadline, url = time.monotonic() + 60, None
        while url is None and time.monotonic() < deadline and proc.poll() is None:
            try:
                line = lines.get(timeout=0.5)
            except queue.Empty:
                continue
            m = re.search(r"listening on (http://127\.0\.0\.1:(\d+)) \(test:Count; no token\)", line)
            url = m.group(1) if m and int(m.group(2)) > 0 else None
        assert url is not None, "no 'listening on' line within 60 s"
        assert httpx.get(url + "/health", timeout=5).status_code == 200  # listening when it says so
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.slow
def test_a_run_reaches_the_server_with_the_token_from_a_file(start_server, tmp_path) -> None:
    from jgem.metrics import read_jsonl
    from jgem.train import Trainer
    from tests.agentgym.conftest import TOKEN
    from tests.train_utils import small_config

    server = start_server(None, "--env", "game:GuessTheNumber-v0-easy")  # the fixture's server wants TOKEN
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    run = tmp_path / "run"
    cfg = small_config(str(run), steps=1, env={"backend": "remote", "remote_urls": (server.url,)})
    cfg = dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, remote_token_file=str(token_file)))
    summary = Trainer(cfg).run()  # one step, checkpointed: everything a run writes
    assert summary["steps"] == 1
    rows = [r for r in read_jsonl(run / "metrics.jsonl") if "rollout/faults" in r]
    assert rows and rows[0]["rollout/faults"] == 0  # a wrong token would fault every episode
    files = [p for p in run.rglob("*") if p.is_file()]
    assert any(p.name == "config.json" for p in files) and any("checkpoints" in p.parts for p in files)
    leaked = [p for p in files if TOKEN.encode() in p.read_bytes()]
    assert not leaked, f"the token reached {leaked}"
