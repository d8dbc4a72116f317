"""RemoteEnv and AsyncBatchClient against real `jgem-serve` processes on 127.0.0.1."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time

import httpx
import pytest

pytest.importorskip("uvicorn")

import jgem  # noqa: E402
from jgem.core import EnvFault, JgemError  # noqa: E402
from jgem.envs.remote.client import AsyncBatchClient, RemoteEnv  # noqa: E402
from tests.agentgym.conftest import TOKEN  # noqa: E402
from tests.agentgym.remote_envs import CountEnv  # noqa: E402

ENV = "test:Count-v0"


def test_remote_episode_matches_local_env(start_server):
    server = start_server()
    remote = RemoteEnv(server.url, ENV, token=TOKEN, env_kwargs={"length": 4}, timeout=5)
    local = CountEnv(length=4)
    try:
        assert remote.reset(seed=7) == local.reset(seed=7)
        for a in ["a", "b", "c", "d"]:
            assert remote.step(a) == local.step(a)
        with pytest.raises(JgemError, match="reset"):
            remote.step("e")  # the episode ended
        remote.reset(seed=1)
        remote.step("a")
        clone = remote.spawn(same_state=True)  # server-side snapshot, restored into a new remote env
        try:
            assert clone.step("q") == remote.step("q")
        finally:
            clone.close()
    finally:
        remote.close()
    assert httpx.get(server.url + "/health").json()["envs"] == 0  # close() released both envs


def test_wrong_token_is_refused(start_server):
    server = start_server()
    env = RemoteEnv(server.url, ENV, token="wrong", timeout=5)
    with pytest.raises(JgemError, match="token"):
        env.reset()
    env.close()


def test_no_server_raises_envfault_quickly():
    env = RemoteEnv("http://127.0.0.1:9", ENV, token=TOKEN, timeout=1, retries=1, backoff_s=0.01)
    t = time.monotonic()
    with pytest.raises(EnvFault, match="no env server"):
        env.reset()
    assert time.monotonic() - t < 5
    env.close()


@pytest.mark.slow
def test_load_batched_and_per_env_requests_lose_and_duplicate_nothing(start_server):
    """256 envs x 50 steps through the batched client, plus 32 envs stepped with one request per step."""
    server = start_server()
    n, steps = 256, 50

    async def batched() -> None:
        async with AsyncBatchClient(server.url, token=TOKEN, max_batch=64) as c:
            ids = await c.create(n, ENV)
            starts = [r["observation"].split("|")[2] for r in await c.reset(ids, seeds=list(range(n)))]
            for t in range(1, steps + 1):
                out = await c.step(ids, [f"{i}" for i in ids])
                assert [r["observation"] for r in out] == [f"{i}|{t}|{s}" for i, s in zip(ids, starts)]
            await c.close(ids)

    async def per_env() -> None:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=30) as h:
            ids = [(await h.post("/create")).json()["id"] for _ in range(32)]
            await asyncio.gather(*(h.post("/reset", json={"id": i}) for i in ids))

            async def run(i: int) -> None:
                for t in range(1, 21):
                    r = (await h.post("/step", json={"id": i, "action": "s", "seq": t})).json()
                    assert r["observation"].split("|")[:2] == ["s", str(t)]

            await asyncio.gather(*(run(i) for i in ids))
            await asyncio.gather(*(h.post("/close", json={"id": i}) for i in ids))

    t0 = time.monotonic()
    asyncio.run(asyncio.wait_for(batched(), 60))
    asyncio.run(asyncio.wait_for(per_env(), 60))
    assert time.monotonic() - t0 < 90
    metrics = httpx.get(server.url + "/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).text
    assert f"jgem_serve_steps {n * steps + 32 * 20}\n" in metrics
    assert "jgem_serve_replayed_steps 0\n" in metrics and "jgem_serve_envs_active 0\n" in metrics


@pytest.mark.slow
def test_sigkill_one_of_two_servers_mid_run(start_server):
    a, b = start_server(), start_server()
    envs = [
        RemoteEnv(u, ENV, token=TOKEN, timeout=2, retries=2, backoff_s=0.05, fallback_urls=[v])
        for u, v in [(a.url, b.url), (b.url, a.url)] * 4
    ]
    try:
        for e in envs:
            e.reset(seed=0)
            e.step("x")
        a.kill()
        t = time.monotonic()
        results = [e.step("y") for e in envs]
        assert time.monotonic() - t < 10  # faults are reported promptly, never a hang
        for _, reward, term, trunc, info in results[::2]:
            assert trunc and not term and reward == 0.0 and "fault" in info, info
        for obs, _, _, trunc, info in results[1::2]:
            assert not trunc and obs.startswith("y|2|") and "fault" not in info
        for e in envs:  # the envs of the dead server carry on with the other one
            e.reset(seed=1)
            assert e.base_url == b.url
            assert e.step("z")[0].startswith("z|1|")
        assert httpx.get(b.url + "/health").json()["envs"] == 8
    finally:
        for e in envs:
            e.close()


@pytest.mark.slow
def test_restarted_server_ends_episode_then_recovers(start_server):
    a = start_server()
    env = RemoteEnv(a.url, ENV, token=TOKEN, timeout=2, retries=1, backoff_s=0.05)
    try:
        env.reset(seed=0)
        env.step("x")
        a.kill()
        start_server(a.port)  # same address, new instance: the old env id must not reach someone else's env
        obs, reward, term, trunc, info = env.step("y")
        assert trunc and "restarted" in info["fault"]
        assert env.reset(seed=0)[0].startswith("start|0|")
        assert env.step("y")[0].startswith("y|1|")
    finally:
        env.close()


@pytest.mark.slow
def test_hung_server_times_out_instead_of_hanging(start_server):
    a = start_server()
    env = RemoteEnv(a.url, ENV, token=TOKEN, timeout=0.5, retries=1, backoff_s=0.05)
    try:
        env.reset(seed=0)
        os.kill(a.proc.pid, signal.SIGSTOP)
        t = time.monotonic()
        obs, _, _, trunc, info = env.step("y")
        assert trunc and "fault" in info and time.monotonic() - t < 5
    finally:
        os.kill(a.proc.pid, signal.SIGCONT)
        env.close()


def test_sigterm_shuts_down_gracefully(start_server, tmp_path):
    log = tmp_path / "closed.log"
    a = start_server(env={"JGEM_TEST_CLOSE_LOG": str(log)})
    envs = [RemoteEnv(a.url, ENV, token=TOKEN, timeout=5) for _ in range(3)]
    for e in envs:
        e.reset()
    a.proc.terminate()
    assert a.proc.wait(15) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal after its graceful shutdown
    assert log.read_text().count("closed") == 3  # the lifespan shutdown closed every env
    for e in envs:
        e.close()


@pytest.mark.slow
def test_env_pool_remote_backend_survives_a_killed_server(start_server):
    pool_mod = pytest.importorskip("jgem.envs.pool")
    import inspect

    if "remote_urls" not in inspect.signature(pool_mod.EnvPool).parameters:
        pytest.skip("jgem.envs.pool.EnvPool has no remote backend yet")
    a, b = start_server(), start_server()
    pool = jgem.EnvPool(ENV, num_envs=4, backend="remote", remote_urls=[a.url, b.url], remote_token=TOKEN)
    try:
        pool.reset(seeds=[0, 1, 2, 3])
        assert len(pool.recv()) == 4
        a.kill()  # urls are round-robin: envs 0 and 2 lived on a
        t = time.monotonic()
        out = pool.step([0, 1, 2, 3], ["x"] * 4)
        assert time.monotonic() - t < 60
        assert list(out.truncated) == [True, False, True, False]
        assert all("fault" in out.infos[i] for i in (0, 2))
        for t in range(2, 6):  # the envs on the surviving server carry on
            out = pool.step([1, 3], ["y", "y"])
            assert [o.split("|")[:2] for o in out.obs] == [["y", str(t)]] * 2 and not out.truncated.any()
    finally:
        pool.close()


def _half_sent_headers(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"POST /create HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ")  # never finished
    return s


def test_half_sent_headers_are_dropped_after_the_header_timeout(start_server):
    server = start_server(None, "--timeout-headers", "1")
    s = _half_sent_headers(server.port)
    try:
        start = time.monotonic()
        assert s.recv(1024) == b""  # the server closed it
        assert time.monotonic() - start < 5
    finally:
        s.close()
    with httpx.Client(base_url=server.url, timeout=5) as h:  # a whole request is unaffected
        assert h.get("/health").status_code == 200


def test_the_connection_cap_holds(start_server):
    server = start_server(None, "--limit-concurrency", "3")
    held = [_half_sent_headers(server.port) for _ in range(3)]
    try:
        time.sleep(0.5)
        with httpx.Client(base_url=server.url, timeout=5) as h:
            assert h.get("/health").status_code == 503
    finally:
        for s in held:
            s.close()
    time.sleep(0.5)
    with httpx.Client(base_url=server.url, timeout=5) as h:
        assert h.get("/health").status_code == 200
