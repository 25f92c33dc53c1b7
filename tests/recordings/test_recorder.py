import errno
import re
import threading
from pathlib import Path

import numpy as np
import pytest

from recordings.errors import InvalidCallId, RecordExists
from recordings.recorder import CallRecorder
from recordings.wavfile import read_pcm16
from recordings.writer import RecordWriter
from tests.recordings.helpers import header_sizes, read_json, timeline_lines, wait_until

META = {
    "stream_sid": "MZ1",
    "account_sid": "AC1",
    "from": "+15551234567",
    "to": "+15557654321",
    "agent": "cascade",
    "versions": {"offhook": "0.1.0"},
}
TRANSCRIPT = {
    "turns": [
        {
            "speaker": "caller",
            "text": "hi",
            "start_ms": 100.0,
            "end_ms": 400.0,
            "truncated": False,
            "intended": "hi",
            "latency": None,
        }
    ]
}


def tone(n: int, value: int) -> np.ndarray:
    return np.full(n, value, dtype=np.int16)


def test_close_leaves_all_five_files_with_bot_audio_on_the_caller_clock(tmp_path):
    recorder = CallRecorder(tmp_path, "CA1", meta=META)
    recorder.caller_audio(tone(8000, 100))
    recorder.bot_audio(2000, tone(800, 200))
    recorder.event(250.0, "caller_turn", text="hi")
    recorder.close(
        ended_with="hangup", transcript=TRANSCRIPT, meta_updates={"summary": {"turns": 1}}
    )

    folder = tmp_path / "CA1"
    names = {"meta.json", "timeline.jsonl", "caller.wav", "bot.wav", "transcript.json"}
    assert {p.name for p in folder.iterdir()} == names
    caller, _ = read_pcm16(folder / "caller.wav")
    bot, _ = read_pcm16(folder / "bot.wav")
    assert caller.size == bot.size == 8000
    np.testing.assert_array_equal(bot[:2000], 0)
    np.testing.assert_array_equal(bot[2000:2800], 200)
    np.testing.assert_array_equal(bot[2800:], 0)  # padded to the caller's length
    assert header_sizes(folder / "bot.wav") == (36 + 16000, 16000)
    assert read_json(folder / "transcript.json") == TRANSCRIPT
    assert timeline_lines(folder / "timeline.jsonl") == [
        {"t_ms": 250.0, "event": "caller_turn", "text": "hi"}
    ]


def test_meta_at_close_records_the_end_and_keeps_what_the_caller_gave(tmp_path):
    recorder = CallRecorder(tmp_path, "CA1", meta=META)
    recorder.close(
        ended_with="completed",
        transcript=TRANSCRIPT,
        meta_updates={"summary": {"turns": 1}, "fallbacks": ["llm"], "ended_at": "bogus"},
    )

    meta = read_json(tmp_path / "CA1" / "meta.json")
    assert meta["ended_with"] == "completed"
    assert meta["ended_at"] != "bogus"  # recorder-owned keys win over meta_updates
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", meta["ended_at"])
    assert isinstance(meta["duration_s"], float) and 0 <= meta["duration_s"] < 10
    assert meta["summary"] == {"turns": 1}
    assert meta["fallbacks"] == ["llm"]
    assert meta["from"] == "+15551234567"
    assert meta["versions"] == {"offhook": "0.1.0"}
    assert meta["recorder"] == {"dropped": 0, "errors": 0}


def test_meta_is_written_at_start_with_an_open_end(tmp_path):
    recorder = CallRecorder(tmp_path, "CA1", meta={"from": "+1555", "format": 99, "call_sid": "x"})
    meta = read_json(tmp_path / "CA1" / "meta.json")
    recorder.close(ended_with="hangup", transcript={"turns": []})

    assert meta["format"] == 1
    assert meta["call_sid"] == "CA1"
    assert meta["sample_rate"] == 8000
    assert meta["ended_at"] is None and meta["ended_with"] is None and meta["duration_s"] is None
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", meta["started_at"])
    assert meta["from"] == "+1555"
    assert meta["fallbacks"] == [] and meta["versions"] == {} and meta["error"] is None


def test_bot_pieces_land_at_their_start_and_an_overlapping_head_is_dropped(tmp_path):
    recorder = CallRecorder(tmp_path, "CA1", meta=META)
    recorder.bot_audio(0, tone(100, 1))
    recorder.bot_audio(50, np.arange(100, dtype=np.int16))  # first 50 samples already heard
    recorder.bot_audio(120, tone(30, 3))  # wholly inside what is written: nothing left
    recorder.bot_audio(400, tone(10, 4))
    recorder.close(ended_with="hangup", transcript={"turns": []})

    bot, _ = read_pcm16(tmp_path / "CA1" / "bot.wav")
    np.testing.assert_array_equal(bot[:100], 1)
    np.testing.assert_array_equal(bot[100:150], np.arange(50, 100))
    np.testing.assert_array_equal(bot[150:400], 0)
    np.testing.assert_array_equal(bot[400:410], 4)
    assert bot.size == 410  # longer than the (empty) caller audio: padding never cuts


def test_each_timeline_line_reaches_the_disk_as_it_is_written(tmp_path):
    # No periodic flush within the test: only the per-line flush can pass it.
    recorder = CallRecorder(tmp_path, "CA1", meta=META, flush_interval_s=60.0)
    recorder.event(
        12.5,
        "turn_timing",
        mouth_to_mouth_ms=np.float32(420.5),
        turn=np.int64(3),
        stt_ms=float("nan"),
        where=Path("/x"),
    )
    path = tmp_path / "CA1" / "timeline.jsonl"
    try:
        assert wait_until(lambda: len(timeline_lines(path)) == 1)
        assert timeline_lines(path) == [
            {
                "t_ms": 12.5,
                "event": "turn_timing",
                "mouth_to_mouth_ms": 420.5,
                "turn": 3,
                "stt_ms": None,
                "where": "/x",
            }
        ]
    finally:
        recorder.close(ended_with="hangup", transcript={"turns": []})


def test_caller_audio_reaches_the_disk_within_about_a_second(tmp_path):
    recorder = CallRecorder(tmp_path, "CA1", meta=META)
    recorder.caller_audio(tone(160, 5))  # one 20 ms frame: far below any buffer size
    path = tmp_path / "CA1" / "caller.wav"
    try:
        assert wait_until(lambda: read_pcm16(path)[0].size == 160, timeout_s=3.0)
    finally:
        recorder.close(ended_with="hangup", transcript={"turns": []})


def test_the_call_never_waits_for_a_stuck_writer_and_drops_are_counted(tmp_path, monkeypatch):
    entered, release = threading.Event(), threading.Event()
    write_line = RecordWriter.write_line

    def stuck_disk(self: RecordWriter, line: str) -> None:
        entered.set()
        release.wait(10)
        write_line(self, line)

    monkeypatch.setattr(RecordWriter, "write_line", stuck_disk)
    recorder = CallRecorder(tmp_path, "CA1", meta=META, queue_size=4)
    try:
        recorder.event(0.0, "first")
        assert entered.wait(2)  # the writer holds "first"; the queue is empty
        flood = threading.Thread(
            target=lambda: [recorder.event(float(i), "flood", i=i) for i in range(100)],
            daemon=True,
        )
        flood.start()
        flood.join(timeout=2)
        assert not flood.is_alive(), "event() waited for the disk"
        assert recorder.dropped == 96
    finally:
        release.set()
    recorder.close(ended_with="hangup", transcript={"turns": []})

    events = timeline_lines(tmp_path / "CA1" / "timeline.jsonl")
    assert [e.get("i") for e in events] == [None, 0, 1, 2, 3]
    assert read_json(tmp_path / "CA1" / "meta.json")["recorder"]["dropped"] == 96


def test_close_is_idempotent_and_the_record_is_then_left_alone(tmp_path):
    recorder = CallRecorder(tmp_path, "CA1", meta=META)
    recorder.caller_audio(tone(80, 1))
    assert not recorder.closed
    recorder.close(ended_with="hangup", transcript=TRANSCRIPT)
    assert recorder.closed  # finished, not merely asked to close: the writer is done
    folder = tmp_path / "CA1"
    before = {p.name: p.read_bytes() for p in folder.iterdir()}

    recorder.close(ended_with="error", transcript={"turns": []})
    recorder.event(1.0, "late")
    recorder.caller_audio(tone(80, 2))
    recorder.bot_audio(0, tone(80, 3))

    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


def test_a_full_disk_is_counted_and_logged_never_raised_into_the_call(
    tmp_path, monkeypatch, caplog
):
    def disk_full(self: RecordWriter, pcm16: np.ndarray) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(RecordWriter, "caller_audio", disk_full)
    recorder = CallRecorder(tmp_path, "CA1", meta=META)
    recorder.caller_audio(tone(160, 1))
    recorder.caller_audio(tone(160, 1))
    recorder.event(1.0, "still_recording")
    recorder.close(ended_with="hangup", transcript=TRANSCRIPT)

    assert recorder.errors == 2
    meta = read_json(tmp_path / "CA1" / "meta.json")
    assert meta["ended_with"] == "hangup"
    assert meta["recorder"]["errors"] == 2
    assert timeline_lines(tmp_path / "CA1" / "timeline.jsonl")[0]["event"] == "still_recording"
    assert "No space left on device" in caplog.text


def test_caller_buffers_are_copied_so_they_can_be_reused(tmp_path):
    recorder = CallRecorder(tmp_path, "CA1", meta=META)
    buffer = tone(160, 7)
    recorder.caller_audio(buffer)
    buffer[:] = -1
    recorder.close(ended_with="hangup", transcript={"turns": []})
    np.testing.assert_array_equal(read_pcm16(tmp_path / "CA1" / "caller.wav")[0], 7)


def test_a_record_is_never_overwritten(tmp_path):
    CallRecorder(tmp_path, "CA1", meta=META).close(ended_with="hangup", transcript=TRANSCRIPT)
    before = (tmp_path / "CA1" / "meta.json").read_bytes()
    with pytest.raises(RecordExists, match="CA1"):
        CallRecorder(tmp_path, "CA1", meta=META)
    assert (tmp_path / "CA1" / "meta.json").read_bytes() == before


@pytest.mark.parametrize("call_sid", ["../etc", "a/b", "", "x" * 65, "a b", "CA1\n", ".."])
def test_ids_that_could_leave_the_root_are_refused(tmp_path, call_sid):
    with pytest.raises(InvalidCallId):
        CallRecorder(tmp_path / "calls", call_sid, meta=META)
    assert not (tmp_path / "calls").exists()


def test_misuse_fails_loudly_at_the_call_site(tmp_path):
    recorder = CallRecorder(tmp_path, "CA1", meta=META)
    with pytest.raises(TypeError, match="int16"):
        recorder.caller_audio(np.zeros(160, dtype=np.float32))
    with pytest.raises(ValueError, match="start_sample"):
        recorder.bot_audio(-1, tone(10, 1))
    with pytest.raises(ValueError, match="reserved"):
        recorder.event(0.0, "x", event="y")
    with pytest.raises(ValueError):
        recorder.close(ended_with="exploded", transcript={"turns": []})
    with pytest.raises(ValueError, match="repair"):
        recorder.close(ended_with="crashed", transcript={"turns": []})
    recorder.close(ended_with="hangup", transcript={"turns": []})


def test_a_record_stops_growing_at_its_cap_and_its_meta_says_so(tmp_path):
    recorder = CallRecorder(tmp_path, "CA1", meta=META, max_bytes=40_000)
    for _ in range(10):  # 10 x 8000 bytes of caller audio offered, 40 kB allowed
        recorder.caller_audio(tone(4000, 100))
    recorder.event(1.0, "caller_turn", text="past the cap")
    recorder.close(ended_with="hangup", transcript=TRANSCRIPT)

    folder = tmp_path / "CA1"
    caller, _ = read_pcm16(folder / "caller.wav")
    # Caller audio counts twice: bot.wav is padded to its length at close.
    assert caller.size == 8_000  # two 16 kB chunks fit in 40 kB, a third does not
    audio_bytes = sum((folder / name).stat().st_size for name in ("caller.wav", "bot.wav"))
    assert audio_bytes <= 40_000 + 2 * 44
    assert timeline_lines(folder / "timeline.jsonl") == []
    assert read_json(folder / "meta.json")["truncated"] is True


def test_a_record_within_its_cap_is_not_truncated(tmp_path):
    recorder = CallRecorder(tmp_path, "CA1", meta=META, max_bytes=40_000)
    recorder.caller_audio(tone(4000, 100))
    recorder.close(ended_with="hangup", transcript=TRANSCRIPT)

    assert read_json(tmp_path / "CA1" / "meta.json")["truncated"] is False


def test_records_are_readable_by_their_owner_only(tmp_path):
    root = tmp_path / "calls"
    recorder = CallRecorder(root, "CA1", meta=META)
    recorder.caller_audio(tone(800, 1))
    recorder.close(ended_with="hangup", transcript=TRANSCRIPT)

    assert (root.stat().st_mode & 0o777) == 0o700
    assert ((root / "CA1").stat().st_mode & 0o777) == 0o700
    files = list((root / "CA1").iterdir())
    assert len(files) == 5
    assert {f.name: f.stat().st_mode & 0o777 for f in files} == {f.name: 0o600 for f in files}
