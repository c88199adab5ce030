"""The connections of ``greval serve``: uvicorn's h11 protocol plus what uvicorn leaves out for clients that are
slow on purpose — a deadline for a request's headers and a cap on open connections.

uvicorn closes a connection that stays idle after a response (``timeout_keep_alive``), but not one that sends
nothing after connecting, or its headers a byte at a time: each such connection is held for as long as the
client likes. Here every connection has ``header_timeout`` seconds from its first byte of a request (or from
connecting) to complete the request's headers, else it gets a 408 and is closed. The body's deadline is the
guard's (:class:`greval.serve.app.Guard`). A connection opened while ``max_connections`` are open is answered
503 ``too_many_connections`` (with ``Retry-After``) at its first request, and closed.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
from typing import Any

import h11
from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

from greval.errors import option
from greval.serve.app import Receive, Scope, Send, ServeError, ServeSettings, log_access

_TIMEOUT_BODY = json.dumps(
    {
        "error": {
            "kind": "header_timeout",
            "message": f"request headers not complete in time (the server's {option('header_timeout')})",
        }
    }
).encode()
#: Sent (outside h11: no request was parsed to answer) when the headers are late, then the connection closes.
REQUEST_TIMEOUT = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
    b"content-length: %d\r\n\r\n%s" % (len(_TIMEOUT_BODY), _TIMEOUT_BODY)
)


def too_many_connections(limit: int) -> Any:
    """The ASGI app a connection over the cap is answered by: 503 JSON, Retry-After, then closed."""

    async def refuse(scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        message = f"more than {limit} connections open (the server's {option('max_connections')}); try again"
        error = ServeError(503, "too_many_connections", message, None, {"Retry-After": "1", "Connection": "close"})
        await error.response()(scope, receive, send)
        log_access(scope, "unrouted", 503, time.perf_counter() - started, None, error.kind)

    return refuse


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a header deadline and a connection cap (see the module's docstring)."""

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
        *,
        header_timeout: float,
        max_connections: int,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.header_timeout = header_timeout
        self.max_connections = max_connections
        self.header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            self.app = too_many_connections(self.max_connections)
        self._await_headers()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is h11.IDLE:  # a request begun, its headers not complete yet
            self._await_headers()
        else:
            self._headers_done()

    def connection_lost(self, exc: Exception | None) -> None:
        self._headers_done()
        super().connection_lost(exc)

    def _await_headers(self) -> None:
        """Start the header deadline unless it runs already (it counts from the first byte, not the last)."""
        if self.header_timer is None and not self.transport.is_closing():
            self.header_timer = self.loop.call_later(self.header_timeout, self._headers_late)

    def _headers_done(self) -> None:
        if self.header_timer is not None:
            self.header_timer.cancel()
            self.header_timer = None

    def _headers_late(self) -> None:
        self.header_timer = None
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self.transport.write(REQUEST_TIMEOUT)
            self.transport.close()


def protocol(settings: ServeSettings) -> Any:
    """What to pass uvicorn as ``http=``: it calls it as it would the protocol class. A partial of a module-level
    class, so that ``--workers`` (spawned processes) can pickle it."""
    return functools.partial(
        GuardedH11Protocol, header_timeout=settings.header_timeout, max_connections=settings.max_connections
    )
