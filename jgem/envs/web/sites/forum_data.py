"""The forum's seeded database: users, boards, threads, nested comments and their scores, from word lists.

`build(seed)` is deterministic (one `random.Random` per seed; "now" is a date the seed picks, never the clock).
Scores are a base drawn per item plus the votes cast on the site; base scores differ within a board (threads)
and within a thread (comments), so "the top thread" and "the highest-scoring comment" have one answer. No
username or title is a substring of another, so a name in an answer or a `/user/<name>` URL points at one.
"""

from __future__ import annotations

import datetime as dt
import random
import re
import sqlite3
from typing import Any

SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE users (id INTEGER PRIMARY KEY, username TEXT UNIQUE NOT NULL, password TEXT NOT NULL,
                    joined TEXT NOT NULL);
CREATE TABLE boards (id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL, description TEXT NOT NULL);
CREATE TABLE posts (
    id INTEGER PRIMARY KEY, board_id INTEGER NOT NULL REFERENCES boards(id),
    author_id INTEGER NOT NULL REFERENCES users(id), title TEXT NOT NULL, body TEXT NOT NULL,
    created TEXT NOT NULL, base_score INTEGER NOT NULL);
CREATE TABLE comments (
    id INTEGER PRIMARY KEY, post_id INTEGER NOT NULL REFERENCES posts(id), parent_id INTEGER REFERENCES comments(id),
    author_id INTEGER NOT NULL REFERENCES users(id), body TEXT NOT NULL, created TEXT NOT NULL,
    base_score INTEGER NOT NULL);
CREATE TABLE votes (
    user_id INTEGER NOT NULL REFERENCES users(id), kind TEXT NOT NULL CHECK (kind IN ('post', 'comment')),
    target_id INTEGER NOT NULL, value INTEGER NOT NULL CHECK (value IN (-1, 1)),
    PRIMARY KEY (user_id, kind, target_id));
"""

MAIN_USER = "MarvelsGrantMan136"  # the account tasks speak for (WebArena's forum user)
BOARDS = {  # name: (description, thread titles); names are not prefixes of one another (URL matching)
    "books": (
        "Novels, non-fiction and everything you read.",
        [
            "What are you reading this week",
            "Best fantasy series to start this year",
            "Is it worth finishing a book you dislike",
            "Recommend me a short classic novel",
            "Audiobooks versus paper books",
            "The library near me is closing",
            "Which translation of the Odyssey to read",
            "Books that changed how you think",
            "Finished my first thousand page novel",
            "Underrated science fiction authors",
            "Do you keep a reading journal",
            "Book club picks for beginners",
        ],
    ),
    "movies": (
        "Films old and new, reviews and recommendations.",
        [
            "Most rewatchable comedy of the nineties",
            "Movies with a perfect final scene",
            "Is the director cut always better",
            "Hidden gems from the festival circuit",
            "Practical effects that still hold up",
            "Sequels better than the original",
            "What did you watch last weekend",
            "Best film scores of all time",
            "Silent films worth watching today",
            "Documentaries that changed your mind",
            "The cinema in my town reopened",
            "Overrated classics discussion",
        ],
    ),
    "cooking": (
        "Recipes, techniques and kitchen disasters.",
        [
            "How do you keep basil fresh",
            "My first attempt at sourdough",
            "Cast iron care myths",
            "Weeknight dinners under thirty minutes",
            "Best knife for a home cook",
            "Why did my custard split",
            "Favourite soup for cold evenings",
            "Meal prep ideas for the office",
            "Homemade pasta without a machine",
            "Spice blends you always keep",
            "Baking at high altitude tips",
            "Vegetarian dishes that even meat eaters love",
        ],
    ),
    "gaming": (
        "Video games, board games and the people who play them.",
        [
            "Games with the best soundtrack",
            "Finally beat the final boss",
            "Cozy games for a rainy day",
            "Board game recommendations for four players",
            "Speedrunning as a beginner",
            "Is the new console worth it",
            "Retro games that aged well",
            "Co-op games to play with a partner",
            "Longest save file you have",
            "Indie studios to watch",
            "Puzzle games that made you feel clever",
            "Which controller do you prefer",
        ],
    ),
    "travel": (
        "Trips, tips and places worth the detour.",
        [
            "Packing light for two weeks",
            "Best train journeys in Europe",
            "Travelling solo for the first time",
            "Underrated cities to visit in spring",
            "How early to arrive at the airport",
            "Favourite hostel experiences",
            "Budget tips for expensive cities",
            "Road trip playlist suggestions",
            "Learning a few phrases before a trip",
            "Night markets worth visiting",
            "Travel insurance horror stories",
            "Hiking trails with a view",
        ],
    ),
    "science": (
        "Research news, explainers and questions.",
        [
            "Why is the sky blue at noon but red at sunset",
            "New exoplanet discoveries this month",
            "How do vaccines train the immune system",
            "Explain quantum entanglement simply",
            "The oldest known cave paintings",
            "What happens inside a black hole",
            "Citizen science projects you can join",
            "How accurate are weather forecasts",
            "Deep sea creatures that glow",
            "The chemistry of baking bread",
            "How bees navigate",
            "Fusion power progress explained",
        ],
    ),
}
ADJECTIVES = ["Quiet", "Brave", "Lucky", "Clever", "Sunny", "Rapid", "Gentle", "Cosmic", "Mellow", "Witty", "Frosty",
              "Bold", "Nimble", "Dusty", "Golden"]  # fmt: skip
ANIMALS = ["Falcon", "Otter", "Badger", "Heron", "Lynx", "Panda", "Walrus", "Gecko", "Raven", "Bison", "Koala",
           "Marmot", "Puffin", "Tapir", "Yak"]  # fmt: skip
OPENERS = ["I have been thinking about this for a while.", "Curious what everyone here thinks.",
           "Long time lurker, first post.", "This came up at dinner last night.",
           "Maybe a silly question, but here goes.",
           "I could not find an older thread about this."]  # fmt: skip
DETAILS = ["Any advice is welcome.", "Please share your experience below.", "I will post an update next week.",
           "Links to good resources would help a lot.", "Tell me I am not the only one.",
           "Bonus points for something a little unusual."]  # fmt: skip
COMMENTS = [
    "Totally agree with this.",
    "I had the exact same experience last year.",
    "Could you share more details?",
    "This is the best answer in the thread.",
    "Not sure I agree, but it is an interesting take.",
    "Thanks, this helped a lot.",
    "Came here to say the same thing.",
    "Seconding this recommendation.",
    "I tried that and it did not work for me.",
    "Great question, following the thread.",
    "Depends a lot on your budget.",
    "My friend swears by the opposite approach.",
    "Saving this for later.",
    "That is a surprisingly deep rabbit hole.",
    "Have you looked at the older threads?",
    "Honestly the simplest option is usually best.",
    "Underrated point right here.",
    "I changed my mind after reading this.",
    "Same here, every single time.",
    "Source on that?",
]
THREADS_PER_BOARD = (6, 9)
MAX_DEPTH = 3


def slugify(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "thread"


def build(seed: int) -> sqlite3.Connection:
    rng = random.Random(f"jgem-forum-{seed}")
    db = sqlite3.connect(":memory:", check_same_thread=False)
    db.row_factory = sqlite3.Row
    db.executescript(SCHEMA)
    now = dt.datetime(2024, 1, 1, 12) + dt.timedelta(days=rng.randrange(300))
    db.execute("INSERT INTO meta VALUES ('now', ?)", (now.isoformat(timespec="minutes"),))
    users = [MAIN_USER]
    while len(users) < 15:
        name = f"{rng.choice(ADJECTIVES)}{rng.choice(ANIMALS)}{rng.randint(10, 99)}"
        if not any(name in u or u in name for u in users):
            users.append(name)
    for name in users:
        joined = (now - dt.timedelta(days=rng.randint(60, 2000))).date().isoformat()
        db.execute("INSERT INTO users (username, password, joined) VALUES (?, ?, ?)", (name, f"{name}-pass", joined))
    user_ids = list(range(1, len(users) + 1))
    for name, (description, titles) in BOARDS.items():
        bid = db.execute("INSERT INTO boards (name, description) VALUES (?, ?)", (name, description)).lastrowid
        count = rng.randint(*THREADS_PER_BOARD)
        for title, score in zip(rng.sample(titles, count), rng.sample(range(-5, 300), count)):
            created = now - dt.timedelta(minutes=rng.randint(60, 14 * 24 * 60))
            body = f"{rng.choice(OPENERS)} {title}? {rng.choice(DETAILS)}"
            pid = db.execute(
                "INSERT INTO posts (board_id, author_id, title, body, created, base_score) VALUES (?, ?, ?, ?, ?, ?)",
                (bid, rng.choice(user_ids), title, body, _iso(created), score),
            ).lastrowid
            _comments(db, rng, pid, created, now, user_ids)
    db.commit()
    return db


def _comments(
    db: sqlite3.Connection, rng: random.Random, pid: int, since: dt.datetime, now: dt.datetime, user_ids: list[int]
) -> None:
    count = rng.randint(0, 7)
    depth: dict[int, int] = {}
    at = since
    for score in rng.sample(range(-4, 80), count):
        at += dt.timedelta(minutes=rng.randint(1, max(1, int((now - at).total_seconds() // 60 // (count + 1)))))
        parents = [c for c, d in depth.items() if d < MAX_DEPTH]
        parent = rng.choice(parents) if parents and rng.random() < 0.5 else None
        cid = db.execute(
            "INSERT INTO comments (post_id, parent_id, author_id, body, created, base_score) VALUES (?, ?, ?, ?, ?, ?)",
            (pid, parent, rng.choice(user_ids), rng.choice(COMMENTS), _iso(at), score),
        ).lastrowid
        depth[cid] = 1 if parent is None else depth[parent] + 1


def _iso(t: dt.datetime) -> str:
    return t.isoformat(timespec="minutes")


# ---- reads shared by the pages and the task templates (one definition of scores and orders)

POST_SCORE = "(p.base_score + COALESCE((SELECT SUM(value) FROM votes WHERE kind = 'post' AND target_id = p.id), 0))"
COMMENT_SCORE = (
    "(c.base_score + COALESCE((SELECT SUM(value) FROM votes WHERE kind = 'comment' AND target_id = c.id), 0))"
)
POSTS = (
    f"SELECT p.*, b.name AS board, u.username AS author, {POST_SCORE} AS score, "
    "(SELECT COUNT(*) FROM comments WHERE post_id = p.id) AS comment_count "
    "FROM posts p JOIN boards b ON b.id = p.board_id JOIN users u ON u.id = p.author_id"
)
COMMENTS_OF = (
    f"SELECT c.*, u.username AS author, {COMMENT_SCORE} AS score FROM comments c "
    "JOIN users u ON u.id = c.author_id WHERE c.post_id = ? ORDER BY c.id"
)
SORTS = ("hot", "new", "top")


def ranked(posts: list[dict[str, Any]], sort: str, now: str) -> list[dict[str, Any]]:
    """Posts in a listing's order: "top" by score, "new" by time, "hot" by score decayed with age (Reddit's idea)."""
    if sort == "top":
        return sorted(posts, key=lambda p: (-p["score"], p["id"]))
    if sort == "new":
        return sorted(posts, key=lambda p: (p["created"], p["id"]), reverse=True)
    t = dt.datetime.fromisoformat(now)

    def hot(p: dict[str, Any]) -> float:
        hours = max(0.0, (t - dt.datetime.fromisoformat(p["created"])).total_seconds() / 3600)
        return p["score"] / (hours + 2) ** 1.5

    return sorted(posts, key=lambda p: (-hot(p), p["id"]))


def thread(comments: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A thread's comments in page order (depth first, siblings oldest first), each with `depth`, its `children`
    and `label`: "by <author>", with " (2)", " (3)", ... for that author's later comments on the page, which
    names its buttons uniquely ("Upvote comment by <author> (2)")."""
    kids: dict[int | None, list[dict[str, Any]]] = {}
    for c in comments:
        kids.setdefault(c["parent_id"], []).append(c)
    order: list[dict[str, Any]] = []
    seen: dict[str, int] = {}

    def walk(parent: int | None, depth: int) -> None:
        for c in kids.get(parent, []):
            seen[c["author"]] = seen.get(c["author"], 0) + 1
            c["depth"], c["children"] = depth, kids.get(c["id"], [])
            c["label"] = f"by {c['author']}" + (f" ({seen[c['author']]})" if seen[c["author"]] > 1 else "")
            order.append(c)
            walk(c["id"], depth + 1)

    walk(None, 0)
    return order
