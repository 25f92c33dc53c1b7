"""The server's care of finished records: crash repair, retention and, with
RECORDS_URL, uploads to the S3-compatible store and retention there."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from recordings.retention import retention_loop
from recordings.s3_records import S3Records
from recordings.s3_store import S3RecordStore
from recordings.store import RecordStore
from recordings.uploader import RecordUploader

if TYPE_CHECKING:
    from app.services import Services

__all__ = ["look_after_records", "open_uploader"]

log = logging.getLogger(__name__)


def open_uploader(services: Services) -> RecordUploader | None:
    """The uploader for RECORDS_URL (None without one), its counts in /metrics."""
    settings = services.settings
    if not settings.records_url or not settings.recording:
        return None
    metrics = services.metrics
    uploader = RecordUploader(
        settings.calls_dir,
        S3Records.from_url(settings.records_url),
        active=services.recording_now,
        on_uploaded=metrics.record_uploads.labels(outcome="uploaded").inc,
        on_failed=metrics.record_uploads.labels(outcome="failed").inc,
    )
    metrics.records_pending_upload.set_function(lambda: len(uploader.pending()))
    return uploader


async def look_after_records(services: Services) -> None:
    """Repair what a crash left open, upload what the store lacks, then apply
    retention daily, locally and in the store. Runs until cancelled; nothing here
    raises into the server."""
    settings = services.settings
    store = RecordStore(settings.calls_dir)
    active = services.recording_now
    try:
        repaired = await asyncio.to_thread(store.repair, active())
        if repaired:
            log.warning("repaired %d call record(s) left open by a crash", len(repaired))
    except Exception:
        log.exception("repairing call records under %s failed", store.root)
    uploader = services.uploader
    if uploader is None:
        await retention_loop(store, settings, active=active)
        return
    # Before local retention runs: a record the store lacks must not be removed here.
    try:
        await uploader.scan()
    except Exception:
        log.exception("scanning %s for records to upload failed", store.root)
    remote = S3RecordStore(uploader.remote)
    try:
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(uploader.run(), name="record-uploads")
            tasks.create_task(
                retention_loop(store, settings, active=lambda: active() | uploader.pending()),
                name="record-retention",
            )
            tasks.create_task(
                retention_loop(remote, settings, active=frozenset), name="store-retention"
            )
    finally:
        remote.close()
