"""The shop's task templates: information seeking, navigation and state changes, easy and hard.

`make_task(db, seed, difficulty)` reads a freshly seeded shop database, picks template `seed % n` of the
difficulty (so consecutive seeds cycle through all of them) and fills it from a `random.Random` of the seed.
Each template returns its evaluator (from the database: the truth the pages show) and its solution (steps on the
accessible names the shop's pages give; see shop.py and templates/shop/).

easy (2-5 steps): the price of a product; the total of one of my orders; open a product's page; open page 2 of
a category in a given sort order; add N of a product in a colour (and size) to the cart, from its page.
hard (5-15 steps): the cheapest product of a category with a colour or material; which of my orders holds a
product; open the best-rated product of a category made of a material; add two products with options to the
cart; buy the cart with a given shipping address.
"""

from __future__ import annotations

import random
import sqlite3
from typing import Any

from jgem.envs.web.sites import task as T
from jgem.envs.web.sites.shop_data import CATEGORIES, money
from jgem.envs.web.sites.task import Instance, click, stop, type_

SHOP = "__SHOP__"
USER = "emma"
PAGE_SIZE = 8  # shop.PAGE_SIZE (not imported: shop imports this module)
SORT_PHRASES = {  # ?sort= value: (how the intent says it, link text)
    "name": ("name", "Sort by name"),
    "price": ("price, lowest first", "Sort by price: low to high"),
    "price_desc": ("price, highest first", "Sort by price: high to low"),
    "rating": ("rating, best first", "Sort by rating"),
}
FIRST_NAMES = ["Maria", "James", "Aisha", "Tomás", "Yuki", "Olivia", "Kwame", "Sofia", "Lucas", "Mei"]
LAST_NAMES = ["Garcia", "Okafor", "Schmidt", "Tanaka", "Novak", "Rossi", "Haddad", "Lindqvist", "Moreau", "Singh"]
STREETS = ["Maple Avenue", "Cedar Lane", "Hillcrest Road", "Bay Street", "Mill Road", "Orchard Way", "Park Row"]
CITIES = ["Springfield", "Riverton", "Fairview", "Lakewood", "Greenville", "Brookfield", "Ashland"]


def make_task(db: sqlite3.Connection, seed: int, difficulty: str) -> dict[str, Any]:
    """The WebArena task config of `seed` at `difficulty` ("easy" or "hard") on the shop state in `db`."""
    templates = {"easy": EASY, "hard": HARD}[difficulty]
    rng = random.Random(f"jgem-shop-task-{difficulty}-{seed}")
    inst = templates[seed % len(templates)](_Shop(db), rng)
    return T.config("shop", SHOP, USER, seed, difficulty, inst)


class _Shop:
    """Read access to the seeded database, in the shapes the templates want."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def rows(self, sql: str, params: tuple = ()) -> list[dict[str, Any]]:
        return [dict(r) for r in self.db.execute(sql, params)]

    def products(self, category: str | None = None, order: str = "name") -> list[dict[str, Any]]:
        where, params = ("WHERE c.slug = ?", (category,)) if category else ("", ())
        return self.rows(
            f"SELECT p.*, c.slug AS category, c.title AS category_title FROM products p "
            f"JOIN categories c ON c.id = p.category_id {where} ORDER BY {order}",
            params,
        )

    def orders(self) -> list[dict[str, Any]]:
        """My orders as the order history lists them (newest first), each with its item rows."""
        orders = self.rows(
            "SELECT o.* FROM orders o JOIN users u ON u.id = o.user_id WHERE u.username = ? ORDER BY number DESC",
            (USER,),
        )
        for o in orders:
            o["items"] = self.rows("SELECT * FROM order_items WHERE order_id = ? ORDER BY id", (o["id"],))
        return orders

    def cart(self) -> list[dict[str, Any]]:
        return self.rows(
            "SELECT c.*, p.name FROM cart c JOIN products p ON p.id = c.product_id "
            "JOIN users u ON u.id = c.user_id WHERE u.username = ? ORDER BY c.id",
            (USER,),
        )

    def pick_options(self, rng: random.Random, product: dict[str, Any]) -> tuple[str, str]:
        """A colour and size (or "") of `product` that is not yet a line of my cart."""
        taken = {(c["product_id"], c["colour"], c["size"]) for c in self.cart()}
        sizes = product["sizes"].split(",") if product["sizes"] else [""]
        free = [(c, s) for c in product["colours"].split(",") for s in sizes if (product["id"], c, s) not in taken]
        return rng.choice(free)


def _search(name: str) -> list[T.Step]:
    return [type_("textbox", "Search", name, enter=True), click("link", name)]


def _describe(product: dict[str, Any], colour: str, size: str, qty: int) -> str:
    return f"{qty} × {product['name']} (colour {colour}{f', size {size}' if size else ''})"


def _choose(product: dict[str, Any], colour: str, size: str, qty: int) -> list[T.Step]:
    """On a product page: pick the options and quantity, add to the cart."""
    steps = [click("radio", colour)] + ([click("radio", size)] if size else [])
    if qty != 1:
        steps.append(type_("spinbutton", "Quantity", str(qty)))
    return [*steps, click("button", "Add to cart")]


def _qty_target(product: dict[str, Any], colour: str, size: str, qty: int) -> dict[str, Any]:
    element = f"line-{product['id']}-{colour.lower()}-{size.lower() or 'none'}"  # shop.line_id
    return T.target(f"{SHOP}/cart", f"#{element} .qty", exact=str(qty))


# ---- easy


def price(shop: _Shop, rng: random.Random) -> Instance:
    p = rng.choice(shop.products())
    answer = money(p["price"])
    return Instance(
        0,
        "What is the price of {{product}}?",
        {"product": p["name"]},
        T.string_match(include=[answer.removeprefix("$")]),
        [*_search(p["name"]), stop(answer)],
        f"{SHOP}/",
    )


def order_total(shop: _Shop, rng: random.Random) -> Instance:
    o = rng.choice(shop.orders())
    answer = money(o["total"])
    return Instance(
        1,
        "What was the total of my order {{number}}?",
        {"number": str(o["number"])},
        T.string_match(include=[answer.removeprefix("$")]),
        [click("link", "My orders"), click("link", f"View order {o['number']}"), stop(answer)],
        f"{SHOP}/",
    )


def open_product(shop: _Shop, rng: random.Random) -> Instance:
    p = rng.choice(shop.products())
    return Instance(
        2,
        "Open the product page of {{product}}.",
        {"product": p["name"]},
        T.url_match(f"{SHOP}/product/{p['slug']}.html"),
        [*_search(p["name"]), stop()],
        f"{SHOP}/",
    )


def category_page(shop: _Shop, rng: random.Random) -> Instance:
    slug = rng.choice(list(CATEGORIES))
    sort = rng.choice(list(SORT_PHRASES))
    phrase, link = SORT_PHRASES[sort]
    return Instance(
        3,
        "Show me the second page of {{category}} products sorted by {{order}}.",
        {"category": CATEGORIES[slug][0], "order": phrase},
        T.url_match(f"{SHOP}/category/{slug}?sort={sort}&page=2"),
        [click("link", CATEGORIES[slug][0]), click("link", link), click("link", "Next page"), stop()],
        f"{SHOP}/",
    )


def add_to_cart(shop: _Shop, rng: random.Random) -> Instance:
    p = rng.choice(shop.products())
    colour, size = shop.pick_options(rng, p)
    qty = rng.randint(1, 3)
    return Instance(
        4,
        "Add {{item}} to my cart.",
        {"item": _describe(p, colour, size, qty)},
        T.program_html(_qty_target(p, colour, size, qty)),
        [*_choose(p, colour, size, qty), stop()],
        f"{SHOP}/product/{p['slug']}.html",
    )


# ---- hard


def cheapest_with(shop: _Shop, rng: random.Random) -> Instance:
    """The cheapest product of a category with a colour or material that the cheapest few lack (so the listing
    sorted by price is not enough: the product pages must be checked)."""
    candidates = []
    for slug in CATEGORIES:
        by_price = shop.products(slug, "price")
        for kind in ("colour", "material"):
            values = {v for p in by_price for v in (p["colours"].split(",") if kind == "colour" else [p["material"]])}
            for value in sorted(values):
                hit = next(i for i, p in enumerate(by_price) if _has(p, kind, value))
                if 1 <= hit <= 4:
                    candidates.append((slug, kind, value, by_price, hit))
    slug, kind, value, by_price, hit = rng.choice(candidates)
    name = by_price[hit]["name"]
    condition = f"comes in {value}" if kind == "colour" else f"is made of {value}"
    return Instance(
        5,
        "What is the cheapest product in {{category}} that {{condition}}?",
        {"category": CATEGORIES[slug][0], "condition": condition},
        T.string_match(include=[name]),
        [
            click("link", CATEGORIES[slug][0]),
            click("link", SORT_PHRASES["price"][1]),
            *T.scan([p["name"] for p in by_price], hit),
            stop(name),
        ],
        f"{SHOP}/",
    )


def order_with(shop: _Shop, rng: random.Random) -> Instance:
    """Which of my orders holds a product that is in exactly one of them (not the newest, when one exists)."""
    orders = shop.orders()
    holders: dict[str, list[int]] = {}
    for i, o in enumerate(orders):
        for name in {it["name"] for it in o["items"]}:
            holders.setdefault(name, []).append(i)
    once = sorted((name, at[0]) for name, at in holders.items() if len(at) == 1)
    name, hit = rng.choice([c for c in once if c[1] >= 1] or once)
    number = str(orders[hit]["number"])
    return Instance(
        6,
        "Which of my orders contains {{product}}? Answer with the order number.",
        {"product": name},
        T.string_match(include=[number]),
        [click("link", "My orders"), *T.scan([f"View order {o['number']}" for o in orders], hit), stop(number)],
        f"{SHOP}/",
    )


def best_rated(shop: _Shop, rng: random.Random) -> Instance:
    """Open the best-rated product of a category made of a material: it beats every other product of that
    material there, and better-rated products of other materials come before it in the listing."""
    candidates = []
    for slug in CATEGORIES:
        by_rating = shop.products(slug, "rating DESC, name")
        for material in sorted({p["material"] for p in by_rating}):
            same = [i for i, p in enumerate(by_rating) if p["material"] == material]
            unique = len(same) == 1 or by_rating[same[1]]["rating"] < by_rating[same[0]]["rating"]
            if unique and 1 <= same[0] <= 4:
                candidates.append((slug, material, by_rating, same[0]))
    slug, material, by_rating, hit = rng.choice(candidates)
    return Instance(
        7,
        "Open the page of the best-rated {{material}} product in {{category}}.",
        {"material": material, "category": CATEGORIES[slug][0]},
        T.url_match(f"{SHOP}/product/{by_rating[hit]['slug']}.html"),
        [
            click("link", CATEGORIES[slug][0]),
            click("link", SORT_PHRASES["rating"][1]),
            *T.scan([p["name"] for p in by_rating], hit),
            stop(),
        ],
        f"{SHOP}/",
    )


def add_two(shop: _Shop, rng: random.Random) -> Instance:
    first_category, second_category = rng.sample(list(CATEGORIES), 2)
    picks = []
    for slug in (first_category, second_category):
        p = rng.choice(shop.products(slug))
        colour, size = shop.pick_options(rng, p)
        picks.append((p, colour, size, rng.randint(1, 3)))
    steps = [s for p, colour, size, qty in picks for s in (*_search(p["name"]), *_choose(p, colour, size, qty))]
    return Instance(
        8,
        "Add {{first}} and {{second}} to my cart.",
        {"first": _describe(*picks[0]), "second": _describe(*picks[1])},
        T.program_html(*(_qty_target(*pick) for pick in picks)),
        [*steps, stop()],
        f"{SHOP}/",
    )


def checkout(shop: _Shop, rng: random.Random) -> Instance:
    name = f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"
    street = f"{rng.randint(2, 999)} {rng.choice(STREETS)}"
    city = rng.choice(CITIES)
    number = shop.rows("SELECT MAX(number) + 1 AS n FROM orders")[0]["n"]  # the number the next order gets
    order = f"{SHOP}/orders/{number}"
    return Instance(
        9,
        "Buy everything in my cart and ship it to {{name}}, {{street}}, {{city}}.",
        {"name": name, "street": street, "city": city},
        T.program_html(
            T.target(order, "#shipping-address", include=[name, street, city]),
            T.target(order, "#order-items", include=sorted({line["name"] for line in shop.cart()})),
        ),
        [
            click("link", "My cart"),
            click("link", "Proceed to checkout"),
            type_("textbox", "Full name", name),
            type_("textbox", "Street address", street),
            type_("textbox", "City", city),
            click("button", "Place order"),
            stop(),
        ],
        f"{SHOP}/",
    )


def _has(p: dict[str, Any], kind: str, value: str) -> bool:
    return value in p["colours"].split(",") if kind == "colour" else p["material"] == value


EASY = [price, order_total, open_product, category_page, add_to_cart]
HARD = [cheapest_with, order_with, best_rated, add_two, checkout]
