"""All the call records under one root: list, open, repair after a crash, clean up."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from recordings.cleanup_plan import Entry, Removal, carry_out, plan_removals
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

    def summary(self, call_sid: str) -> CallSummary:
        """The headline numbers of one call (what `offhook calls list` shows)."""
        return self.open(call_sid).summary()

    def close(self) -> None:
        """Nothing to let go of: the records are the files themselves."""

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
        plan = plan_removals(
            self._entries(),
            retention_days=retention_days,
            max_storage_gb=max_storage_gb,
            now=now,
            active=active,
        )
        if dry_run:
            return plan
        return carry_out(plan, lambda call_sid: shutil.rmtree(self.root / call_sid), OSError)

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

    def _entries(self) -> list[Entry]:
        entries = []
        for path in self._folders():
            try:
                started_at = parse_time(str(read_json_object(path / META)["started_at"]))
            except (RecordError, OSError, KeyError, ValueError):
                started_at = datetime.fromtimestamp(path.stat().st_mtime, UTC)
            entries.append(Entry(path.name, started_at, folder_bytes(path)))
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
