import asyncio
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from recordings.jsonio import write_json_atomic
from recordings.layout import format_time
from recordings.retention import retention_loop
from recordings.store import RecordStore, Removal


@dataclass(frozen=True)
class Policy:
    retention_days: float | None = 30.0
    max_storage_gb: float | None = 0.0  # 0 is how Settings says "no limit"


def old_record(root: Path, call_sid: str) -> None:
    (root / call_sid).mkdir(parents=True)
    started = datetime.now(UTC) - timedelta(days=60)
    write_json_atomic(root / call_sid / "meta.json", {"started_at": format_time(started)})


class WatchedStore(RecordStore):
    """A store that says when `cleanup` has run `times` times, succeeded or not."""

    def __init__(self, root: Path, *, times: int = 1, error: Exception | None = None) -> None:
        super().__init__(root)
        self.calls: list[dict[str, Any]] = []
        self.done = threading.Event()
        self._times = times
        self._error = error

    def cleanup(self, **limits: Any) -> list[Removal]:
        self.calls.append(limits)
        try:
            if self._error is not None:
                raise self._error
            return super().cleanup(**limits)
        finally:
            if len(self.calls) >= self._times:
                self.done.set()


async def test_the_loop_cleans_up_at_start_and_spares_active_calls(tmp_path):
    old_record(tmp_path, "CAold")
    old_record(tmp_path, "CAlive")
    store = WatchedStore(tmp_path)

    task = asyncio.create_task(retention_loop(store, Policy(), active=lambda: {"CAlive"}))
    try:
        assert await asyncio.to_thread(store.done.wait, 2.0)
        assert store.ids() == ["CAlive"]
    finally:
        task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_failing_cleanup_is_logged_and_retried_never_raised(tmp_path, caplog):
    store = WatchedStore(tmp_path, times=3, error=OSError("disk on fire"))

    task = asyncio.create_task(retention_loop(store, Policy(), active=set, interval_s=0.01))
    try:
        assert await asyncio.to_thread(store.done.wait, 2.0)
        assert not task.done()
    finally:
        task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert store.calls[0]["retention_days"] == 30.0
    assert store.calls[0]["max_storage_gb"] is None  # 0 from settings means no limit
    assert "disk on fire" in caplog.text
