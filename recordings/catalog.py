"""What `offhook calls` needs of a place that holds records: the local folder
(RecordStore) and the S3-compatible store (S3RecordStore) both are one."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Protocol

from recordings.cleanup_plan import Removal
from recordings.errors import RecordError
from recordings.record import CallRecord, CallSummary

__all__ = ["RecordCatalog"]


class RecordCatalog(Protocol):
    """Blocking throughout; from an event loop, call it through asyncio.to_thread."""

    @property
    def root(self) -> Path | str:
        """Where the records are, for messages: a folder or s3://BUCKET/PREFIX."""
        ...

    def ids(self) -> list[str]:
        """Call ids with a record (one holding meta.json), sorted."""
        ...

    def open(self, call_sid: str) -> CallRecord:
        """One call's record as local files: InvalidCallId, RecordNotFound or
        CorruptRecord if not."""
        ...

    def summary(self, call_sid: str) -> CallSummary:
        """One call's headline numbers, reading no more than they need."""
        ...

    def summaries(self, *, problems: list[RecordError] | None = None) -> list[CallSummary]:
        """Every readable record's summary, oldest first; the unreadable in `problems`."""
        ...

    def size_bytes(self) -> int:
        """Bytes held by every record."""
        ...

    def cleanup(
        self,
        *,
        retention_days: float | None,
        max_storage_gb: float | None,
        now: datetime | None = None,
        dry_run: bool = False,
        active: Iterable[str] = frozenset(),
    ) -> list[Removal]:
        """Remove what retention says (recordings.cleanup_plan); the removals."""
        ...

    def close(self) -> None:
        """Let go of what reading needed (downloaded copies)."""
        ...
