"""Twilio Media Streams messages as typed values.

The server side: `parse_event` turns each text frame Twilio sends into one frozen
dataclass, and `media_message` / `mark_message` / `clear_message` build the only three
messages we send back. Nothing outside telephony/ sees the JSON.

Twilio's side (`TwilioEventWriter`, `parse_outbound`), used by the simulator and tests,
lives in telephony.peer and is re-exported here.
"""

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TypeAlias

from telephony._fields import JsonObject, describe, load_object
from telephony.errors import ProtocolError, UnknownEvent
from telephony.errors import ProtocolErrorKind as Kind
from telephony.peer import (
    OutboundClear,
    OutboundEvent,
    OutboundMark,
    OutboundMedia,
    TwilioEventWriter,
    parse_outbound,
)
from telephony.wire import (
    CHANNELS,
    DTMF_DIGITS,
    INBOUND_EVENTS,
    MAX_MEDIA_PAYLOAD_BYTES,
    MAX_MESSAGE_CHARS,
    MULAW_ENCODING,
    SAMPLE_RATE_HZ,
)

__all__ = [
    "MAX_MEDIA_PAYLOAD_BYTES",
    "MAX_MESSAGE_CHARS",
    "Connected",
    "Dtmf",
    "InboundEvent",
    "Mark",
    "Media",
    "OutboundClear",
    "OutboundEvent",
    "OutboundMark",
    "OutboundMedia",
    "Start",
    "Stop",
    "TwilioEventWriter",
    "clear_message",
    "mark_message",
    "media_message",
    "parse_event",
    "parse_outbound",
]

_COMPACT = (",", ":")


@dataclass(frozen=True, slots=True)
class Connected:
    """First message on the socket; carries no stream SID yet."""

    protocol: str
    version: str


@dataclass(frozen=True, slots=True)
class Start:
    """The stream's metadata; `custom_parameters` are the TwiML <Parameter>s."""

    sequence_number: int
    stream_sid: str
    account_sid: str
    call_sid: str
    tracks: tuple[str, ...]
    # Read-only view of a private copy (see __post_init__); hash=False because a
    # mapping is unhashable, while equality still compares it.
    custom_parameters: Mapping[str, str] = field(hash=False)
    encoding: str
    sample_rate: int
    channels: int

    def __post_init__(self) -> None:
        # Copy, then freeze: a caller's dict mutated later must not change the event.
        frozen = MappingProxyType(dict(self.custom_parameters))
        object.__setattr__(self, "custom_parameters", frozen)
        object.__setattr__(self, "tracks", tuple(self.tracks))

    @property
    def parameters(self) -> Mapping[str, str]:
        """The custom parameters (read-only)."""
        return self.custom_parameters


@dataclass(frozen=True, slots=True)
class Media:
    """One chunk of caller audio; `payload` is raw 8 kHz mu-law, already decoded."""

    sequence_number: int
    stream_sid: str
    track: str
    chunk: int
    timestamp_ms: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class Dtmf:
    """A key the caller pressed."""

    sequence_number: int
    stream_sid: str
    track: str
    digit: str


@dataclass(frozen=True, slots=True)
class Mark:
    """Echo of a mark we sent: played, or discarded by a `clear`."""

    sequence_number: int
    stream_sid: str
    name: str


@dataclass(frozen=True, slots=True)
class Stop:
    """The stream ended (the caller hung up, or the call was redirected)."""

    sequence_number: int
    stream_sid: str
    account_sid: str
    call_sid: str


InboundEvent: TypeAlias = Connected | Start | Media | Dtmf | Mark | Stop


def parse_event(message: str | bytes) -> InboundEvent:
    """Parse one frame from Twilio; raise ProtocolError (or UnknownEvent) if invalid.

    Unknown fields inside known events are ignored: Twilio adds fields without notice.
    """
    root = load_object(message, max_chars=MAX_MESSAGE_CHARS)
    name = root.text("event")
    match name:
        case "connected":
            return Connected(protocol=root.text("protocol"), version=root.text("version"))
        case "start":
            return _start(root)
        case "media":
            return _media(root)
        case "dtmf":
            return _dtmf(root)
        case "mark":
            body = root.object("mark")
            return Mark(
                sequence_number=root.count("sequenceNumber"),
                stream_sid=root.text("streamSid", non_empty=True),
                name=body.text("name"),
            )
        case "stop":
            body = root.object("stop")
            return Stop(
                sequence_number=root.count("sequenceNumber"),
                stream_sid=root.text("streamSid", non_empty=True),
                account_sid=body.text("accountSid", non_empty=True),
                call_sid=body.text("callSid", non_empty=True),
            )
        case _:
            raise UnknownEvent(name, INBOUND_EVENTS)


def _start(root: JsonObject) -> Start:
    body = root.object("start")
    stream_sid = root.text("streamSid", non_empty=True)
    # Twilio repeats the SID inside `start`; two different SIDs in one message mean
    # a forged or corrupted start, not a stream we can serve.
    if body.has("streamSid") and (inner := body.text("streamSid")) != stream_sid:
        raise ProtocolError(
            f"expected 'start.streamSid' to equal 'streamSid' {stream_sid!r}, got {inner!r}",
            kind=Kind.WRONG_STREAM,
        )
    tracks = body.strings("tracks")
    if not tracks:
        raise ProtocolError(
            "expected 'start.tracks' to name at least one track, got []",
            kind=Kind.BAD_VALUE,
        )
    media_format = body.object("mediaFormat")
    encoding = media_format.text("encoding")
    sample_rate = media_format.count("sampleRate")
    channels = media_format.count("channels")
    if (encoding, sample_rate, channels) != (MULAW_ENCODING, SAMPLE_RATE_HZ, CHANNELS):
        raise ProtocolError(
            f"expected mediaFormat {MULAW_ENCODING} {SAMPLE_RATE_HZ} Hz {CHANNELS} channel, "
            f"got {encoding[:40]} {sample_rate} Hz {channels} channels",
            kind=Kind.UNSUPPORTED_FORMAT,
        )
    # Not documented whether Twilio omits an empty customParameters; treat absence
    # as no parameters rather than fail the call.
    parameters = body.string_map("customParameters") if body.has("customParameters") else {}
    return Start(
        sequence_number=root.count("sequenceNumber"),
        stream_sid=stream_sid,
        account_sid=body.text("accountSid", non_empty=True),
        call_sid=body.text("callSid", non_empty=True),
        tracks=tracks,
        custom_parameters=parameters,
        encoding=encoding,
        sample_rate=sample_rate,
        channels=channels,
    )


def _media(root: JsonObject) -> Media:
    body = root.object("media")
    return Media(
        sequence_number=root.count("sequenceNumber"),
        stream_sid=root.text("streamSid", non_empty=True),
        track=body.text("track", non_empty=True),
        chunk=body.count("chunk"),
        timestamp_ms=body.count("timestamp"),
        payload=body.base64("payload", max_bytes=MAX_MEDIA_PAYLOAD_BYTES),
    )


def _dtmf(root: JsonObject) -> Dtmf:
    body = root.object("dtmf")
    digit = body.text("digit")
    if digit not in DTMF_DIGITS:
        raise ProtocolError(
            f"expected 'dtmf.digit' to be one of 0-9 * # A-D, got {describe(digit)}",
            kind=Kind.BAD_VALUE,
        )
    return Dtmf(
        sequence_number=root.count("sequenceNumber"),
        stream_sid=root.text("streamSid", non_empty=True),
        track=body.text("track", non_empty=True),
        digit=digit,
    )


def _require_sid(stream_sid: str) -> None:
    if not stream_sid:
        raise ValueError("expected a non-empty stream SID, got ''")


def media_message(stream_sid: str, mulaw: bytes) -> str:
    """Audio for Twilio to play: raw 8 kHz mu-law, any length.

    Exactly these fields: Twilio flags extra ones such as track or chunk (31951).
    """
    _require_sid(stream_sid)
    payload = base64.b64encode(mulaw).decode("ascii")
    message = {"event": "media", "streamSid": stream_sid, "media": {"payload": payload}}
    return json.dumps(message, separators=_COMPACT)


def mark_message(stream_sid: str, name: str) -> str:
    """A mark Twilio echoes once everything sent before it has played (or was cleared)."""
    _require_sid(stream_sid)
    if not name:
        raise ValueError("expected a non-empty mark name, got ''")
    message = {"event": "mark", "streamSid": stream_sid, "mark": {"name": name}}
    return json.dumps(message, separators=_COMPACT)


def clear_message(stream_sid: str) -> str:
    """Drop all buffered, unplayed audio; Twilio echoes every pending mark at once."""
    _require_sid(stream_sid)
    return json.dumps({"event": "clear", "streamSid": stream_sid}, separators=_COMPACT)
