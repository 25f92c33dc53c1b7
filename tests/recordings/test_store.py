from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from callevents import BargeIn, BotTurn, CallerTurn, Error, TurnTiming
from recordings.errors import CorruptRecord, InvalidCallId, RecordError, RecordNotFound
from recordings.jsonio import dumps_line, write_json_atomic
from recordings.layout import format_time
from recordings.recorder import CallRecorder
from recordings.store import RecordStore, Removal

NOW = datetime(2024, 6, 1, 12, 0, tzinfo=UTC)
MB = 1_000_000


def fake_record(
    root: Path, call_sid: str, *, age_days: float = 0.0, size: int = 0, **meta: Any
) -> Path:
    """A finished record started `age_days` before NOW, with `size` bytes of audio."""
    folder = root / call_sid
    folder.mkdir(parents=True)
    started = NOW - timedelta(days=age_days)
    write_json_atomic(
        folder / "meta.json",
        {
            "format": 1,
            "call_sid": call_sid,
            "started_at": format_time(started),
            "ended_at": format_time(started + timedelta(seconds=30)),
            "duration_s": 30.0,
            "ended_with": "hangup",
            **meta,
        },
    )
    (folder / "caller.wav").write_bytes(b"\0" * size)
    return folder


def folder_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.iterdir())


# --- opening -----------------------------------------------------------------------------


@pytest.mark.parametrize("call_sid", ["../etc", "a/b", "", "x" * 65, "/abs", "CA1\n"])
def test_open_refuses_ids_that_could_leave_the_root(tmp_path, call_sid):
    with pytest.raises(InvalidCallId, match="invalid call id"):
        RecordStore(tmp_path).open(call_sid)


def test_a_missing_record_names_the_call_and_the_root(tmp_path):
    with pytest.raises(RecordNotFound) as caught:
        RecordStore(tmp_path).open("CA404")
    assert str(caught.value) == f"no record for call CA404 under {tmp_path}"


def test_corrupt_meta_names_the_file_and_the_json_error(tmp_path):
    folder = tmp_path / "CA1"
    folder.mkdir()
    (folder / "meta.json").write_text('{"format": 1,', encoding="utf-8")
    with pytest.raises(CorruptRecord) as caught:
        RecordStore(tmp_path).open("CA1")
    assert caught.value.path == folder / "meta.json"
    assert str(caught.value).startswith(f"{folder / 'meta.json'}: invalid JSON: Expecting")


def test_every_error_is_a_record_error():
    for error in (InvalidCallId, RecordNotFound, CorruptRecord):
        assert issubclass(error, RecordError)


def test_ids_are_the_folders_holding_a_meta_json(tmp_path):
    fake_record(tmp_path, "CA2")
    fake_record(tmp_path, "CA1")
    (tmp_path / "CA3").mkdir()  # died before writing meta.json
    (tmp_path / "not an id").mkdir()
    (tmp_path / "stray.txt").write_text("x")
    assert RecordStore(tmp_path).ids() == ["CA1", "CA2"]
    assert RecordStore(tmp_path / "nowhere").ids() == []


def test_a_torn_last_timeline_line_is_skipped(tmp_path):
    folder = fake_record(tmp_path, "CA1")
    (folder / "timeline.jsonl").write_text('{"t_ms": 1, "event": "a"}\n{"t_ms": 2, "ev', "utf-8")
    events = list(RecordStore(tmp_path).open("CA1").timeline())
    assert events == [{"t_ms": 1, "event": "a"}]


def test_a_bad_line_before_the_last_is_corruption(tmp_path):
    folder = fake_record(tmp_path, "CA1")
    (folder / "timeline.jsonl").write_text('{"t_ms": 1, "ev\n{"t_ms": 2, "event": "b"}\n', "utf-8")
    with pytest.raises(CorruptRecord, match=r"timeline\.jsonl: line 1"):
        list(RecordStore(tmp_path).open("CA1").timeline())


def test_a_record_without_transcript_or_audio_reads_as_empty(tmp_path):
    folder = fake_record(tmp_path, "CA1")
    (folder / "caller.wav").unlink()
    record = RecordStore(tmp_path).open("CA1")
    assert record.transcript() == {"turns": []}
    assert list(record.timeline()) == []
    assert record.caller_audio().dtype == np.int16
    assert record.caller_audio().size == record.bot_audio().size == 0


def test_a_recorded_call_reads_back_through_the_store(tmp_path):
    recorder = CallRecorder(tmp_path, "CA1", meta={"from": "+15551234567"})
    recorder.caller_audio(np.full(800, 3, dtype=np.int16))
    recorder.bot_audio(100, np.full(100, 4, dtype=np.int16))
    recorder.event(5.0, "hello", n=1)
    recorder.close(ended_with="completed", transcript={"turns": [{"speaker": "bot"}]})

    record = RecordStore(tmp_path).open("CA1")
    assert record.meta["from"] == "+15551234567"
    assert list(record.timeline()) == [{"t_ms": 5.0, "event": "hello", "n": 1}]
    assert record.transcript() == {"turns": [{"speaker": "bot"}]}
    np.testing.assert_array_equal(record.caller_audio(), 3)
    assert record.bot_audio().size == 800


# --- summaries ---------------------------------------------------------------------------


def test_summaries_take_numbers_from_meta_when_the_call_wrote_them(tmp_path):
    summary = {"turns": 6, "barge_ins": 2, "errors": 1, "mouth_to_mouth_ms": {"p50": 610.0}}
    folder = fake_record(
        tmp_path, "CA1", size=100, summary=summary, fallbacks=["llm"], agent="cascade", to="+1"
    )
    (folder / "timeline.jsonl").write_text(dumps_line({"t_ms": 1, "event": BargeIn.name}), "utf-8")

    [line] = RecordStore(tmp_path).summaries()
    assert (line.call_sid, line.turns, line.barge_ins, line.errors) == ("CA1", 6, 2, 1)
    assert line.mouth_to_mouth_p50_ms == 610.0
    assert line.started_at == NOW
    assert (line.duration_s, line.ended_with, line.agent, line.to) == (
        30.0,
        "hangup",
        "cascade",
        "+1",
    )
    assert line.fallbacks == ("llm",)
    assert line.size_bytes == folder_size(folder)


def test_summaries_fall_back_to_the_timeline(tmp_path):
    folder = fake_record(tmp_path, "CA1")
    events = [
        CallerTurn(text="a"),
        TurnTiming(mouth_to_mouth_ms=500),
        BotTurn(turn_id=2, text="b"),
        TurnTiming(mouth_to_mouth_ms=700),
        TurnTiming(mouth_to_mouth_ms=900),
        TurnTiming(),  # a turn with no mouth-to-mouth figure: not a latency
        BargeIn(turn_id=2, heard="b"),
        Error(stage="llm", error="llm timeout"),
    ]
    lines = [{"t_ms": t, "event": e.name, **e.data()} for t, e in enumerate(events, start=1)]
    # What earlier versions wrote for a failed stage: still an error.
    lines.append({"t_ms": 9, "event": "backend_error", "stage": "tts", "error": "down"})
    (folder / "timeline.jsonl").write_text("".join(map(dumps_line, lines)), "utf-8")

    [line] = RecordStore(tmp_path).summaries()
    assert (line.turns, line.barge_ins, line.errors) == (2, 1, 2)
    assert line.mouth_to_mouth_p50_ms == 700.0


def test_one_corrupt_record_is_reported_not_raised(tmp_path):
    fake_record(tmp_path, "CA2", age_days=1)
    fake_record(tmp_path, "CA3", age_days=2)
    broken = tmp_path / "CA1"
    broken.mkdir()
    (broken / "meta.json").write_text("[1, 2", encoding="utf-8")

    problems: list[RecordError] = []
    lines = RecordStore(tmp_path).summaries(problems=problems)
    assert [line.call_sid for line in lines] == ["CA3", "CA2"]  # oldest first
    assert len(problems) == 1
    assert isinstance(problems[0], CorruptRecord)
    assert problems[0].path == broken / "meta.json"


# --- cleanup -----------------------------------------------------------------------------


def test_cleanup_by_age_removes_records_started_before_the_cutoff(tmp_path):
    fake_record(tmp_path, "CAold", age_days=31, size=10)
    fake_record(tmp_path, "CAnew", age_days=29, size=10)
    store = RecordStore(tmp_path)
    old_bytes = folder_size(tmp_path / "CAold")

    removed = store.cleanup(retention_days=30, max_storage_gb=None, now=NOW)
    assert removed == [Removal("CAold", "age", old_bytes)]
    assert store.ids() == ["CAnew"]


def test_a_dry_run_returns_the_plan_and_removes_nothing(tmp_path):
    fake_record(tmp_path, "CAold", age_days=31)
    store = RecordStore(tmp_path)
    plan = store.cleanup(retention_days=30, max_storage_gb=None, now=NOW, dry_run=True)
    assert [(r.call_sid, r.reason) for r in plan] == [("CAold", "age")]
    assert store.ids() == ["CAold"]


def test_cleanup_by_size_removes_the_oldest_until_the_store_fits(tmp_path):
    for age, call_sid in enumerate(["CA1", "CA2", "CA3", "CA4"]):
        fake_record(tmp_path, call_sid, age_days=10 - age, size=MB)  # CA1 is the oldest
    store = RecordStore(tmp_path)
    assert store.size_bytes() > 4 * MB

    plan = store.cleanup(retention_days=None, max_storage_gb=0.0025, now=NOW, dry_run=True)
    assert [(r.call_sid, r.reason) for r in plan] == [("CA1", "size"), ("CA2", "size")]
    removed = store.cleanup(retention_days=None, max_storage_gb=0.0025, now=NOW)
    assert removed == plan
    assert store.ids() == ["CA3", "CA4"]
    assert store.size_bytes() <= 2.5 * MB


def test_age_removals_count_towards_the_size_limit(tmp_path):
    fake_record(tmp_path, "CAold", age_days=40, size=2 * MB)
    fake_record(tmp_path, "CA2", age_days=2, size=MB)
    fake_record(tmp_path, "CA1", age_days=1, size=MB)
    plan = RecordStore(tmp_path).cleanup(
        retention_days=30, max_storage_gb=0.0025, now=NOW, dry_run=True
    )
    assert [(r.call_sid, r.reason) for r in plan] == [("CAold", "age")]


def test_active_calls_are_never_removed(tmp_path):
    fake_record(tmp_path, "CAlive", age_days=100, size=3 * MB)
    fake_record(tmp_path, "CAdone", age_days=1, size=MB)
    store = RecordStore(tmp_path)

    removed = store.cleanup(retention_days=30, max_storage_gb=0.001, now=NOW, active={"CAlive"})
    assert [(r.call_sid, r.reason) for r in removed] == [("CAdone", "size")]
    assert store.ids() == ["CAlive"]


def test_a_folder_that_never_got_its_meta_is_aged_by_its_mtime(tmp_path):
    (tmp_path / "CAhalf").mkdir()
    removed = RecordStore(tmp_path).cleanup(
        retention_days=1, max_storage_gb=None, now=datetime.now(UTC) + timedelta(days=2)
    )
    assert [r.call_sid for r in removed] == ["CAhalf"]
    assert not (tmp_path / "CAhalf").exists()


@pytest.mark.parametrize(("days", "gb"), [(0, None), (-1, None), (None, 0), (None, -5.0)])
def test_a_limit_of_zero_or_less_is_refused_rather_than_wiping_the_store(tmp_path, days, gb):
    fake_record(tmp_path, "CA1")
    with pytest.raises(ValueError, match="> 0"):
        RecordStore(tmp_path).cleanup(retention_days=days, max_storage_gb=gb, now=NOW)
    assert RecordStore(tmp_path).ids() == ["CA1"]
