"""The env server's HTTP contract, in process (FastAPI TestClient)."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

import tests.agentgym.remote_envs  # noqa: E402, F401  registers test:Count-v0
from jgem.envs.remote.server import create_app, parse_args  # noqa: E402
from jgem.envs.remote.service import EnvService, ServeConfig  # noqa: E402

H = {"Authorization": "Bearer tok"}


@pytest.fixture
def client():
    app = create_app(
        ServeConfig(
            envs=("test:Count",), token="tok", max_body_bytes=4096, max_batch=64, allow_kwargs=("length", "lenght")
        )
    )
    with TestClient(app) as c:
        yield c


def test_agentgym_contract_episode(client):
    idx = client.post("/create", headers=H).json()["id"]  # no body: AgentGym style, the only served id
    r = client.post("/reset", json={"id": idx, "data_idx": 3}, headers=H).json()
    assert set(r) >= {"observation", "reward", "score", "done"} and r["done"] is False
    start = r["observation"].split("|")[2]
    for t in range(1, 4):
        s = client.post("/step", json={"id": idx, "action": f"a{t}"}, headers=H).json()
        assert s["observation"] == f"a{t}|{t}|{start}" and s["reward"] == 1.0 and s["score"] == float(t)
    assert client.get("/observation", params={"id": idx}, headers=H).json() == {"observation": f"a3|3|{start}"}
    # data_idx is the seed: the same index gives the same episode
    again = client.post("/reset", json={"id": idx, "data_idx": 3}, headers=H).json()
    assert again["observation"] == r["observation"]
    assert client.post("/close", json={"id": idx}, headers=H).json() == {"closed": True}
    assert client.post("/step", json={"id": idx, "action": "x"}, headers=H).status_code == 404


def test_episode_end_and_kwargs(client):
    idx = client.post("/create", json={"env_id": "test:Count-v0", "env_kwargs": {"length": 2}}, headers=H).json()["id"]
    client.post("/reset", json={"id": idx, "seed": 0}, headers=H)
    client.post("/step", json={"id": idx, "action": "a"}, headers=H)
    last = client.post("/step", json={"id": idx, "action": "a"}, headers=H).json()
    assert last["done"] and last["terminated"] and last["info"] == {"success": True}
    r = client.post("/step", json={"id": idx, "action": "a"}, headers=H)
    assert r.status_code == 409 and "/reset" in r.json()["detail"]


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("post", "/create", None),
        ("post", "/reset", {"id": 0}),
        ("post", "/step", {"id": 0, "action": "a"}),
        ("get", "/observation?id=0", None),
        ("post", "/close", {"id": 0}),
        ("get", "/metrics", None),
        ("post", "/batch/step", {"items": []}),
        ("post", "/snapshot", {"id": 0}),
    ],
)
@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "tok"}])
def test_refused_without_token(client, method, path, body, headers):
    client.post("/create", headers=H)
    r = client.request(method, path, json=body, headers=headers)
    assert r.status_code == 401 and "token" in r.json()["detail"]


def test_health_is_open_and_metrics_count(client):
    assert client.get("/health").json()["status"] == "ok"
    idx = client.post("/create", headers=H).json()["id"]
    client.post("/reset", json={"id": idx}, headers=H)
    client.post("/step", json={"id": idx, "action": "a"}, headers=H)
    text = client.get("/metrics", headers=H).text
    assert "jgem_serve_steps 1\n" in text and "jgem_serve_envs_active 1\n" in text


def test_bad_requests_get_4xx_with_a_message(client):
    bad_json = client.post("/step", content=b'{"id": 0, "action": ', headers={**H, "content-type": "application/json"})
    assert bad_json.status_code == 422 and "JSON" in str(bad_json.json()["detail"])
    missing = client.post("/step", json={"id": 0}, headers=H)
    assert missing.status_code == 422 and "action" in str(missing.json()["detail"])
    unknown = client.post("/step", json={"id": 12345, "action": "a"}, headers=H)
    assert unknown.status_code == 404 and "12345" in unknown.json()["detail"]
    wrong_env = client.post("/create", json={"env_id": "game:Nope-v0"}, headers=H)
    assert wrong_env.status_code == 400 and "not served" in wrong_env.json()["detail"]
    bad_kwargs = client.post("/create", json={"env_kwargs": {"lenght": 3}}, headers=H)
    assert bad_kwargs.status_code == 400 and "length" in bad_kwargs.json()["detail"]
    big = client.post("/step", json={"id": 0, "action": "x" * 5000}, headers=H)
    assert big.status_code == 413 and "limit" in big.json()["detail"]

    def chunks():  # streamed without a content-length
        for _ in range(10):
            yield b"x" * 1000

    streamed = client.post("/step", content=chunks(), headers={**H, "content-type": "application/json"})
    assert streamed.status_code == 413
    too_many = client.post("/batch/create", json={"count": 65}, headers=H)
    assert too_many.status_code == 422


def test_env_exception_is_a_500_fault_and_needs_reset(client):
    idx = client.post("/create", headers=H).json()["id"]
    client.post("/reset", json={"id": idx}, headers=H)
    r = client.post("/step", json={"id": idx, "action": "raise"}, headers=H)
    assert r.status_code == 500 and "asked to raise" in r.json()["detail"]
    assert client.post("/step", json={"id": idx, "action": "a"}, headers=H).status_code == 409
    assert client.post("/reset", json={"id": idx}, headers=H).status_code == 200


def test_step_seq_makes_retries_idempotent(client):
    idx = client.post("/create", headers=H).json()["id"]
    client.post("/reset", json={"id": idx, "seed": 1}, headers=H)
    first = client.post("/step", json={"id": idx, "action": "a", "seq": 1}, headers=H).json()
    retry = client.post("/step", json={"id": idx, "action": "a", "seq": 1}, headers=H).json()
    assert retry == first and first["observation"].startswith("a|1|")
    skip = client.post("/step", json={"id": idx, "action": "a", "seq": 3}, headers=H)
    assert skip.status_code == 409 and "next must be 2" in skip.json()["detail"]
    nxt = client.post("/step", json={"id": idx, "action": "b", "seq": 2}, headers=H).json()
    assert nxt["observation"].startswith("b|2|")


def test_batch_endpoints_and_per_item_errors(client):
    ids = client.post("/batch/create", json={"count": 5}, headers=H).json()["ids"]
    assert len(set(ids)) == 5
    resets = client.post("/batch/reset", json={"items": [{"id": i, "seed": i} for i in ids]}, headers=H).json()
    assert all(r["observation"].startswith("start|0|") for r in resets["results"])
    items = [{"id": i, "action": f"x{i}"} for i in ids] + [{"id": 999, "action": "y"}]
    out = client.post("/batch/step", json={"items": items}, headers=H).json()["results"]
    assert [r["observation"].split("|")[:2] for r in out[:5]] == [[f"x{i}", "1"] for i in ids]
    assert out[5]["status"] == 404 and "999" in out[5]["error"]


def test_snapshot_restore_clones_an_episode(client):
    a = client.post("/create", headers=H).json()["id"]
    b = client.post("/create", headers=H).json()["id"]
    client.post("/reset", json={"id": a, "seed": 5}, headers=H)
    client.post("/step", json={"id": a, "action": "a"}, headers=H)
    key = client.post("/snapshot", json={"id": a}, headers=H).json()["snapshot"]
    assert client.post("/restore", json={"id": b, "snapshot": key}, headers=H).json() == {"restored": True}
    sa = client.post("/step", json={"id": a, "action": "z"}, headers=H).json()
    sb = client.post("/step", json={"id": b, "action": "z"}, headers=H).json()
    assert sa == sb and sa["observation"].startswith("z|2|")
    assert client.post("/restore", json={"id": b, "snapshot": "nope"}, headers=H).status_code == 404


def test_restarted_instance_is_refused(client):
    idx = client.post("/create", headers=H).json()["id"]
    r = client.post("/reset", json={"id": idx}, headers={**H, "X-Jgem-Instance": "old-instance"})
    assert r.status_code == 410 and "restarted" in r.json()["detail"]


def test_reaper_closes_idle_envs():
    svc = EnvService(ServeConfig(envs=("test:Count-v0",), idle_timeout_s=10))
    a, b = svc.create(), svc.create()
    svc.reset(b)
    svc._slots[a].last_used -= 11
    assert svc.reap() == 1 and len(svc) == 1
    assert svc.reap(now=time.monotonic() + 11) == 1 and len(svc) == 0
    assert svc.metrics()["reaped"] == 2


def test_config_errors_say_what_to_do():
    with pytest.raises(ValueError, match="no registered env id"):
        EnvService(ServeConfig(envs=("nothing:Here",)))
    svc = EnvService(ServeConfig(envs=("test:Count-v0",), max_envs=1))
    svc.create()
    with pytest.raises(Exception, match="max-envs"):
        svc.create()
    svc = EnvService(ServeConfig(envs=("test:Count-v0",), max_envs=3))
    with pytest.raises(Exception, match="max-envs"):
        svc.create_many(4)
    assert len(svc) == 0  # all or nothing
    assert parse_args(["--env", "game:", "--port", "9"]).port == 9


def test_serves_a_real_agentgym_suite_by_prefix():
    """TextCraft played to a win through HTTP with the reference planner, served by id prefix."""
    from jgem.envs.agentgym.textcraft import plan
    from jgem.envs.agentgym.textcraft_recipes import default_book

    app = create_app(ServeConfig(envs=("agentgym:TextCraft",), token="tok"))
    with TestClient(app) as c:
        assert len(c.get("/env_ids", headers=H).json()["env_ids"]) == 6  # v0, d1..d4, minecraft
        assert c.post("/create", headers=H).status_code == 400  # several ids served: name one
        idx = c.post("/create", json={"env_id": "agentgym:TextCraft-v0-d3"}, headers=H).json()["id"]
        r = c.post("/reset", json={"id": idx, "seed": 4}, headers=H).json()
        goal = r["observation"].rsplit("Goal: craft ", 1)[1].rstrip(".")
        for seq, cmd in enumerate(plan(default_book(), goal), 1):
            out = c.post("/step", json={"id": idx, "action": cmd, "seq": seq}, headers=H).json()
        assert out["reward"] == 1.0 and out["done"] and out["info"]["success"] is True


def test_cli_refuses_public_host_without_token(monkeypatch):
    from jgem.envs.remote import server

    monkeypatch.delenv("JGEM_SERVE_TOKEN", raising=False)
    with pytest.raises(SystemExit, match="without a token"):
        server.main(["--env", "test:Count-v0", "--host", "0.0.0.0"])
    with pytest.raises(SystemExit, match="no registered env id"):
        server.main(["--env", "nothing:Here", "--token", "t"])
