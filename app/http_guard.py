"""What uvicorn lacks against strangers who need no signature: a deadline on request
heads, a cap on open connections, and an access log they cannot fill.

uvicorn (0.54) starts no timer until a request has been read: a connection that sends
half a request head and then a byte now and then (a slow-loris) stays open for ever, and
`limit_concurrency` only answers 503 to requests that complete. `guarded_http_protocol`
subclasses its httptools protocol: a connection whose request head is not whole within
`head_timeout_s` of its start (or of the previous request's end) is closed, and a
connection beyond `max_connections` (HTTP and WebSocket together) is closed at once.

`RefusalLogFilter` rate-limits uvicorn's access and error lines for refused requests
(4xx/5xx, WebSocket handshakes rejected): 1,554 lines in 10 s of forged handshakes, the
same flood our own refusal log (app/refusal_log.py) wrote 2 lines for. The metrics count
every refusal.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


def guarded_http_protocol(*, head_timeout_s: float, max_connections: int) -> type[Any]:
    """uvicorn's httptools protocol with a request-head deadline and a connection cap;
    give it to uvicorn.Config(http=...).

    Over the cap, the connection that has waited longest without a whole request head
    gives way (a stranger's idle sockets, not Twilio's next webhook); only when every
    connection is busy is the newcomer refused.
    """
    # Connections still without a whole request head, oldest first: this server's own.
    waiting: dict[GuardedHttpProtocol, None] = {}

    class GuardedHttpProtocol(HttpToolsProtocol):
        _head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > max_connections:
                if not waiting:
                    transport.abort()  # every connection is busy: no room for one more
                    return
                oldest = next(iter(waiting))
                oldest._stop_head_timer()
                oldest.transport.abort()
            self._start_head_timer()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._start_head_timer()

        def on_headers_complete(self) -> None:
            self._stop_head_timer()
            super().on_headers_complete()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            # The next request on this connection has as long for its head.
            if not self.transport.is_closing():
                self._start_head_timer()

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop_head_timer()
            super().connection_lost(exc)

        def _start_head_timer(self) -> None:
            if self._head_timer is None:
                self._head_timer = self.loop.call_later(head_timeout_s, self._head_too_slow)
                waiting[self] = None

        def _stop_head_timer(self) -> None:
            waiting.pop(self, None)
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_too_slow(self) -> None:
            self._head_timer = None
            waiting.pop(self, None)
            if self.cycle is not None and not self.cycle.response_complete:
                return  # a request is being served: its head was whole
            if not self.transport.is_closing():
                self.transport.abort()

    return GuardedHttpProtocol


class RefusalLogFilter(logging.Filter):
    """Lets every other line through; of refusal lines, `burst` per `window_s`, then,
    when the next window opens, one line of its own saying how many were dropped."""

    def __init__(
        self,
        *,
        burst: int = 5,
        window_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        summary: logging.Logger | None = None,
    ) -> None:
        super().__init__()
        self.burst = burst
        self.window_s = window_s
        self.clock = clock
        # Its own logger: uvicorn's access formatter takes only its own five arguments.
        self.summary = summary or logging.getLogger("app.refusals")
        self._began = -window_s
        self._passed = 0
        self._dropped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if not _is_refusal(record):
            return True
        now = self.clock()
        if now - self._began >= self.window_s:
            if self._dropped:
                self.summary.warning(
                    "%d refused requests were not logged in %.0f s",
                    self._dropped,
                    now - self._began,
                )
            self._began, self._passed, self._dropped = now, 0, 0
        if self._passed < self.burst:
            self._passed += 1
            return True
        self._dropped += 1
        return False


# uvicorn's lines a stranger can cause without any signature: refused requests and
# handshakes (the templates, never the rendered text: a path can hold any character),
# and garbage on the socket.
_STRANGERS_ERROR_LINES = ("Invalid HTTP request received.", "Unsupported upgrade request.")
_WS_TEMPLATE = '%s - "WebSocket %s"'


def _is_refusal(record: logging.LogRecord) -> bool:
    if record.name == "uvicorn.access":
        args = record.args
        if isinstance(args, tuple) and args and isinstance(args[-1], int):
            return bool(args[-1] >= 400)
        return False
    template = str(record.msg)
    if template.startswith(_WS_TEMPLATE):
        return "[accepted]" not in template
    return template in _STRANGERS_ERROR_LINES


def server_options(*, head_timeout_s: float, max_connections: int) -> dict[str, Any]:
    """uvicorn.Config options every offhook server runs with (`serve`, and the tests'
    servers, so they test what runs)."""
    return {
        "ws_max_size": 1 << 20,  # Twilio frames are ~300 bytes; refuse absurd ones early
        "ws_ping_interval": None,  # Twilio does not answer pings reliably; it closes itself
        "ws": "websockets-sansio",
        "http": guarded_http_protocol(
            head_timeout_s=head_timeout_s, max_connections=max_connections
        ),
    }


def limit_refusal_logs(filter_: RefusalLogFilter | None = None) -> RefusalLogFilter:
    """Attach one shared filter to uvicorn's access and error loggers."""
    shared = filter_ or RefusalLogFilter()
    for name in ("uvicorn.access", "uvicorn.error"):
        logging.getLogger(name).addFilter(shared)
    return shared
