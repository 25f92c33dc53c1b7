"""Errors raised at the telephony boundary.

    TelephonyError                 anything telephony/ refuses or fails at
    ├── ProtocolError              an inbound message broke the Media Streams protocol
    │   └── UnknownEvent           a well-formed message named an event we do not know
    ├── SignatureError             a webhook or stream handshake failed the signature check
    └── CallControlError           Twilio's REST API refused or failed a call update

Programming mistakes on our own side (building a message from an empty stream SID, an
invalid phone number) raise the built-in ValueError / RuntimeError instead: they are
bugs to fix, not traffic to count.
"""

from collections.abc import Iterable
from enum import StrEnum


class ProtocolErrorKind(StrEnum):
    """The closed set of metric labels a ProtocolError may carry.

    Closed on purpose: the label ends up in a metric, and a free-form label would let a
    peer inflate its cardinality.
    """

    BINARY_FRAME = "binary_frame"
    MESSAGE_TOO_LARGE = "message_too_large"
    INVALID_JSON = "invalid_json"
    UNKNOWN_EVENT = "unknown_event"
    MISSING_FIELD = "missing_field"
    UNEXPECTED_FIELD = "unexpected_field"
    BAD_TYPE = "bad_type"
    BAD_VALUE = "bad_value"
    BAD_BASE64 = "bad_base64"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    UNSUPPORTED_FORMAT = "unsupported_format"
    WRONG_STREAM = "wrong_stream"
    OUT_OF_ORDER = "out_of_order"


class TelephonyError(Exception):
    """Base class of every error raised by telephony/."""


class ProtocolError(TelephonyError):
    """A malformed or invalid Media Streams message.

    `kind` is a short label (a ProtocolErrorKind, which is a str) for metrics; the
    message says what was expected and what arrived.
    """

    def __init__(self, message: str, *, kind: str) -> None:
        super().__init__(message)
        # ValueError for an unknown label: see ProtocolErrorKind on why the set is closed.
        self.kind: str = ProtocolErrorKind(kind)


class UnknownEvent(ProtocolError):
    """A well-formed message whose `event` names no event we know."""

    def __init__(self, event: str, expected: Iterable[str]) -> None:
        shown = event if len(event) <= 40 else event[:37] + "..."
        super().__init__(
            f"expected event to be one of {', '.join(expected)}; got {shown!r}",
            kind=ProtocolErrorKind.UNKNOWN_EVENT,
        )
        self.event = event


class SignatureError(TelephonyError):
    """A request or WebSocket handshake did not carry a valid Twilio signature."""


class CallControlError(TelephonyError):
    """Twilio's REST API refused a call update, or could not be reached.

    `status` is the HTTP status and `code` Twilio's error code, when there was a response.
    """

    def __init__(self, message: str, *, status: int | None = None, code: int | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
