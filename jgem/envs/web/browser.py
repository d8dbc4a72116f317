"""BrowserSession: one headless Chromium that an env drives with WebArena's actions, from any thread.

Every public method submits a coroutine to the process's driver loop (`driver.py`) and waits for it with a
timeout; what happens on the page is `Tabs` (`tabs.py`). Each session owns its own Chromium process group
(`chromium.py`), so sessions are isolated and `close()` can kill one outright from any thread, even while another
call on it hangs.

Failures: an action the page cannot take (an id not on it, a tab that does not exist, a url that does not load)
raises `ActionError`, and the episode goes on. A dead, hung or closed browser raises `BrowserError` naming the
call; a call that times out kills the browser (it is hung), and `reset()` starts a new one. A page that does not
commit and parse its document within `timeout_s` of the action that led there raises `PageTimeout` naming it
(the browser lives on); both are `EnvFault`s, which the pool answers by rebuilding the env.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import weakref
from collections.abc import Callable, Coroutine
from typing import Any

from playwright.async_api import Error as PlaywrightError

from jgem.core import EnvFault
from jgem.envs.web.actions import Action
from jgem.envs.web.chromium import Chromium, find
from jgem.envs.web.driver import CallTimeout, driver, existing
from jgem.envs.web.tabs import SETTLE_S, PageTimeout, Tabs, first_line

LAUNCH_TIMEOUT_S = 60.0


class BrowserError(EnvFault):
    """The browser died, hung past its timeout, or the session was closed; the env should be rebuilt."""


class ScriptError(ValueError):
    """A JavaScript expression given to `evaluate` threw in the page."""


class BrowserSession:
    """A headless Chromium for one env: reset to a url, observe, execute actions. Starts on first use.

    Every method is synchronous, callable from any thread, and bounded by `timeout_s` (launching by
    `LAUNCH_TIMEOUT_S`); calls on one session run one at a time. A call that waits for a page (reset, observe,
    execute, goto) gives the page its own `timeout_s` on top, so that a page too slow to load is reported as
    `PageTimeout`, naming it, before the call's bound takes it for a hung browser.
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
        self._box: dict[str, Tabs | None] = {"tabs": None}  # shared with the finalizer, not the session
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
                raise BrowserError(f"could not open {url}: {first_line(e)}") from None
            await b.settle(b.current, [b.current], b.windows_opened)

        self._call("reset", reset, LAUNCH_TIMEOUT_S + self._page_call_s)

    def observe(self, kind: str = "accessibility_tree", budget: int = 16000) -> str:
        """The current tab as WebArena's observation (see `observation.py`), then its URL and the tabs."""
        return self._call("observe", lambda: self._with_browser(lambda b: b.observe(kind, budget)), self._page_call_s)

    def execute(self, action: Action) -> None:
        """Carry out `action` on the current tab and wait for the page to settle. `stop` does nothing here."""
        if not isinstance(action, Action):
            raise TypeError(f"execute takes an Action (from actions.parse); got {type(action).__name__}")
        self._call(f"execute {action}", lambda: self._with_browser(lambda b: b.execute(action)), self._page_call_s)

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

        async def goto(b: Tabs) -> None:
            page = await b.tab()
            await page.goto(url)
            await b.settle(page, [*b.context.pages], b.windows_opened)

        self._call(f"goto {url}", lambda: self._with_browser(goto), self._page_call_s)

    def evaluate(self, js: str) -> Any:
        """The JSON value of JavaScript `js` (an expression or a function) on the current tab.
        `ScriptError` when it throws."""

        async def evaluate(b: Tabs) -> Any:
            try:
                return await b.current.evaluate(js)
            except Exception as e:
                b.check_alive(e)
                raise ScriptError(f"{first_line(e)} (in {js[:200]!r})") from None

        return self._call("evaluate", lambda: self._with_browser(evaluate))

    def content(self) -> str:
        """The current tab's HTML."""
        return self._call("content", lambda: self._with_browser(lambda b: b.current.content()))

    @property
    def pids(self) -> list[int]:
        """The live processes of this session's Chromium (browser, renderers, GPU, utilities)."""
        self._after_fork()
        b = self._box["tabs"]
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

    @property
    def _page_call_s(self) -> float:
        """The bound of a call that waits for a page (`Tabs.settle`): the page the action led to, `timeout_s`; a
        popup it asked for, SETTLE_S; the settling, SETTLE_S, in which a redirect's document gets `timeout_s`
        again. Past it the browser is taken for hung; within it a page that never settles is a `PageTimeout`."""
        return 2 * self.timeout_s + 2 * SETTLE_S + 1.0

    def _after_fork(self) -> None:
        """In a forked child the parent's Chromium is not ours: forget it (never kill it) and start afresh."""
        if self._pid != os.getpid():
            self._finalizer.detach()
            self._box = {"tabs": None}
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
            return driver().run(make(), timeout)
        except ValueError:  # ActionError and ScriptError too: the page's answer, not a fault
            raise
        except (BrowserError, PageTimeout) as e:
            raise type(e)(f"{what} failed: {e}") from e
        except CallTimeout:
            b = self._box["tabs"]
            if b is not None:
                b.chromium.kill(f"killed after {what} timed out")
            raise BrowserError(
                f"{what} timed out after {timeout:.1f} s; the browser was killed (reset() starts a new one)"
            ) from None
        except Exception as e:
            b = self._box["tabs"]
            if self._closed:
                reason = "the browser session was closed during the call"
            elif b is not None and b.chromium.ended(within=1.0):  # its connection can drop before it is reaped
                b.chromium.kill()  # its renderers may outlive it for a moment
                reason = f"{b.chromium.exit_reason()}; reset() starts a new one"
            elif isinstance(e, (PlaywrightError, OSError)):
                reason = first_line(e)
            else:
                raise  # a bug, not a browser fault
            raise BrowserError(f"{what} failed: {reason}") from e
        finally:
            self._call_lock.release()

    async def _running(self, restart: bool) -> Tabs:
        """The session's browser, launched if there is none (or, with `restart`, if it died)."""
        b = self._box["tabs"]
        if b is not None and (b.chromium.alive() or not restart):
            return b
        loop = driver()
        if b is not None:
            await loop.blocking(b.chromium.kill)
        try:
            playwright = await loop.playwright()
            chromium = await loop.blocking(Chromium, find(self.executable, playwright.chromium.executable_path))
        except Exception as e:
            raise BrowserError(f"could not start Chromium: {first_line(e)}") from None
        b = Tabs(chromium)
        with self._state_lock:
            closed = self._closed
            if not closed:
                self._box["tabs"] = b
        if closed:
            await loop.blocking(chromium.kill)
            raise BrowserError("the browser session was closed while Chromium started")
        try:
            deadline = time.monotonic() + LAUNCH_TIMEOUT_S
            while (endpoint := chromium.endpoint(deadline)) is None:
                await asyncio.sleep(0.01)
            b.browser = await playwright.chromium.connect_over_cdp(endpoint, timeout=LAUNCH_TIMEOUT_S * 1000)
            await b.new_context(self.viewport, self.timeout_s)
        except Exception as e:
            await loop.blocking(chromium.kill, f"killed after a failed start ({first_line(e)})")
            raise BrowserError(f"could not start Chromium: {first_line(e)}") from None
        return b

    async def _with_browser(self, use: Callable[[Tabs], Coroutine[Any, Any, Any]]) -> Any:
        b = await self._running(restart=False)
        if not b.chromium.alive():
            await driver().blocking(b.chromium.kill)  # its renderers may outlive it for a moment
            raise BrowserError(f"{b.chromium.exit_reason()}; reset() starts a new one")
        return await use(b)


async def _current_url(b: Tabs) -> str:
    return (await b.tab()).url


async def _current_index(b: Tabs) -> int:
    return b.context.pages.index(await b.tab())


def _kill_box(box: dict[str, Tabs | None]) -> None:
    """Kill the browser in `box` (on close, garbage collection, or interpreter exit) and drop Playwright's
    connection to it in the background."""
    b, box["tabs"] = box["tabs"], None
    if b is None:
        return
    b.chromium.kill("closed")
    loop = existing()
    if b.browser is not None and loop is not None:
        loop.spawn(b.browser.close())
