"""Finished records reach the S3 store (a real SeaweedFS), late changes too, and a store
that is away loses nothing: the record waits locally and goes when it is back."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import pytest

from recordings.late import append_late_event
from recordings.layout import BOT_WAV, CALLER_WAV, META, TIMELINE, TRANSCRIPT
from recordings.recorder import CallRecorder
from recordings.s3_records import S3Records
from recordings.s3_store import S3RecordStore
from recordings.uploader import UPLOADED, RecordUploader, files_to_upload
from tests.ops.records import THREE_TURNS, CallSpec, build_call
from tests.recordings.s3_bucket import new_records_url, objects, s3_client, use_s3
from tests.services import S3Server

EVERY_FILE = {META, TIMELINE, CALLER_WAV, BOT_WAV, TRANSCRIPT}


def test_a_finished_record_is_uploaded_whole_and_only_once(
    s3_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_s3(monkeypatch, s3_endpoint)
    url = new_records_url(s3_endpoint)
    folder = build_call(tmp_path, CallSpec("CAdone", THREE_TURNS)).path
    uploader = RecordUploader(tmp_path, S3Records.from_url(url))
    assert uploader.upload_now("CAdone") == len(EVERY_FILE)
    stored = objects(s3_endpoint, url)
    assert stored == {f"CAdone/{name}": (folder / name).read_bytes() for name in EVERY_FILE}
    assert (folder / UPLOADED).exists()  # the local copy stays, noted as uploaded
    assert uploader.upload_now("CAdone") == 0


def test_a_record_still_being_written_is_not_uploaded(
    s3_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_s3(monkeypatch, s3_endpoint)
    url = new_records_url(s3_endpoint)
    recorder = CallRecorder(tmp_path, "CAlive", meta={})
    try:
        assert files_to_upload(tmp_path / "CAlive") == {}
        assert RecordUploader(tmp_path, S3Records.from_url(url)).upload_now("CAlive") == 0
        assert objects(s3_endpoint, url) == {}
    finally:
        recorder.close(ended_with="hangup", transcript={"turns": []})
    assert set(files_to_upload(tmp_path / "CAlive")) == EVERY_FILE


def test_an_event_after_the_call_is_uploaded_too(
    s3_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_s3(monkeypatch, s3_endpoint)
    url = new_records_url(s3_endpoint)
    folder = build_call(tmp_path, CallSpec("CAlate", THREE_TURNS)).path
    uploader = RecordUploader(tmp_path, S3Records.from_url(url))
    uploader.upload_now("CAlate")
    assert append_late_event(tmp_path, "CAlate", "call_status", {"status": "completed"})
    assert list(files_to_upload(folder)) == [TIMELINE]
    assert uploader.upload_now("CAlate") == 1
    stored = objects(s3_endpoint, url)[f"CAlate/{TIMELINE}"]
    assert stored == (folder / TIMELINE).read_bytes()
    assert b'"call_status"' in stored


async def test_startup_scan_uploads_what_an_earlier_process_left(
    s3_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_s3(monkeypatch, s3_endpoint)
    url = new_records_url(s3_endpoint)
    for sid in ("CAone", "CAtwo"):
        build_call(tmp_path, CallSpec(sid, THREE_TURNS))
    uploaded: list[int] = []
    uploader = RecordUploader(
        tmp_path, S3Records.from_url(url), on_uploaded=lambda: uploaded.append(1)
    )
    await uploader.scan()
    assert uploader.pending() == {"CAone", "CAtwo"}
    task = asyncio.create_task(uploader.run())
    try:
        await _until(lambda: not uploader.pending(), timeout_s=20)
    finally:
        await _stop(task)
    assert len(uploaded) == 2
    assert {key.split("/")[0] for key in objects(s3_endpoint, url)} == {"CAone", "CAtwo"}


async def test_a_store_that_is_away_loses_nothing_and_stalls_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = S3Server().start()
    try:
        use_s3(monkeypatch, server.endpoint)
        s3_client(server.endpoint).create_bucket(Bucket="records")
        server.stop()  # the store goes away, then a call finishes

        failures: list[int] = []
        uploader = RecordUploader(
            tmp_path / "calls",
            S3Records.from_url("s3://records/gw1"),
            retry_min_s=0.05,
            retry_max_s=0.3,
            on_failed=lambda: failures.append(1),
        )
        task = asyncio.create_task(uploader.run())
        folder = build_call(tmp_path / "calls", CallSpec("CAkept", THREE_TURNS)).path
        uploader.notify("CAkept")
        # The event loop keeps its pace while uploads fail (they run in a thread).
        worst_gap = await _worst_loop_gap(until=lambda: len(failures) >= 3, timeout_s=30)
        assert worst_gap < 0.25
        assert uploader.failing and uploader.pending() == {"CAkept"}
        assert set(files_to_upload(folder)) == EVERY_FILE  # all still here, none noted

        server.start()  # same data folder: the bucket is back
        try:
            await _until(lambda: not uploader.pending(), timeout_s=60)
        finally:
            await _stop(task)
        assert not uploader.failing
        assert files_to_upload(folder) == {}
        stored = objects(server.endpoint, "s3://records/gw1")
        assert stored == {f"CAkept/{name}": (folder / name).read_bytes() for name in EVERY_FILE}
        store = S3RecordStore(S3Records.from_url("s3://records/gw1"))
        try:
            assert store.ids() == ["CAkept"]
        finally:
            store.close()
    finally:
        server.stop()


async def _until(condition: object, timeout_s: float) -> None:
    assert callable(condition)
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def _worst_loop_gap(until: object, timeout_s: float) -> float:
    """The longest the event loop was away between 10 ms ticks, until `until()` holds."""
    assert callable(until)
    deadline = time.monotonic() + timeout_s
    worst, last = 0.0, time.monotonic()
    while not until():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)
        now = time.monotonic()
        worst, last = max(worst, now - last), now
    return worst


async def _stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
