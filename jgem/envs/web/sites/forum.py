"""Postmill-like forum: boards of threads, nested comments, votes, user pages, served from a seeded database.

Pages: the front page and each board (`/f/<board>`, sorted hot, new or top), a thread (`/f/<board>/<id>/<slug>`)
with its nested comments and a comment form, a reply form per comment, a submit form per board, user pages
(posts, comments, karma), sign in and out. Voting (up or down on threads and comments; the same vote again takes
it back) and posting need a signed-in user. Server-rendered HTML, forms POST and redirect, no JavaScript.
Ids that tasks' `program_html` locators read: `#post-title`, `#post-body`, `#post-score`, `#comment-count`,
`#comments`, and per comment `#comment-<id>` with `#comment-<id>-score` and its `.replies` list.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from jgem.envs.web.sites import forum_data as F
from jgem.envs.web.sites.base import Site, local_path
from jgem.envs.web.sites.tasks_forum import make_task

FRONT_PAGE = 15
MAX_TITLE, MAX_BODY = 200, 5000


class ForumSite(Site):
    """The forum; `user` is the account whose votes, comments and threads the tasks make."""

    name = "forum"
    user = F.MAIN_USER
    tasks = staticmethod(make_task)

    def build(self, seed: int) -> sqlite3.Connection:
        return F.build(seed)

    def routes(self) -> list[Route]:
        return [
            Route("/", self.home),
            Route("/f/{board}", self.board),
            Route("/f/{board}/submit", self.submit, methods=["GET", "POST"]),
            Route("/f/{board}/{post:int}/{slug}", self.thread),
            Route("/post/{post:int}/comment", self.comment, methods=["POST"]),
            Route("/comment/{comment:int}/reply", self.reply, methods=["GET", "POST"]),
            Route("/vote", self.vote, methods=["POST"]),
            Route("/user/{name}", self.user_page),
        ]

    def context(self, user: str | None) -> dict[str, Any]:
        return {"boards": self.query("SELECT name FROM boards ORDER BY name")}

    # ---- listings

    async def home(self, request: Request) -> Response:
        sort = _sort(request)
        posts = self._ranked(self.query(F.POSTS), sort)[:FRONT_PAGE]
        return self.page(request, "home", posts=posts, sort=sort, here=_here(request))

    async def board(self, request: Request) -> Response:
        board = self._board(request.path_params["board"])
        sort = _sort(request)
        posts = self._ranked(self.query(F.POSTS + " WHERE p.board_id = ?", (board["id"],)), sort)
        return self.page(request, "board", board=board, posts=posts, sort=sort, here=_here(request))

    def _ranked(self, posts: list[dict[str, Any]], sort: str) -> list[dict[str, Any]]:
        for p in posts:
            p["url"] = thread_url(p)
        return F.ranked(posts, sort, self.query("SELECT value FROM meta WHERE key = 'now'")[0]["value"])

    # ---- a thread and its comments

    async def thread(self, request: Request) -> Response:
        post = self._post(request.path_params["post"])
        if post["board"] != request.path_params["board"]:
            raise HTTPException(404, f"Thread {post['id']} is not in f/{request.path_params['board']}.")
        return self._thread_page(request, post)

    def _thread_page(self, request: Request, post: dict[str, Any], error: str = "", status: int = 200) -> Response:
        comments = F.thread(self.query(F.COMMENTS_OF, (post["id"],)))
        top = [c for c in comments if c["parent_id"] is None]
        return self.page(request, "thread", status, post=post, comments=top, here=post["url"], error=error)

    async def comment(self, request: Request) -> Response:
        post = self._post(request.path_params["post"])
        user = self.require_user(request, back=post["url"])
        try:
            body = _text((await self.form(request)).get("body", ""), "comment", MAX_BODY)
        except ValueError as e:
            return self._thread_page(request, post, str(e), 400)
        cid = self._insert_comment(user, post["id"], None, body)
        return self.redirect(f"{post['url']}#comment-{cid}")

    async def reply(self, request: Request) -> Response:
        rows = self.query(
            "SELECT c.*, u.username AS author FROM comments c JOIN users u ON u.id = c.author_id WHERE c.id = ?",
            (request.path_params["comment"],),
        )
        if not rows:
            raise HTTPException(404, f"There is no comment {request.path_params['comment']}.")
        parent = rows[0]
        post = self._post(parent["post_id"])
        user = self.require_user(request, back=f"/comment/{parent['id']}/reply")
        if request.method == "GET":
            return self.page(request, "reply", post=post, parent=parent, error="")
        try:
            body = _text((await self.form(request)).get("body", ""), "reply", MAX_BODY)
        except ValueError as e:
            return self.page(request, "reply", 400, post=post, parent=parent, error=str(e))
        cid = self._insert_comment(user, post["id"], parent["id"], body)
        return self.redirect(f"{post['url']}#comment-{cid}")

    def _insert_comment(self, user: str, post: int, parent: int | None, body: str) -> int:
        with self.db() as db:
            return db.execute(
                "INSERT INTO comments (post_id, parent_id, author_id, body, created, base_score) "
                "VALUES (?, ?, (SELECT id FROM users WHERE username = ?), ?, ?, 0)",
                (post, parent, user, body, _now(db)),
            ).lastrowid

    async def submit(self, request: Request) -> Response:
        board = self._board(request.path_params["board"])
        user = self.require_user(request, back=f"/f/{board['name']}/submit")
        if request.method == "GET":
            return self.page(request, "submit", board=board, error="", form={})
        f = await self.form(request)
        try:
            title = _text(f.get("title", ""), "title", MAX_TITLE)
            body = _text(f.get("body", ""), "body", MAX_BODY)
        except ValueError as e:
            return self.page(request, "submit", 400, board=board, error=str(e), form=f)
        with self.db() as db:
            pid = db.execute(
                "INSERT INTO posts (board_id, author_id, title, body, created, base_score) "
                "VALUES (?, (SELECT id FROM users WHERE username = ?), ?, ?, ?, 0)",
                (board["id"], user, title, body, _now(db)),
            ).lastrowid
        return self.redirect(f"/f/{board['name']}/{pid}/{F.slugify(title)}")

    async def vote(self, request: Request) -> Response:
        f = await self.form(request)
        back = local_path(f.get("next", "/"))
        user = self.require_user(request, back=back)
        kind, value = f.get("kind", ""), f.get("value", "")
        if kind not in ("post", "comment") or value not in ("1", "-1") or not f.get("id", "").isdigit():
            raise HTTPException(400, "A vote needs kind=post|comment, an id and value=1|-1.")
        with self.db() as db:
            if not db.execute(f"SELECT 1 FROM {kind}s WHERE id = ?", (int(f["id"]),)).fetchone():
                raise HTTPException(404, f"There is no {kind} {f['id']}.")
            uid = db.execute("SELECT id FROM users WHERE username = ?", (user,)).fetchone()[0]
            key = (uid, kind, int(f["id"]))
            old = db.execute("SELECT value FROM votes WHERE user_id = ? AND kind = ? AND target_id = ?", key).fetchone()
            db.execute("DELETE FROM votes WHERE user_id = ? AND kind = ? AND target_id = ?", key)
            if old is None or old[0] != int(value):  # the same vote again takes it back
                db.execute("INSERT INTO votes VALUES (?, ?, ?, ?)", (*key, int(value)))
        return self.redirect(back)

    # ---- users

    async def user_page(self, request: Request) -> Response:
        name = request.path_params["name"]
        rows = self.query("SELECT * FROM users WHERE username = ?", (name,))
        if not rows:
            raise HTTPException(404, f"There is no user {name!r}.")
        posts = self.query(F.POSTS + " WHERE u.username = ? ORDER BY p.created DESC, p.id DESC", (name,))
        for p in posts:
            p["url"] = thread_url(p)
        comments = self.query(
            f"SELECT c.*, {F.COMMENT_SCORE} AS score, p.title, p.id AS pid, b.name AS board FROM comments c "
            "JOIN posts p ON p.id = c.post_id JOIN boards b ON b.id = p.board_id "
            "WHERE c.author_id = ? ORDER BY c.created DESC, c.id DESC",
            (rows[0]["id"],),
        )
        for c in comments:
            c["url"] = f"{thread_url({'board': c['board'], 'id': c['pid'], 'title': c['title']})}#comment-{c['id']}"
        karma = sum(p["score"] for p in posts) + sum(c["score"] for c in comments)
        return self.page(request, "user", account=rows[0], posts=posts, comments=comments, karma=karma)

    def _board(self, name: str) -> dict[str, Any]:
        rows = self.query("SELECT * FROM boards WHERE name = ?", (name,))
        if not rows:
            raise HTTPException(404, f"There is no forum f/{name}.")
        return rows[0]

    def _post(self, pid: int) -> dict[str, Any]:
        rows = self.query(F.POSTS + " WHERE p.id = ?", (pid,))
        if not rows:
            raise HTTPException(404, f"There is no thread {pid}.")
        rows[0]["url"] = thread_url(rows[0])
        return rows[0]


def thread_url(post: dict[str, Any]) -> str:
    return f"/f/{post['board']}/{post['id']}/{F.slugify(post['title'])}"


def _sort(request: Request) -> str:
    sort = request.query_params.get("sort", "hot")
    if sort not in F.SORTS:
        raise HTTPException(400, f"Unknown sort {sort!r}; use one of {', '.join(F.SORTS)}.")
    return sort


def _here(request: Request) -> str:
    """This page's path and query: where a vote sends the browser back to."""
    return request.url.path + (f"?{request.url.query}" if request.url.query else "")


def _now(db: sqlite3.Connection) -> str:
    """The forum's clock for new posts and comments: the seeded "now" (pages stay deterministic)."""
    return db.execute("SELECT value FROM meta WHERE key = 'now'").fetchone()[0]


def _text(value: str, what: str, limit: int) -> str:
    value = value.strip()
    if not value:
        raise ValueError(f"The {what} cannot be empty.")
    if len(value) > limit:
        raise ValueError(f"The {what} is over {limit} characters.")
    return value
