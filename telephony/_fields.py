"""Typed, field-by-field reading of one JSON text frame.

The only place in offhook that touches Media Streams JSON. Every accessor returns a
typed value or raises ProtocolError whose kind is a metric label and whose message names
the field, what was expected and (briefly) what arrived.
"""

import base64
import binascii
import json
import re
from collections.abc import Iterable, Mapping

from telephony.errors import ProtocolError
from telephony.errors import ProtocolErrorKind as Kind

# ASCII digits only: str.isdigit() and int() also accept other scripts' digits.
_DIGITS = re.compile(r"[0-9]+")
_MAX_COUNT = 2**63 - 1
_MAX_COUNT_DIGITS = len(str(_MAX_COUNT))
_SHOWN_CHARS = 40


def describe(value: object) -> str:
    """A short rendering of an offending value: its JSON type and a clipped repr."""
    if isinstance(value, bool):
        kind = "boolean"
    elif isinstance(value, int | float):
        kind = "number"
    else:
        kind = {dict: "object", list: "array", str: "string", type(None): "null"}.get(
            type(value), type(value).__name__
        )
    text = repr(value)
    if len(text) > _SHOWN_CHARS:
        text = text[: _SHOWN_CHARS - 3] + "..."
    return f"{kind} {text}"


def _reject_constant(name: str) -> object:
    # json.loads accepts NaN and Infinity, which are not JSON and Twilio never sends.
    raise ValueError(f"{name} is not valid JSON")


def load_object(message: object, *, max_chars: int | None) -> "JsonObject":
    """Parse one WebSocket frame that must hold a JSON object."""
    if isinstance(message, bytes | bytearray | memoryview):
        raise ProtocolError(
            f"expected a JSON text frame, got a binary frame of {len(message)} bytes",
            kind=Kind.BINARY_FRAME,
        )
    if not isinstance(message, str):
        raise TypeError(f"expected the frame as str or bytes, got {type(message).__name__}")
    if max_chars is not None and len(message) > max_chars:
        raise ProtocolError(
            f"expected a message of at most {max_chars} characters, got {len(message)}",
            kind=Kind.MESSAGE_TOO_LARGE,
        )
    try:
        data = json.loads(message, parse_constant=_reject_constant)
    # ValueError covers JSONDecodeError and over-long integer literals; RecursionError
    # covers deeply nested arrays.
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(
            f"expected a JSON object, got text that is not JSON ({exc})",
            kind=Kind.INVALID_JSON,
        ) from exc
    if not isinstance(data, dict):
        raise ProtocolError(f"expected a JSON object, got {describe(data)}", kind=Kind.BAD_TYPE)
    return JsonObject(data, "")


class JsonObject:
    """One JSON object and its path in the message, read through typed accessors."""

    __slots__ = ("_data", "_path")

    def __init__(self, data: Mapping[str, object], path: str) -> None:
        self._data = data
        self._path = path

    def _name(self, field: str) -> str:
        return f"{self._path}.{field}" if self._path else field

    def has(self, field: str) -> bool:
        return field in self._data

    def _get(self, field: str) -> object:
        try:
            return self._data[field]
        except KeyError:
            raise ProtocolError(
                f"expected field {self._name(field)!r}, it is missing",
                kind=Kind.MISSING_FIELD,
            ) from None

    def _wrong(self, field: str, expected: str, value: object, kind: Kind) -> ProtocolError:
        return ProtocolError(
            f"expected {self._name(field)!r} to be {expected}, got {describe(value)}", kind=kind
        )

    def text(self, field: str, *, non_empty: bool = False) -> str:
        value = self._get(field)
        if not isinstance(value, str):
            raise self._wrong(field, "a string", value, Kind.BAD_TYPE)
        if non_empty and not value:
            raise self._wrong(field, "a non-empty string", value, Kind.BAD_VALUE)
        return value

    def count(self, field: str) -> int:
        """A non-negative integer sent as a JSON number or a string of digits.

        Twilio's examples send sequence numbers, chunks and timestamps as strings and
        media formats as numbers; either form is accepted everywhere.
        """
        value = self._get(field)
        expected = "a non-negative integer (number or string of digits)"
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise self._wrong(field, expected, value, Kind.BAD_TYPE)
        if isinstance(value, str):
            negative = value.startswith("-")
            digits = value[1:] if negative else value
            if _DIGITS.fullmatch(digits) is None:
                raise self._wrong(field, expected, value, Kind.BAD_TYPE)
            # Checked before int(): int() refuses strings past ~4300 digits with its own error.
            if negative or len(digits) > _MAX_COUNT_DIGITS:
                raise self._wrong(field, expected, value, Kind.BAD_VALUE)
            value = int(digits)
        if not 0 <= value <= _MAX_COUNT:
            raise self._wrong(field, expected, value, Kind.BAD_VALUE)
        return value

    def object(self, field: str) -> "JsonObject":
        value = self._get(field)
        if not isinstance(value, dict):
            raise self._wrong(field, "an object", value, Kind.BAD_TYPE)
        return JsonObject(value, self._name(field))

    def strings(self, field: str) -> tuple[str, ...]:
        value = self._get(field)
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise self._wrong(field, "an array of strings", value, Kind.BAD_TYPE)
        return tuple(value)

    def string_map(self, field: str) -> dict[str, str]:
        value = self._get(field)
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise self._wrong(field, "an object of string values", value, Kind.BAD_TYPE)
        return dict(value)

    def base64(self, field: str, *, max_bytes: int | None = None) -> bytes:
        encoded = self.text(field)
        try:
            decoded = base64.b64decode(encoded, validate=True)
        # binascii.Error for bad alphabet or padding; ValueError for non-ASCII text.
        except (binascii.Error, ValueError) as exc:
            raise self._wrong(field, f"base64 ({exc})", encoded, Kind.BAD_BASE64) from exc
        if max_bytes is not None and len(decoded) > max_bytes:
            raise ProtocolError(
                f"expected {self._name(field)!r} to decode to at most {max_bytes} bytes, "
                f"got {len(decoded)}",
                kind=Kind.PAYLOAD_TOO_LARGE,
            )
        return decoded

    def only(self, allowed: Iterable[str]) -> None:
        """Refuse any field outside `allowed`: for messages whose schema is exact."""
        permitted = set(allowed)
        extra = sorted(set(self._data) - permitted)
        if extra:
            raise ProtocolError(
                f"expected only fields {sorted(permitted)} in {self._path or 'the message'}, "
                f"got unexpected {[self._name(name) for name in extra]}",
                kind=Kind.UNEXPECTED_FIELD,
            )
