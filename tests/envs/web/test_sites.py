"""The shipped shop and forum over real HTTP (no browser): seeded state, pages, forms, sessions, server lifecycle."""

from __future__ import annotations

import random
import socket
import threading
import urllib.parse

import httpx
import pytest

from jgem.envs.web.sites import forum_data, shop_data
from jgem.envs.web.sites.forum import ForumSite, thread_url
from jgem.envs.web.sites.shop import SORTS, ShopSite, line_id
from tests.envs.web.site_driver import Page, http_client


@pytest.fixture(scope="module")
def shop():
    with ShopSite() as site:
        yield site


@pytest.fixture(scope="module")
def forum():
    with ForumSite() as site:
        yield site


def signed_in(site, user: str | None = None) -> httpx.Client:
    client = http_client(base_url=site.url, follow_redirects=True)
    assert client.get(site.login_url(user)).status_code == 200
    return client


def get(url: str) -> httpx.Response:
    """One GET on a client of its own, closed after it (as `httpx.get`)."""
    with http_client() as client:
        return client.get(url)


def dump(db) -> list[str]:
    return list(db.iterdump())


def live_dump(site) -> list[str]:
    with site.db() as db:
        return dump(db)


def assert_names_unique(page: Page) -> None:
    """Every control's (role, accessible name) picks one thing on the page: one control, or links to one page."""
    seen: dict[tuple[str, str], set[str]] = {}
    for role, name, node in page.controls():
        if role == "heading":  # not a control (review titles repeat)
            continue
        assert name, f"{role} {node.attrs} on {page.url} has no accessible name"
        target = node.attrs.get("href", f"#{id(node)}").split("#")[0] if role == "link" else f"#{id(node)}"
        seen.setdefault((role, name), set()).add(target)
    dupes = {k: v for k, v in seen.items() if len(v) > 1}
    assert not dupes, f"controls sharing a name on {page.url}: {dupes}"


# ---- seeded state


@pytest.mark.parametrize("build", [shop_data.build, forum_data.build], ids=["shop", "forum"])
def test_same_seed_builds_the_same_database_and_seeds_differ(build) -> None:
    assert dump(build(7)) == dump(build(7))
    assert dump(build(7)) != dump(build(8))


def test_shop_data_has_unique_answers() -> None:
    for seed in range(20):
        db = shop_data.build(seed)
        products = [dict(r) for r in db.execute("SELECT * FROM products")]
        names = [p["name"] for p in products]
        assert 30 <= len(products) <= 80
        assert len({p["price"] for p in products}) == len(products)
        assert not [(a, b) for a in names for b in names if a != b and a in b]
        numbers = [r[0] for r in db.execute("SELECT number FROM orders")]
        assert all(len(str(n)) == 5 for n in numbers), numbers  # no order URL is a prefix of another
        assert db.execute("SELECT COUNT(*) FROM cart").fetchone()[0] >= 1
        assert db.execute("SELECT COUNT(*) FROM orders WHERE user_id = 1").fetchone()[0] >= 4


def test_forum_data_has_unique_answers() -> None:
    for seed in range(20):
        db = forum_data.build(seed)
        users = [r[0] for r in db.execute("SELECT username FROM users")]
        titles = [r[0] for r in db.execute("SELECT title FROM posts")]
        assert forum_data.MAIN_USER in users
        assert not [(a, b) for a in users for b in users if a != b and a in b]
        assert not [(a, b) for a in titles for b in titles if a != b and a in b]
        for table, group in (("posts", "board_id"), ("comments", "post_id")):
            dupes = db.execute(
                f"SELECT COUNT(*) FROM (SELECT {group}, base_score FROM {table} GROUP BY 1, 2 HAVING COUNT(*) > 1)"
            ).fetchone()[0]
            assert dupes == 0, f"seed {seed}: equal scores in {table}"


# ---- pages


def test_shop_pages_render_with_unique_control_names(shop) -> None:
    shop.reset(1)
    client = signed_in(shop)
    paths = ["/", "/search?q=mug", "/search?q=", "/cart", "/checkout", "/orders", "/account"]
    for c in shop.query("SELECT slug FROM categories"):
        paths += [f"/category/{c['slug']}?sort={s}&page={p}" for s in SORTS for p in (1, 2)]
    paths += [f"/product/{p['slug']}.html" for p in shop.query("SELECT slug FROM products WHERE id % 4 = 0")]
    paths += [f"/orders/{o['number']}" for o in shop.query("SELECT number FROM orders WHERE user_id = 1")]
    for path in paths:
        r = client.get(path)
        assert r.status_code == 200, path
        assert_names_unique(Page(r))
    assert "Search results for “mug”" in client.get("/search?q=mug").text
    other = shop.query("SELECT number FROM orders WHERE user_id != 1 LIMIT 1")[0]["number"]
    for path, status in [("/product/nope.html", 404), ("/category/nope", 404), (f"/orders/{other}", 404),
                         ("/category/kitchen?page=9", 404), ("/category/kitchen?sort=colour", 400),
                         ("/category/kitchen?page=x", 400)]:  # fmt: skip
        r = client.get(path)
        assert r.status_code == status, path
        assert Page(r).select("#error-message") is not None


def test_forum_pages_render_with_unique_control_names(forum) -> None:
    forum.reset(1)
    client = signed_in(forum)
    paths = ["/", "/?sort=new", "/?sort=top"]
    for b in forum.query("SELECT name FROM boards"):
        paths += [f"/f/{b['name']}", f"/f/{b['name']}?sort=new", f"/f/{b['name']}?sort=top", f"/f/{b['name']}/submit"]
    posts = forum.query("SELECT p.*, b.name AS board FROM posts p JOIN boards b ON b.id = p.board_id")
    paths += [thread_url(p) for p in posts]
    paths += [f"/comment/{c['id']}/reply" for c in forum.query("SELECT id FROM comments WHERE id % 5 = 0")]
    paths += [f"/user/{u['username']}" for u in forum.query("SELECT username FROM users")]
    for path in paths:
        r = client.get(path)
        assert r.status_code == 200, path
        assert_names_unique(Page(r))
    post = forum.query("SELECT p.*, b.name AS board FROM posts p JOIN boards b ON b.id = p.board_id LIMIT 1")[0]
    wrong_board = "movies" if post["board"] != "movies" else "books"
    for path in ["/f/nope", f"/f/{wrong_board}/{post['id']}/x", "/user/nobody", "/comment/99999/reply", "/?sort=x"]:
        assert client.get(path).status_code in (400, 404), path


# ---- sessions


def test_pages_that_need_a_user_send_to_login_and_back(shop, forum) -> None:
    shop.reset(0)
    anon = http_client(base_url=shop.url)
    number = shop.query("SELECT number FROM orders WHERE user_id = 1 LIMIT 1")[0]["number"]
    for path in ["/cart", "/checkout", "/orders", "/account", f"/orders/{number}"]:
        r = anon.get(path)
        assert (r.status_code, r.headers["location"]) == (303, "/login?" + urllib.parse.urlencode({"next": path}))
    p = shop.query("SELECT * FROM products LIMIT 1")[0]
    r = anon.post("/cart/add", data={"product": p["id"], "colour": p["colours"].split(",")[0]})
    assert r.headers["location"] == "/login?" + urllib.parse.urlencode({"next": f"/product/{p['slug']}.html"})
    assert anon.get("/").status_code == 200 and anon.get(f"/product/{p['slug']}.html").status_code == 200

    r = anon.post("/login", data={"username": "emma", "password": "wrong", "next": "/cart"})
    assert r.status_code == 401 and "Wrong username or password" in r.text
    r = anon.post("/login", data={"username": "emma", "password": "emma-pass", "next": "/cart"})
    assert (r.status_code, r.headers["location"]) == (303, "/cart")
    assert anon.get("/cart").status_code == 200
    anon.post("/logout")
    assert anon.get("/cart").status_code == 303

    forged = http_client(base_url=shop.url, cookies={"shop_session": "emma:" + "0" * 32})
    assert forged.get("/cart").status_code == 303
    assert anon.get("/login/auto?user=emma&key=bad&next=/cart").status_code == 403
    assert get(shop.login_url("nobody")).status_code == 404

    forum.reset(0)
    anon = http_client(base_url=forum.url)
    assert anon.post("/vote", data={"kind": "post", "id": "1", "value": "1", "next": "/f/books"}).status_code == 303
    assert anon.get("/f/books/submit").status_code == 303
    assert forum.query("SELECT COUNT(*) AS n FROM votes")[0]["n"] == 0


# ---- forms change state


def test_shop_cart_and_checkout_change_state(shop) -> None:
    shop.reset(2)
    client = signed_in(shop)
    in_cart = {c["product_id"] for c in shop.query("SELECT product_id FROM cart")}
    p = shop.query("SELECT * FROM products WHERE sizes != '' ORDER BY id")
    p = next(x for x in p if x["id"] not in in_cart)
    colour, size = p["colours"].split(",")[-1], p["sizes"].split(",")[0]
    add = {"product": p["id"], "colour": colour, "size": size, "qty": "2"}
    r = client.post("/cart/add", data=add)
    assert r.url.path == "/cart"
    row = f"#{line_id(p['id'], colour, size)} .qty"
    assert Page(r).select(row).text() == "2"
    assert Page(client.post("/cart/add", data={**add, "qty": ""})).select(row).text() == "3"  # same line, merged

    for bad, error in [({"colour": "Plaid"}, "Choose a colour."), ({"size": "XXS"}, "Choose a size."),
                       ({"qty": "0"}, "The quantity must be 1 to 99.")]:  # fmt: skip
        r = client.post("/cart/add", data={**add, **bad})
        assert r.status_code == 400 and error in r.text
    assert Page(client.get("/cart")).select(row).text() == "3"

    line = shop.query("SELECT id FROM cart WHERE product_id = ?", (p["id"],))[0]["id"]
    assert Page(client.post("/cart/update", data={"line": line, "qty": "5"})).select(row).text() == "5"
    assert Page(client.post("/cart/remove", data={"line": line})).select(row) is None

    cart = shop.query("SELECT c.qty, p.price, p.name FROM cart c JOIN products p ON p.id = c.product_id")
    r = client.post("/checkout", data={"name": "Ann Lee", "street": "", "city": "Oslo"})
    assert r.status_code == 400 and "Fill in: Street address." in r.text
    number = shop.query("SELECT MAX(number) + 1 AS n FROM orders")[0]["n"]
    r = client.post("/checkout", data={"name": "Ann Lee", "street": "1 Main St", "city": "Oslo"})
    page = Page(r)
    assert r.url.path == f"/orders/{number}"
    assert page.select("#shipping-address").text() == "Ann Lee\n1 Main St\nOslo"
    assert page.select("#order-total").text() == shop_data.money(sum(c["qty"] * c["price"] for c in cart))
    assert all(c["name"] in page.select("#order-items").text() for c in cart)
    assert Page(client.get("/cart")).select("#cart-empty") is not None
    assert f"View order {number}" in client.get("/orders").text
    assert client.post("/checkout", data={"name": "A", "street": "B", "city": "C"}).status_code == 400  # empty cart


def test_forum_votes_comments_replies_and_threads_change_state(forum) -> None:
    forum.reset(3)
    client = signed_in(forum)
    post = forum.query(
        "SELECT p.*, b.name AS board FROM posts p JOIN boards b ON b.id = p.board_id "
        "WHERE (SELECT COUNT(*) FROM comments WHERE post_id = p.id) >= 2 LIMIT 1"
    )[0]
    url = thread_url(post)

    def score(selector: str) -> int:
        return int(Page(client.get(url)).select(selector).text())

    def vote(kind: str, id_: int, value: str) -> None:
        r = client.post("/vote", data={"kind": kind, "id": id_, "value": value, "next": url})
        assert r.url.path == url

    base = post["base_score"]
    vote("post", post["id"], "1")
    assert score("#post-score") == base + 1
    vote("post", post["id"], "1")  # the same vote again takes it back
    assert score("#post-score") == base
    vote("post", post["id"], "-1")
    assert score("#post-score") == base - 1
    comment = forum.query("SELECT * FROM comments WHERE post_id = ? ORDER BY id LIMIT 1", (post["id"],))[0]
    vote("comment", comment["id"], "1")
    assert score(f"#comment-{comment['id']}-score") == comment["base_score"] + 1
    assert client.post("/vote", data={"kind": "post", "id": "x", "value": "1"}).status_code == 400

    count = score("#comment-count")
    r = client.post(f"/post/{post['id']}/comment", data={"body": "A brand new comment."})
    page = Page(r)
    assert r.url.path == url and "A brand new comment." in page.select("#comments").text()
    assert int(page.select("#comment-count").text()) == count + 1
    assert client.post(f"/post/{post['id']}/comment", data={"body": "  "}).status_code == 400

    r = client.post(f"/comment/{comment['id']}/reply", data={"body": "A nested reply."})
    assert "A nested reply." in Page(r).select(f"#comment-{comment['id']} > .replies").text()

    pid = forum.query("SELECT MAX(id) + 1 AS n FROM posts")[0]["n"]
    r = client.post(f"/f/{post['board']}/submit", data={"title": "Hello there", "body": "First post."})
    assert r.url.path == f"/f/{post['board']}/{pid}/hello-there"
    assert Page(r).select("#post-body").text() == "First post."
    assert client.post(f"/f/{post['board']}/submit", data={"title": "", "body": "x"}).status_code == 400
    newest = Page(client.get(f"/f/{post['board']}?sort=new")).select("#posts").text()
    assert newest.startswith("Hello there")
    profile = Page(client.get(f"/user/{forum.user}"))
    assert "Hello there" in profile.select("#user-posts").text()
    assert "A nested reply." in profile.select("#user-comments").text()


def test_reset_restores_the_seeded_state(shop, forum) -> None:
    for site, change in [
        (shop, lambda c: c.post("/cart/remove", data={"line": shop.query("SELECT id FROM cart LIMIT 1")[0]["id"]})),
        (forum, lambda c: c.post("/post/1/comment", data={"body": "changed"})),
    ]:
        site.reset(4)
        pristine = live_dump(site)
        assert change(signed_in(site)).status_code == 200
        assert live_dump(site) != pristine
        site.reset(4)
        assert live_dump(site) == pristine == dump(site.build(4))


# ---- the server


def test_close_frees_the_port_from_any_thread_and_is_idempotent() -> None:
    site = ShopSite()
    before = set(threading.enumerate())
    url = site.start()
    assert site.start() == url
    serving = set(threading.enumerate()) - before
    assert [t.name for t in serving] == ["jgem-shop-server"]
    port = urllib.parse.urlparse(url).port
    assert get(url + "/").status_code == 200
    closer = threading.Thread(target=site.close)
    closer.start()
    closer.join(10)
    site.close()
    assert not [t for t in serving if t.is_alive()]
    with pytest.raises(httpx.ConnectError):
        get(url + "/")
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # nothing listens there any more
    with pytest.raises(RuntimeError, match="closed"):
        site.start()
    with pytest.raises(RuntimeError, match="not serving"):
        site.login_url()


def test_two_sites_serve_at_once_with_separate_sessions(shop, forum) -> None:
    assert urllib.parse.urlparse(shop.url).port != urllib.parse.urlparse(forum.url).port
    client = http_client(follow_redirects=False)
    client.get(shop.login_url())  # cookies ignore ports: both sites see both cookies
    assert client.get(shop.url + "/cart").status_code == 200
    assert client.get(forum.url + "/f/books/submit").status_code == 303
    client.get(forum.login_url())
    assert client.get(forum.url + "/f/books/submit").status_code == 200
    assert client.get(shop.url + "/cart").status_code == 200
    with ShopSite() as other:
        other.reset(11)
        shop.reset(12)
        assert other.url != shop.url
        assert other.query("SELECT name FROM products") != shop.query("SELECT name FROM products")


def test_concurrent_requests_while_resetting(shop) -> None:
    shop.reset(5)
    products = shop.query("SELECT * FROM products")
    errors: list[str] = []

    def browse(worker: int) -> None:
        rng = random.Random(worker)
        client = signed_in(shop)
        for _ in range(12):
            p = rng.choice(products)
            for r in (
                client.get(rng.choice(["/", "/cart", "/orders", f"/product/{p['slug']}.html", "/search?q=steel"])),
                client.post(
                    "/cart/add",
                    data={"product": p["id"], "colour": p["colours"].split(",")[0], "size": p["sizes"].split(",")[0]},
                ),  # fmt: skip
            ):
                if r.status_code not in (200, 400, 404):
                    errors.append(f"{r.request.method} {r.request.url} -> {r.status_code}")

    workers = [threading.Thread(target=browse, args=(i,)) for i in range(4)]
    for w in workers:
        w.start()
    for i in range(12):
        shop.reset(5 + i % 2)
    for w in workers:
        w.join(60)
    assert not errors
    shop.reset(5)
    assert live_dump(shop) == dump(shop.build(5))
