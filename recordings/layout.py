"""Where a record lives and the names, ids and timestamps every module agrees on."""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path

from recordings.errors import InvalidCallId

__all__ = [
    "BOT_WAV",
    "CALLER_WAV",
    "FILE_MODE",
    "FOLDER_MODE",
    "FORMAT_VERSION",
    "META",
    "SAMPLE_RATE",
    "TIMELINE",
    "TRANSCRIPT",
    "EndedWith",
    "check_call_id",
    "format_time",
    "parse_time",
    "private_opener",
    "record_dir",
]

FORMAT_VERSION = 1
SAMPLE_RATE = 8000

META = "meta.json"
TIMELINE = "timeline.jsonl"
CALLER_WAV = "caller.wav"
BOT_WAV = "bot.wav"
TRANSCRIPT = "transcript.json"

# fullmatch, not `$`: `$` would also accept a trailing newline.
_CALL_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


class EndedWith(StrEnum):
    """How a call ended, as written to meta.json's `ended_with`."""

    COMPLETED = "completed"  # the bot or the caller finished the conversation normally
    HANGUP = "hangup"  # the caller hung up (Twilio `stop`)
    DISCONNECTED = "disconnected"  # the stream's socket went away without a `stop`
    ERROR = "error"  # the call ended because of a failure on our side
    BOT_HANGUP = "bot_hangup"  # the bot ended the call (goodbye, MAX_CALL_S, silence...)
    TRANSFERRED = "transferred"  # the bot handed the call to TRANSFER_TO
    # An outbound call that never connected, as Twilio's status callback said.
    BUSY = "busy"
    NO_ANSWER = "no-answer"
    FAILED = "failed"
    CANCELED = "canceled"
    TIMEOUT = "timeout"  # no media for MEDIA_TIMEOUT_S: the line is dead
    MAX_LENGTH = "max_length"  # the call reached MAX_CALL_S
    FLOOD = "flood"  # the peer sent media faster than real time allows
    CRASHED = "crashed"  # set by RecordStore.repair: the process died mid-call


# Records hold callers' voices and words: readable by the service's user only.
FILE_MODE = 0o600
FOLDER_MODE = 0o700


def private_opener(path: str, flags: int) -> int:
    """`open(..., opener=private_opener)`: a new file is created 0600, never 0644."""
    return os.open(path, flags, FILE_MODE)


def check_call_id(call_sid: object) -> str:
    """Return `call_sid` if it is safe to use as one folder name, else raise InvalidCallId."""
    if not isinstance(call_sid, str) or not _CALL_ID.fullmatch(call_sid):
        raise InvalidCallId(f"invalid call id {call_sid!r}: expected ^[A-Za-z0-9_-]{{1,64}}$")
    return call_sid


def record_dir(root: Path, call_sid: str) -> Path:
    """The folder of one call's record; the id is checked first."""
    return Path(root) / check_call_id(call_sid)


def format_time(moment: datetime) -> str:
    """ISO-8601 in UTC with milliseconds and a `Z`: 2024-05-01T12:00:00.123Z."""
    if moment.tzinfo is None:
        raise ValueError("naive datetime: pass an aware one (datetime.now(UTC))")
    utc = moment.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def parse_time(text: str) -> datetime:
    """Inverse of format_time; any ISO-8601 string, naive ones taken as UTC."""
    moment = datetime.fromisoformat(text)
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
