"""Serve an ASGI app on a free loopback port, from a background thread with its own event loop.

uvicorn runs in a daemon thread (`asyncio.run` there, so the app never shares the caller's loop); `start()`
returns the base URL once a TCP connection is accepted, and `close()` stops the server from any thread and frees
the port. A server that was closed stays closed: make a new one to serve again.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import uvicorn

START_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 5.0


class LoopbackServer:
    """`LoopbackServer(app).start() -> "http://127.0.0.1:<port>"`; `close()` is idempotent and thread-safe."""

    def __init__(self, app: Any, name: str = "site") -> None:
        self.app, self.name = app, name
        self._lock = threading.Lock()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._url: str | None = None
        self._closed = False

    @property
    def url(self) -> str | None:
        """The base URL while serving, else None."""
        return self._url

    def start(self) -> str:
        with self._lock:
            if self._closed:
                raise RuntimeError(f"the {self.name} server was closed; make a new one to serve again")
            if self._url is not None:
                return self._url
            config = uvicorn.Config(
                self.app,
                host="127.0.0.1",
                port=0,  # the OS picks a free port
                log_level="warning",
                access_log=False,
                lifespan="off",
                ws="none",
                timeout_graceful_shutdown=1,
            )
            self._server = uvicorn.Server(config)
            self._thread = threading.Thread(target=self._server.run, name=f"jgem-{self.name}-server", daemon=True)
            self._thread.start()
            deadline = time.monotonic() + START_TIMEOUT_S
            while not self._server.started:
                if not self._thread.is_alive():
                    raise RuntimeError(f"the {self.name} server stopped while starting (see the log above)")
                if time.monotonic() > deadline:
                    self._stop()
                    raise RuntimeError(f"the {self.name} server did not start within {START_TIMEOUT_S:.0f} s")
                time.sleep(0.005)
            port = self._server.servers[0].sockets[0].getsockname()[1]
            with socket.create_connection(("127.0.0.1", port), timeout=START_TIMEOUT_S):
                pass  # accepted: the URL is usable
            self._url = f"http://127.0.0.1:{port}"
            return self._url

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._url = None
            self._stop()

    def _stop(self) -> None:
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is None or thread is None:
            return
        server.should_exit = True  # the loop polls this every 0.1 s, closes the listener, then drains connections
        thread.join(STOP_TIMEOUT_S)
        if thread.is_alive():  # a request hangs past the graceful window: drop it
            server.force_exit = True
            thread.join(STOP_TIMEOUT_S)
        if thread.is_alive():
            raise RuntimeError(f"the {self.name} server thread did not stop within {2 * STOP_TIMEOUT_S:.0f} s")
