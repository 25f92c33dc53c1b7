"""Errors raised by the recordings package.

    RecordError              anything recordings/ refuses or cannot read
    ├── InvalidCallId        a call id that is not ^[A-Za-z0-9_-]{1,64}$ (no path tricks)
    ├── RecordExists         a recorder was started for a call that already has a folder
    ├── RecordNotFound       no record for that call under the store's root
    ├── CorruptRecord        a record file cannot be parsed (names the file and why)
    └── StoreUnavailable     the S3-compatible store refused or could not be reached

Programming mistakes on our own side (float audio where PCM16 is expected, an unknown
`ended_with`) raise the built-in TypeError / ValueError instead: they are bugs to fix.
Disk failures while a call is being recorded never raise at all: the writer thread
counts and logs them, because a full disk must not end a phone call.
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "CorruptRecord",
    "InvalidCallId",
    "RecordError",
    "RecordExists",
    "RecordNotFound",
    "StoreUnavailable",
]


class RecordError(Exception):
    """Base class of the recordings package."""


class InvalidCallId(RecordError):
    """A call id that could escape the store's root or is not a Twilio-style id."""


class RecordExists(RecordError):
    """A call's folder already exists; records are never overwritten."""


class RecordNotFound(RecordError):
    """The store holds no record for a call."""


class CorruptRecord(RecordError):
    """A file of a record cannot be read; `path` names it."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class StoreUnavailable(RecordError):
    """The S3-compatible store failed a request (unreachable, no such bucket, denied)."""
