"""The server with RECORDS_URL: records a crash left are repaired and uploaded at start,
a record that closes is uploaded, and /metrics counts it; a bad RECORDS_URL stops
`offhook serve` before it starts."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import pytest

from app.record_keeping import look_after_records
from app.services import Services
from app.settings import SettingsError
from recordings.recorder import CallRecorder
from tests.conftest import test_settings as settings_for
from tests.ops.records import THREE_TURNS, CallSpec, build_call
from tests.recordings.s3_bucket import new_records_url, objects, use_s3


async def test_the_server_uploads_records_and_counts_them(
    s3_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_s3(monkeypatch, s3_endpoint)
    url = new_records_url(s3_endpoint)
    settings = settings_for(data_dir=str(tmp_path), records_url=url)
    # Left by an earlier process: one finished, one cut off by a crash (never closed).
    build_call(settings.calls_dir, CallSpec("CAbefore", THREE_TURNS))
    crashed = CallRecorder(settings.calls_dir, "CAcrashed", meta={})
    crashed.event(10.0, "speech_start")
    assert crashed.flush()
    services = Services(settings)
    try:
        assert services.uploader is not None
        keeper = asyncio.create_task(look_after_records(services))
        try:
            await _until(lambda: {"CAbefore", "CAcrashed"} <= _calls(s3_endpoint, url))
            build_call(settings.calls_dir, CallSpec("CAnow", THREE_TURNS))
            services.record_closed("CAnow")
            await _until(lambda: "CAnow" in _calls(s3_endpoint, url))
            await _until(lambda: not services.uploader.pending())  # type: ignore[union-attr]
        finally:
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper
        metrics = services.metrics.render().decode()
        assert 'offhook_record_uploads_total{outcome="uploaded"} 3.0' in metrics
        assert "offhook_records_pending_upload 0.0" in metrics
        stored_meta = objects(s3_endpoint, url)["CAcrashed/meta.json"]
        assert b'"crashed"' in stored_meta  # repaired first, then uploaded
    finally:
        await services.scheduler.aclose()


def test_without_records_url_nothing_is_uploaded(tmp_path: Path) -> None:
    assert Services(settings_for(data_dir=str(tmp_path))).uploader is None


def test_a_malformed_records_url_stops_the_server(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="RECORDS_URL"):
        settings_for(records_url="https://bucket.example.com/calls").check()


def _calls(endpoint: str, url: str) -> set[str]:
    return {key.split("/")[0] for key in objects(endpoint, url) if key.endswith("/meta.json")}


async def _until(condition: object, timeout_s: float = 20.0) -> None:
    assert callable(condition)
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.1)
