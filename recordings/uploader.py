"""Upload finished call records to the S3-compatible store, and never lose one.

The local record stays the one written during the call (crash-safe, repaired after a
crash, as always); the store gets a copy once the call is over. What was uploaded is
noted in the record's `.uploaded.json`: each file's size and mtime as they were sent.
A record is pending while a file differs from that note, so an event appended after the
call (a late status callback) is uploaded too, and a record repaired after a crash is
found by the scan at start. An upload that fails is retried with backoff, the record
going to the back of the queue; until it is uploaded it is `pending()`, and local
retention must not remove it.

Uploads run one at a time in a worker thread: the event loop never waits for the store.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from recordings.jsonio import write_json_atomic
from recordings.layout import META, record_dir
from recordings.s3_records import S3Records
from recordings.store import RecordStore

__all__ = ["UPLOADED", "RecordUploader", "files_to_upload"]

log = logging.getLogger(__name__)

UPLOADED = ".uploaded.json"  # a dot: readers and uploads skip it, like temporary files

_Signature = tuple[int, int]  # size, mtime in ns


def _signatures(folder: Path) -> dict[str, _Signature]:
    found = {}
    for path in folder.iterdir():
        if path.name.startswith(".") or path.is_symlink() or not path.is_file():
            continue
        stat = path.stat()
        found[path.name] = (stat.st_size, stat.st_mtime_ns)
    return found


def _uploaded(folder: Path) -> dict[str, _Signature]:
    try:
        noted = json.loads((folder / UPLOADED).read_text(encoding="utf-8"))["files"]
        return {str(name): (int(sig[0]), int(sig[1])) for name, sig in noted.items()}
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError):
        return {}  # no note (or a damaged one): everything is uploaded again


def _closed(folder: Path) -> bool:
    try:
        meta = json.loads((folder / META).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and bool(meta.get("ended_at"))


def files_to_upload(folder: Path) -> dict[str, _Signature]:
    """A closed record's files that the store does not have as they are now; meta.json
    last (as locally, a reader that sees it sees the rest). Nothing for an open record:
    its writer still owns it."""
    if not _closed(folder):
        return {}
    noted = _uploaded(folder)
    changed = {name: sig for name, sig in _signatures(folder).items() if noted.get(name) != sig}
    return dict(sorted(changed.items(), key=lambda item: item[0] == META))


class RecordUploader:
    """Copies closed records under `root` to `remote`; call `notify` when one closes or
    changes, run `run()` as a task. `scan()` finds what an earlier process left."""

    def __init__(
        self,
        root: Path,
        remote: S3Records,
        *,
        active: Callable[[], Iterable[str]] = frozenset,
        retry_min_s: float = 1.0,
        retry_max_s: float = 60.0,
        rescan_s: float = 600.0,
        on_uploaded: Callable[[], None] | None = None,
        on_failed: Callable[[], None] | None = None,
    ) -> None:
        self.root = Path(root)
        self.remote = remote
        self._active = active
        self._retry_min_s = retry_min_s
        self._retry_max_s = retry_max_s
        self._rescan_s = rescan_s
        self._on_uploaded = on_uploaded
        self._on_failed = on_failed
        self._queue: collections.deque[str] = collections.deque()
        self._pending: set[str] = set()
        self._wake = asyncio.Event()
        self._failing_since: float | None = None

    def pending(self) -> frozenset[str]:
        """Records known to wait for an upload (queued, being sent, or failing)."""
        return frozenset(self._pending)

    @property
    def failing(self) -> bool:
        """The last upload failed: the store is away (or refuses)."""
        return self._failing_since is not None

    def notify(self, call_sid: str) -> None:
        """A record closed or changed: upload it soon. Never blocks; event loop only."""
        if call_sid not in self._queue:
            self._queue.append(call_sid)
        self._pending.add(call_sid)
        self._wake.set()

    async def scan(self) -> None:
        """Queue every record on disk that the store lacks (or has out of date)."""
        for call_sid in await asyncio.to_thread(self._scan):
            self.notify(call_sid)

    async def run(self) -> None:
        """Upload until cancelled; rescans the disk every `rescan_s` as a safety net."""
        delay = 0.0
        next_scan = time.monotonic() + self._rescan_s
        while True:
            if not self._queue:
                self._wake.clear()
                try:
                    async with asyncio.timeout(max(0.0, next_scan - time.monotonic())):
                        await self._wake.wait()
                except TimeoutError:
                    next_scan = time.monotonic() + self._rescan_s
                    await self._guarded_scan()
                continue
            call_sid = self._queue.popleft()
            if call_sid in set(self._active()):
                continue  # still being written: its close notifies again
            try:
                await asyncio.to_thread(self.upload_now, call_sid)
            except Exception as exc:
                self._failed(call_sid, exc)
                self._queue.append(call_sid)  # to the back: one bad record blocks no other
                delay = min(self._retry_max_s, max(self._retry_min_s, 2 * delay))
                await asyncio.sleep(delay)
                continue
            delay = 0.0
            self._succeeded()
            if call_sid not in self._queue:
                self._pending.discard(call_sid)

    def upload_now(self, call_sid: str) -> int:
        """Upload what the store lacks of one record (blocking); the number of files.

        Each file's signature is taken before it is read, so a file that changes while
        it is sent stays pending and goes again.
        """
        folder = record_dir(self.root, call_sid)
        if not folder.is_dir():
            return 0  # removed meanwhile (retention, an operator): nothing to keep
        changed = files_to_upload(folder)
        if not changed:
            return 0
        noted = _uploaded(folder)
        for name, signature in changed.items():
            self.remote.upload(call_sid, folder / name)
            noted[name] = signature
            write_json_atomic(folder / UPLOADED, {"files": noted})
        if self._on_uploaded is not None:
            self._on_uploaded()
        log.info("uploaded the record of call %s to %s", call_sid, self.remote.location.url)
        return len(changed)

    def _scan(self) -> list[str]:
        found = []
        for call_sid in RecordStore(self.root).ids():
            try:
                if files_to_upload(record_dir(self.root, call_sid)):
                    found.append(call_sid)
            except OSError as exc:
                log.warning("cannot read the record of call %s: %s", call_sid, exc)
        return found

    async def _guarded_scan(self) -> None:
        try:
            await self.scan()
        except Exception:
            log.exception("scanning %s for records to upload failed", self.root)

    def _failed(self, call_sid: str, exc: Exception) -> None:
        if self._on_failed is not None:
            self._on_failed()
        if self._failing_since is None:
            self._failing_since = time.monotonic()
            log.error(
                "uploading the record of call %s failed: %s; kept locally, retrying", call_sid, exc
            )
        else:
            log.debug("uploading the record of call %s failed again: %s", call_sid, exc)

    def _succeeded(self) -> None:
        if self._failing_since is not None:
            down_s = time.monotonic() - self._failing_since
            log.warning("uploads to %s resumed after %.0f s", self.remote.location.url, down_s)
            self._failing_since = None
