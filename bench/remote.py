"""Env-server throughput over loopback: AgentGym's one request per env step vs jgem's batched requests.

Peer: AgentGym's client pattern (a blocking POST /step per env per turn), run against the same jgem server
in the same run; also concurrent per-env requests, and in-process stepping as the ceiling. Prints JSON lines.

    .venv/bin/python bench/remote.py --envs 256 --steps 20
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time

import httpx

import jgem
from jgem.envs.remote.client import AsyncBatchClient

TOKEN = "bench-token"
ENV_ID = "agentgym:TextCraft-v0"
KWARGS = {"max_turns": 10**9}  # "inventory" never ends an episode: every request is one step
ACTION = "inventory"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(port: int) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "-m",
        "jgem.envs.remote.server",
        "--env",
        ENV_ID,
        "--port",
        str(port),
        "--token",
        TOKEN,
        "--max-envs",
        "100000",
        "--allow-kwarg",
        "max_turns",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(300):
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("server did not start")


def in_process(n: int, steps: int) -> float:
    envs = [jgem.make(ENV_ID, **KWARGS) for _ in range(n)]
    for i, e in enumerate(envs):
        e.reset(seed=i)
    t = time.perf_counter()
    for _ in range(steps):
        for e in envs:
            e.step(ACTION)
    return time.perf_counter() - t


def agentgym_sequential(url: str, n: int, steps: int) -> float:
    """AgentGym's clients: one blocking POST per env per step."""
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as h:
        ids = [h.post("/create", json={"env_kwargs": KWARGS}).json()["id"] for _ in range(n)]
        for i in ids:
            h.post("/reset", json={"id": i, "data_idx": i})
        t = time.perf_counter()
        for _ in range(steps):
            for i in ids:
                r = h.post("/step", json={"id": i, "action": ACTION})
                r.raise_for_status()
        dt = time.perf_counter() - t
        for i in ids:
            h.post("/close", json={"id": i})
    return dt


async def per_env_concurrent(url: str, n: int, steps: int) -> float:
    """One request per env step, all envs of a turn in flight together."""
    limits = httpx.Limits(max_connections=64)
    async with httpx.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60, limits=limits
    ) as h:
        ids = [(await h.post("/create", json={"env_kwargs": KWARGS})).json()["id"] for _ in range(n)]
        await asyncio.gather(*(h.post("/reset", json={"id": i}) for i in ids))
        t = time.perf_counter()
        for s in range(1, steps + 1):
            rs = await asyncio.gather(*(h.post("/step", json={"id": i, "action": ACTION, "seq": s}) for i in ids))
            assert all(r.status_code == 200 for r in rs)
        dt = time.perf_counter() - t
        await asyncio.gather(*(h.post("/close", json={"id": i}) for i in ids))
    return dt


async def batched(url: str, n: int, steps: int, max_batch: int) -> float:
    async with AsyncBatchClient(url, token=TOKEN, max_batch=max_batch, timeout=60) as c:
        ids = await c.create(n, ENV_ID, KWARGS)
        await c.reset(ids, list(range(n)))
        t = time.perf_counter()
        for _ in range(steps):
            out = await c.step(ids, [ACTION] * n)
            assert not any("fault" in r["info"] for r in out)
        dt = time.perf_counter() - t
        await c.close(ids)
    return dt


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--envs", type=int, default=256)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--max-batch", type=int, default=256)
    args = p.parse_args()
    n, steps = args.envs, args.steps
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = start_server(port)
    try:
        results = {
            "agentgym_one_request_per_step": agentgym_sequential(url, n, steps),
            "per_env_requests_concurrent": asyncio.run(per_env_concurrent(url, n, steps)),
            "jgem_batched_async": asyncio.run(batched(url, n, steps, args.max_batch)),
            "in_process": in_process(n, steps),
        }
    finally:
        proc.terminate()
        proc.wait(15)
    peer = n * steps / results["agentgym_one_request_per_step"]
    for mode, dt in results.items():
        rate = n * steps / dt
        print(
            json.dumps(
                {
                    "bench": "remote",
                    "mode": mode,
                    "env": ENV_ID,
                    "envs": n,
                    "steps_per_env": steps,
                    "seconds": round(dt, 3),
                    "steps_per_s": round(rate, 1),
                    "ratio_vs_agentgym": round(rate / peer, 2),
                    "cpus": os.cpu_count(),
                }
            )
        )


if __name__ == "__main__":
    main()
