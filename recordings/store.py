"""All the call records under one root: list, open, repair after a crash, clean up."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

from recordings.errors import CorruptRecord, RecordError, RecordNotFound
from recordings.jsonio import read_json_object, write_json_atomic
from recordings.layout import (
    BOT_WAV,
    CALLER_WAV,
    META,
    SAMPLE_RATE,
    TRANSCRIPT,
    EndedWith,
    check_call_id,
    format_time,
    parse_time,
)
from recordings.record import CallRecord, CallSummary, folder_bytes
from recordings.timeline import last_t_ms, transcript_from_timeline
from recordings.wavfile import count_samples, repair_wav

# CallRecord and CallSummary are what the store hands out; importable from here too.
__all__ = ["CallRecord", "CallSummary", "RecordStore", "Removal"]

log = logging.getLogger(__name__)

_BYTES_PER_GB = 1_000_000_000  # storage is sold in decimal gigabytes


@dataclass(frozen=True)
class Removal:
    """A record cleanup removed (or, in a dry run, would remove)."""

    call_sid: str
    reason: Literal["age", "size"]
    bytes: int


@dataclass(frozen=True)
class _Entry:
    call_sid: str
    path: Path
    started_at: datetime
    bytes: int


class RecordStore:
    """The records under `root` (one folder per call). Blocking file I/O throughout:
    from an event loop, call it through asyncio.to_thread."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def ids(self) -> list[str]:
        """Call ids with a record (a folder holding meta.json), sorted."""
        return sorted(path.name for path in self._folders() if (path / META).is_file())

    def open(self, call_sid: str) -> CallRecord:
        """The record of one call: InvalidCallId, RecordNotFound or CorruptRecord if not."""
        path = self.root / check_call_id(call_sid)
        meta = path / META
        if not meta.is_file():
            raise RecordNotFound(f"no record for call {call_sid} under {self.root}")
        return CallRecord(path=path, meta=read_json_object(meta))

    def summaries(self, *, problems: list[RecordError] | None = None) -> list[CallSummary]:
        """One summary per readable record, oldest first.

        A record that cannot be read is left out and its error appended to `problems`
        (when given), so that one damaged record does not hide all the others.
        """
        result = []
        for call_sid in self.ids():
            try:
                result.append(self.open(call_sid).summary())
            except (RecordError, OSError) as exc:
                error = (
                    exc
                    if isinstance(exc, RecordError)
                    else CorruptRecord(self.root / call_sid, str(exc))
                )
                if problems is not None:
                    problems.append(error)
        result.sort(key=lambda s: (s.started_at, s.call_sid))
        return result

    def size_bytes(self) -> int:
        """Bytes used by every record folder under the root."""
        return sum(folder_bytes(path) for path in self._folders())

    # --- after a crash --------------------------------------------------------------------

    def repair(self, active: Iterable[str] = frozenset()) -> list[str]:
        """Finish the records a dead process left open; returns the ids it changed.

        For every record not in `active` (calls being recorded right now): WAV headers
        are fixed to the files' lengths, and a record without `ended_at` is closed as
        "crashed", ending at its last timeline event or the end of its caller audio
        (whichever is later; the files' mtime when it has neither), with a transcript
        rebuilt from the timeline's caller_turn / bot_turn events if it has none.
        Records that cannot be repaired are logged and left as they are.
        """
        skip = set(active)
        repaired = []
        for call_sid in self.ids():
            if call_sid in skip:
                continue
            try:
                changed = self._repair_one(self.open(call_sid))
            except (RecordError, OSError) as exc:
                log.warning("cannot repair the record of call %s: %s", call_sid, exc)
                continue
            if changed:
                log.info("repaired the record of call %s", call_sid)
                repaired.append(call_sid)
        return repaired

    def _repair_one(self, record: CallRecord) -> bool:
        changed = False
        for name in (CALLER_WAV, BOT_WAV):
            if (record.path / name).exists():
                changed |= repair_wav(record.path / name)
        if record.meta.get("ended_at") is not None:
            return changed
        started_at = record.started_at
        events = list(record.timeline())
        if not (record.path / TRANSCRIPT).exists():
            write_json_atomic(record.path / TRANSCRIPT, transcript_from_timeline(events))
        ended_at = _estimate_end(record, started_at, last_t_ms(events))
        meta = {
            **record.meta,
            "ended_at": format_time(ended_at),
            "duration_s": round((ended_at - started_at).total_seconds(), 3),
            "ended_with": str(EndedWith.CRASHED),
        }
        # Last, as at a normal close: a set ended_at means the record is complete.
        write_json_atomic(record.path / META, meta)
        return True

    # --- retention ------------------------------------------------------------------------

    def cleanup(
        self,
        *,
        retention_days: float | None,
        max_storage_gb: float | None,
        now: datetime | None = None,
        dry_run: bool = False,
        active: Iterable[str] = frozenset(),
    ) -> list[Removal]:
        """Remove records older than `retention_days`, then the oldest records until the
        store fits in `max_storage_gb` (decimal GB). None disables a limit.

        Calls in `active` are never removed, though their bytes count towards the total.
        Any folder with a valid call id counts, even one without meta.json (a call that
        died while starting); its age is the folder's mtime. With `dry_run` nothing is
        removed and the plan is returned; otherwise the removals that succeeded.
        """
        for name, limit in (("retention_days", retention_days), ("max_storage_gb", max_storage_gb)):
            if limit is not None and not limit > 0:
                raise ValueError(f"{name} must be > 0 or None (no limit), got {limit}")
        now = datetime.now(UTC) if now is None else now
        if now.tzinfo is None:
            raise ValueError("naive `now`: pass an aware datetime")
        skip = set(active)
        entries = self._entries()
        candidates = sorted(
            (e for e in entries if e.call_sid not in skip), key=lambda e: (e.started_at, e.call_sid)
        )
        plan: list[Removal] = []
        if retention_days is not None:
            cutoff = now - timedelta(days=retention_days)
            plan += [
                Removal(e.call_sid, "age", e.bytes) for e in candidates if e.started_at < cutoff
            ]
        if max_storage_gb is not None:
            limit_bytes = max_storage_gb * _BYTES_PER_GB
            planned = {r.call_sid for r in plan}
            total = sum(e.bytes for e in entries) - sum(r.bytes for r in plan)
            for entry in candidates:
                if total <= limit_bytes:
                    break
                if entry.call_sid not in planned:
                    plan.append(Removal(entry.call_sid, "size", entry.bytes))
                    total -= entry.bytes
        if dry_run:
            return plan
        removed = []
        for removal in plan:
            try:
                shutil.rmtree(self.root / removal.call_sid)
            except OSError as exc:
                log.warning("cannot remove the record of call %s: %s", removal.call_sid, exc)
                continue
            removed.append(removal)
        return removed

    # --- helpers ----------------------------------------------------------------------------

    def _folders(self) -> list[Path]:
        """Real folders (not symlinks) under the root whose names are valid call ids."""
        if not self.root.is_dir():
            return []
        folders = []
        for path in self.root.iterdir():
            if path.is_symlink() or not path.is_dir():
                continue
            try:
                check_call_id(path.name)
            except RecordError:
                continue
            folders.append(path)
        return folders

    def _entries(self) -> list[_Entry]:
        entries = []
        for path in self._folders():
            try:
                started_at = parse_time(str(read_json_object(path / META)["started_at"]))
            except (RecordError, OSError, KeyError, ValueError):
                started_at = datetime.fromtimestamp(path.stat().st_mtime, UTC)
            entries.append(_Entry(path.name, path, started_at, folder_bytes(path)))
        return entries


def _estimate_end(
    record: CallRecord, started_at: datetime, last_event_ms: float | None
) -> datetime:
    """When a crashed call ended: its last sign of life on the call clock, else mtimes."""
    caller = record.path / CALLER_WAV
    audio_s = count_samples(caller) / SAMPLE_RATE if caller.exists() else 0.0
    clock_s = max(audio_s, (last_event_ms or 0.0) / 1000)
    if clock_s > 0:
        return started_at + timedelta(seconds=clock_s)
    mtimes = [p.stat().st_mtime for p in record.path.iterdir() if p.is_file()]
    return max(started_at, *(datetime.fromtimestamp(t, UTC) for t in mtimes))
