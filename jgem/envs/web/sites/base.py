"""`Site`: a small web app jgem serves on loopback, whose whole state is an sqlite database rebuilt from a seed.

The env's contract (docs in WEB_DESIGN.md): `start() -> base_url`, `reset(seed)`, `make_task(seed, difficulty)`,
`login_url(user)`, `close()`, `name`. Requests run on the server's thread while the env resets from its own, so
every database access holds the site's lock, and `reset` builds the new database first and swaps it in at once:
a request sees the old state or the new one, never half of each.

A subclass gives `build(seed)` (a fresh database), `routes()` (its pages), `context(user)` (what every page's
layout shows) and `tasks` (its task generator); this class gives sessions, login, rendering and errors.
Sessions are a signed cookie per site (`shop_session`, `forum_session`: cookies ignore ports, and both sites share
127.0.0.1), so they need no server state and survive a reset.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import operator
import secrets
import sqlite3
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import jinja2
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from jgem.envs.web.sites.server import LoopbackServer

TEMPLATES = Path(__file__).parent / "templates"
DIFFICULTIES = ("easy", "hard")
MAX_FORM_BYTES = 1 << 16


class LoginRequired(Exception):
    """Raised by a page that needs a signed-in user; answered with a redirect to the login form."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.path = path


class Site:
    """A seeded site behind a loopback HTTP server. Subclasses set `name`, `user` and `tasks`."""

    name: ClassVar[str]
    user: ClassVar[str]  # the account tasks speak for ("my orders"); `login_url()` signs it in
    tasks: ClassVar[Callable[[sqlite3.Connection, int, str], dict[str, Any]]]

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._secret = secrets.token_bytes(16)
        self._db: sqlite3.Connection | None = None
        self.seed: int | None = None
        self._jinja = jinja2.Environment(
            loader=jinja2.FileSystemLoader([TEMPLATES / self.name, TEMPLATES / "common"]),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        app = Starlette(
            routes=[
                Route("/login", self._login_form, methods=["GET"]),
                Route("/login", self._login, methods=["POST"]),
                Route("/login/auto", self._login_auto, methods=["GET"]),
                Route("/logout", self._logout, methods=["POST"]),
                *self.routes(),
            ],
            exception_handlers={LoginRequired: self._to_login, HTTPException: self._error},
        )
        self._server = LoopbackServer(app, name=self.name)
        self.reset(0)

    # ---- the env's interface

    def start(self) -> str:
        """Serve on 127.0.0.1 at a free port (idempotent); the base URL, once it accepts connections."""
        return self._server.start()

    @property
    def url(self) -> str:
        """The base URL; the site must be started."""
        if self._server.url is None:
            raise RuntimeError(f"the {self.name} site is not serving; call start() first")
        return self._server.url

    def reset(self, seed: int) -> None:
        """Replace the whole state with the one `seed` builds (same seed, same state)."""
        seed = _seed(seed)
        db = self.build(seed)
        with self._lock:  # every use of the database holds the lock, so none is using `old` now
            old, self._db, self.seed = self._db, db, seed
            if old is not None:
                old.close()

    def make_task(self, seed: int, difficulty: str) -> dict[str, Any]:
        """A WebArena-format task for the state `reset(seed)` builds (read from a private copy of that state, so it
        does not matter what was done to the live site since)."""
        if difficulty not in DIFFICULTIES:
            raise ValueError(f"difficulty {difficulty!r} is not one of {', '.join(DIFFICULTIES)}")
        db = self.build(_seed(seed))
        try:
            return type(self).tasks(db, _seed(seed), difficulty)
        finally:
            db.close()

    def login_url(self, user: str | None = None, next: str = "/") -> str:
        """A URL that signs `user` (default: `self.user`) in with the session cookie and redirects to `next`."""
        user = self.user if user is None else user
        query = urllib.parse.urlencode({"user": user, "key": self._sign(user), "next": next})
        return f"{self.url}/login/auto?{query}"

    def close(self) -> None:
        """Stop serving and free the port; idempotent, from any thread."""
        self._server.close()

    def __enter__(self) -> Site:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- what subclasses give

    def build(self, seed: int) -> sqlite3.Connection:
        """A fresh in-memory database holding the state of `seed`."""
        raise NotImplementedError

    def routes(self) -> list[Route]:
        raise NotImplementedError

    def context(self, user: str | None) -> dict[str, Any]:
        """What the layout of every page shows (navigation, cart size, ...), read under the lock."""
        return {}

    # ---- helpers for pages and tests

    def query(self, sql: str, params: tuple | dict = ()) -> list[dict[str, Any]]:
        """Rows of a read on the live database, as dicts."""
        with self.db() as db:
            return [dict(r) for r in db.execute(sql, params)]

    @contextlib.contextmanager
    def db(self) -> Iterator[sqlite3.Connection]:
        """The live database, held under the site's lock; committed on success, rolled back on error."""
        with self._lock:
            assert self._db is not None
            try:
                yield self._db
            except BaseException:
                self._db.rollback()
                raise
            self._db.commit()

    def session_user(self, request: Request) -> str | None:
        """The signed-in user of a request, or None (no cookie, a forged one, or a user this state lacks)."""
        value = request.cookies.get(self._cookie, "")
        user, _, sig = value.rpartition(":")
        if not user or not hmac.compare_digest(sig, self._sign(user)):
            return None
        return user if self.query("SELECT 1 FROM users WHERE username = ?", (user,)) else None

    def require_user(self, request: Request, back: str | None = None) -> str:
        """The signed-in user, else `LoginRequired`: sign in, then come back to `back` (default: this page; a form
        POST names the page it was on)."""
        user = self.session_user(request)
        if user is None:
            raise LoginRequired(back or request.url.path + (f"?{request.url.query}" if request.url.query else ""))
        return user

    async def form(self, request: Request) -> dict[str, str]:
        """An urlencoded POST body as {field: first value} (parsed here, so no multipart dependency)."""
        body = await request.body()
        if len(body) > MAX_FORM_BYTES:
            raise HTTPException(413, f"form over {MAX_FORM_BYTES} bytes")
        fields = urllib.parse.parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
        return {k: v[0] for k, v in fields.items()}

    def page(self, request: Request, template: str, status: int = 200, **ctx: Any) -> HTMLResponse:
        user = self.session_user(request)
        with self._lock:
            layout = self.context(user)
        html = self._jinja.get_template(f"{template}.jinja").render(user=user, path=request.url.path, **layout, **ctx)
        return HTMLResponse(html, status_code=status)

    @staticmethod
    def redirect(url: str) -> RedirectResponse:
        return RedirectResponse(url, status_code=303)

    # ---- sessions

    @property
    def _cookie(self) -> str:
        return f"{self.name}_session"

    def _sign(self, user: str) -> str:
        return hmac.new(self._secret, f"{self.name}:{user}".encode(), hashlib.sha256).hexdigest()[:32]

    def _signed_in(self, user: str, next: str) -> Response:
        response = self.redirect(local_path(next))
        response.set_cookie(self._cookie, f"{user}:{self._sign(user)}", httponly=True, samesite="lax")
        return response

    async def _login_form(self, request: Request) -> Response:
        return self.page(request, "login", next=local_path(request.query_params.get("next", "/")), error="")

    async def _login(self, request: Request) -> Response:
        f = await self.form(request)
        user, password, next = f.get("username", "").strip(), f.get("password", ""), local_path(f.get("next", "/"))
        rows = self.query("SELECT password FROM users WHERE username = ?", (user,))
        if not rows or not hmac.compare_digest(rows[0]["password"], password):
            return self.page(request, "login", 401, next=next, error="Wrong username or password.")
        return self._signed_in(user, next)

    async def _login_auto(self, request: Request) -> Response:
        q = request.query_params
        user = q.get("user", "")
        if not hmac.compare_digest(q.get("key", ""), self._sign(user)):
            raise HTTPException(403, "This sign-in link is not valid.")
        if not self.query("SELECT 1 FROM users WHERE username = ?", (user,)):
            raise HTTPException(404, f"There is no user {user!r} on this site.")
        return self._signed_in(user, q.get("next", "/"))

    async def _logout(self, request: Request) -> Response:
        response = self.redirect("/")
        response.delete_cookie(self._cookie)
        return response

    async def _to_login(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, LoginRequired)
        return self.redirect("/login?" + urllib.parse.urlencode({"next": exc.path}))

    async def _error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return self.page(request, "error", exc.status_code, code=exc.status_code, message=exc.detail)


def _seed(seed: int) -> int:
    try:
        return operator.index(seed)
    except TypeError:
        raise TypeError(f"a site's seed must be an int, got {type(seed).__name__} {seed!r}") from None


def local_path(url: str) -> str:
    """`url` if it is a path on this site, else "/" (a sign-in never redirects off the site)."""
    return url if url.startswith("/") and not url.startswith("//") else "/"
