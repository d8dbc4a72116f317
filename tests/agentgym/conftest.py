"""Fixtures for the env-server tests: real `jgem-serve` subprocesses on 127.0.0.1, always killed afterwards."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "test-token"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One `python -m jgem.envs.remote.server` process serving the test env."""

    def __init__(self, port: int | None = None, *extra: str, env: dict | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [
            sys.executable,
            "-m",
            "jgem.envs.remote.server",
            "--env",
            "test:Count",
            "--import",
            "tests.agentgym.remote_envs",
            "--port",
            str(self.port),
            "--token",
            TOKEN,
            "--allow-kwarg",
            "length",
            *extra,
        ]
        env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.proc.stderr.read().decode()[-2000:]}")
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("server did not answer /health within 30 s")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGCONT)  # in case a test stopped it
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        if self.proc.stderr:
            self.proc.stderr.close()


@pytest.fixture
def start_server():
    """Factory for servers; every one started is stopped at teardown."""
    servers: list[Server] = []

    def start(port: int | None = None, *extra: str, env: dict | None = None) -> Server:
        servers.append(Server(port, *extra, env=env))
        return servers[-1]

    yield start
    for s in servers:
        s.stop()
