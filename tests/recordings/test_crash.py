"""A process killed mid-call: what it wrote stays readable and is repaired next start."""

import os
import subprocess
import sys
import textwrap
import wave
from datetime import timedelta
from pathlib import Path

import numpy as np

from recordings.layout import parse_time
from recordings.store import RecordStore
from recordings.wavfile import PLACEHOLDER, read_pcm16
from tests.recordings.helpers import header_sizes

REPO = Path(__file__).resolve().parents[2]

CALL = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    import numpy as np
    from callevents import BargeIn, BotTurn, CallerTurn, Error, TurnTiming
    from recordings import CallRecorder

    recorder = CallRecorder(
        Path(sys.argv[1]), "CAcrash", meta={"from": "+15551234567", "agent": "cascade"}
    )

    def emit(t_ms, event):
        recorder.event(t_ms, event.name, **event.data())

    recorder.caller_audio(np.full(12001, 1000, dtype=np.int16))
    recorder.bot_audio(4000, np.full(2000, -500, dtype=np.int16))
    emit(500.0, CallerTurn(text="hello there", start_ms=100.0, end_ms=500.0))
    emit(900.0, BotTurn(
        turn_id=2, text="Hi! How can I", intended="Hi! How can I help?",
        truncated=True, start_ms=550.0, end_ms=800.0,
    ))
    emit(900.0, TurnTiming(mouth_to_mouth_ms=420.0))
    emit(1400.0, BargeIn(turn_id=2, heard="Hi! How can I", truncated=True))
    emit(1450.0, Error(stage="llm", error="timed out"))
    # A line as versions before typed events wrote a failed stage.
    recorder.event(1460.0, "backend_error", stage="tts", error="down")
    assert recorder.flush(5.0)
    os._exit(1)  # no close(), no atexit, no finally: as if the process was killed
    """
)


def crash_mid_call(root: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", CALL, str(root)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr


def test_a_killed_call_is_readable_before_any_repair(tmp_path):
    crash_mid_call(tmp_path)
    folder = tmp_path / "CAcrash"

    assert header_sizes(folder / "caller.wav") == (PLACEHOLDER, PLACEHOLDER)
    caller, rate = read_pcm16(folder / "caller.wav")
    assert rate == 8000
    assert caller.size == 12001
    record = RecordStore(tmp_path).open("CAcrash")
    assert record.meta["ended_at"] is None
    assert [e["event"] for e in record.timeline()] == [
        "caller_turn",
        "bot_turn",
        "turn_timing",
        "barge_in",
        "error",
        "backend_error",
    ]
    bot = record.bot_audio()
    assert bot.size == 12001
    np.testing.assert_array_equal(bot[4000:6000], -500)


def test_repair_closes_a_killed_call_as_crashed(tmp_path):
    crash_mid_call(tmp_path)
    store = RecordStore(tmp_path)

    assert store.repair() == ["CAcrash"]
    assert store.repair() == []  # nothing left to do

    record = store.open("CAcrash")
    meta = record.meta
    assert meta["ended_with"] == "crashed"
    # Ends at its last sign of life: 12001 samples of caller audio outlast the last event.
    assert meta["duration_s"] == 1.5
    ended_at = parse_time(meta["ended_at"]) - parse_time(meta["started_at"])
    assert abs(ended_at - timedelta(seconds=1.5)) <= timedelta(milliseconds=1)
    for name in ("caller.wav", "bot.wav"):
        with wave.open(str(record.path / name), "rb") as f:
            assert f.getnframes() == (12001 if name == "caller.wav" else 6000)
    turns = record.transcript()["turns"]
    assert [(t["speaker"], t["text"]) for t in turns] == [
        ("caller", "hello there"),
        ("bot", "Hi! How can I"),
    ]
    assert turns[1]["truncated"] is True
    assert turns[1]["intended"] == "Hi! How can I help?"
    summary = store.summaries()[0]
    # Both errors count, whatever name their line has (repaired records once said 0).
    assert (summary.ended_with, summary.turns, summary.barge_ins, summary.errors) == (
        "crashed",
        2,
        1,
        2,
    )
    assert summary.mouth_to_mouth_p50_ms == 420.0


def test_repair_leaves_calls_in_progress_alone(tmp_path):
    crash_mid_call(tmp_path)
    before = {p.name: p.read_bytes() for p in (tmp_path / "CAcrash").iterdir()}

    assert RecordStore(tmp_path).repair(active={"CAcrash"}) == []
    assert {p.name: p.read_bytes() for p in (tmp_path / "CAcrash").iterdir()} == before
