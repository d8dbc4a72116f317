"""The forum's task templates: information seeking, navigation and state changes, easy and hard.

`make_task(db, seed, difficulty)` reads a freshly seeded forum database, picks template `seed % n` of the
difficulty and fills it from a `random.Random` of the seed. Evaluators come from the database (the truth the
pages show), solutions are steps on the accessible names forum.py's pages give.

easy (3 steps): who posted the top thread of a board; how many comments a thread has; open a board sorted by
new or top; up- or downvote a thread; comment on a thread, from its page.
hard (4-12 steps): which thread of a board has a comment by a user (open them in turn); open the profile of the
author of the best comment on a board's top thread; reply to a user's comment in a named thread; upvote a board's
top thread and its best comment; create a thread with a title and body.
"""

from __future__ import annotations

import random
import sqlite3
from typing import Any

from jgem.envs.web.sites import forum_data as F
from jgem.envs.web.sites import task as T
from jgem.envs.web.sites.task import Instance, click, stop, type_

FORUM = "__FORUM__"
NEW_TITLES = ["Looking for recommendations from this community", "A small win I wanted to share",
              "Weekly discussion thread for newcomers", "Unpopular opinion about a classic",
              "What got you into this hobby", "Tips I wish I had known earlier", "Ask me anything about my setup",
              "The best advice I ever got here"]  # fmt: skip
REPLIES = ["Thanks for sharing, this was really helpful.", "I see it differently, but good points.",
           "Could you post a photo next time?", "This made my day, thank you.", "Bookmarking this for the weekend.",
           "Agreed, and the second point matters most.", "Welcome to the forum, glad you posted.",
           "I had no idea about that, great find."]  # fmt: skip


def make_task(db: sqlite3.Connection, seed: int, difficulty: str) -> dict[str, Any]:
    """The WebArena task config of `seed` at `difficulty` ("easy" or "hard") on the forum state in `db`."""
    templates = {"easy": EASY, "hard": HARD}[difficulty]
    rng = random.Random(f"jgem-forum-task-{difficulty}-{seed}")
    inst = templates[seed % len(templates)](_Forum(db), rng)
    return T.config("forum", FORUM, F.MAIN_USER, seed, difficulty, inst)


class _Forum:
    """Read access to the seeded database, in the shapes the templates want."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        self.now = db.execute("SELECT value FROM meta WHERE key = 'now'").fetchone()[0]

    def rows(self, sql: str, params: tuple = ()) -> list[dict[str, Any]]:
        return [dict(r) for r in self.db.execute(sql, params)]

    def boards(self) -> list[str]:
        return [r["name"] for r in self.rows("SELECT name FROM boards ORDER BY name")]

    def posts(self, board: str, sort: str = "hot") -> list[dict[str, Any]]:
        """A board's threads in its listing's order, each with `url` and its `comments` in page order."""
        posts = F.ranked(self.rows(F.POSTS + " WHERE b.name = ?", (board,)), sort, self.now)
        for p in posts:
            p["url"] = f"{FORUM}/f/{board}/{p['id']}/{F.slugify(p['title'])}"
            p["comments"] = F.thread(self.rows(F.COMMENTS_OF, (p["id"],)))
        return posts

    def top_with_comments(self) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
        """(board, its top thread, that thread's highest-scoring comment) for boards whose top thread has one."""
        out = []
        for board in self.boards():
            top = self.posts(board, "top")[0]
            if top["comments"]:
                out.append((board, top, max(top["comments"], key=lambda c: c["score"])))
        return out


def _open(board: str, sort: str | None = None) -> list[T.Step]:
    return [click("link", f"f/{board}")] + ([click("link", sort.capitalize())] if sort else [])


# ---- easy


def top_author(forum: _Forum, rng: random.Random) -> Instance:
    board = rng.choice(forum.boards())
    top = forum.posts(board, "top")[0]
    return Instance(
        0,
        "Who posted the top-scoring thread in f/{{board}}?",
        {"board": board},
        T.string_match(include=[top["author"]]),
        [*_open(board, "top"), stop(top["author"])],
        f"{FORUM}/",
    )


def comment_count(forum: _Forum, rng: random.Random) -> Instance:
    board = rng.choice(forum.boards())
    post = rng.choice(forum.posts(board))
    n = str(post["comment_count"])
    return Instance(
        1,
        "How many comments does the thread “{{title}}” in f/{{board}} have?",
        {"title": post["title"], "board": board},
        T.string_match(include=[n]),
        [*_open(board), click("link", post["title"]), stop(n)],
        f"{FORUM}/",
    )


def sorted_board(forum: _Forum, rng: random.Random) -> Instance:
    board = rng.choice(forum.boards())
    sort, phrase = rng.choice([("new", "newest"), ("top", "top-scoring")])
    return Instance(
        2,
        "Show me the {{order}} threads of f/{{board}}.",
        {"order": phrase, "board": board},
        T.url_match(f"{FORUM}/f/{board}?sort={sort}"),
        [*_open(board, sort), stop()],
        f"{FORUM}/",
    )


def vote_thread(forum: _Forum, rng: random.Random) -> Instance:
    board = rng.choice(forum.boards())
    post = rng.choice(forum.posts(board))
    action, delta = rng.choice([("Upvote", 1), ("Downvote", -1)])
    return Instance(
        3,
        "{{action}} the thread “{{title}}” in f/{{board}}.",
        {"action": action, "title": post["title"], "board": board},
        T.program_html(T.target(post["url"], "#post-score", exact=str(post["score"] + delta))),
        [*_open(board), click("button", f"{action} {post['title']}"), stop()],
        f"{FORUM}/",
    )


def comment_thread(forum: _Forum, rng: random.Random) -> Instance:
    post = rng.choice(forum.posts(rng.choice(forum.boards())))
    text = rng.choice(REPLIES)
    return Instance(
        4,
        "Post a comment saying “{{text}}” on the thread “{{title}}”.",
        {"text": text, "title": post["title"]},
        T.program_html(T.target(post["url"], "#comments", include=[text])),
        [type_("textbox", "Comment", text), click("button", "Post comment"), stop()],
        post["url"],
    )


# ---- hard


def commented_thread(forum: _Forum, rng: random.Random) -> Instance:
    """Which thread of a board has a comment by a user who commented on exactly one there: one of the first six
    of the listing, not the first when possible (so the threads must be opened in turn)."""
    candidates = []
    for board in forum.boards():
        posts = forum.posts(board)
        at: dict[str, set[int]] = {}
        for i, p in enumerate(posts):
            for c in p["comments"]:
                at.setdefault(c["author"], set()).add(i)
        candidates += [(board, posts, user, min(s)) for user, s in sorted(at.items()) if len(s) == 1 and min(s) <= 5]
    board, posts, user, hit = rng.choice([c for c in candidates if c[3] >= 1] or candidates)
    title = posts[hit]["title"]
    return Instance(
        5,
        "Which thread in f/{{board}} has a comment by {{user}}? Answer with its title.",
        {"board": board, "user": user},
        T.string_match(include=[title]),
        [*_open(board), *T.scan([p["title"] for p in posts], hit), stop(title)],
        f"{FORUM}/",
    )


def best_commenter(forum: _Forum, rng: random.Random) -> Instance:
    board, top, best = rng.choice(forum.top_with_comments())
    return Instance(
        6,
        "Open the profile page of the user who wrote the highest-scoring comment on the top-scoring thread "
        "of f/{{board}}.",
        {"board": board},
        T.url_match(f"{FORUM}/user/{best['author']}"),
        [*_open(board, "top"), click("link", top["title"]), click("link", best["author"]), stop()],
        f"{FORUM}/",
    )


def reply_comment(forum: _Forum, rng: random.Random) -> Instance:
    """Reply to the only comment of a user in a named thread."""
    candidates = []
    for board in forum.boards():
        for p in forum.posts(board):
            authors = [c["author"] for c in p["comments"]]
            candidates += [(board, p, c) for c in p["comments"] if authors.count(c["author"]) == 1]
    board, post, comment = rng.choice(candidates)
    text = rng.choice(REPLIES)
    return Instance(
        7,
        "In the thread “{{title}}” in f/{{board}}, reply to the comment by {{user}} with “{{text}}”.",
        {"title": post["title"], "board": board, "user": comment["author"], "text": text},
        T.program_html(T.target(post["url"], f"#comment-{comment['id']} > .replies", include=[text])),
        [
            *_open(board),
            click("link", post["title"]),
            click("link", f"Reply to comment {comment['label']}"),
            type_("textbox", "Reply", text),
            click("button", "Post reply"),
            stop(),
        ],
        f"{FORUM}/",
    )


def upvote_top(forum: _Forum, rng: random.Random) -> Instance:
    board, top, best = rng.choice(forum.top_with_comments())
    return Instance(
        8,
        "Upvote the top-scoring thread of f/{{board}} and the highest-scoring comment on it.",
        {"board": board},
        T.program_html(
            T.target(top["url"], "#post-score", exact=str(top["score"] + 1)),
            T.target(top["url"], f"#comment-{best['id']}-score", exact=str(best["score"] + 1)),
        ),
        [
            *_open(board, "top"),
            click("button", f"Upvote {top['title']}"),
            click("link", top["title"]),
            click("button", f"Upvote comment {best['label']}"),
            stop(),
        ],
        f"{FORUM}/",
    )


def create_thread(forum: _Forum, rng: random.Random) -> Instance:
    board = rng.choice(forum.boards())
    title, body = rng.choice(NEW_TITLES), " ".join(rng.sample(REPLIES, 2))
    pid = forum.rows("SELECT MAX(id) + 1 AS n FROM posts")[0]["n"]  # the id the next thread gets
    url = f"{FORUM}/f/{board}/{pid}/{F.slugify(title)}"
    return Instance(
        9,
        "Create a thread in f/{{board}} titled “{{title}}” that says “{{body}}”.",
        {"board": board, "title": title, "body": body},
        T.program_html(T.target(url, "#post-title", exact=title), T.target(url, "#post-body", include=[body])),
        [
            *_open(board),
            click("link", "Submit a new thread"),
            type_("textbox", "Title", title),
            type_("textbox", "Body", body),
            click("button", "Create thread"),
            stop(),
        ],
        f"{FORUM}/",
    )


EASY = [top_author, comment_count, sorted_board, vote_thread, comment_thread]
HARD = [commented_thread, best_commenter, reply_comment, upvote_top, create_thread]
