"""Twilio's side of a Media Stream, for the simulator and tests.

`TwilioEventWriter` writes the frames Twilio sends, in the shape and order Twilio sends
them (numbers as strings, as in Twilio's examples). `parse_outbound` reads what our
server sends back as strictly as Twilio judges it: any field beyond the documented ones
is an error (Twilio warning 31951), so a test catches a server that adds `track`.
"""

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import TypeAlias

from telephony._fields import load_object
from telephony.errors import ProtocolError, UnknownEvent
from telephony.errors import ProtocolErrorKind as Kind
from telephony.wire import (
    CHANNELS,
    DTMF_DIGITS,
    MULAW_ENCODING,
    OUTBOUND_EVENTS,
    SAMPLE_RATE_HZ,
)

_COMPACT = (",", ":")


@dataclass(frozen=True, slots=True)
class OutboundMedia:
    stream_sid: str
    payload: bytes


@dataclass(frozen=True, slots=True)
class OutboundMark:
    stream_sid: str
    name: str


@dataclass(frozen=True, slots=True)
class OutboundClear:
    stream_sid: str


OutboundEvent: TypeAlias = OutboundMedia | OutboundMark | OutboundClear


def parse_outbound(message: str, *, expected_stream_sid: str | None = None) -> OutboundEvent:
    """Parse a frame our server sent, refusing anything Twilio would flag.

    With `expected_stream_sid`, a message for another stream is a ProtocolError
    (kind "wrong_stream"), as Twilio treats it.
    """
    root = load_object(message, max_chars=None)
    name = root.text("event")
    event: OutboundEvent
    match name:
        case "media":
            root.only(("event", "streamSid", "media"))
            body = root.object("media")
            body.only(("payload",))
            event = OutboundMedia(
                stream_sid=root.text("streamSid", non_empty=True), payload=body.base64("payload")
            )
        case "mark":
            root.only(("event", "streamSid", "mark"))
            body = root.object("mark")
            body.only(("name",))
            event = OutboundMark(
                stream_sid=root.text("streamSid", non_empty=True),
                name=body.text("name", non_empty=True),
            )
        case "clear":
            root.only(("event", "streamSid"))
            event = OutboundClear(stream_sid=root.text("streamSid", non_empty=True))
        case _:
            raise UnknownEvent(name, OUTBOUND_EVENTS)
    if expected_stream_sid is not None and event.stream_sid != expected_stream_sid:
        raise ProtocolError(
            f"expected streamSid {expected_stream_sid!r}, got {event.stream_sid!r}",
            kind=Kind.WRONG_STREAM,
        )
    return event


class WriterState(Enum):
    NEW = "new"
    CONNECTED = "connected"
    STARTED = "started"
    STOPPED = "stopped"


class TwilioEventWriter:
    """Writes one stream's frames as Twilio would, refusing an order Twilio never uses.

    Order: connected, start, then media / dtmf / mark in any mix, then stop.
    `sequenceNumber` counts from 1 at `start`; `chunk` counts media frames from 1.
    """

    def __init__(self, stream_sid: str, call_sid: str, account_sid: str) -> None:
        for label, value in (
            ("stream_sid", stream_sid),
            ("call_sid", call_sid),
            ("account_sid", account_sid),
        ):
            if not value:
                raise ValueError(f"expected a non-empty {label}, got {value!r}")
        self.stream_sid = stream_sid
        self.call_sid = call_sid
        self.account_sid = account_sid
        self._state = WriterState.NEW
        self._sequence = 0
        self._chunk = 0

    @property
    def state(self) -> WriterState:
        return self._state

    def _enter(self, event: str, expected: WriterState, after: WriterState) -> None:
        if self._state is not expected:
            raise RuntimeError(
                f"cannot write {event!r}: expected the writer to be {expected.value}, "
                f"but it is {self._state.value}"
            )
        self._state = after

    def _next_sequence(self) -> str:
        self._sequence += 1
        return str(self._sequence)

    @staticmethod
    def _dump(message: Mapping[str, object]) -> str:
        return json.dumps(message, separators=_COMPACT)

    def connected(self) -> str:
        self._enter("connected", WriterState.NEW, WriterState.CONNECTED)
        return self._dump({"event": "connected", "protocol": "Call", "version": "1.0.0"})

    def start(
        self, custom_parameters: Mapping[str, str], tracks: tuple[str, ...] = ("inbound",)
    ) -> str:
        if not tracks:
            raise ValueError("expected at least one track, got ()")
        self._enter("start", WriterState.CONNECTED, WriterState.STARTED)
        return self._dump(
            {
                "event": "start",
                "sequenceNumber": self._next_sequence(),
                "start": {
                    "accountSid": self.account_sid,
                    "streamSid": self.stream_sid,
                    "callSid": self.call_sid,
                    "tracks": list(tracks),
                    "customParameters": dict(custom_parameters),
                    "mediaFormat": {
                        "encoding": MULAW_ENCODING,
                        "sampleRate": SAMPLE_RATE_HZ,
                        "channels": CHANNELS,
                    },
                },
                "streamSid": self.stream_sid,
            }
        )

    def media(self, payload: bytes, timestamp_ms: int) -> str:
        if timestamp_ms < 0:
            raise ValueError(f"expected timestamp_ms >= 0, got {timestamp_ms}")
        self._enter("media", WriterState.STARTED, WriterState.STARTED)
        self._chunk += 1
        return self._dump(
            {
                "event": "media",
                "sequenceNumber": self._next_sequence(),
                "media": {
                    "track": "inbound",
                    "chunk": str(self._chunk),
                    "timestamp": str(timestamp_ms),
                    "payload": base64.b64encode(payload).decode("ascii"),
                },
                "streamSid": self.stream_sid,
            }
        )

    def dtmf(self, digit: str) -> str:
        if digit not in DTMF_DIGITS:
            raise ValueError(f"expected a DTMF digit (0-9 * # A-D), got {digit!r}")
        self._enter("dtmf", WriterState.STARTED, WriterState.STARTED)
        return self._dump(
            {
                "event": "dtmf",
                "streamSid": self.stream_sid,
                "sequenceNumber": self._next_sequence(),
                "dtmf": {"track": "inbound_track", "digit": digit},
            }
        )

    def mark(self, name: str) -> str:
        self._enter("mark", WriterState.STARTED, WriterState.STARTED)
        return self._dump(
            {
                "event": "mark",
                "sequenceNumber": self._next_sequence(),
                "streamSid": self.stream_sid,
                "mark": {"name": name},
            }
        )

    def stop(self) -> str:
        self._enter("stop", WriterState.STARTED, WriterState.STOPPED)
        return self._dump(
            {
                "event": "stop",
                "sequenceNumber": self._next_sequence(),
                "streamSid": self.stream_sid,
                "stop": {"accountSid": self.account_sid, "callSid": self.call_sid},
            }
        )
