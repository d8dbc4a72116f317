"""One Chromium's browser context and its tabs, as WebArena's actions and observations see them.

`Tabs` runs on the driver's loop thread: it executes actions the way WebArena does (an element is found by its
id, scrolled into view and clicked at its centre; `type` focuses, clears, types and maybe presses Enter), keeps
the current tab (a tab a click opens becomes current), waits after each action until the page has settled, numbers
the elements it shows, and renders the current tab with `observation.render`.

Settling has a hard part and a soft one. Hard: the navigation the action started has committed and the new
document is parsed (DOMContentLoaded); an observation before that reads an empty document, so a page that gets
there later than the context's timeout is a `PageTimeout` naming it. Soft: the load event and no document, XHR or
fetch request in flight, waited for at most `SETTLE_S` (a page that keeps polling is observed as it is).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from typing import Any

from playwright.async_api import TimeoutError as PlaywrightTimeout

from jgem.core import EnvFault
from jgem.envs.web import observation
from jgem.envs.web.actions import Action, ActionError
from jgem.envs.web.chromium import Chromium

SETTLE_S = 3.0  # longest wait for a loaded page's late requests after an action, before observing it anyway
_GRACE_S = 0.05  # lets a navigation or popup a script starts just after an action announce itself
_POLL_S = 0.01
_TRACKED = frozenset(("document", "xhr", "fetch"))  # requests that change what the page shows after "load"

# Runs on the node an element id names: scrolls it into view and returns its centre in viewport pixels.
# Clicking an <option> of a <select> chooses it (the closed select's options have no box to click).
_LOCATE_JS = """function (choose) {
  if (!this.isConnected) return {error: "is no longer on the page"};
  if (window !== window.top) return {error: "is inside a frame"};
  const el = this.nodeType === Node.ELEMENT_NODE ? this : this.parentElement;
  if (!el) return {error: "is not an element"};
  const select = el.tagName === "OPTION" ? el.closest("select") : null;
  if (select && !choose) return {error: "is an option of a select; click it to choose it"};
  if (select) {
    select.value = el.value;
    select.dispatchEvent(new Event("input", {bubbles: true}));
    select.dispatchEvent(new Event("change", {bubbles: true}));
    return {selected: true};
  }
  if (el.scrollIntoViewIfNeeded) el.scrollIntoViewIfNeeded(true); else el.scrollIntoView({block: "center"});
  let rect = el.getBoundingClientRect();
  if (this.nodeType === Node.TEXT_NODE) {
    const range = document.createRange();
    range.selectNodeContents(this);
    rect = range.getBoundingClientRect();
  }
  if (rect.width <= 0 || rect.height <= 0 || getComputedStyle(el).visibility !== "visible") {
    return {error: "is not visible"};
  }
  return {x: rect.left + rect.width / 2, y: rect.top + rect.height / 2};
}"""
_SCROLL_JS = (  # WebArena's (from natbot): one viewport up or down
    "(document.scrollingElement || document.body).scrollTop = "
    "(document.scrollingElement || document.body).scrollTop {sign} window.innerHeight;"
)


class PageTimeout(EnvFault):
    """A page did not commit or parse its document within the timeout: the site (or the machine) failed, not
    the action."""


class Tabs:
    """A running Chromium and Playwright's handles on it: the context, its tabs, the current tab, the network
    activity of each tab (to tell when a page has settled) and the ids shown for its elements. Runs on the
    driver's loop thread only."""

    def __init__(self, chromium: Chromium) -> None:
        self.chromium = chromium
        self.browser: Any = None
        self.context: Any = None
        self.current: Any = None
        self.timeout_s = 0.0  # the context's: how long a page may take to commit and parse its document
        self.cdp: dict[Any, Any] = {}
        self.inflight: dict[Any, set[Any]] = {}
        self.navigating: dict[Any, str] = {}  # tab -> the url of its main frame's navigation not yet committed
        self.windows_opened = 0  # popups the pages asked for (a target=_blank click, window.open)
        self.numbers: dict[Any, tuple[str, dict[int, int], dict[int, int]]] = {}  # tab -> its document's ids
        self.next_id = itertools.count(1)

    async def new_context(self, viewport: tuple[int, int], timeout_s: float, **options: Any) -> None:
        """Replace the context (and all its tabs) by a fresh one with one blank tab."""
        old, self.context = self.context, None
        if old is not None:
            await old.close()
        self.cdp.clear()
        self.inflight.clear()
        self.navigating.clear()
        self.numbers.clear()
        self.next_id = itertools.count(1)
        width, height = viewport
        context = await self.browser.new_context(
            viewport={"width": width, "height": height}, locale="en-US", timezone_id="UTC", **options
        )
        context.set_default_timeout(timeout_s * 1000)
        context.on("page", self._track)
        self.context, self.timeout_s = context, timeout_s
        self.current = await context.new_page()

    def _track(self, page: Any) -> None:
        """Follow a new tab's requests and navigations (every tab of the context passes here)."""
        inflight: set[Any] = set()
        self.inflight[page] = inflight

        def started(request: Any) -> None:
            if request.resource_type in _TRACKED:
                inflight.add(request)
            if request.is_navigation_request() and request.frame == page.main_frame:
                self.navigating[page] = request.url

        def ended(request: Any) -> None:
            inflight.discard(request)
            if request.is_navigation_request() and request.failure is not None:
                self.navigating.pop(page, None)  # also a 204 answer or a download: they commit nothing

        def committed(frame: Any) -> None:
            if frame == page.main_frame:
                self.navigating.pop(page, None)

        def closed(_: Any) -> None:
            for per_tab in (self.inflight, self.cdp, self.numbers):
                per_tab.pop(page, None)

        page.on("request", started)
        page.on("requestfinished", ended)
        page.on("requestfailed", ended)
        page.on("framenavigated", committed)
        page.on("close", closed)

    async def session(self, page: Any) -> Any:
        """Our CDP session on `page`. It also reports, as the page's renderer decides them, the navigations and
        popups an action starts, before Playwright sees their requests or pages (which can lag under load)."""
        if page not in self.cdp:
            cdp = await self.context.new_cdp_session(page)
            main_frame = (await cdp.send("Page.getFrameTree"))["frameTree"]["frame"]["id"]

            def requested(event: dict[str, Any]) -> None:
                if event.get("frameId") == main_frame and event.get("disposition") == "currentTab":
                    self.navigating[page] = event.get("url", "")

            def window_open(_: dict[str, Any]) -> None:
                self.windows_opened += 1

            cdp.on("Page.frameRequestedNavigation", requested)
            cdp.on("Page.windowOpen", window_open)
            await cdp.send("Page.enable")
            self.cdp[page] = cdp
        return self.cdp[page]

    async def sync(self, page: Any, deadline: float) -> None:
        """Return once every navigation and popup an action on `page` asked for is known, and a navigation it
        started has committed. The renderer reports them on our CDP session while it handles the input, so a
        round trip there after the action (which returns once the renderer took the input) comes back behind
        them, however late a loaded machine delivers events (a fixed grace alone can miss them); and Chromium
        holds commands to a frame that is navigating until the navigation commits. `PageTimeout` at
        `deadline` (time.monotonic())."""
        if page.is_closed():
            return
        try:
            cdp = await self.session(page)
            await asyncio.wait_for(cdp.send("Runtime.evaluate", {"expression": "0"}), deadline - time.monotonic())
        except TimeoutError:  # asyncio's, since Python 3.11
            raise self._timeout(page, "answer") from None
        except Exception:  # a closed tab or a dead browser: what follows reports it
            pass

    async def loaded(self, page: Any, deadline: float | None = None) -> None:
        """Wait until `page`'s main frame has committed its navigation and parsed the new document
        (DOMContentLoaded). `PageTimeout` naming the page at `deadline` (by default `timeout_s` from now)."""
        deadline = time.monotonic() + self.timeout_s if deadline is None else deadline
        while page in self.navigating and not page.is_closed():
            if time.monotonic() > deadline:
                raise self._timeout(page, "commit")
            await asyncio.sleep(_POLL_S)
        try:
            await page.wait_for_load_state("domcontentloaded", timeout=max(deadline - time.monotonic(), 0.001) * 1000)
        except PlaywrightTimeout:
            raise self._timeout(page, "parse") from None
        except Exception as e:
            if not page.is_closed():  # a closed tab is left for tab() to replace
                self.check_alive(e)
                raise

    def _timeout(self, page: Any, what: str) -> PageTimeout:
        waited = f"within {self.timeout_s:.1f} s; the env should be rebuilt"
        if page in self.navigating:
            return PageTimeout(f"the navigation to {self.navigating[page] or page.url} did not commit {waited}")
        if what == "parse":
            return PageTimeout(
                f"the page at {page.url} did not finish parsing its document (DOMContentLoaded) {waited}"
            )
        return PageTimeout(f"the page at {page.url} did not answer {waited}")

    async def settle(self, page: Any, before: list[Any], windows_before: int) -> None:
        """Wait until the current tab has committed and parsed the page the action on `page` led to (at most
        `timeout_s`, else `PageTimeout`), then at most SETTLE_S until it has loaded and has no document/XHR
        request in flight. A tab the action opened (a target=_blank link) becomes the current tab, as in
        WebArena."""
        start = time.monotonic()
        hard_by = start + self.timeout_s
        await self.sync(page, hard_by)
        # navigations and popups a script starts a moment after the action (the grace overlaps the sync)
        await asyncio.sleep(max(start + _GRACE_S - time.monotonic(), 0.0))
        popup_by = time.monotonic() + SETTLE_S
        opened = [p for p in self.context.pages if p not in before]
        while len(opened) < self.windows_opened - windows_before and time.monotonic() < popup_by:
            await asyncio.sleep(_POLL_S)  # a popup was asked for; its page is still on its way
            opened = [p for p in self.context.pages if p not in before]
        if opened:
            self.current = opened[-1]
            await self.current.bring_to_front()
        page = self.current
        await self.loaded(page, hard_by)
        deadline = time.monotonic() + SETTLE_S
        while time.monotonic() < deadline and not page.is_closed():
            if page in self.navigating:  # a redirect or a script navigated on: its document is waited for too
                await self.loaded(page)
            if self.inflight.get(page):
                await asyncio.sleep(_POLL_S)
                continue
            with contextlib.suppress(Exception):  # a page that never loads is observed as it is
                await page.wait_for_load_state("load", timeout=max(deadline - time.monotonic(), 0.001) * 1000)
            await asyncio.sleep(_POLL_S)
            if page not in self.navigating and not self.inflight.get(page):
                return

    async def locate(self, element_id: int, choose: bool = False) -> dict[str, Any]:
        """Scroll element `element_id` of the current tab into view and return its centre {"x", "y"} and its
        {"backend_id"}; with `choose`, an option of a select is chosen instead ({"selected": True})."""
        cdp = await self.session(self.current)
        _, backends = await self.ids(self.current)
        if element_id not in backends:
            raise ActionError(
                f"element [{element_id}] is not on the current page (ids are those of its last observation)"
            )
        try:
            resolved = await cdp.send("DOM.resolveNode", {"backendNodeId": backends[element_id]})
        except Exception as e:
            self.check_alive(e)
            raise ActionError(f"element [{element_id}] is no longer on the page") from None
        object_id = resolved["object"]["objectId"]
        try:
            result = await cdp.send(
                "Runtime.callFunctionOn",
                {
                    "objectId": object_id,
                    "functionDeclaration": _LOCATE_JS,
                    "arguments": [{"value": choose}],
                    "returnByValue": True,
                },
            )
        finally:
            with contextlib.suppress(Exception):
                await cdp.send("Runtime.releaseObject", {"objectId": object_id})
        found = result.get("result", {}).get("value") or {"error": "could not be located"}
        if "error" in found:
            raise ActionError(f"element [{element_id}] {found['error']}")
        return {**found, "backend_id": backends[element_id]}

    def check_alive(self, error: Exception) -> None:
        """Re-raise `error` (a fault) when the browser or the tab is gone; else the caller blames the action."""
        if not self.chromium.alive() or self.current is None or self.current.is_closed():
            raise error

    async def tab(self) -> Any:
        """The current tab; if the page closed it (window.close()), the last tab, or a new blank one."""
        if self.current is None or self.current.is_closed():
            pages = self.context.pages
            self.current = pages[-1] if pages else await self.context.new_page()
        return self.current

    async def execute(self, action: Action) -> None:
        page, before, windows_before = await self.tab(), list(self.context.pages), self.windows_opened
        await self.session(page)  # before the action, so that it reports the navigation the action starts
        kind = action.kind
        if kind in ("click", "hover", "type"):
            assert action.element_id is not None
            spot = await self.locate(action.element_id, choose=kind == "click")
            if kind == "click" and "x" in spot:
                await page.mouse.click(spot["x"], spot["y"])
            elif kind == "hover":
                await page.mouse.move(spot["x"], spot["y"])
            elif kind == "type":
                await self._type(action, spot["backend_id"])
        elif kind == "press":
            # WebArena: Meta is Control off a Mac (and Chromium here is never on a Mac).
            await page.keyboard.press(action.key.replace("Meta", "Control"))
        elif kind == "scroll":
            await page.evaluate(_SCROLL_JS.format(sign="-" if action.direction == "up" else "+"))
        elif kind == "new_tab":
            self.current = await self.context.new_page()
            await self.current.bring_to_front()
            return
        elif kind == "tab_focus":
            pages = self.context.pages
            if not 0 <= (action.tab or 0) < len(pages):
                raise ActionError(f"tab_focus [{action.tab}]: there are {len(pages)} tabs, numbered from 0")
            self.current = pages[action.tab or 0]
            await self.current.bring_to_front()
        elif kind == "close_tab":
            await page.close()
            pages = self.context.pages
            self.current = pages[-1] if pages else await self.context.new_page()  # never leave no tab
            await self.current.bring_to_front()
            before = list(self.context.pages)
        elif kind == "goto":
            try:
                await page.goto(action.text)
            except Exception as e:
                self.check_alive(e)
                raise ActionError(f"goto [{action.text}] failed: {first_line(e)}") from None
        elif kind == "go_back":
            await page.go_back()
        elif kind == "go_forward":
            await page.go_forward()
        elif kind == "stop":
            return
        else:
            raise ActionError(f"unknown action kind {kind!r}")
        await self.settle(page, before, windows_before)

    async def _type(self, action: Action, backend_id: int) -> None:
        """WebArena's type: focus the field, clear it (select all, delete), type, and press Enter if asked."""
        cdp = await self.session(self.current)
        try:
            await cdp.send("DOM.focus", {"backendNodeId": backend_id})
        except Exception as e:
            self.check_alive(e)
            raise ActionError(f"element [{action.element_id}] cannot take typed text: {first_line(e)}") from None
        keyboard = self.current.keyboard
        await keyboard.press("Control+a")
        await keyboard.press("Delete")
        await keyboard.type(action.text)
        if action.press_enter_after:
            await keyboard.press("Enter")

    async def titles(self) -> list[str]:
        return [(await p.title()) or p.url for p in self.context.pages]

    async def ids(self, page: Any) -> tuple[dict[int, int], dict[int, int]]:
        """The ids shown for `page`'s current document: (backendDOMNodeId -> id, id -> backendDOMNodeId).

        Chromium's own backendDOMNodeIds are handed out lazily, to whatever asks first (Chromium's autofill
        numbers a page's forms when it sees them, racing the first observation), so they differ from load to
        load. The session numbers shown nodes itself, in the order it first shows them, from one counter per
        context: the same page after `reset` gets the same ids, and an id from a page since left (or another
        tab) is not on the current one."""
        cdp = await self.session(page)
        loader = (await cdp.send("Page.getFrameTree"))["frameTree"]["frame"]["loaderId"]
        if page not in self.numbers or self.numbers[page][0] != loader:  # a new document
            self.numbers[page] = (loader, {}, {})
        return self.numbers[page][1], self.numbers[page][2]

    async def observe(self, kind: str, budget: int) -> str:
        page = await self.tab()
        await self.loaded(page)  # a navigation a script started since the action settled: never an empty page
        tree = await (await self.session(page)).send("Accessibility.getFullAXTree")
        shown, backends = await self.ids(page)

        def number(backend_id: int) -> int:
            if backend_id not in shown:
                shown[backend_id] = next(self.next_id)
                backends[shown[backend_id]] = backend_id
            return shown[backend_id]

        titles = await self.titles()
        return observation.render(tree["nodes"], page.url, titles, self.context.pages.index(page), kind, budget, number)


def first_line(e: BaseException) -> str:
    """The first line of an error's message (Playwright's carry a call log after it)."""
    return (str(e).strip().splitlines() or [type(e).__name__])[0]
