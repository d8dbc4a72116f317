"""The env server under hostile or careless clients: auth from headers first, on every route; cut bodies never run."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

import tests.agentgym.remote_envs  # noqa: E402, F401  registers test:Count-v0
from jgem.envs.remote.server import create_app, parse_args, resolve_token  # noqa: E402
from jgem.envs.remote.service import EnvService, ServeConfig  # noqa: E402

H = {"Authorization": "Bearer tok"}


def _app():
    svc = EnvService(ServeConfig(envs=("test:Count",), token="tok", max_body_bytes=4096))
    return create_app(svc.config, svc), svc


@pytest.mark.parametrize("path", ["/", "/docs", "/openapi.json", "/redoc", "/nothing-here"])
def test_every_route_but_health_needs_the_token(path):
    app, _ = _app()
    with TestClient(app) as c:
        r = c.get(path)
        assert r.status_code == 401 and "token" in r.json()["detail"]
        assert c.get(path, headers=H).status_code != 401
        assert c.get("/health").status_code == 200


def test_auth_comes_before_the_stale_instance_410():
    app, _ = _app()
    with TestClient(app) as c:
        r = c.post("/reset", json={"id": 0}, headers={"X-Jgem-Instance": "old-instance"})
        assert r.status_code == 401


async def _call(app, method: str, path: str, headers: list, messages: list) -> tuple[int | None, int]:
    """Run one ASGI request; returns (status, how many body messages the app pulled)."""
    pulled = 0
    status = None

    async def receive() -> dict:
        nonlocal pulled
        pulled += 1
        if pulled <= len(messages):
            return messages[pulled - 1]
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
        "state": {},
    }
    await asyncio.wait_for(app(scope, receive, send), timeout=10)
    return status, pulled


def test_unauthenticated_body_is_never_read():
    app, _ = _app()
    big = {"type": "http.request", "body": b"x" * 4000, "more_body": True}
    status, pulled = asyncio.run(_call(app, "POST", "/create", [(b"content-length", b"1000000")], [big] * 300))
    assert status == 401 and pulled == 0


def test_a_request_cut_mid_body_is_never_run():
    app, svc = _app()
    headers = [(b"authorization", b"Bearer tok"), (b"content-type", b"application/json"), (b"content-length", b"1000")]
    cut = [{"type": "http.request", "body": b"{}", "more_body": True}, {"type": "http.disconnect"}]
    status, _ = asyncio.run(_call(app, "POST", "/create", headers, cut))
    assert status is None and len(svc) == 0  # no answer, no env


def test_token_from_a_file_or_the_environment(tmp_path, monkeypatch):
    f = tmp_path / "token"
    f.write_text("s3cret\n")
    monkeypatch.delenv("JGEM_SERVE_TOKEN", raising=False)
    assert resolve_token(parse_args(["--env", "game:", "--token-file", str(f)])) == "s3cret"
    monkeypatch.setenv("JGEM_SERVE_TOKEN", "from-env")
    assert resolve_token(parse_args(["--env", "game:"])) == "from-env"
    f.write_text("")
    with pytest.raises(SystemExit, match="empty"):
        resolve_token(parse_args(["--env", "game:", "--token-file", str(f)]))
