"""uvicorn's h11 protocol with a deadline for request headers.

uvicorn closes idle keep-alive connections but waits forever for the rest of a request's headers, so a
client sending them a byte at a time holds a connection slot indefinitely. This subclass closes a
connection whose request headers have not arrived whole `header_timeout` seconds after the connection
opened or after the first byte of the next request on a kept-alive connection. Pinning h11 also keeps
`h11_max_incomplete_event_size` (the header size cap) in force where httptools is installed.
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol


class HeaderTimeoutH11(H11Protocol):
    header_timeout: float = 10.0

    _header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is h11.IDLE:  # the client is still sending a request's headers
            if self._header_timer is None:
                self._arm()
        else:
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._header_timer = self.loop.call_later(self.header_timeout, self._timed_out)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _timed_out(self) -> None:
        self._header_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()


def with_header_timeout(seconds: float) -> Any:
    """The protocol class for `uvicorn.run(http=...)` closing connections whose headers take over `seconds`."""
    return type("HeaderTimeoutH11", (HeaderTimeoutH11,), {"header_timeout": float(seconds)})
