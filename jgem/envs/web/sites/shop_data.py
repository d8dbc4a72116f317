"""The shop's seeded database: catalogue, reviews, users, past orders and a cart, all drawn from word lists.

`build(seed)` is deterministic (one `random.Random` per seed, no clock). Prices are unique across the catalogue
and no product name is a substring of another, so "the cheapest ..." has one answer and a name in an answer (or a
`/product/<slug>.html` URL) points at one product. Money is stored in cents.
"""

from __future__ import annotations

import datetime as dt
import random
import re
import sqlite3

SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE categories (id INTEGER PRIMARY KEY, slug TEXT UNIQUE NOT NULL, title TEXT NOT NULL);
CREATE TABLE products (
    id INTEGER PRIMARY KEY, slug TEXT UNIQUE NOT NULL, name TEXT UNIQUE NOT NULL,
    category_id INTEGER NOT NULL REFERENCES categories(id), price INTEGER UNIQUE NOT NULL,
    material TEXT NOT NULL, colours TEXT NOT NULL, sizes TEXT NOT NULL, description TEXT NOT NULL,
    rating REAL NOT NULL, review_count INTEGER NOT NULL);
CREATE TABLE reviews (
    id INTEGER PRIMARY KEY, product_id INTEGER NOT NULL REFERENCES products(id), author TEXT NOT NULL,
    stars INTEGER NOT NULL, title TEXT NOT NULL, body TEXT NOT NULL, date TEXT NOT NULL);
CREATE TABLE users (
    id INTEGER PRIMARY KEY, username TEXT UNIQUE NOT NULL, password TEXT NOT NULL, full_name TEXT NOT NULL,
    email TEXT NOT NULL, street TEXT NOT NULL, city TEXT NOT NULL);
CREATE TABLE cart (
    id INTEGER PRIMARY KEY, user_id INTEGER NOT NULL REFERENCES users(id),
    product_id INTEGER NOT NULL REFERENCES products(id), colour TEXT NOT NULL, size TEXT NOT NULL,
    qty INTEGER NOT NULL CHECK (qty > 0), UNIQUE (user_id, product_id, colour, size));
CREATE TABLE orders (
    id INTEGER PRIMARY KEY, number INTEGER UNIQUE NOT NULL, user_id INTEGER NOT NULL REFERENCES users(id),
    date TEXT NOT NULL, status TEXT NOT NULL, ship_name TEXT NOT NULL, ship_street TEXT NOT NULL,
    ship_city TEXT NOT NULL, total INTEGER NOT NULL);
CREATE TABLE order_items (
    id INTEGER PRIMARY KEY, order_id INTEGER NOT NULL REFERENCES orders(id),
    product_id INTEGER NOT NULL REFERENCES products(id), name TEXT NOT NULL, colour TEXT NOT NULL,
    size TEXT NOT NULL, qty INTEGER NOT NULL, price INTEGER NOT NULL);
"""

# slug: (title, nouns, materials, price range in dollars); slugs are not prefixes of one another (URL matching)
CATEGORIES = {
    "kitchen": (
        "Kitchen",
        ["Mug", "Kettle", "Teapot", "Skillet", "Cutting Board", "Colander", "Salad Bowl"],
        ["ceramic", "steel", "bamboo", "cast iron", "glass"],
        (6, 90),
    ),
    "clothing": (
        "Clothing",
        ["T-Shirt", "Hoodie", "Rain Jacket", "Scarf", "Sweater", "Beanie", "Cardigan"],
        ["cotton", "wool", "linen", "polyester", "fleece"],
        (9, 160),
    ),
    "electronics": (
        "Electronics",
        ["Headphones", "Speaker", "Charger", "Keyboard", "Mouse", "Webcam", "Power Bank"],
        ["plastic", "aluminium", "rubber"],
        (12, 240),
    ),
    "outdoor": (
        "Outdoor",
        ["Tent", "Backpack", "Water Bottle", "Hammock", "Lantern", "Camping Chair", "Sleeping Bag"],
        ["nylon", "canvas", "steel", "polyester"],
        (10, 320),
    ),
    "decor": (
        "Home Decor",
        ["Table Lamp", "Cushion", "Vase", "Rug", "Wall Clock", "Candle Holder", "Picture Frame"],
        ["ceramic", "glass", "wood", "cotton", "brass"],
        (7, 180),
    ),
    "garden": (
        "Garden",
        ["Watering Can", "Plant Pot", "Garden Hose", "Pruning Shears", "Bird Feeder", "Trowel"],
        ["steel", "plastic", "terracotta", "wood"],
        (5, 120),
    ),
}
SIZED = {"clothing"}
SIZES = ["S", "M", "L", "XL"]
BRANDS = ["Northwind", "Alder", "Brightwell", "Cobalt", "Driftwood", "Evergreen", "Fjord", "Granite", "Harbor",
          "Ironbark", "Juniper", "Kestrel", "Lumen", "Meadow", "Nimbus", "Oakline", "Pinecrest", "Quill", "Redwood",
          "Summit", "Tidewater", "Umber", "Vantage", "Willow"]  # fmt: skip
ADJECTIVES = ["Classic", "Compact", "Deluxe", "Essential", "Everyday", "Heritage", "Modern", "Premium", "Rustic",
              "Sleek", "Sturdy", "Vintage", "Travel", "Ultra"]  # fmt: skip
COLOURS = ["Black", "White", "Red", "Blue", "Green", "Grey", "Navy", "Yellow", "Orange", "Pink", "Brown", "Teal"]
REVIEWERS = ["Ava", "Ben", "Chloe", "Dev", "Elena", "Farid", "Grace", "Hiro", "Isla", "Jonas", "Kira", "Liam",
             "Maya", "Noah", "Olga", "Priya", "Quinn", "Rosa", "Sven", "Tara"]  # fmt: skip
REVIEW_TITLES = {
    1: ["Broke within a week", "Not as described", "Would not buy again"],
    2: ["Disappointing", "Below expectations", "Feels cheap"],
    3: ["It is fine", "Does the job", "Average quality"],
    4: ["Very good", "Solid purchase", "Happy with it"],
    5: ["Excellent", "Love it", "Best purchase this year"],
}
REVIEW_BODIES = ["The colour is exactly as pictured.", "Shipping was quick and the packaging was good.",
                 "It is smaller than I expected.", "Great value for the price.", "The finish started to wear off.",
                 "I bought a second one as a gift.", "Instructions were unclear.",
                 "Feels well made and sturdy."]  # fmt: skip
USERS = [  # username, full name, street, city; emma is the account the tasks speak for (WebArena's shopper)
    ("emma", "Emma Lopez", "101 S San Mateo Dr", "San Mateo"),
    ("alex", "Alex Chen", "48 Harbor Way", "Portland"),
    ("sam", "Sam Patel", "7 Elm Court", "Austin"),
    ("jordan", "Jordan Kim", "220 Lake Shore Rd", "Chicago"),
]
ORDER_STATUSES = ["Complete", "Complete", "Complete", "Canceled"]
CATEGORY_SIZE = (10, 14)


def slugify(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def money(cents: int) -> str:
    return f"${cents // 100:,}.{cents % 100:02d}"


def build(seed: int) -> sqlite3.Connection:
    rng = random.Random(f"jgem-shop-{seed}")
    db = sqlite3.connect(":memory:", check_same_thread=False)
    db.row_factory = sqlite3.Row
    db.executescript(SCHEMA)
    today = dt.date(2024, 1, 1) + dt.timedelta(days=rng.randrange(300))
    db.execute("INSERT INTO meta VALUES ('today', ?)", (today.isoformat(),))
    _catalogue(db, rng, today)
    for username, full_name, street, city in USERS:
        db.execute(
            "INSERT INTO users (username, password, full_name, email, street, city) VALUES (?, ?, ?, ?, ?, ?)",
            (username, f"{username}-pass", full_name, f"{username}@example.com", street, city),
        )
    _orders(db, rng, today)
    emma = db.execute("SELECT id FROM users WHERE username = 'emma'").fetchone()[0]
    for product in rng.sample(db.execute("SELECT * FROM products").fetchall(), rng.randint(1, 3)):
        colour, size = _options(rng, product)
        db.execute(
            "INSERT INTO cart (user_id, product_id, colour, size, qty) VALUES (?, ?, ?, ?, ?)",
            (emma, product["id"], colour, size, rng.randint(1, 2)),
        )
    db.commit()
    return db


def _catalogue(db: sqlite3.Connection, rng: random.Random, today: dt.date) -> None:
    names: list[str] = []
    prices: set[int] = set()
    for slug, (title, nouns, materials, (lo, hi)) in CATEGORIES.items():
        cid = db.execute("INSERT INTO categories (slug, title) VALUES (?, ?)", (slug, title)).lastrowid
        for _ in range(rng.randint(*CATEGORY_SIZE)):
            while True:
                adjective, noun = rng.choice(ADJECTIVES), rng.choice(nouns)
                name = f"{rng.choice(BRANDS)} {adjective} {noun}"
                if not any(name in n or n in name for n in names):
                    break
            names.append(name)
            while (price := rng.randint(lo, hi) * 100 + rng.choice((0, 49, 50, 95, 99))) in prices:
                pass
            prices.add(price)
            material = rng.choice(materials)
            colours = sorted(rng.sample(COLOURS, rng.randint(2, 4)), key=COLOURS.index)
            sizes = SIZES[rng.randint(0, 1) :] if slug in SIZED else []
            description = (
                f"The {name} is a {adjective.lower()} {noun.lower()} made of {material}, "
                f"available in {', '.join(c.lower() for c in colours)}."
            )
            pid = db.execute(
                "INSERT INTO products (slug, name, category_id, price, material, colours, sizes, description, "
                "rating, review_count) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, 0)",
                (slugify(name), name, cid, price, material, ",".join(colours), ",".join(sizes), description),
            ).lastrowid
            _reviews(db, rng, pid, today)


def _reviews(db: sqlite3.Connection, rng: random.Random, pid: int, today: dt.date) -> None:
    quality = rng.uniform(1.5, 5.0)
    stars = [min(5, max(1, round(rng.gauss(quality, 0.9)))) for _ in range(rng.randint(1, 5))]
    for s in stars:
        date = today - dt.timedelta(days=rng.randrange(1, 400))
        db.execute(
            "INSERT INTO reviews (product_id, author, stars, title, body, date) VALUES (?, ?, ?, ?, ?, ?)",
            (pid, rng.choice(REVIEWERS), s, rng.choice(REVIEW_TITLES[s]), rng.choice(REVIEW_BODIES), date.isoformat()),
        )
    db.execute(
        "UPDATE products SET rating = ?, review_count = ? WHERE id = ?",
        (round(sum(stars) / len(stars), 1), len(stars), pid),
    )


def _options(rng: random.Random, product: sqlite3.Row) -> tuple[str, str]:
    sizes = product["sizes"].split(",") if product["sizes"] else [""]
    return rng.choice(product["colours"].split(",")), rng.choice(sizes)


def _orders(db: sqlite3.Connection, rng: random.Random, today: dt.date) -> None:
    """Past orders of every user, numbered in date order with five-digit numbers (no number is a prefix of another,
    so an `/orders/<n>` URL names one order)."""
    products = db.execute("SELECT * FROM products").fetchall()
    users = db.execute("SELECT * FROM users").fetchall()
    placed = []
    for user in users:
        for _ in range(rng.randint(4, 7) if user["username"] == "emma" else rng.randint(1, 3)):
            placed.append((today - dt.timedelta(days=rng.randrange(2, 420)), user))
    placed.sort(key=lambda p: (p[0], p[1]["id"]))
    number = rng.randint(10000, 10500)
    for date, user in placed:
        number += rng.randint(3, 40)
        status = "Processing" if (today - date).days < 7 else rng.choice(ORDER_STATUSES)
        oid = db.execute(
            "INSERT INTO orders (number, user_id, date, status, ship_name, ship_street, ship_city, total) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, 0)",
            (number, user["id"], date.isoformat(), status, user["full_name"], user["street"], user["city"]),
        ).lastrowid
        total = 0
        for product in rng.sample(products, rng.randint(1, 3)):
            colour, size = _options(rng, product)
            qty = rng.randint(1, 2)
            total += qty * product["price"]
            db.execute(
                "INSERT INTO order_items (order_id, product_id, name, colour, size, qty, price) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (oid, product["id"], product["name"], colour, size, qty, product["price"]),
            )
        db.execute("UPDATE orders SET total = ? WHERE id = ?", (total, oid))
