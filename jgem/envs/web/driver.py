"""The process's event-loop thread and Playwright driver, shared by all its browser sessions.

Playwright's sync API is bound to the thread that made it, but a pool steps an env from whichever worker thread
is free. So each process runs Playwright's async API on one event-loop thread of its own, and sessions submit
coroutines to it from any thread and wait with a timeout. A forked child gets a driver of its own on first use.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import os
import threading
from collections.abc import Callable, Coroutine
from typing import Any

from playwright.async_api import async_playwright


class CallTimeout(Exception):
    """A call on the driver's loop did not finish within its timeout."""


class Driver:
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
            raise CallTimeout from None

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
_the_driver: Driver | None = None


def driver() -> Driver:
    """This process's driver, started on first use (and again in a forked child, which has no loop thread)."""
    global _the_driver
    with _driver_lock:
        if _the_driver is None or _the_driver.pid != os.getpid():  # a forked child has no loop thread
            _the_driver = Driver()
        return _the_driver


def existing() -> Driver | None:
    """This process's driver if one was started here, else None (never starts one)."""
    driver = _the_driver
    return driver if driver is not None and driver.pid == os.getpid() else None
