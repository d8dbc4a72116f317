"""A browserless driver for the shipped sites' tests: plays a task's `solution` over HTTP and scores its `eval`.

It parses each page (stdlib `html.parser`), finds controls by (role, accessible name) as Chromium names them for
the sites' markup (aria-label, else `<label for>` text for fields, else the element's text), fills and submits
forms as a browser would (radio groups, implicit submission on Enter, the submitter's name=value), follows
redirects and keeps a history for `go_back`. A `(role, name)` must pick one control on its page (several links
to the same URL count as one), a field must be empty before `type` (a browser types after what is there), so a
solution that passes here has the names, uniqueness and forms the browser-driven solver relies on. Scoring follows
WebArena's evaluators for the locators the sites use (`document.querySelector(sel)?.outerText ?? ''`).
"""

from __future__ import annotations

import html.parser
import json
import re
import ssl
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

import httpx

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
BLOCK = {"p", "div", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "ul", "ol", "table", "section", "article",
         "header", "nav", "main", "form", "fieldset", "blockquote", "address", "dl", "dt", "dd", "thead",
         "tbody"}  # fmt: skip
LOCATOR = re.compile(r"^document\.querySelector\((\".*?\")\)\?\.outerText \?\? ''$")
PLACEHOLDERS = ("__SHOP__", "__FORUM__")
_TLS = ssl.create_default_context()  # the sites are plain http; httpx would load the CA store per client (~50 ms)


def http_client(**kwargs: Any) -> httpx.Client:
    """An httpx client for the loopback sites (timeout 10 s unless given), on one shared TLS context."""
    return httpx.Client(verify=_TLS, **{"timeout": 10, **kwargs})


INPUT_ROLES = {"text": "textbox", "password": "textbox", "email": "textbox", "search": "searchbox",
               "number": "spinbutton", "radio": "radio", "checkbox": "checkbox", "submit": "button"}  # fmt: skip


@dataclass(eq=False)
class Node:
    tag: str
    attrs: dict[str, str]
    parent: Node | None = None
    children: list[Node | str] = field(default_factory=list)

    def walk(self):
        yield self
        for c in self.children:
            if isinstance(c, Node):
                yield from c.walk()

    def text(self) -> str:
        """Rendered text, roughly `outerText`: blocks and `<br>` on their own lines, spaces collapsed."""
        parts: list[str] = []

        def go(n: Node) -> None:
            if n.tag in ("script", "style"):
                return
            if n.tag in BLOCK or n.tag == "br":
                parts.append("\n")
            for c in n.children:
                parts.append(c) if isinstance(c, str) else go(c)
            if n.tag in BLOCK:
                parts.append("\n")

        go(self)
        lines = (" ".join(line.split()) for line in "".join(parts).split("\n"))
        return "\n".join(line for line in lines if line)

    def has_class(self, cls: str) -> bool:
        return cls in self.attrs.get("class", "").split()


class _Parser(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = self.cur = Node("#document", {})

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs}, self.cur)
        self.cur.children.append(node)
        if tag not in VOID:
            self.cur = node

    def handle_endtag(self, tag: str) -> None:
        n = self.cur
        while n is not None and n.tag != tag:
            n = n.parent
        if n is not None and n.parent is not None:
            self.cur = n.parent

    def handle_data(self, data: str) -> None:
        self.cur.children.append(data)


def role(n: Node) -> str | None:
    """Chromium's role for the elements the sites use."""
    if n.tag == "a" and "href" in n.attrs:
        return "link"
    if n.tag == "button":
        return "button"
    if n.tag == "textarea":
        return "textbox"
    if n.tag == "select":
        return "combobox"
    if n.tag in ("h1", "h2", "h3", "h4", "h5", "h6"):
        return "heading"
    if n.tag == "input":
        kind = n.attrs.get("type", "text")
        return INPUT_ROLES.get(kind)
    return None


class Page:
    """A parsed page: its URL, status and DOM."""

    def __init__(self, response: httpx.Response) -> None:
        self.url, self.status, self.html = str(response.url), response.status_code, response.text
        parser = _Parser()
        parser.feed(response.text)
        self.root = parser.root
        self.labels = {n.attrs["for"]: n.text() for n in self.root.walk() if n.tag == "label" and "for" in n.attrs}

    def name(self, n: Node) -> str:
        if "aria-label" in n.attrs:
            return " ".join(n.attrs["aria-label"].split())
        if n.tag in ("input", "textarea", "select"):
            return self.labels.get(n.attrs.get("id", ""), "")
        return " ".join(n.text().split())

    def controls(self) -> list[tuple[str, str, Node]]:
        return [(r, self.name(n), n) for n in self.root.walk() if (r := role(n)) is not None]

    def find(self, role_: str, name: str) -> Node:
        hits = [n for r, nm, n in self.controls() if r == role_ and nm == name]
        if not hits:
            near = sorted({f"{r} {nm!r}" for r, nm, _ in self.controls() if r == role_})
            raise AssertionError(f"no {role_} {name!r} on {self.url}; there are: {', '.join(near)}")
        same_link = role_ == "link" and len({n.attrs["href"] for n in hits}) == 1
        if len(hits) > 1 and not same_link:
            raise AssertionError(f"{len(hits)} controls {role_} {name!r} on {self.url}: a solution step is ambiguous")
        return hits[0]

    def select(self, selector: str) -> Node | None:
        """`querySelector` for the selector forms the tasks use: `#id`, `#id .cls`, `#id > .cls`."""
        m = re.fullmatch(r"#([\w-]+)(?:\s*(>)?\s*\.([\w-]+))?", selector)
        if not m:
            raise ValueError(f"selector {selector!r} is outside what this driver understands")
        base = next((n for n in self.root.walk() if n.attrs.get("id") == m.group(1)), None)
        if base is None or not m.group(3):
            return base
        pool = [c for c in base.children if isinstance(c, Node)] if m.group(2) else list(base.walk())[1:]
        return next((n for n in pool if n.has_class(m.group(3))), None)

    def text(self) -> str:
        return self.root.text()


class Driver:
    """Plays solution steps against a site through an httpx client (which keeps the session cookie)."""

    def __init__(self, client: httpx.Client, base_url: str) -> None:
        self.client, self.base = client, base_url
        self.history: list[str] = []
        self.page: Page | None = None
        self.values: dict[int, str] = {}  # id(node) -> typed value, on the current page
        self.checked: set[int] = set()  # id(node) of radios and checkboxes ticked on the current page

    def url(self, url: str) -> str:
        for ph in PLACEHOLDERS:
            url = url.replace(ph, self.base)
        return urllib.parse.urljoin(self.page.url if self.page else self.base, url)

    def goto(self, url: str, record: bool = True) -> Page:
        return self._load(self.client.get(self.url(url)), record)

    def _load(self, response: httpx.Response, record: bool = True) -> Page:
        if response.status_code >= 500:
            raise AssertionError(f"{response.request.method} {response.request.url} -> {response.status_code}")
        if record and self.page is not None:
            self.history.append(self.page.url)
        self.page, self.values, self.checked = Page(response), {}, set()
        return self.page

    def play(self, step: list[Any]) -> None:
        kind, args = step[0], step[1:]
        assert self.page is not None
        if kind == "click":
            self.click(self.page.find(args[0], args[1]))
        elif kind == "type":
            node = self.page.find(args[0], args[1])
            current = self.values.get(id(node), node.attrs.get("value", "") if node.tag == "input" else node.text())
            assert current == "", f"{args[0]} {args[1]!r} holds {current!r}: typing would append to it"
            self.values[id(node)] = args[2]
            if int(args[3]) if len(args) > 3 else 1:
                self.submit(self._form(node), None)
        elif kind == "go_back":
            self.goto(self.history.pop(), record=False)
        elif kind == "goto":
            self.goto(args[0])
        elif kind != "stop":
            raise AssertionError(f"the driver cannot play {step}")

    def click(self, node: Node) -> None:
        r = role(node)
        if r == "link":
            self.goto(node.attrs["href"])
        elif r == "radio":
            form = self._form(node)
            for n in form.walk():
                if role(n) == "radio" and n.attrs.get("name") == node.attrs.get("name"):
                    self.checked.discard(id(n))
            self.checked.add(id(node))
        elif r == "checkbox":
            self.checked ^= {id(node)}
        elif r == "button":
            self.submit(self._form(node), node)
        else:
            raise AssertionError(f"clicking a {r} does nothing here")

    def _form(self, node: Node) -> Node:
        n = node.parent
        while n is not None and n.tag != "form":
            n = n.parent
        assert n is not None, f"{node.tag} {node.attrs} is in no form"
        return n

    def submit(self, form: Node, submitter: Node | None) -> None:
        if submitter is None:  # implicit submission: the form's first submit button submits it
            submitter = next((n for n in form.walk() if role(n) == "button"), None)
        fields: list[tuple[str, str]] = []
        for n in form.walk():
            name = n.attrs.get("name")
            if not name or n is submitter or n.tag == "button":
                continue
            if n.tag == "input" and n.attrs.get("type") in ("radio", "checkbox"):
                if id(n) in self.checked:
                    fields.append((name, n.attrs.get("value", "on")))
            elif n.tag in ("input", "textarea"):
                default = n.attrs.get("value", "") if n.tag == "input" else n.text()
                fields.append((name, self.values.get(id(n), default)))
        if submitter is not None and submitter.attrs.get("name"):
            fields.append((submitter.attrs["name"], submitter.attrs.get("value", "")))
        action = self.url(form.attrs.get("action", self.page.url))
        if form.attrs.get("method", "get").lower() == "post":
            self._load(self.client.post(action, content=urllib.parse.urlencode(fields), headers=_FORM))
        else:
            self._load(self.client.get(action.split("?")[0] + "?" + urllib.parse.urlencode(fields)))


_FORM = {"content-type": "application/x-www-form-urlencoded"}


# ---- WebArena's scoring, for the eval forms the shipped tasks use


def clean(s: str) -> str:
    s = s.strip()
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "'\"":
        s = s[1:-1]
    return s.lower()


def must_include(ref: str, pred: str, tokenize: bool) -> bool:
    ref, pred = clean(ref), clean(pred)
    tokens = re.findall(r"\w+|[^\w\s]", ref)
    return ref in re.findall(r"\w+|[^\w\s]", pred) if tokenize and len(tokens) == 1 else ref in pred


def string_score(ev: dict[str, Any], answer: str) -> bool:
    refs = ev["reference_answers"]
    if "exact_match" in refs:
        return clean(refs["exact_match"]) == clean(answer)
    return all(must_include(r, answer, len(refs["must_include"]) == 1) for r in refs["must_include"])


def url_score(ev: dict[str, Any], url: str, base: str) -> bool:
    pred = urllib.parse.urlparse(url.rstrip("/"))
    for ref in ev["reference_url"].split(" |OR| "):
        gold = urllib.parse.urlparse(ref.replace("__SHOP__", base).replace("__FORUM__", base).rstrip("/"))
        pq = urllib.parse.parse_qs(pred.query)
        query_ok = all(any(v in pq.get(k, []) for v in vs) for k, vs in urllib.parse.parse_qs(gold.query).items())
        if gold.netloc + gold.path in pred.netloc + pred.path and query_ok:
            return True
    return False


def locate(page: Page, locator: str) -> str:
    m = LOCATOR.match(locator)
    assert m, f"locator {locator!r} is not of the querySelector form the sites' tasks use"
    node = page.select(json.loads(m.group(1)))
    return "" if node is None else node.text()


def html_score(ev: dict[str, Any], driver: Driver) -> bool:
    for t in ev["program_html"]:
        page = driver.page if t["url"] == "last" else driver.goto(t["url"], record=False)
        selected, req = locate(page, t["locator"]), t["required_contents"]
        ok = clean(req["exact_match"]) == clean(selected) if "exact_match" in req else all(
            must_include(r, selected, False) for r in req["must_include"])  # fmt: skip
        if not ok:
            return False
    return True


def score(task: dict[str, Any], answer: str, driver: Driver) -> bool:
    """WebArena's verdict: every evaluator of the task passes (URL read before program_html navigates)."""
    ev, url = task["eval"], driver.page.url
    checks = {
        "string_match": lambda: string_score(ev, answer),
        "url_match": lambda: url_score(ev, url, driver.base),
        "program_html": lambda: html_score(ev, driver),
    }
    return all(checks[k]() for k in ev["eval_types"])
