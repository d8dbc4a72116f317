"""Fixtures for the browser tests: small HTML pages served on a free loopback port, and a shared session."""

from __future__ import annotations

import contextlib
import html
import threading
import time
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from jgem.envs.web.browser import BrowserSession


def _page(title: str, body: str, head: str = "") -> str:
    return f"<!doctype html><html><head><title>{title}</title>{head}</head><body>{body}</body></html>"


PAGES = {
    "/": _page(
        "Home",
        "<h1>Welcome home</h1><p>Pick a page below.</p>"
        "<nav><a href='/form'>Form page</a> <a href='/long'>Long page</a> <a href='/menu'>Menu page</a> "
        "<a href='/target' target='_blank'>Open in new tab</a></nav>"
        "<button aria-label=\"Bob's button\">Bob's</button>"
        "<div style='display:none'><a href='/secret'>Hidden link</a></div>",
    ),
    "/form": _page(
        "Form",
        "<form action='/result' method='get'>"
        "<label for='name'>Name</label> <input id='name' name='name'>"
        "<label for='colour'>Colour</label> <select id='colour' name='colour'>"
        "<option value='red'>Red</option><option value='green'>Green</option><option value='blue'>Blue</option>"
        "</select><label><input type='checkbox' name='gift'>Gift wrap</label>"
        "<button type='submit'>Submit</button></form>",
    ),
    "/long": _page(
        "Long",
        "".join(f"<p style='margin:0;height:100px'>Paragraph number {i} of the long page.</p>" for i in range(60))
        + "<a href='/'>Bottom link</a>",
    ),
    "/menu": _page(
        "Menu",
        "<div class='menu'><span>Products menu</span><ul class='sub'><li><a href='/target'>Secret item</a></li>"
        "</ul></div><p>Below the menu.</p>",
        head="<style>.sub{display:none}.menu:hover .sub{display:block}</style>",
    ),
    "/alert": _page(
        "Alert",
        "<button onclick=\"alert('hi'); document.getElementById('out').textContent = 'Greeted'\">Greet</button>"
        "<p id='out'>Not yet</p>",
    ),
    "/target": _page("Target", "<h1>Target page</h1><a href='/'>Back home</a>"),
}


SLOW_PAGE = _page("Slow", "<h1>Slow page</h1><a href='/'>Home from the slow page</a>")


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        url = urllib.parse.urlsplit(self.path)
        query = {k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()}
        if url.path == "/slow":  # answers after `head` s and sends its body `body` s later: a route under load
            self._slow(float(query.get("head", 0)), float(query.get("body", 0)))
            return
        if url.path == "/nothing":  # no content: a navigation here ends without leaving the page
            self.send_response(204)
            self.end_headers()
            return
        if url.path == "/link":  # one link, to `to`: a click on it navigates there
            body = _page("Link", f"<a href='{html.escape(query['to'])}'>Go</a>").encode()
        elif url.path == "/result":
            sent = ", ".join(f"{k}={v}" for k, v in sorted(query.items()))
            body = _page("Result", f"<p>You sent {html.escape(sent)}</p>").encode()
        elif url.path in PAGES:
            body = PAGES[url.path].encode()
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _slow(self, head: float, body: float) -> None:
        time.sleep(head)
        page = SLOW_PAGE.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.flush()  # the headers go now: the browser commits the navigation to an empty document
        time.sleep(body)
        with contextlib.suppress(ConnectionError):  # the browser gave up on it (a test of a page that never loads)
            self.wfile.write(page)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="session")
def origin() -> Iterator[str]:
    """Origin (no trailing slash) of the fixture pages, served from a thread on 127.0.0.1:<free port>."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="session")
def session() -> Iterator[BrowserSession]:
    """One browser per test process, shared by the modules; tests reset it to the page they need."""
    s = BrowserSession(timeout_s=20.0)
    yield s
    s.close()
