"""One call's record, read back: meta, timeline, transcript, audio and a summary line."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from recordings.errors import CorruptRecord
from recordings.jsonio import read_json_object
from recordings.layout import BOT_WAV, CALLER_WAV, META, TIMELINE, TRANSCRIPT, parse_time
from recordings.timeline import stats_from_timeline
from recordings.wavfile import read_pcm16

__all__ = ["CallRecord", "CallSummary", "folder_bytes"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CallSummary:
    """One line of `offhook calls`: who, when, how long, how it went."""

    call_sid: str
    started_at: datetime
    duration_s: float | None
    from_: str | None
    to: str | None
    ended_with: str | None
    agent: str | None
    fallbacks: tuple[str, ...]
    error: str | None
    turns: int
    barge_ins: int
    errors: int
    mouth_to_mouth_p50_ms: float | None
    size_bytes: int


@dataclass(frozen=True)
class CallRecord:
    """A record folder and its parsed meta.json. Other files are read on demand."""

    path: Path
    meta: dict[str, Any]

    @property
    def call_sid(self) -> str:
        return self.path.name

    @property
    def started_at(self) -> datetime:
        value = self.meta.get("started_at")
        if isinstance(value, str):
            try:
                return parse_time(value)
            except ValueError:
                pass
        raise CorruptRecord(self.path / META, f"started_at {value!r} is not an ISO-8601 time")

    def timeline(self) -> Iterator[dict[str, Any]]:
        """The timeline's events in order; none when the file is missing.

        A last line without its newline that does not parse is the write a crash cut
        short, and is skipped; any other bad line raises CorruptRecord.
        """
        path = self.path / TIMELINE
        try:
            f = open(path, "rb")
        except FileNotFoundError:
            return
        with f:
            for number, raw in enumerate(f, start=1):
                if not raw.strip():
                    continue
                try:
                    event = json.loads(raw)
                except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
                    if not raw.endswith(b"\n"):
                        log.info("%s: skipping line %d, cut short by a crash", path, number)
                        return
                    raise CorruptRecord(path, f"line {number}: {exc}") from exc
                if not isinstance(event, dict):
                    raise CorruptRecord(path, f"line {number}: expected a JSON object")
                yield event

    def transcript(self) -> dict[str, Any]:
        """transcript.json, or {"turns": []} for a record that has none (yet)."""
        path = self.path / TRANSCRIPT
        if not path.exists():
            return {"turns": []}
        return read_json_object(path)

    def caller_audio(self) -> np.ndarray:
        """caller.wav as int16; sample i is call-clock sample i."""
        return self._audio(CALLER_WAV)

    def bot_audio(self) -> np.ndarray:
        """bot.wav as int16, padded with silence or cut to caller.wav's length, so the
        two line up sample for sample (a crashed call's bot.wav was never padded)."""
        bot = self._audio(BOT_WAV)
        length = self._audio(CALLER_WAV).size
        if bot.size >= length:
            return bot[:length]
        return np.concatenate((bot, np.zeros(length - bot.size, dtype=np.int16)))

    def size_bytes(self) -> int:
        return folder_bytes(self.path)

    def summary(self) -> CallSummary:
        """The headline numbers, from meta["summary"] where the call wrote them, else
        from the timeline (a crashed call never wrote them)."""
        meta = self.meta
        given = meta.get("summary")
        given = given if isinstance(given, dict) else {}
        latency = given.get("mouth_to_mouth_ms")
        # A p50 of null is an answer (no turn was timed); a missing one is not.
        p50_known = isinstance(latency, dict) and "p50" in latency
        p50 = _optional_float(latency.get("p50")) if isinstance(latency, dict) else None
        turns = _optional_count(given.get("turns"))
        barge_ins = _optional_count(given.get("barge_ins"))
        errors = _optional_count(given.get("errors"))
        if turns is None or barge_ins is None or errors is None or not p50_known:
            stats = stats_from_timeline(self.timeline())
            turns = stats.turns if turns is None else turns
            barge_ins = stats.barge_ins if barge_ins is None else barge_ins
            errors = stats.errors if errors is None else errors
            p50 = p50 if p50_known else stats.mouth_to_mouth_p50_ms
        fallbacks = meta.get("fallbacks")
        return CallSummary(
            call_sid=self.call_sid,
            started_at=self.started_at,
            duration_s=_optional_float(meta.get("duration_s")),
            from_=_optional_str(meta.get("from")),
            to=_optional_str(meta.get("to")),
            ended_with=_optional_str(meta.get("ended_with")),
            agent=_optional_str(meta.get("agent")),
            fallbacks=tuple(str(f) for f in fallbacks) if isinstance(fallbacks, list) else (),
            error=_optional_str(meta.get("error")),
            turns=turns,
            barge_ins=barge_ins,
            errors=errors,
            mouth_to_mouth_p50_ms=p50,
            size_bytes=self.size_bytes(),
        )

    def _audio(self, name: str) -> np.ndarray:
        path = self.path / name
        if not path.exists():
            return np.zeros(0, dtype=np.int16)
        return read_pcm16(path)[0]


def folder_bytes(path: Path) -> int:
    """Bytes of the regular files under `path`, symlinks not followed."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except FileNotFoundError:  # removed while we walked
                continue
    return total


def _optional_str(value: Any) -> str | None:
    return None if value is None else str(value)


def _optional_float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _optional_count(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value
