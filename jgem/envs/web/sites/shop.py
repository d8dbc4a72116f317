"""One Stop Market: a small shop in the image of WebArena's shopping site, served from a seeded sqlite database.

Pages: home, category listings (sort by name, price either way, or rating; 8 a page), search, product pages (price,
rating, attributes, reviews, colour/size/quantity and "Add to cart"), the cart (change quantity, remove), checkout
(shipping name and address), order history and order details, the account page, sign in and out. Server-rendered
HTML, forms POST and redirect, no JavaScript. Every control a task uses has an accessible name unique on its page.
Ids that tasks' `program_html` locators read: `#cart-items` rows `#line-<product id>-<colour>-<size|none>` with a
`.qty` cell, `#cart-total`; on an order page `#order-number`, `#order-date`, `#order-status`, `#shipping-address`,
`#order-items`, `#order-total`.
"""

from __future__ import annotations

import datetime as dt
import math
import sqlite3
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from jgem.envs.web.sites import shop_data
from jgem.envs.web.sites.base import Site
from jgem.envs.web.sites.tasks_shop import make_task

PAGE_SIZE = 8
SORTS = {  # ?sort= value: (ORDER BY, link text)
    "name": ("name", "Sort by name"),
    "price": ("price", "Sort by price: low to high"),
    "price_desc": ("price DESC", "Sort by price: high to low"),
    "rating": ("rating DESC, name", "Sort by rating"),
}
MAX_QTY = 99


def line_id(product_id: int, colour: str, size: str) -> str:
    """The element id of a cart row: one per product, colour and size."""
    return f"line-{product_id}-{colour.lower()}-{size.lower() or 'none'}"


def nice_date(iso: str) -> str:
    d = dt.date.fromisoformat(iso)
    return f"{d:%b} {d.day}, {d.year}"


class ShopSite(Site):
    """The shop; `user` "emma" is the shopper whose cart and orders the tasks are about."""

    name = "shop"
    user = "emma"
    tasks = staticmethod(make_task)

    def build(self, seed: int) -> sqlite3.Connection:
        return shop_data.build(seed)

    def routes(self) -> list[Route]:
        return [
            Route("/", self.home),
            Route("/category/{slug}", self.category),
            Route("/search", self.search),
            Route("/product/{slug}.html", self.product),
            Route("/cart", self.cart),
            Route("/cart/add", self.cart_add, methods=["POST"]),
            Route("/cart/update", self.cart_update, methods=["POST"]),
            Route("/cart/remove", self.cart_remove, methods=["POST"]),
            Route("/checkout", self.checkout, methods=["GET", "POST"]),
            Route("/orders", self.orders),
            Route("/orders/{number:int}", self.order),
            Route("/account", self.account),
        ]

    def context(self, user: str | None) -> dict[str, Any]:
        categories = self.query("SELECT slug, title FROM categories ORDER BY id")
        count = self.query(
            "SELECT COALESCE(SUM(qty), 0) AS n FROM cart JOIN users u ON u.id = user_id WHERE u.username = ?",
            (user or "",),
        )[0]["n"]
        return {"categories": categories, "cart_count": count}

    # ---- catalogue

    async def home(self, request: Request) -> Response:
        top = self.query("SELECT * FROM products ORDER BY rating DESC, review_count DESC, name LIMIT 6")
        return self.page(request, "home", products=[_product(p) for p in top])

    async def category(self, request: Request) -> Response:
        slug = request.path_params["slug"]
        rows = self.query("SELECT * FROM categories WHERE slug = ?", (slug,))
        if not rows:
            raise HTTPException(404, f"There is no category {slug!r}.")
        sort = request.query_params.get("sort", "name")
        if sort not in SORTS:
            raise HTTPException(400, f"Unknown sort {sort!r}; use one of {', '.join(SORTS)}.")
        total = self.query("SELECT COUNT(*) AS n FROM products WHERE category_id = ?", (rows[0]["id"],))[0]["n"]
        pages = max(1, math.ceil(total / PAGE_SIZE))
        page = _int(request.query_params.get("page", "1"), "page")
        if not 1 <= page <= pages:
            raise HTTPException(404, f"Page {page} does not exist; this category has {pages}.")
        products = self.query(
            f"SELECT * FROM products WHERE category_id = ? ORDER BY {SORTS[sort][0]} LIMIT ? OFFSET ?",
            (rows[0]["id"], PAGE_SIZE, (page - 1) * PAGE_SIZE),
        )
        return self.page(
            request,
            "category",
            category=rows[0],
            products=[_product(p) for p in products],
            sort=sort,
            sorts={k: v[1] for k, v in SORTS.items()},
            page=page,
            pages=pages,
            total=total,
        )

    async def search(self, request: Request) -> Response:
        q = request.query_params.get("q", "").strip()
        words = q.lower().split()
        rows = self.query(
            "SELECT p.*, c.title AS category FROM products p JOIN categories c ON c.id = category_id ORDER BY name"
        )
        hits = [
            p for p in rows if words and all(w in f"{p['name']} {p['category']} {p['material']}".lower() for w in words)
        ]
        return self.page(request, "search", q=q, products=[_product(p) for p in hits])

    async def product(self, request: Request) -> Response:
        return self._product_page(request, request.path_params["slug"])

    def _product_page(self, request: Request, slug: str, error: str = "", status: int = 200) -> Response:
        rows = self.query(
            "SELECT p.*, c.title AS category, c.slug AS category_slug FROM products p "
            "JOIN categories c ON c.id = category_id WHERE p.slug = ?",
            (slug,),
        )
        if not rows:
            raise HTTPException(404, f"There is no product {slug!r}.")
        reviews = self.query("SELECT * FROM reviews WHERE product_id = ? ORDER BY date DESC, id", (rows[0]["id"],))
        for r in reviews:
            r["date"] = nice_date(r["date"])
        return self.page(request, "product", status, product=_product(rows[0]), reviews=reviews, error=error)

    # ---- cart and checkout

    async def cart(self, request: Request) -> Response:
        user = self.require_user(request)
        lines = self._cart(user)
        return self.page(request, "cart", lines=lines, total=shop_data.money(sum(li["cents"] for li in lines)))

    async def cart_add(self, request: Request) -> Response:
        f = await self.form(request)
        rows = self.query("SELECT * FROM products WHERE id = ?", (_int(f.get("product", ""), "product"),))
        if not rows:
            raise HTTPException(404, "There is no such product.")
        p = rows[0]
        user = self.require_user(request, back=f"/product/{p['slug']}.html")
        colour, size = f.get("colour", ""), f.get("size", "")
        qty = _int(f.get("qty") or "1", "quantity")
        sizes = p["sizes"].split(",") if p["sizes"] else [""]
        error = (
            "Choose a colour." if colour not in p["colours"].split(",")
            else "Choose a size." if size not in sizes
            else f"The quantity must be 1 to {MAX_QTY}." if not 1 <= qty <= MAX_QTY
            else ""
        )  # fmt: skip
        if error:
            return self._product_page(request, p["slug"], error, 400)
        with self.db() as db:
            uid = _uid(db, user)
            db.execute(
                "INSERT INTO cart (user_id, product_id, colour, size, qty) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (user_id, product_id, colour, size) DO UPDATE SET qty = MIN(qty + excluded.qty, ?)",
                (uid, p["id"], colour, size, qty, MAX_QTY),
            )
        return self.redirect("/cart")

    async def cart_update(self, request: Request) -> Response:
        user = self.require_user(request, back="/cart")
        f = await self.form(request)
        line, qty = _int(f.get("line", ""), "line"), _int(f.get("qty", ""), "quantity")
        if not 0 <= qty <= MAX_QTY:
            raise HTTPException(400, f"The quantity must be 0 to {MAX_QTY}.")
        with self.db() as db:
            uid = _uid(db, user)
            if qty == 0:
                db.execute("DELETE FROM cart WHERE id = ? AND user_id = ?", (line, uid))
            else:
                db.execute("UPDATE cart SET qty = ? WHERE id = ? AND user_id = ?", (qty, line, uid))
        return self.redirect("/cart")

    async def cart_remove(self, request: Request) -> Response:
        user = self.require_user(request, back="/cart")
        line = _int((await self.form(request)).get("line", ""), "line")
        with self.db() as db:
            db.execute("DELETE FROM cart WHERE id = ? AND user_id = ?", (line, _uid(db, user)))
        return self.redirect("/cart")

    async def checkout(self, request: Request) -> Response:
        user = self.require_user(request, back="/checkout")
        f = {k: v.strip() for k, v in (await self.form(request)).items()} if request.method == "POST" else {}
        with self._lock:  # the order holds exactly the cart it empties, whatever other requests do
            lines = self._cart(user)
            total = shop_data.money(sum(li["cents"] for li in lines))
            if request.method == "GET":
                return self.page(request, "checkout", lines=lines, total=total, error="", form={})
            missing = [label for key, label in (("name", "Full name"), ("street", "Street address"), ("city", "City"))
                       if not f.get(key)]  # fmt: skip
            if missing or not lines:
                error = "Your cart is empty." if not lines else f"Fill in: {', '.join(missing)}."
                return self.page(request, "checkout", 400, lines=lines, total=total, error=error, form=f)
            with self.db() as db:
                uid = _uid(db, user)
                number = db.execute("SELECT MAX(number) + 1 FROM orders").fetchone()[0]
                today = db.execute("SELECT value FROM meta WHERE key = 'today'").fetchone()[0]
                oid = db.execute(
                    "INSERT INTO orders (number, user_id, date, status, ship_name, ship_street, ship_city, total) "
                    "VALUES (?, ?, ?, 'Pending', ?, ?, ?, ?)",
                    (number, uid, today, f["name"], f["street"], f["city"], sum(li["cents"] for li in lines)),
                ).lastrowid
                db.executemany(
                    "INSERT INTO order_items (order_id, product_id, name, colour, size, qty, price) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [
                        (oid, li["product_id"], li["name"], li["colour"], li["size"], li["qty"], li["price"])
                        for li in lines
                    ],  # fmt: skip
                )
                db.execute("DELETE FROM cart WHERE user_id = ?", (uid,))
        return self.redirect(f"/orders/{number}")

    def _cart(self, user: str) -> list[dict[str, Any]]:
        lines = self.query(
            "SELECT c.id, c.product_id, c.colour, c.size, c.qty, p.name, p.slug, p.price FROM cart c "
            "JOIN products p ON p.id = c.product_id JOIN users u ON u.id = c.user_id WHERE u.username = ? "
            "ORDER BY c.id",
            (user,),
        )
        for li in lines:
            li["cents"] = li["qty"] * li["price"]
            li["element_id"] = line_id(li["product_id"], li["colour"], li["size"])
            li["label"] = ", ".join(x for x in (li["name"], li["colour"], li["size"]) if x)
            li["unit"], li["subtotal"] = shop_data.money(li["price"]), shop_data.money(li["cents"])
        return lines

    # ---- orders and account

    async def orders(self, request: Request) -> Response:
        user = self.require_user(request)
        orders = self.query(
            "SELECT o.*, (SELECT SUM(qty) FROM order_items WHERE order_id = o.id) AS items FROM orders o "
            "JOIN users u ON u.id = o.user_id WHERE u.username = ? ORDER BY o.number DESC",
            (user,),
        )
        for o in orders:
            o["date"], o["total"] = nice_date(o["date"]), shop_data.money(o["total"])
        return self.page(request, "orders", orders=orders)

    async def order(self, request: Request) -> Response:
        user = self.require_user(request)
        number = request.path_params["number"]
        rows = self.query(
            "SELECT o.* FROM orders o JOIN users u ON u.id = o.user_id WHERE o.number = ? AND u.username = ?",
            (number, user),
        )
        if not rows:
            raise HTTPException(404, f"You have no order {number}.")
        order = rows[0]
        items = self.query("SELECT * FROM order_items WHERE order_id = ? ORDER BY id", (order["id"],))
        for it in items:
            it["unit"], it["subtotal"] = shop_data.money(it["price"]), shop_data.money(it["qty"] * it["price"])
        order["date"], order["total"] = nice_date(order["date"]), shop_data.money(order["total"])
        return self.page(request, "order", order=order, items=items)

    async def account(self, request: Request) -> Response:
        user = self.require_user(request)
        return self.page(request, "account", account=self.query("SELECT * FROM users WHERE username = ?", (user,))[0])


def _product(p: dict[str, Any]) -> dict[str, Any]:
    """A product row with display fields."""
    return {
        **p,
        "price_text": shop_data.money(p["price"]),
        "colour_list": p["colours"].split(","),
        "size_list": p["sizes"].split(",") if p["sizes"] else [],
    }


def _uid(db: sqlite3.Connection, user: str) -> int:
    return db.execute("SELECT id FROM users WHERE username = ?", (user,)).fetchone()[0]


def _int(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise HTTPException(400, f"The {what} must be a whole number, got {text!r}.") from None
