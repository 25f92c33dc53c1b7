"""Every gateway's call records, read back from the S3-compatible store.

The same interface as the local RecordStore (recordings.catalog.RecordCatalog), so
`offhook calls` works on either. A record is downloaded into a private temporary
folder when it is opened and read there by the same code as a local one; `close()`
(or the end of the process) removes those copies. Listing reads meta.json alone (and
the timeline for a call that never wrote its summary, such as a crashed one).
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import weakref
from collections import defaultdict
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

from recordings.cleanup_plan import Entry, Removal, carry_out, plan_removals
from recordings.errors import CorruptRecord, RecordError, RecordNotFound
from recordings.jsonio import read_json_object
from recordings.layout import FOLDER_MODE, META, TIMELINE, check_call_id
from recordings.record import CallRecord, CallSummary
from recordings.s3_records import S3Object, S3Records

__all__ = ["S3RecordStore"]


_READERS = 8  # meta.json requests in flight while listing: latency, not bandwidth, bound


class S3RecordStore:
    """The records under one s3:// location. Blocking network I/O throughout."""

    def __init__(self, remote: S3Records) -> None:
        self.remote = remote
        # mkdtemp makes it 0700: downloaded records hold callers' voices.
        self._cache = Path(tempfile.mkdtemp(prefix="offhook-records-"))
        self._finalizer = weakref.finalize(self, shutil.rmtree, self._cache, True)

    @property
    def root(self) -> str:
        return self.remote.location.url

    def close(self) -> None:
        self._finalizer()

    def ids(self) -> list[str]:
        return sorted(sid for sid, files in self._by_call().items() if META in files)

    def open(self, call_sid: str) -> CallRecord:
        """Download the call's every file, then read it as a local record."""
        files = self._files(call_sid)
        folder = self._fresh_folder(call_sid)
        for obj in files.values():
            self.remote.download(obj, folder / obj.name)
        return CallRecord(path=folder, meta=read_json_object(folder / META))

    def summary(self, call_sid: str) -> CallSummary:
        return self._summary(self._files(call_sid))

    def summaries(self, *, problems: list[RecordError] | None = None) -> list[CallSummary]:
        records = [files for files in self._by_call().values() if META in files]

        def read(files: dict[str, S3Object]) -> CallSummary | RecordError:
            try:
                return self._summary(files)
            except (RecordError, OSError) as exc:
                where = files[META].key
                return exc if isinstance(exc, RecordError) else CorruptRecord(Path(where), str(exc))

        with ThreadPoolExecutor(_READERS, thread_name_prefix="s3-summary") as pool:
            results = list(pool.map(read, records))
        summaries = [r for r in results if isinstance(r, CallSummary)]
        if problems is not None:
            problems += [r for r in results if isinstance(r, RecordError)]
        summaries.sort(key=lambda s: (s.started_at, s.call_sid))
        return summaries

    def size_bytes(self) -> int:
        return sum(obj.size for obj in self.remote.objects())

    def cleanup(
        self,
        *,
        retention_days: float | None,
        max_storage_gb: float | None,
        now: datetime | None = None,
        dry_run: bool = False,
        active: Iterable[str] = frozenset(),
    ) -> list[Removal]:
        """The local rule (recordings.cleanup_plan), applied to the store.

        A record's age here is when its oldest file was uploaded, which a listing gives
        without reading each meta.json: never earlier than the call's start, so a record
        is never removed early, and late only by how long its upload waited.
        """
        entries = [
            Entry(
                call_sid,
                min(obj.modified for obj in files.values()),
                sum(obj.size for obj in files.values()),
            )
            for call_sid, files in self._by_call().items()
        ]
        plan = plan_removals(
            entries,
            retention_days=retention_days,
            max_storage_gb=max_storage_gb,
            now=now,
            active=active,
        )
        if dry_run:
            return plan
        return carry_out(plan, self.remote.delete, RecordError)

    # --- helpers ----------------------------------------------------------------------------

    def _by_call(self) -> dict[str, dict[str, S3Object]]:
        calls: dict[str, dict[str, S3Object]] = defaultdict(dict)
        for obj in self.remote.objects():
            calls[obj.call_sid][obj.name] = obj
        return dict(calls)

    def _files(self, call_sid: str) -> dict[str, S3Object]:
        check_call_id(call_sid)
        files = {obj.name: obj for obj in self.remote.objects(call_sid)}
        if META not in files:
            raise RecordNotFound(f"no record for call {call_sid} under {self.root}")
        return files

    def _summary(self, files: dict[str, S3Object]) -> CallSummary:
        meta_obj = files[META]
        folder = self._fresh_folder(meta_obj.call_sid)
        self.remote.download(meta_obj, folder / META)
        meta = read_json_object(folder / META)
        if TIMELINE in files and _needs_timeline(meta):
            self.remote.download(files[TIMELINE], folder / TIMELINE)
        summary = CallRecord(path=folder, meta=meta).summary()
        return dataclasses.replace(summary, size_bytes=sum(obj.size for obj in files.values()))

    def _fresh_folder(self, call_sid: str) -> Path:
        folder = self._cache / check_call_id(call_sid)
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(mode=FOLDER_MODE)
        return folder


def _needs_timeline(meta: dict[str, Any]) -> bool:
    """Whether CallRecord.summary falls back on the timeline (it reads it only then)."""
    given = meta.get("summary")
    if not isinstance(given, dict):
        return True
    latency = given.get("mouth_to_mouth_ms")
    counts = (given.get(key) for key in ("turns", "barge_ins", "errors"))
    return not (
        all(isinstance(c, int) and not isinstance(c, bool) for c in counts)
        and isinstance(latency, dict)
        and "p50" in latency
    )
