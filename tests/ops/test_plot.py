"""The PNG timeline of a call."""

import struct
from pathlib import Path

import numpy as np
import pytest

from callevents import BargeIn, EndOfTurn, SpeechStart, SpeechStop
from ops.calls import main
from ops.plot import TimelineMarks, marks_from_record, plot_timeline, speech_spans, voiced_spans
from recordings.store import RecordStore
from tests.ops.records import THREE_TURNS, CallSpec, build_call, line

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from the IHDR chunk, which must come first."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    length, kind = struct.unpack(">I4s", data[8:16])
    assert (length, kind) == (13, b"IHDR")
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_plot_writes_a_legible_png_of_a_recorded_call(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    build_call(tmp_path / "calls", CallSpec("CAplot", THREE_TURNS))
    target = tmp_path / "out" / "call.png"

    assert main(["--data-dir", str(tmp_path), "plot", "CAplot", "--out", str(target)]) == 0

    width, height = png_size(target)
    assert width >= 1200 and height >= 600
    assert str(target) in capsys.readouterr().out


def test_plot_of_a_call_without_audio_still_draws(tmp_path: Path) -> None:
    empty = np.zeros(0, dtype=np.int16)
    target = tmp_path / "empty.png"

    plot_timeline(empty, empty, TimelineMarks(), target, width_px=1200, height_px=600)

    assert png_size(target) == (1200, 600)


def test_voiced_spans_find_bot_audio_and_bridge_short_pauses() -> None:
    audio = np.zeros(8000 * 3, dtype=np.int16)
    audio[800:4000] = 8000  # 100-500 ms
    audio[5600:8000] = 8000  # 700-1000 ms: 200 ms after the first, one utterance
    audio[16000:17600] = 8000  # 2000-2200 ms
    audio[20000:20080] = 20  # 10 ms far below -45 dBFS: silence

    assert voiced_spans(audio) == [(100.0, 1000.0), (2000.0, 2200.0)]


def test_speech_spans_pair_vad_events_and_close_an_open_one_at_the_end() -> None:
    timeline = [
        line(100.0, SpeechStart(sample=1600)),
        line(900.0, SpeechStop(sample=14400)),
        line(950.0, SpeechStop(sample=15200)),  # a stray stop opens nothing
        {"t_ms": None, "event": "vad_start"},  # a damaged line: no time, no span
        line(2000.0, SpeechStart(sample=32000)),
    ]

    assert speech_spans(timeline, end_ms=2500.0) == [(100.0, 900.0), (2000.0, 2500.0)]


def test_marks_of_a_recorded_call_come_from_its_typed_events(tmp_path: Path) -> None:
    build_call(tmp_path, CallSpec("CAmarks", THREE_TURNS))
    record = RecordStore(tmp_path).open("CAmarks")

    marks = marks_from_record(list(record.timeline()), record.transcript(), end_ms=12_500.0)

    # Each exchange: speech from its start to vad_stop (60 ms after the last sound), the
    # turn judged 240 ms later; the second reply is interrupted 600 ms into the third.
    assert marks.caller_speech == [(2200.0, 3460.0), (6000.0, 7060.0), (8700.0, 9960.0)]
    assert marks.end_of_turn == [3700.0, 7300.0, 10200.0]
    assert marks.barge_ins == [9300.0]
    assert [m2m for _, _, m2m in marks.latencies] == [500.0, 500.0, 500.0]


def test_marks_ignore_events_they_do_not_draw() -> None:
    timeline = [
        line(100.0, EndOfTurn(probability=0.9, silence_ms=240)),
        {"t_ms": 200.0, "event": "teleport"},  # unknown to this version
        {"t_ms": 300.0, "event": "barge_in", "heard": 7},  # a field of the wrong type
        line(400.0, BargeIn(turn_id=2, heard="Sure", truncated=True)),
    ]

    marks = marks_from_record(timeline, {"turns": []}, end_ms=500.0)

    assert marks.end_of_turn == [100.0]
    assert marks.barge_ins == [300.0, 400.0]
    assert marks.caller_speech == []
