"""HTTP env server: any registered env id behind AgentGym's contract plus jgem's batched endpoints.

`create_app(ServeConfig(...))` builds the FastAPI app; `jgem-serve` (`main`) runs it under uvicorn.
Every route but `/health` needs `Authorization: Bearer <token>` when the server has a token.
"""

# No `from __future__ import annotations`: FastAPI must resolve the request models defined inside create_app.
import argparse
import asyncio
import contextlib
import hmac
import importlib
import ipaddress
import logging
import os
import sys
from typing import Annotated, Any

from jgem.envs.remote.protocol import DEFAULT_PORT, INSTANCE_HEADER, TOKEN_HEADER
from jgem.envs.remote.service import EnvService, ServeConfig, ServiceError

log = logging.getLogger("jgem.serve")


class HeaderAuth:
    """ASGI middleware checking the bearer token from the headers alone, before any body is read and before
    any other check (the instance header's 410 included): every path but `/health` (`/`, `/docs` and
    `/openapi.json` too) answers 401 JSON without it."""

    OPEN = frozenset({"/health"})

    def __init__(self, app: Any, token: str | None) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode() if token else None

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or self.expected is None or scope.get("path") in self.OPEN:
            return await self.app(scope, receive, send)
        got = b""
        for name, value in scope.get("headers") or []:
            if name == b"authorization":
                got = value
                break
        if hmac.compare_digest(got, self.expected):
            return await self.app(scope, receive, send)
        body = b'{"detail": "missing or wrong bearer token; send \'Authorization: Bearer <token>\'"}'
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", b"Bearer"),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


class BodyLimit:
    """ASGI middleware refusing request bodies over `max_bytes` with 413, declared or streamed; a request whose
    client went away before the whole body arrived is never run."""

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            return await self._refuse(send)
        # Read the whole body first (bounded), so a streamed oversized body is refused before any handler runs.
        chunks, seen = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # http.disconnect mid-body: the request did not arrive whole
            chunks.append(message.get("body", b""))
            seen += len(chunks[-1])
            if seen > self.max_bytes:
                return await self._refuse(send)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, send: Any) -> None:
        body = (
            f'{{"detail": "request body exceeds the server limit of {self.max_bytes} bytes; send smaller '
            f'batches or start the server with a larger --max-body-bytes"}}'
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})


def create_app(config: ServeConfig, service: EnvService | None = None) -> Any:
    """The FastAPI app serving `config.envs`."""
    from fastapi import Body, Depends, FastAPI, HTTPException, Request
    from fastapi.concurrency import run_in_threadpool
    from fastapi.responses import JSONResponse, PlainTextResponse
    from pydantic import BaseModel, ConfigDict, Field

    svc = service if service is not None else EnvService(config)  # an empty service is falsy (__len__)

    class _Body(BaseModel):
        model_config = ConfigDict(extra="ignore")  # AgentGym clients send extra fields; ignore them

    class CreateBody(_Body):
        env_id: str | None = None
        env_kwargs: dict[str, Any] | None = None

    class BatchCreateBody(CreateBody):
        count: int = Field(ge=1, le=config.max_batch)

    class IdBody(_Body):
        id: int

    class ResetBody(IdBody):
        seed: int | None = None
        agent: str | None = None  # a multi-agent env: answer this agent's view only
        data_idx: int | None = None  # AgentGym's name for the task index; used as the seed

    class StepBody(IdBody):
        action: str | dict[str, str]  # a dict: a multi-agent env's joint action
        seq: int | None = None
        agent: str | None = None  # a multi-agent env: the action is this agent's alone

    class RestoreBody(IdBody):
        snapshot: str

    class BatchReset(_Body):
        items: list[ResetBody] = Field(max_length=config.max_batch)

    class BatchStep(_Body):
        items: list[StepBody] = Field(max_length=config.max_batch)

    async def authorize(request: Request) -> None:
        if not config.token:
            return
        got = request.headers.get(TOKEN_HEADER, "")
        if not hmac.compare_digest(got.encode(), f"Bearer {config.token}".encode()):
            raise HTTPException(
                401,
                "missing or wrong bearer token; send 'Authorization: Bearer <token>'",
                headers={"WWW-Authenticate": "Bearer"},
            )

    @contextlib.asynccontextmanager
    async def lifespan(app: Any):
        async def reaper() -> None:
            while True:
                await asyncio.sleep(config.reap_interval_s)
                n = await run_in_threadpool(svc.reap)
                if n:
                    log.info("reaped %d idle envs", n)

        task = asyncio.create_task(reaper())
        try:
            yield
        finally:  # graceful shutdown: uvicorn has drained requests; release every env (JVMs, sockets)
            task.cancel()
            await run_in_threadpool(svc.close_all)

    app = FastAPI(title="jgem env server", lifespan=lifespan)
    app.state.service = svc
    guarded = [Depends(authorize)]

    @app.exception_handler(ServiceError)
    async def _service_error(request: Request, exc: ServiceError) -> JSONResponse:
        return JSONResponse({"detail": exc.message}, status_code=exc.status)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        # Never a plain-text 500: clients parse every answer as JSON.
        log.exception("unhandled error on %s", request.url.path)
        return JSONResponse({"detail": f"internal server error: {type(exc).__name__}; see the server log"}, 500)

    @app.middleware("http")
    async def _instance_header(request: Request, call_next: Any) -> Any:
        # A client that names the instance it created its env on is refused after a restart: env ids restart
        # from 0, and its id may now belong to someone else's env.
        expected = request.headers.get(INSTANCE_HEADER)
        if expected and expected != svc.instance:
            return JSONResponse(
                {
                    "detail": f"server instance changed ({expected} -> {svc.instance}): it restarted "
                    "and its envs are gone; create a new env"
                },
                status_code=410,
                headers={INSTANCE_HEADER: svc.instance},
            )
        response = await call_next(request)
        response.headers[INSTANCE_HEADER] = svc.instance
        return response

    def reset_one(b: ResetBody) -> dict:
        return svc.reset(b.id, b.seed if b.seed is not None else b.data_idx, b.agent)

    def batch(fn: Any, items: list) -> list[dict]:
        out = []
        for it in items:
            try:
                out.append(fn(it))
            except ServiceError as e:
                out.append({"error": e.message, "status": e.status})
        return out

    @app.get("/")
    def hello() -> str:
        return f"This is the jgem env server for {', '.join(svc.env_ids[:20])}."

    @app.get("/health")
    def health() -> dict:
        return {"status": "ok", "instance": svc.instance, "envs": len(svc)}

    @app.get("/metrics", dependencies=guarded, response_class=PlainTextResponse)
    def metrics() -> str:
        return "".join(f"jgem_serve_{k} {v}\n" for k, v in svc.metrics().items())

    @app.get("/env_ids", dependencies=guarded)
    def env_ids() -> dict:
        return {"env_ids": list(svc.env_ids)}

    @app.post("/create", dependencies=guarded)
    def create(body: Annotated[CreateBody | None, Body()] = None) -> dict:
        body = body or CreateBody()
        return {"id": svc.create(body.env_id, body.env_kwargs), "instance": svc.instance}

    @app.post("/batch/create", dependencies=guarded)
    def batch_create(body: BatchCreateBody) -> dict:
        return {"ids": svc.create_many(body.count, body.env_id, body.env_kwargs), "instance": svc.instance}

    @app.post("/reset", dependencies=guarded)
    def reset(body: ResetBody) -> dict:
        return reset_one(body)

    @app.post("/step", dependencies=guarded)
    def step(body: StepBody) -> dict:
        return svc.step(body.id, body.action, body.seq, body.agent)

    @app.post("/batch/reset", dependencies=guarded)
    def batch_reset(body: BatchReset) -> dict:
        return {"results": batch(reset_one, body.items)}

    @app.post("/batch/step", dependencies=guarded)
    def batch_step(body: BatchStep) -> dict:
        return {"results": batch(lambda b: svc.step(b.id, b.action, b.seq, b.agent), body.items)}

    @app.get("/observation", dependencies=guarded)
    def observation(id: int, agent: str | None = None) -> dict:
        return {"observation": svc.observation(id)} if agent is None else svc.observation(id, agent)

    @app.post("/close", dependencies=guarded)
    def close(body: IdBody) -> dict:
        svc.close(body.id)
        return {"closed": True}

    @app.post("/snapshot", dependencies=guarded)
    def snapshot(body: IdBody) -> dict:
        return {"snapshot": svc.snapshot(body.id)}

    @app.post("/restore", dependencies=guarded)
    def restore(body: RestoreBody) -> dict:
        svc.restore(body.id, body.snapshot)
        return {"restored": True}

    return HeaderAuth(BodyLimit(app, config.max_body_bytes), config.token)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser("jgem-serve", description="Serve jgem envs over HTTP (AgentGym contract).")
    p.add_argument(
        "--env",
        action="append",
        required=True,
        help="env id or id prefix to serve (repeatable), e.g. agentgym:BabyAI or game:",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=DEFAULT_PORT)
    p.add_argument(
        "--token",
        default=None,
        help="bearer token clients must send; visible to other local users in the process list, so prefer "
        "--token-file or $JGEM_SERVE_TOKEN",
    )
    p.add_argument("--token-file", default=None, help="read the bearer token from this file (first line)")
    p.add_argument(
        "--limit-concurrency",
        type=int,
        default=256,
        help="most connections and tasks at once (uvicorn); more are answered 503",
    )
    p.add_argument(
        "--timeout-keep-alive", type=float, default=5.0, help="seconds an idle connection is kept open (uvicorn)"
    )
    p.add_argument(
        "--timeout-headers",
        type=float,
        default=10.0,
        help="seconds a client may take to send a request's headers; slower connections are closed",
    )
    p.add_argument("--no-token", action="store_true", help="allow serving a non-loopback host without a token")
    p.add_argument("--max-envs", type=int, default=4096)
    p.add_argument("--max-body-bytes", type=int, default=ServeConfig.max_body_bytes)
    p.add_argument(
        "--idle-timeout", type=float, default=ServeConfig.idle_timeout_s, help="seconds before an idle env is closed"
    )
    p.add_argument(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE first (repeatable), e.g. one that registers your own env ids",
    )
    p.add_argument(
        "--allow-kwarg",
        dest="allow_kwargs",
        action="append",
        default=[],
        metavar="NAME",
        help="env kwarg clients may pass in env_kwargs (repeatable; '*' any name); others answer 403",
    )
    p.add_argument(
        "--data-root",
        dest="data_roots",
        action="append",
        default=[],
        metavar="DIR",
        help="directory data paths in env_kwargs may name (repeatable); without one, no path is accepted",
    )
    p.add_argument(
        "--allow-url",
        dest="allow_urls",
        action="append",
        default=[],
        metavar="PREFIX",
        help="URL prefix env_kwargs may name, e.g. http://search:8000/ (repeatable); without one, no URL",
    )
    p.add_argument("--log-level", default="warning")
    return p.parse_args(argv)


def resolve_token(args: argparse.Namespace) -> str | None:
    """The token from --token-file, else --token, else $JGEM_SERVE_TOKEN."""
    from jgem.envs.remote import TOKEN_ENV, read_token_file

    if args.token_file:
        try:
            return read_token_file(args.token_file)
        except ValueError as e:
            sys.exit(f"--token-file: {e}")
    return args.token or os.environ.get(TOKEN_ENV) or None


def main(argv: list[str] | None = None) -> None:
    """`jgem-serve`: run the server until SIGINT/SIGTERM, then close every env."""
    import uvicorn

    args = parse_args(argv)
    args.token = resolve_token(args)
    if not args.token and not _is_loopback(args.host) and not args.no_token:
        sys.exit(
            f"refusing to serve {args.host} without a token: pass --token (or set JGEM_SERVE_TOKEN), "
            "or --no-token if the network is trusted"
        )
    for module in args.imports:
        importlib.import_module(module)
    config = ServeConfig(
        envs=tuple(args.env),
        token=args.token,
        max_envs=args.max_envs,
        max_body_bytes=args.max_body_bytes,
        idle_timeout_s=args.idle_timeout,
        allow_kwargs=tuple(args.allow_kwargs),
        data_roots=tuple(args.data_roots),
        allow_urls=tuple(args.allow_urls),
    )
    try:
        app = create_app(config)
    except ValueError as e:
        sys.exit(str(e))
    from jgem.envs.remote.header_timeout import with_header_timeout

    server = _announcing_server(
        uvicorn.Config(
            app,
            http=with_header_timeout(args.timeout_headers),
            host=args.host,
            port=args.port,
            log_level=args.log_level,
            timeout_graceful_shutdown=10,
            limit_concurrency=args.limit_concurrency,
            timeout_keep_alive=args.timeout_keep_alive,
            h11_max_incomplete_event_size=16 * 1024,  # headers larger than this are refused
        ),
        tuple(args.env),
        bool(args.token),
    )
    with contextlib.suppress(KeyboardInterrupt):
        server.run()
    if not server.started:
        sys.exit(3)  # uvicorn's startup failure (e.g. the port is taken); it logged why


def listening_line(host: str, port: int, envs: tuple[str, ...], token: bool) -> str:
    """The line jgem-serve prints once its socket listens: the URL clients use, what it serves, and its auth."""
    netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    auth = "token required" if token else "no token"
    return f"jgem-serve: listening on http://{netloc} ({', '.join(envs)}; {auth}); Ctrl-C stops it"


def _announcing_server(config: Any, envs: tuple[str, ...], token: bool) -> Any:
    """uvicorn's server, printing `listening_line` (with the bound port, also for --port 0) once it listens."""
    import uvicorn

    class AnnouncingServer(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            if self.should_exit or not getattr(self, "servers", None):
                return
            host, port = self.servers[0].sockets[0].getsockname()[:2]
            print(listening_line(host, port, envs, token), file=sys.stderr, flush=True)

    return AnnouncingServer(config)


if __name__ == "__main__":
    main()
