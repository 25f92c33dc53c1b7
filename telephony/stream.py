"""One Media Streams WebSocket: typed events in, the three outbound messages out.

Invalid frames are reported (logged and counted by the caller's callback) and skipped;
the call goes on. A peer that goes away ends `receive()` with None; sends to a closed
socket are dropped silently, because a hang-up may race with the bot's speech.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from telephony.errors import ProtocolError, ProtocolErrorKind
from telephony.protocol import (
    InboundEvent,
    Media,
    Start,
    clear_message,
    mark_message,
    media_message,
    parse_event,
)

log = logging.getLogger(__name__)


class TwilioStream:
    def __init__(
        self, websocket: WebSocket, on_protocol_error: Callable[[ProtocolError], None]
    ) -> None:
        self._ws = websocket
        self.on_protocol_error = on_protocol_error  # swapped once a call owns the stream
        self.stream_sid: str | None = None
        self.closed = False

    async def receive(self) -> InboundEvent | None:
        """The next valid event, or None once the socket is gone."""
        while not self.closed:
            try:
                message = await self._ws.receive()
            except (WebSocketDisconnect, RuntimeError):
                self.closed = True
                return None
            if message["type"] == "websocket.disconnect":
                self.closed = True
                return None
            raw = message.get("text")
            if raw is None:
                raw = message.get("bytes") or b""
            try:
                event = parse_event(raw)
                self._check_stream(event)
            except ProtocolError as exc:
                self.on_protocol_error(exc)
                continue
            if isinstance(event, Start):
                self.stream_sid = event.stream_sid
            return event
        return None

    def _check_stream(self, event: InboundEvent) -> None:
        sid = getattr(event, "stream_sid", None)
        if sid is None or isinstance(event, Start):
            return
        if self.stream_sid is None:
            if isinstance(event, Media):
                raise ProtocolError(
                    "media arrived before the start event", kind=ProtocolErrorKind.OUT_OF_ORDER
                )
            return
        if sid != self.stream_sid:
            raise ProtocolError(
                f"streamSid {sid!r} does not match this stream's {self.stream_sid!r}",
                kind=ProtocolErrorKind.WRONG_STREAM,
            )

    async def _send(self, text: str) -> None:
        if self.closed or self._ws.application_state != WebSocketState.CONNECTED:
            return
        try:
            await self._ws.send_text(text)
        except (WebSocketDisconnect, RuntimeError, OSError):
            self.closed = True

    async def send_media(self, mulaw: bytes) -> None:
        assert self.stream_sid is not None, "no stream started"
        await self._send(media_message(self.stream_sid, mulaw))

    async def send_mark(self, name: str) -> None:
        assert self.stream_sid is not None, "no stream started"
        await self._send(mark_message(self.stream_sid, name))

    async def send_clear(self) -> None:
        assert self.stream_sid is not None, "no stream started"
        await self._send(clear_message(self.stream_sid))

    async def close(self, code: int = 1000, reason: str = "") -> None:
        if self.closed:
            return
        self.closed = True
        if self._ws.application_state == WebSocketState.CONNECTED:
            try:
                await self._ws.close(code=code, reason=reason)
            except (WebSocketDisconnect, RuntimeError, OSError):
                pass  # the peer left first: nothing to close
