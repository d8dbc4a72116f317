"""BrowserSession: one headless Chromium that an env drives with WebArena's actions, from any thread.

Playwright's sync API is bound to the thread that made it, but a pool steps an env from whichever worker thread
is free. So each process runs Playwright's async API on one event-loop thread of its own (`_Driver`, shared by
all sessions of the process, made again after a fork), and every public method submits a coroutine there and
waits for it with a timeout. Each session owns its own Chromium process group (see `chromium.py`), so sessions
are isolated and `close()` can kill one outright from any thread, even while another call on it hangs.

Failures: an action the page cannot take (an id not on it, a tab that does not exist, a url that does not load)
raises `ActionError`, and the episode goes on. A dead, hung or closed browser raises `BrowserError` naming the
call; a call that times out kills the browser (it is hung), and `reset()` starts a new one.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import os
import threading
import time
import weakref
from collections.abc import Callable, Coroutine
from typing import Any

from jgem.core import EnvFault
from jgem.envs.web import observation
from jgem.envs.web.actions import Action, ActionError
from jgem.envs.web.chromium import Chromium, find

LAUNCH_TIMEOUT_S = 60.0
SETTLE_S = 3.0  # longest wait for a page to settle after an action, before observing it anyway
_GRACE_S = 0.05  # lets a navigation or popup an action triggered announce itself
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


class BrowserError(EnvFault):
    """The browser died, hung past its timeout, or the session was closed; the env should be rebuilt."""


class ScriptError(ValueError):
    """A JavaScript expression given to `evaluate` threw in the page."""


class _CallTimeout(Exception):
    """A call on the driver's loop did not finish within its timeout."""


class _Driver:
    """The process's event-loop thread and Playwright driver, shared by all its sessions."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name="jgem-browser", daemon=True)
        self.thread.start()
        # Starting and killing Chromium block (fork, reaping, removing the profile): they run here, off the
        # loop. This thread lives as long as the process, as PR_SET_PDEATHSIG needs of the thread that forks.
        self.launcher = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="jgem-browser-launcher")
        self._playwright: Any = None
        self._starting: asyncio.Lock | None = None
        atexit.register(self.stop)

    def _run(self) -> None:
        self.loop.run_forever()
        self.loop.close()

    async def blocking(self, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)` on the launcher thread, awaited without blocking the loop."""
        return await self.loop.run_in_executor(self.launcher, fn, *args)

    async def playwright(self) -> Any:
        from playwright.async_api import async_playwright

        self._starting = self._starting or asyncio.Lock()
        async with self._starting:
            if self._playwright is None:
                self._playwright = await async_playwright().start()
        return self._playwright

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float) -> Any:
        if threading.current_thread() is self.thread:
            coro.close()
            raise RuntimeError("a BrowserSession method was called from its own event-loop thread")
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except TimeoutError:
            if future.done():  # the coroutine's own TimeoutError
                raise
            future.cancel()
            raise _CallTimeout from None

    def stop(self) -> None:
        """Stop Playwright's driver and the loop (at interpreter exit, so nothing is torn down under them)."""
        if self.pid != os.getpid():  # a forked child's copy: its loop thread was never here
            return
        if self._playwright is not None:
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(self._playwright.stop(), self.loop).result(5.0)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5.0)

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run `coro` in the background, ignoring its outcome (cleanup that must not block the caller)."""

        async def quietly() -> None:
            with contextlib.suppress(Exception):
                await coro

        if self.loop.is_running():
            asyncio.run_coroutine_threadsafe(quietly(), self.loop)
        else:
            coro.close()


_driver_lock = threading.Lock()
_the_driver: _Driver | None = None


def _driver() -> _Driver:
    global _the_driver
    with _driver_lock:
        if _the_driver is None or _the_driver.pid != os.getpid():  # a forked child has no loop thread
            _the_driver = _Driver()
        return _the_driver


class _Browser:
    """A running Chromium and Playwright's handles on it: the context, its tabs, the current tab, and the
    network activity of each tab (to tell when a page has settled). Used only on the driver's loop thread."""

    def __init__(self, chromium: Chromium) -> None:
        self.chromium = chromium
        self.browser: Any = None
        self.context: Any = None
        self.current: Any = None
        self.cdp: dict[Any, Any] = {}
        self.inflight: dict[Any, set[Any]] = {}
        self.navigating: set[Any] = set()
        self.windows_opened = 0  # popups the pages asked for (a target=_blank click, window.open)

    async def new_context(self, viewport: tuple[int, int], timeout_s: float, **options: Any) -> None:
        """Replace the context (and all its tabs) by a fresh one with one blank tab."""
        old, self.context = self.context, None
        if old is not None:
            await old.close()
        self.cdp.clear()
        self.inflight.clear()
        self.navigating.clear()
        width, height = viewport
        context = await self.browser.new_context(
            viewport={"width": width, "height": height}, locale="en-US", timezone_id="UTC", **options
        )
        context.set_default_timeout(timeout_s * 1000)
        context.on("page", self._track)
        self.context = context
        self.current = await context.new_page()

    def _track(self, page: Any) -> None:
        inflight: set[Any] = set()
        self.inflight[page] = inflight

        def started(request: Any) -> None:
            if request.resource_type in _TRACKED:
                inflight.add(request)
            if request.is_navigation_request() and request.frame == page.main_frame:
                self.navigating.add(page)

        def ended(request: Any) -> None:
            inflight.discard(request)
            if request.is_navigation_request() and request.failure is not None:
                self.navigating.discard(page)

        page.on("request", started)
        page.on("requestfinished", ended)
        page.on("requestfailed", ended)
        page.on("framenavigated", lambda frame: frame == page.main_frame and self.navigating.discard(page))
        page.on("close", lambda _: (self.inflight.pop(page, None), self.cdp.pop(page, None)))

    async def session(self, page: Any) -> Any:
        """Our CDP session on `page`. It also reports, as the page's renderer decides them, the navigations and
        popups an action starts, before Playwright sees their requests or pages (which can lag under load)."""
        if page not in self.cdp:
            cdp = await self.context.new_cdp_session(page)
            main_frame = (await cdp.send("Page.getFrameTree"))["frameTree"]["frame"]["id"]

            def requested(event: dict[str, Any]) -> None:
                if event.get("frameId") == main_frame and event.get("disposition") == "currentTab":
                    self.navigating.add(page)

            def window_open(_: dict[str, Any]) -> None:
                self.windows_opened += 1

            cdp.on("Page.frameRequestedNavigation", requested)
            cdp.on("Page.windowOpen", window_open)
            await cdp.send("Page.enable")
            self.cdp[page] = cdp
        return self.cdp[page]

    async def settle(self, before: list[Any], windows_before: int) -> None:
        """Wait (at most SETTLE_S) until the current tab has loaded and has no document/XHR request in flight.
        A tab the action opened (a target=_blank link) becomes the current tab, as in WebArena."""
        await asyncio.sleep(_GRACE_S)
        deadline = time.monotonic() + SETTLE_S
        opened = [p for p in self.context.pages if p not in before]
        while len(opened) < self.windows_opened - windows_before and time.monotonic() < deadline:
            await asyncio.sleep(_POLL_S)  # a popup was asked for; its page is still on its way
            opened = [p for p in self.context.pages if p not in before]
        if opened:
            self.current = opened[-1]
            await self.current.bring_to_front()
        page = self.current
        while time.monotonic() < deadline and not page.is_closed():
            if page in self.navigating or self.inflight.get(page):
                await asyncio.sleep(_POLL_S)
                continue
            with contextlib.suppress(Exception):  # a page that never loads is observed as it is
                await page.wait_for_load_state("load", timeout=max(deadline - time.monotonic(), 0.001) * 1000)
            await asyncio.sleep(_POLL_S)
            if page not in self.navigating and not self.inflight.get(page):
                return

    async def locate(self, element_id: int, choose: bool = False) -> dict[str, Any]:
        """Scroll element `element_id` of the current tab into view and return its centre {"x", "y"};
        with `choose`, an option of a select is chosen instead ({"selected": True})."""
        cdp = await self.session(self.current)
        try:
            resolved = await cdp.send("DOM.resolveNode", {"backendNodeId": element_id})
        except Exception as e:
            self.check_alive(e)
            raise ActionError(f"element [{element_id}] is not on the current page") from None
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
        return found

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
        kind = action.kind
        if kind in ("click", "hover", "type"):
            assert action.element_id is not None
            spot = await self.locate(action.element_id, choose=kind == "click")
            if kind == "click" and "x" in spot:
                await page.mouse.click(spot["x"], spot["y"])
            elif kind == "hover":
                await page.mouse.move(spot["x"], spot["y"])
            elif kind == "type":
                await self._type(action)
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
                raise ActionError(f"goto [{action.text}] failed: {_first_line(e)}") from None
        elif kind == "go_back":
            await page.go_back()
        elif kind == "go_forward":
            await page.go_forward()
        elif kind == "stop":
            return
        else:
            raise ActionError(f"unknown action kind {kind!r}")
        await self.settle(before, windows_before)

    async def _type(self, action: Action) -> None:
        """WebArena's type: focus the field, clear it (select all, delete), type, and press Enter if asked."""
        cdp = await self.session(self.current)
        try:
            await cdp.send("DOM.focus", {"backendNodeId": action.element_id})
        except Exception as e:
            self.check_alive(e)
            raise ActionError(f"element [{action.element_id}] cannot take typed text: {_first_line(e)}") from None
        keyboard = self.current.keyboard
        await keyboard.press("Control+a")
        await keyboard.press("Delete")
        await keyboard.type(action.text)
        if action.press_enter_after:
            await keyboard.press("Enter")

    async def titles(self) -> list[str]:
        return [(await p.title()) or p.url for p in self.context.pages]

    async def observe(self, kind: str, budget: int) -> str:
        tree = await (await self.session(await self.tab())).send("Accessibility.getFullAXTree")
        pages = self.context.pages
        return observation.render(
            tree["nodes"], self.current.url, await self.titles(), pages.index(self.current), kind, budget
        )


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


class BrowserSession:
    """A headless Chromium for one env: reset to a url, observe, execute actions. Starts on first use.

    Every method is synchronous, callable from any thread, and bounded by `timeout_s` (launching by
    `LAUNCH_TIMEOUT_S`); calls on one session run one at a time.
    """

    def __init__(
        self, viewport: tuple[int, int] = (1280, 720), timeout_s: float = 15.0, executable: str | None = None
    ) -> None:
        if len(viewport) != 2 or min(viewport) <= 0:
            raise ValueError(f"viewport must be (width, height) in pixels; got {viewport!r}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive; got {timeout_s}")
        self.viewport = (int(viewport[0]), int(viewport[1]))
        self.timeout_s = float(timeout_s)
        self.executable = executable
        self._closed = False
        self._box: dict[str, _Browser | None] = {"browser": None}  # shared with the finalizer, not the session
        self._finalizer = weakref.finalize(self, _kill_box, self._box)
        self._new_locks()

    def _new_locks(self) -> None:
        self._pid = os.getpid()
        self._call_lock = threading.Lock()  # one call at a time
        self._state_lock = threading.Lock()  # guards _closed and _box against close() from another thread

    # -- public API ------------------------------------------------------------------------------------

    def start(self) -> None:
        """Launch Chromium with one blank tab, unless it is running. Idempotent; restarts a dead one."""
        self._call("start", lambda: self._running(restart=True), max(LAUNCH_TIMEOUT_S, self.timeout_s))

    def reset(
        self,
        url: str,
        storage_state: dict[str, Any] | str | None = None,
        cookies: list[dict[str, Any]] | None = None,
    ) -> None:
        """Close all tabs and open `url` in a fresh context (no cookies or storage but those given).
        Starts a new Chromium if the old one died."""

        async def reset() -> None:
            b = await self._running(restart=True)
            options = {"storage_state": storage_state} if storage_state is not None else {}
            await b.new_context(self.viewport, self.timeout_s, **options)
            if cookies:
                await b.context.add_cookies(cookies)
            try:
                await b.current.goto(url)
            except Exception as e:
                b.check_alive(e)
                raise BrowserError(f"could not open {url}: {_first_line(e)}") from None
            await b.settle([b.current], b.windows_opened)

        self._call("reset", reset, LAUNCH_TIMEOUT_S + self.timeout_s)

    def observe(self, kind: str = "accessibility_tree", budget: int = 16000) -> str:
        """The current tab as WebArena's observation (see `observation.py`), then its URL and the tabs."""
        if kind not in observation.KINDS:
            raise ValueError(f"observation kind must be one of {observation.KINDS}; got {kind!r}")
        if budget <= 0:
            raise ValueError(f"observation budget must be a positive number of characters; got {budget}")
        return self._call("observe", lambda: self._with_browser(lambda b: b.observe(kind, budget)))

    def execute(self, action: Action) -> None:
        """Carry out `action` on the current tab and wait for the page to settle. `stop` does nothing here."""
        if not isinstance(action, Action):
            raise TypeError(f"execute takes an Action (from actions.parse); got {type(action).__name__}")
        self._call(f"execute {action}", lambda: self._with_browser(lambda b: b.execute(action)))

    @property
    def url(self) -> str:
        """The current tab's url."""
        return self._call("url", lambda: self._with_browser(_current_url))

    @property
    def tabs(self) -> list[str]:
        """The tabs' titles (a tab without a title shows its url), in tab order."""
        return self._call("tabs", lambda: self._with_browser(lambda b: b.titles()))

    @property
    def current_tab(self) -> int:
        """The index of the current tab in `tabs`."""
        return self._call("current_tab", lambda: self._with_browser(_current_index))

    def goto(self, url: str) -> None:
        """Open `url` in the current tab and wait for it to settle (for evaluators; agents use `execute`)."""

        async def goto(b: _Browser) -> None:
            await (await b.tab()).goto(url)
            await b.settle([*b.context.pages], b.windows_opened)

        self._call(f"goto {url}", lambda: self._with_browser(goto))

    def evaluate(self, js: str) -> Any:
        """The JSON value of JavaScript `js` (an expression or a function) on the current tab.
        `ScriptError` when it throws."""

        async def evaluate(b: _Browser) -> Any:
            try:
                return await b.current.evaluate(js)
            except Exception as e:
                b.check_alive(e)
                raise ScriptError(f"{_first_line(e)} (in {js[:200]!r})") from None

        return self._call("evaluate", lambda: self._with_browser(evaluate))

    def content(self) -> str:
        """The current tab's HTML."""
        return self._call("content", lambda: self._with_browser(lambda b: b.current.content()))

    @property
    def pids(self) -> list[int]:
        """The live processes of this session's Chromium (browser, renderers, GPU, utilities)."""
        self._after_fork()
        b = self._box["browser"]
        return b.chromium.pids() if b is not None else []

    def close(self) -> None:
        """Kill Chromium and end the session. Idempotent; safe from any thread, also while a call hangs."""
        self._after_fork()
        with self._state_lock:
            self._closed = True
        self._finalizer()  # kills the browser now, exactly once

    def __enter__(self) -> BrowserSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- running a call on the driver's loop -----------------------------------------------------------

    def _after_fork(self) -> None:
        """In a forked child the parent's Chromium is not ours: forget it (never kill it) and start afresh."""
        if self._pid != os.getpid():
            self._finalizer.detach()
            self._box = {"browser": None}
            self._finalizer = weakref.finalize(self, _kill_box, self._box)
            self._new_locks()

    def _call(self, what: str, make: Callable[[], Coroutine[Any, Any, Any]], timeout: float | None = None) -> Any:
        self._after_fork()
        timeout = self.timeout_s if timeout is None else timeout
        if self._closed:
            raise BrowserError(f"{what}: the browser session is closed")
        if not self._call_lock.acquire(timeout=timeout):
            raise BrowserError(f"{what}: another call held this session for over {timeout:.0f} s")
        try:
            return _driver().run(make(), timeout)
        except ValueError:  # ActionError and ScriptError too: the page's answer, not a fault
            raise
        except BrowserError as e:
            raise BrowserError(f"{what} failed: {e}") from e
        except _CallTimeout:
            b = self._box["browser"]
            if b is not None:
                b.chromium.kill(f"killed after {what} timed out")
            raise BrowserError(
                f"{what} timed out after {timeout:.1f} s; the browser was killed (reset() starts a new one)"
            ) from None
        except Exception as e:
            b = self._box["browser"]
            if self._closed:
                reason = "the browser session was closed during the call"
            elif b is not None and b.chromium.ended(within=1.0):  # its connection can drop before it is reaped
                b.chromium.kill()  # its renderers may outlive it for a moment
                reason = f"{b.chromium.exit_reason()}; reset() starts a new one"
            else:
                reason = _first_line(e)
            raise BrowserError(f"{what} failed: {reason}") from e
        finally:
            self._call_lock.release()

    async def _running(self, restart: bool) -> _Browser:
        """The session's browser, launched if there is none (or, with `restart`, if it died)."""
        b = self._box["browser"]
        if b is not None and (b.chromium.alive() or not restart):
            return b
        driver = _driver()
        if b is not None:
            await driver.blocking(b.chromium.kill)
        try:
            playwright = await driver.playwright()
            chromium = await driver.blocking(Chromium, find(self.executable, playwright.chromium.executable_path))
        except Exception as e:
            raise BrowserError(f"could not start Chromium: {_first_line(e)}") from None
        b = _Browser(chromium)
        with self._state_lock:
            closed = self._closed
            if not closed:
                self._box["browser"] = b
        if closed:
            await driver.blocking(chromium.kill)
            raise BrowserError("the browser session was closed while Chromium started")
        try:
            deadline = time.monotonic() + LAUNCH_TIMEOUT_S
            while (endpoint := chromium.endpoint(deadline)) is None:
                await asyncio.sleep(_POLL_S)
            b.browser = await playwright.chromium.connect_over_cdp(endpoint, timeout=LAUNCH_TIMEOUT_S * 1000)
            await b.new_context(self.viewport, self.timeout_s)
        except Exception as e:
            await driver.blocking(chromium.kill, f"killed after a failed start ({_first_line(e)})")
            raise BrowserError(f"could not start Chromium: {_first_line(e)}") from None
        return b

    async def _with_browser(self, use: Callable[[_Browser], Coroutine[Any, Any, Any]]) -> Any:
        b = await self._running(restart=False)
        if not b.chromium.alive():
            await _driver().blocking(b.chromium.kill)  # its renderers may outlive it for a moment
            raise BrowserError(f"{b.chromium.exit_reason()}; reset() starts a new one")
        return await use(b)


async def _current_url(b: _Browser) -> str:
    return (await b.tab()).url


async def _current_index(b: _Browser) -> int:
    return b.context.pages.index(await b.tab())


def _kill_box(box: dict[str, _Browser | None]) -> None:
    """Kill the browser in `box` (on close, garbage collection, or interpreter exit) and drop Playwright's
    connection to it in the background."""
    b, box["browser"] = box["browser"], None
    if b is None:
        return
    b.chromium.kill("closed")
    if b.browser is not None and _the_driver is not None and _the_driver.pid == os.getpid():
        _the_driver.spawn(b.browser.close())
