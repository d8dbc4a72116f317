"""The shipped sites' task templates: WebArena-format configs, deterministic per seed, true to the database, and
solved by their own solutions over HTTP (the browser-driven replay is the env's test)."""

from __future__ import annotations

import json
import re

import pytest

from jgem.envs.web.sites.forum import ForumSite
from jgem.envs.web.sites.shop import ShopSite
from jgem.envs.web.sites.shop_data import money
from tests.envs.web.site_driver import LOCATOR, Driver, http_client, score, string_score

SITES = {"shop": (ShopSite, "__SHOP__"), "forum": (ForumSite, "__FORUM__")}
DIFFICULTIES = ("easy", "hard")
STEPS = {"easy": (2, 5), "hard": (4, 15)}  # solution length, with its final stop
TEMPLATES = 5  # per site and difficulty
SEEDS = range(2 * TEMPLATES)  # every template twice
KEYS = {"task_id", "sites", "require_login", "storage_state", "start_url", "geolocation", "intent_template",
        "instantiation_dict", "intent", "intent_template_id", "require_reset", "eval", "solution",
        "login_user"}  # fmt: skip
EVAL_KEYS = {"eval_types", "reference_answers", "reference_url", "program_html", "string_note", "url_note"}
ROLES = {"link", "button", "textbox", "radio", "spinbutton", "checkbox", "combobox"}


@pytest.fixture(scope="module")
def sites():
    started = {name: cls() for name, (cls, _) in SITES.items()}
    for site in started.values():
        site.start()
    yield started
    for site in started.values():
        site.close()


@pytest.fixture(scope="module")
def drawn(sites):
    """(site name, seed, difficulty) -> the task `make_task` draws, drawn once for the module (each draw builds the
    seed's state afresh; the test of determinism calls `make_task` itself)."""
    cache: dict[tuple[str, int, str], dict] = {}

    def task(name: str, seed: int, difficulty: str) -> dict:
        if (name, seed, difficulty) not in cache:
            cache[name, seed, difficulty] = sites[name].make_task(seed, difficulty)
        return cache[name, seed, difficulty]

    return task


def driver_for(site, task) -> Driver:
    client = http_client(follow_redirects=True)
    assert client.get(site.login_url(task["login_user"])).status_code == 200
    driver = Driver(client, site.url)
    driver.goto(task["start_url"])
    assert driver.page.status == 200
    return driver


def check_well_formed(task: dict, name: str, difficulty: str, seed: int) -> None:
    placeholder = SITES[name][1]
    assert set(task) == KEYS
    assert task["task_id"] == f"{name}-{difficulty}-{seed}" and task["sites"] == [name]
    assert task["start_url"].startswith(placeholder)
    values = task["instantiation_dict"]
    assert task["intent"] == re.sub(r"\{\{(\w+)\}\}", lambda m: values[m.group(1)], task["intent_template"])
    ev = task["eval"]
    assert set(ev) == EVAL_KEYS and ev["url_note"] == "GOLD in PRED"
    kinds = ev["eval_types"]
    assert kinds and set(kinds) <= {"string_match", "url_match", "program_html"}
    refs = ev["reference_answers"]
    if "string_match" in kinds:
        assert len(refs) == 1
        assert isinstance(refs.get("exact_match"), str) or all(r and isinstance(r, str) for r in refs["must_include"])
    else:
        assert refs is None
    assert ev["reference_url"].startswith(placeholder) if "url_match" in kinds else ev["reference_url"] == ""
    assert bool(ev["program_html"]) == ("program_html" in kinds)
    for t in ev["program_html"]:
        assert t["url"] == "last" or t["url"].startswith(placeholder)
        assert LOCATOR.match(t["locator"]), t["locator"]
        (kind, content), *rest = t["required_contents"].items()
        assert not rest and (kind == "exact_match" and isinstance(content, str) or kind == "must_include" and content)
    solution = task["solution"]
    lo, hi = STEPS[difficulty]
    assert lo <= len(solution) <= hi, (task["intent"], len(solution))
    assert solution[-1][0] == "stop" and all(s[0] != "stop" for s in solution[:-1])
    for step in solution[:-1]:
        assert step[0] in ("click", "type", "go_back"), step
        if step[0] != "go_back":
            assert step[1] in ROLES and step[2], step
        if step[0] == "type":
            assert "]" not in step[3] and step[4] in (0, 1)
    if "string_match" in kinds:  # the solution's answer passes, no answer fails
        assert string_score(ev, solution[-1][1]) and not string_score(ev, "")
    json.dumps(task)


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
@pytest.mark.parametrize("name", SITES)
def test_tasks_are_well_formed_deterministic_and_cover_every_template(sites, drawn, name, difficulty) -> None:
    site = sites[name]
    tasks = [drawn(name, seed, difficulty) for seed in SEEDS]
    for seed, task in zip(SEEDS, tasks):
        check_well_formed(task, name, difficulty, seed)
    assert tasks == [site.make_task(seed, difficulty) for seed in SEEDS]
    first = 0 if difficulty == "easy" else TEMPLATES  # easy templates are 0-4, hard ones 5-9
    assert sorted({t["intent_template_id"] for t in tasks}) == list(range(first, first + TEMPLATES))
    intents: dict[int, set[str]] = {}
    for seed in range(4 * TEMPLATES):
        task = drawn(name, seed, difficulty)
        intents.setdefault(task["intent_template_id"], set()).add(task["intent"])
    assert all(len(v) >= 2 for v in intents.values()), intents  # the seed varies each template's instance
    kinds = {k for t in tasks for k in t["eval"]["eval_types"]}
    assert kinds == {"string_match", "url_match", "program_html"}  # seeking, navigating and changing, each level


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
@pytest.mark.parametrize("name", SITES)
def test_solutions_solve_their_tasks_over_http_and_the_start_does_not(sites, drawn, name, difficulty) -> None:
    site = sites[name]
    for seed in SEEDS:
        site.reset(seed)
        task = drawn(name, seed, difficulty)
        assert not score(task, "", driver_for(site, task)), f"{task['intent']}: already true at the start"
        site.reset(seed)
        driver = driver_for(site, task)
        for step in task["solution"]:
            driver.play(step)
        answer = task["solution"][-1][1]
        if "string_match" in task["eval"]["eval_types"]:  # the answer is read off the page the solution ends on
            assert answer.lower() in driver.page.text().lower(), (task["intent"], answer)
        assert score(task, answer, driver), f"seed {seed}: {task['intent']} not solved by {task['solution']}"


def test_make_task_reads_the_seeded_state_not_the_live_one(sites) -> None:
    shop = sites["shop"]
    shop.reset(9)
    before = shop.make_task(9, "hard")
    client = http_client(base_url=shop.url, follow_redirects=True)
    client.get(shop.login_url())
    client.post("/checkout", data={"name": "A", "street": "B", "city": "C"})  # empties the cart, adds an order
    assert shop.make_task(9, "hard") == before
    with pytest.raises(ValueError, match="difficulty 'medium'"):
        shop.make_task(0, "medium")
    with pytest.raises(TypeError, match="seed must be an int"):
        shop.reset("1")


# ---- the reference answers are the database's truth, by queries of their own


def _one(site, sql: str, params: tuple) -> list:
    return [tuple(r.values()) for r in site.query(sql, params)]


def test_shop_references_are_the_database_truth(sites, drawn) -> None:
    shop = sites["shop"]
    for seed in range(30):
        shop.reset(seed)
        for difficulty in DIFFICULTIES:
            task = drawn("shop", seed, difficulty)
            v, ev, tid = task["instantiation_dict"], task["eval"], task["intent_template_id"]
            refs, url = ev["reference_answers"], ev["reference_url"]
            if tid == 0:
                (price,) = _one(shop, "SELECT price FROM products WHERE name = ?", (v["product"],))
                assert refs["must_include"] == [money(price[0])[1:]]
            elif tid == 1:
                [(total,)] = _one(
                    shop,
                    "SELECT SUM(i.qty * i.price) FROM order_items i JOIN orders o ON o.id = i.order_id "
                    "JOIN users u ON u.id = o.user_id WHERE o.number = ? AND u.username = 'emma'",
                    (int(v["number"]),),
                )
                assert refs["must_include"] == [money(total)[1:]]
            elif tid == 2:
                [(slug,)] = _one(shop, "SELECT slug FROM products WHERE name = ?", (v["product"],))
                assert url == f"__SHOP__/product/{slug}.html"
            elif tid == 3:
                [(slug, n)] = _one(
                    shop,
                    "SELECT c.slug, COUNT(*) FROM categories c JOIN products p ON p.category_id = c.id "
                    "WHERE c.title = ? GROUP BY c.slug",
                    (v["category"],),
                )
                assert url.startswith(f"__SHOP__/category/{slug}?sort=") and url.endswith("&page=2") and n > 8
            elif tid == 5:
                kind, value = re.fullmatch(r"(comes in|is made of) (.+)", v["condition"]).groups()
                test = "(',' || colours || ',') LIKE '%,' || ? || ',%'" if kind == "comes in" else "material = ?"
                rows = _one(
                    shop,
                    f"SELECT name FROM products p JOIN categories c ON c.id = p.category_id WHERE c.title = ? "
                    f"AND {test} ORDER BY price LIMIT 1",
                    (v["category"], value),
                )
                assert refs["must_include"] == [rows[0][0]]
            elif tid == 6:
                rows = _one(
                    shop,
                    "SELECT DISTINCT o.number FROM orders o JOIN order_items i ON i.order_id = o.id "
                    "JOIN users u ON u.id = o.user_id WHERE u.username = 'emma' AND i.name = ?",
                    (v["product"],),
                )
                assert refs["must_include"] == [str(rows[0][0])] and len(rows) == 1
            elif tid == 7:
                rows = _one(
                    shop,
                    "SELECT p.slug, rating FROM products p JOIN categories c ON c.id = p.category_id "
                    "WHERE c.title = ? AND material = ? ORDER BY rating DESC LIMIT 2",
                    (v["category"], v["material"]),
                )
                assert url == f"__SHOP__/product/{rows[0][0]}.html"
                assert len(rows) == 1 or rows[1][1] < rows[0][1]  # one best
            elif tid == 9:
                cart = _one(shop, "SELECT DISTINCT p.name FROM cart c JOIN products p ON p.id = c.product_id", ())
                assert ev["program_html"][1]["required_contents"]["must_include"] == sorted(n for (n,) in cart)


def test_forum_references_are_the_database_truth(sites, drawn) -> None:
    forum = sites["forum"]
    top_sql = (
        "SELECT p.id, u.username, p.title FROM posts p JOIN boards b ON b.id = p.board_id "
        "JOIN users u ON u.id = p.author_id WHERE b.name = ? ORDER BY p.base_score DESC"
    )
    for seed in range(30):
        forum.reset(seed)
        for difficulty in DIFFICULTIES:
            task = drawn("forum", seed, difficulty)
            v, ev, tid = task["instantiation_dict"], task["eval"], task["intent_template_id"]
            refs, url = ev["reference_answers"], ev["reference_url"]
            if tid == 0:
                assert refs["must_include"] == [_one(forum, top_sql, (v["board"],))[0][1]]
            elif tid == 1:
                [(n,)] = _one(
                    forum,
                    "SELECT COUNT(c.id) FROM posts p LEFT JOIN comments c ON c.post_id = p.id WHERE p.title = ?",
                    (v["title"],),
                )
                assert refs["must_include"] == [str(n)]
            elif tid == 5:
                rows = _one(
                    forum,
                    "SELECT DISTINCT p.title FROM comments c JOIN posts p ON p.id = c.post_id "
                    "JOIN boards b ON b.id = p.board_id JOIN users u ON u.id = c.author_id "
                    "WHERE b.name = ? AND u.username = ?",
                    (v["board"], v["user"]),
                )
                assert [r[0] for r in rows] == refs["must_include"]
            elif tid == 6:
                top = _one(forum, top_sql, (v["board"],))[0][0]
                rows = _one(
                    forum,
                    "SELECT u.username FROM comments c JOIN users u ON u.id = c.author_id WHERE c.post_id = ? "
                    "ORDER BY c.base_score DESC LIMIT 1",
                    (top,),
                )
                assert url == f"__FORUM__/user/{rows[0][0]}"
