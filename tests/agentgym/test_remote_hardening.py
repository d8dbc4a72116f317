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


# -- env_kwargs: only what the operator allows (issue 22 item 4) --------------------------------------------


def _rows(path) -> None:
    path.write_text('{"problem": "1+1", "answer": "2"}\n')


def _math_app(**cfg):
    svc = EnvService(ServeConfig(envs=("math:file", "agentgym:DeepSearch-v0"), token="tok", **cfg))
    return create_app(svc.config, svc), svc


def test_kwargs_are_refused_unless_allowed(tmp_path):
    secret = tmp_path / "secret.jsonl"
    _rows(secret)
    secret.chmod(0o600)
    app, svc = _math_app()
    with TestClient(app) as c:
        r = c.post("/create", json={"env_id": "math:file", "env_kwargs": {"path": str(secret)}}, headers=H)
        assert r.status_code == 403 and "'path'" in r.json()["detail"] and "--allow-kwarg" in r.json()["detail"]
        r = c.post("/batch/create", json={"count": 2, "env_id": "math:file", "env_kwargs": {"seed": 1}}, headers=H)
        assert r.status_code == 403 and "'seed'" in r.json()["detail"]
        assert len(svc) == 0


def test_data_paths_only_under_the_data_roots(tmp_path):
    root, outside = tmp_path / "data", tmp_path / "private"
    root.mkdir()
    outside.mkdir()
    _rows(root / "ok.jsonl")
    _rows(outside / "secret.jsonl")
    (root / "link.jsonl").symlink_to(outside / "secret.jsonl")
    app, svc = _math_app(allow_kwargs=("path",), data_roots=(str(root),))
    with TestClient(app) as c:

        def create(path: str):
            return c.post("/create", json={"env_id": "math:file", "env_kwargs": {"path": path}}, headers=H)

        assert create(str(root / "ok.jsonl")).status_code == 200
        for bad in [
            str(outside / "secret.jsonl"),
            str(root / ".." / "private" / "secret.jsonl"),
            str(root / "link.jsonl"),  # a symlink out of the root
            "/etc/passwd",
            "~/secret.jsonl",
            "secret.jsonl",  # relative to the server's cwd
        ]:
            r = create(bad)
            assert r.status_code == 403 and "'path'" in r.json()["detail"] and "data roots" in r.json()["detail"], bad
        assert len(svc) == 1
    app, _ = _math_app(allow_kwargs=("path",))  # no root configured: no path at all
    with TestClient(app) as c:
        r = c.post("/create", json={"env_id": "math:file", "env_kwargs": {"path": str(root / "ok.jsonl")}}, headers=H)
        assert r.status_code == 403


def test_urls_only_with_an_allowed_prefix():
    app, svc = _math_app(allow_kwargs=("search_url", "topk"))
    with TestClient(app) as c:
        kw = {"env_id": "agentgym:DeepSearch-v0", "env_kwargs": {"search_url": "http://169.254.169.254/latest"}}
        r = c.post("/create", json=kw, headers=H)
        assert r.status_code == 403 and "'search_url'" in r.json()["detail"] and "--allow-url" in r.json()["detail"]
        assert len(svc) == 0
    policy = EnvService(ServeConfig(envs=("math:file",), allow_kwargs=("*",), allow_urls=("http://search:8000/",)))
    policy.policy.check({"search_url": "http://search:8000/retrieve", "anything": 3})
    with pytest.raises(ValueError, match="'search_url'"):
        policy.policy.check({"search_url": "http://search:8000.evil.com/"})
    with pytest.raises(ValueError, match="'endpoint'"):
        policy.policy.check({"endpoint": "file:///etc/passwd"})


def test_allow_list_from_the_command_line(tmp_path):
    args = parse_args(
        ["--env", "math:", "--allow-kwarg", "path", "--allow-kwarg", "seed", "--data-root", str(tmp_path)]
        + ["--allow-url", "http://search:8000/"]
    )
    assert args.allow_kwargs == ["path", "seed"] and args.data_roots == [str(tmp_path)]
    assert args.allow_urls == ["http://search:8000/"]


# -- client mistakes are JSON 4xx, never 500 (issue 22 item 9) ---------------------------------------------


def test_constructor_oserror_is_one_4xx_for_missing_and_existing_files(tmp_path):
    (tmp_path / "a_dir").mkdir()
    svc = EnvService(
        ServeConfig(envs=("test:Opens",), token="tok", allow_kwargs=("path",), data_roots=(str(tmp_path),))
    )
    with TestClient(create_app(svc.config, svc)) as c:
        answers = []
        for path in [tmp_path / "missing.txt", tmp_path / "a_dir"]:
            r = c.post("/create", json={"env_kwargs": {"path": str(path)}}, headers=H)
            assert r.status_code == 400 and r.headers["content-type"] == "application/json"
            answers.append(r.json()["detail"].replace(str(path), "P"))
        assert answers[0] == answers[1]  # nothing tells a missing file from an existing one
        assert "No such file" not in answers[0] and "directory" not in answers[0].lower()


def test_a_negative_seed_is_a_4xx_not_an_env_fault():
    app, svc = _app()
    with TestClient(app) as c:
        idx = c.post("/create", headers=H).json()["id"]
        for body in [{"id": idx, "seed": -1}, {"id": idx, "data_idx": -1}]:
            r = c.post("/reset", json=body, headers=H)
            assert r.status_code == 400 and "seed" in r.json()["detail"]
        r = c.post("/batch/reset", json={"items": [{"id": idx, "seed": -1}, {"id": idx, "seed": 2}]}, headers=H)
        first, second = r.json()["results"]
        assert first["status"] == 400 and "observation" in second
        assert svc.counters["faults"] == 0
        assert c.post("/step", json={"id": idx, "action": "a"}, headers=H).status_code == 200


def test_an_unexpected_error_is_a_json_500():
    svc = EnvService(ServeConfig(envs=("test:Opens",), token="tok", allow_kwargs=("boom",)))
    with TestClient(create_app(svc.config, svc), raise_server_exceptions=False) as c:
        r = c.post("/create", json={"env_kwargs": {"boom": True}}, headers=H)
        assert r.status_code == 500 and "RuntimeError" in r.json()["detail"]
