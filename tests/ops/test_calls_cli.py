"""`offhook calls` on records built with the real CallRecorder (tests/ops/records.py)."""

import json
import re
import wave
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from callevents import (
    BargeIn,
    CallEvent,
    Clear,
    EchoIgnored,
    Error,
    Fallback,
    Hold,
    PatienceRaised,
    ReplyCancelled,
    Reprompt,
    Resume,
    TurnCapped,
)
from ops.calls import incidents, main, parse_since
from recordings.jsonio import dumps_line
from recordings.store import RecordStore
from tests.ops.records import THREE_TURNS, CallSpec, Exchange, build_call, line

NOW = datetime.now(UTC)


def _one(latency_ms: float) -> tuple[Exchange, ...]:
    return (Exchange("Is anyone there?", 2200.0, 800.0, "Yes, I am here.", latency_ms),)


# Four calls whose start, latency and duration orders all differ:
#   start (newest first): CAlong, CAerror, CAslow, CAold
#   latency (slowest):    CAslow 1500, CAerror 700, CAlong 500, CAold 300
#   duration (longest):   CAslow ~37 s, CAlong 12.5 s, CAerror ~7.6 s, CAold ~4.6 s
SPECS = (
    CallSpec("CAold", _one(300.0), NOW - timedelta(days=40), "+15551234567", tail_ms=1000.0),
    CallSpec(
        "CAslow", _one(1500.0), NOW - timedelta(days=3), "+15559876543", "+15550199000",
        agent="realtime", tail_ms=30000.0,
    ),
    CallSpec(
        "CAerror", _one(700.0), NOW - timedelta(days=1), "+447700900123", "+15550199000",
        fallbacks=("realtime",), ended_with="error", error="the LLM backend is down",
        backend_errors=1, tail_ms=3000.0,
    ),
    CallSpec("CAlong", THREE_TURNS, NOW - timedelta(hours=2), "+15551234567"),
)  # fmt: skip


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    for spec in SPECS:
        build_call(tmp_path / "calls", spec)
    return tmp_path


def calls(data_dir: Path, *argv: str) -> int:
    return main(["--data-dir", str(data_dir), *argv])


def listed(out: str) -> list[str]:
    """Call ids in the order the table shows them."""
    return re.findall(r"^│ (CA\w+)", out, re.MULTILINE)


# --- list -------------------------------------------------------------------------------


def test_list_shows_every_call_newest_first_with_its_numbers(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert calls(data_dir, "list") == 0

    out = capsys.readouterr().out
    assert listed(out) == ["CAlong", "CAerror", "CAslow", "CAold"]
    row = next(line for line in out.splitlines() if line.startswith("│ CAlong"))
    cells = [cell.strip() for cell in row.strip("│").split("│")]
    started = (NOW - timedelta(hours=2)).strftime("%Y-%m-%d %H:%M")
    assert cells[1].startswith(started)
    assert cells[2:] == ["0:12", "+1***4567", "cascade", "7", "1", "500", "hangup"]
    error_row = next(line for line in out.splitlines() if line.startswith("│ CAerror"))
    assert "cascade (+realtime)" in error_row
    assert "error (1 errors)" in error_row


def test_list_since_an_age(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert calls(data_dir, "list", "--since", "7d") == 0

    assert listed(capsys.readouterr().out) == ["CAlong", "CAerror", "CAslow"]


def test_list_since_an_iso_date(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    day = (NOW - timedelta(days=2)).date().isoformat()

    assert calls(data_dir, "list", "--since", day) == 0

    assert listed(capsys.readouterr().out) == ["CAlong", "CAerror"]


def test_list_from_part_of_the_masked_number(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert calls(data_dir, "list", "--from", "+1***") == 0

    assert listed(capsys.readouterr().out) == ["CAlong", "CAslow", "CAold"]


def test_list_from_a_full_number_matches_its_masked_form(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert calls(data_dir, "list", "--from", "+15551234567") == 0

    assert listed(capsys.readouterr().out) == ["CAlong", "CAold"]


def test_list_by_agent_includes_fallbacks(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert calls(data_dir, "list", "--agent", "realtime") == 0

    assert listed(capsys.readouterr().out) == ["CAerror", "CAslow"]


def test_list_errors_only(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert calls(data_dir, "list", "--errors") == 0

    assert listed(capsys.readouterr().out) == ["CAerror"]


def test_list_sorted_by_latency_slowest_first(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert calls(data_dir, "list", "--sort", "latency") == 0

    assert listed(capsys.readouterr().out) == ["CAslow", "CAerror", "CAlong", "CAold"]


def test_list_sorted_by_duration_longest_first(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert calls(data_dir, "list", "--sort", "duration") == 0

    assert listed(capsys.readouterr().out) == ["CAslow", "CAlong", "CAerror", "CAold"]


def test_list_limit(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert calls(data_dir, "list", "--sort", "latency", "--limit", "2") == 0

    out = capsys.readouterr().out
    assert listed(out) == ["CAslow", "CAerror"]
    assert "2 of 4 calls" in out


def test_list_skips_a_corrupt_record_and_says_so(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (data_dir / "calls" / "CAold" / "meta.json").write_text("{not json", encoding="utf-8")

    assert calls(data_dir, "list") == 0

    captured = capsys.readouterr()
    assert listed(captured.out) == ["CAlong", "CAerror", "CAslow"]
    assert "skipped an unreadable record" in captured.err
    assert "CAold/meta.json" in captured.err


def test_list_of_an_empty_data_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert calls(tmp_path, "list") == 0

    assert "no calls under" in capsys.readouterr().out


def test_a_since_that_is_neither_a_date_nor_an_age_is_a_usage_error(data_dir: Path) -> None:
    with pytest.raises(SystemExit) as exit_info:
        calls(data_dir, "list", "--since", "yesterday")

    assert exit_info.value.code == 2


def test_parse_since_ages_and_dates() -> None:
    now = datetime(2024, 5, 10, 12, 0, tzinfo=UTC)

    assert parse_since("12h", now) == datetime(2024, 5, 10, 0, 0, tzinfo=UTC)
    assert parse_since("2w", now) == datetime(2024, 4, 26, 12, 0, tzinfo=UTC)
    assert parse_since("2024-05-01", now) == datetime(2024, 5, 1, tzinfo=UTC)
    assert parse_since("2024-05-01T08:00:00+02:00", now) == datetime(2024, 5, 1, 6, tzinfo=UTC)


# --- show -------------------------------------------------------------------------------


def test_show_lists_each_turn_with_its_latencies(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert calls(data_dir, "show", "CAlong") == 0

    out = capsys.readouterr().out
    assert "call CAlong" in out
    assert "+1***4567" in out
    row = next(line for line in out.splitlines() if "We open at nine." in line)
    # end of turn, STT, LLM first token, TTS first audio, mouth to mouth
    assert re.findall(r"\d+", row.split("We open at nine.")[1]) == [
        "240",
        "85",
        "120",
        "175",
        "500",
    ]
    caller_row = next(line for line in out.splitlines() if "What time do you open" in line)
    assert [cell.strip() for cell in caller_row.split("│")[5:10]] == ["-"] * 5
    assert "On Sunday we open at ten and close [cut off]" in out
    assert "meant: On Sunday we open at ten and close at four" in out
    barge = next(line for line in out.splitlines() if "barge_in" in line)
    assert "00:09.300" in barge and "On Sunday we open at ten and close" in barge


def _append(data_dir: Path, call_sid: str, *events: tuple[float, CallEvent]) -> None:
    """Events a record's timeline gets after the fact, as the recorder writes them."""
    path = data_dir / "calls" / call_sid / "timeline.jsonl"
    with path.open("a", encoding="utf-8") as f:
        f.writelines(dumps_line(line(t_ms, event)) for t_ms, event in events)


def _rows(out: str, name: str) -> list[str]:
    """The incident table's rows for events called `name`."""
    pattern = re.compile(rf"│ \d\d:\d\d\.\d{{3}} │ {name} +│")
    return [row for row in out.splitlines() if pattern.match(row)]


def test_show_lists_backend_errors(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert calls(data_dir, "show", "CAerror") == 0

    out = capsys.readouterr().out
    assert "the LLM backend is down" in out
    [row] = _rows(out, "error")
    assert "llm: llm timed out after 8 s" in row


def test_show_lists_an_old_records_backend_error_as_an_error(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = data_dir / "calls" / "CAold" / "timeline.jsonl"
    with path.open("a", encoding="utf-8") as f:  # as versions before typed events wrote it
        f.write('{"t_ms": 4100.0, "event": "backend_error", "stage": "tts", "error": "down"}\n')

    assert calls(data_dir, "show", "CAold") == 0

    out = capsys.readouterr().out
    [row] = _rows(out, "error")
    assert "00:04.100" in row and "tts: down" in row
    assert "backend_error" not in out


def test_show_lists_what_went_wrong_or_was_cut_short(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _append(
        data_dir,
        "CAold",
        (4000.0, Reprompt(reason="unclear", speech_ms=900)),
        (4100.0, TurnCapped(speech_ms=15000)),
        (4200.0, Fallback(source="duplex", target="cascade", reason="worker lost")),
        (4300.0, Hold(turn_id=4, heard="Sure, I")),  # the call ended while it held
        (4400.0, PatienceRaised(pause_ms=1236, wait_ms=1486)),
    )

    assert calls(data_dir, "show", "CAold") == 0

    out = capsys.readouterr().out
    [reprompt] = _rows(out, "reprompt")
    assert "00:04.000" in reprompt
    assert "caller not made out (unclear) after 900 ms of speech; asked to repeat" in reprompt
    [capped] = _rows(out, "turn_capped")
    assert "caller turn judged without a pause at its 15000 ms cap" in capped
    [fallback] = _rows(out, "fallback")
    assert '{"from": "duplex", "reason": "worker lost", "to": "cascade"}' in fallback
    [hold] = _rows(out, "hold")
    assert "bot held turn 4 for the caller and never resumed; heard: 'Sure, I'" in hold
    [patience] = _rows(out, "patience_raised")
    assert "bot answered into a 1236 ms pause; statements now wait 1486 ms" in patience


def test_show_says_why_a_barge_in_stopped_the_bot(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stopped = BargeIn(turn_id=5, heard="", truncated=True, reason="short_interruption")
    _append(data_dir, "CAold", (4500.0, stopped))

    assert calls(data_dir, "show", "CAold") == 0

    rows = [row for row in _rows(capsys.readouterr().out, "barge_in") if "turn 5" in row]
    assert rows and "caller interrupted bot turn 5 (short_interruption)" in rows[0]


def test_show_leaves_out_holds_that_resumed_and_everyday_turn_taking(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _append(
        data_dir,
        "CAold",
        (4000.0, Hold(turn_id=2, heard="Yes")),
        (4400.0, Resume(held_ms=400, reason="backchannel")),
        (4500.0, EchoIgnored(speech_ms=300)),
        (4600.0, ReplyCancelled(reason="caller went on")),
    )

    assert calls(data_dir, "show", "CAold") == 0

    assert "no barge-ins or errors" in capsys.readouterr().out


def test_incidents_hold_only_while_nothing_resolved_it() -> None:
    timeline = [
        line(100.0, Hold(turn_id=1)),
        line(300.0, Resume(held_ms=200)),  # went on: no incident
        line(500.0, Hold(turn_id=2)),
        line(900.0, BargeIn(turn_id=2, heard="Sure")),  # listed as the barge-in
        line(900.0, Clear(reason="barge_in")),
        line(1500.0, Hold(turn_id=3)),  # never resolved before the next hold
        line(2000.0, Hold(turn_id=5)),
        line(2300.0, Resume(held_ms=300)),
        line(2600.0, Error(stage="tts", error="down")),
        line(3000.0, Hold(turn_id=7)),  # the call ended while it held
    ]

    assert incidents(timeline) == [
        (900.0, BargeIn(turn_id=2, heard="Sure")),
        (900.0, Clear(reason="barge_in")),
        (1500.0, Hold(turn_id=3)),
        (2600.0, Error(stage="tts", error="down")),
        (3000.0, Hold(turn_id=7)),
    ]


# --- export -----------------------------------------------------------------------------


def test_export_writes_a_stereo_wav_caller_left_bot_right_and_the_transcript(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_dir = tmp_path / "export"

    assert calls(data_dir, "export", "CAlong", "--out", str(out_dir)) == 0

    record = RecordStore(data_dir / "calls").open("CAlong")
    with wave.open(str(out_dir / "CAlong.wav"), "rb") as f:
        assert (f.getnchannels(), f.getsampwidth(), f.getframerate()) == (2, 2, 8000)
        frames = np.frombuffer(f.readframes(f.getnframes()), dtype="<i2").reshape(-1, 2)
    caller, bot = record.caller_audio(), record.bot_audio()
    assert np.abs(bot).max() > 1000  # there is bot audio to compare
    np.testing.assert_array_equal(frames[:, 0], caller)
    np.testing.assert_array_equal(frames[:, 1], bot)
    lines = (out_dir / "CAlong.txt").read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("# call CAlong")
    assert lines[1:4] == [
        "[00:00.300 - 00:01.500] bot: Hello! Thanks for calling. How can I help you today?",
        "[00:02.000 - 00:03.460] caller: What time do you open tomorrow?",
        "[00:03.960 - 00:05.160] bot: We open at nine. (500 ms mouth to mouth)",
    ]
    assert len(lines) == 8
    exported = json.loads((out_dir / "CAlong.json").read_text(encoding="utf-8"))
    assert exported["call_sid"] == "CAlong"
    assert exported["turns"] == record.transcript()["turns"]
    assert "CAlong.wav" in capsys.readouterr().out


# --- cleanup ----------------------------------------------------------------------------


def test_cleanup_dry_run_only_lists_what_would_go(
    data_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RETENTION_DAYS", raising=False)
    monkeypatch.delenv("MAX_STORAGE_GB", raising=False)

    assert calls(data_dir, "cleanup", "--dry-run") == 0

    out = capsys.readouterr().out
    assert "would remove 1 records" in out
    assert listed(out) == ["CAold"]
    assert "older than 30 days" in out
    assert RecordStore(data_dir / "calls").ids() == ["CAerror", "CAlong", "CAold", "CAslow"]


def test_cleanup_removes_records_past_retention(
    data_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RETENTION_DAYS", "2")
    monkeypatch.delenv("MAX_STORAGE_GB", raising=False)

    assert calls(data_dir, "cleanup") == 0

    out = capsys.readouterr().out
    assert "removed 2 records" in out
    assert listed(out) == ["CAold", "CAslow"]
    assert RecordStore(data_dir / "calls").ids() == ["CAerror", "CAlong"]


def test_cleanup_by_size_removes_the_oldest_first(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = RecordStore(data_dir / "calls")
    keep = store.open("CAlong").size_bytes() + store.open("CAerror").size_bytes()
    limit_gb = (keep + 1000) / 1e9

    code = calls(
        data_dir, "cleanup", "--retention-days", "0", "--max-storage-gb", f"{limit_gb:.9f}"
    )

    assert code == 0
    out = capsys.readouterr().out
    assert listed(out) == ["CAold", "CAslow"]
    assert "over " in out and " GB" in out
    assert store.ids() == ["CAerror", "CAlong"]


def test_cleanup_with_nothing_to_do(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert calls(data_dir, "cleanup", "--retention-days", "365", "--max-storage-gb", "10") == 0

    assert "nothing to remove" in capsys.readouterr().out
    assert len(RecordStore(data_dir / "calls").ids()) == 4


def test_a_bad_retention_in_the_environment_is_exit_2(
    data_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RETENTION_DAYS", "a month")

    assert calls(data_dir, "cleanup", "--dry-run") == 2

    assert "$RETENTION_DAYS must be a number" in capsys.readouterr().err


# --- bad ids and broken records -----------------------------------------------------------


@pytest.mark.parametrize("command", ["show", "export", "plot", "replay"])
def test_a_path_as_call_id_is_exit_2_with_one_line(
    data_dir: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    extra = ["--to", "http://127.0.0.1:9"] if command == "replay" else []

    assert calls(data_dir, command, "../x", *extra) == 2

    err = capsys.readouterr().err
    assert err.startswith("offhook calls: invalid call id '../x'")
    assert err.count("\n") == 1
    assert "Traceback" not in err


def test_a_missing_call_is_exit_2(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert calls(data_dir, "show", "CAmissing") == 2

    err = capsys.readouterr().err
    assert "no record for call CAmissing" in err
    assert "Traceback" not in err


def test_a_corrupt_meta_json_is_exit_2(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (data_dir / "calls" / "CAlong" / "meta.json").write_text("{not json", encoding="utf-8")

    assert calls(data_dir, "show", "CAlong") == 2

    err = capsys.readouterr().err
    assert "CAlong/meta.json: invalid JSON" in err
    assert "Traceback" not in err


def test_a_corrupt_caller_wav_is_exit_2_on_export(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (data_dir / "calls" / "CAlong" / "caller.wav").write_bytes(b"not a wav file at all")

    assert calls(data_dir, "export", "CAlong", "--out", str(tmp_path / "x")) == 2

    err = capsys.readouterr().err
    assert "caller.wav" in err
    assert "Traceback" not in err


HOSTILE = "\x1b[2J\x1b]0;owned\x07\x9b31m\u202eevil"


def test_show_neutralises_terminal_escapes_from_a_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hostile_turn = Exchange(f"my name is {HOSTILE}", 2200.0, 800.0, "Hello.", 500.0)
    build_call(tmp_path / "calls", CallSpec("CAevil", (hostile_turn,), to_number=f"+1555{HOSTILE}"))

    assert calls(tmp_path, "show", "CAevil") == 0
    shown = capsys.readouterr().out
    assert not any(ch in shown for ch in "\x1b\x07\x9b\u202e")
    assert "\\x1b[2J" in shown  # visible, not obeyed
    assert calls(tmp_path, "list") == 0
    assert not any(ch in capsys.readouterr().out for ch in "\x1b\x07\x9b\u202e")


def test_export_writes_no_terminal_escapes_from_a_record(tmp_path: Path) -> None:
    hostile_turn = Exchange(f"my name is {HOSTILE}", 2200.0, 800.0, "Hello.", 500.0)
    build_call(tmp_path / "calls", CallSpec("CAevil", (hostile_turn,), to_number=f"+1555{HOSTILE}"))

    assert calls(tmp_path, "export", "CAevil", "--out", str(tmp_path / "out")) == 0
    for name in ("CAevil.txt", "CAevil.json"):
        written = (tmp_path / "out" / name).read_text(encoding="utf-8")
        assert not any(ch in written for ch in "\x1b\x07\x9b\u202e"), name
    text = (tmp_path / "out" / "CAevil.txt").read_text(encoding="utf-8")
    assert "\\x1b[2J" in text  # kept visible, not obeyed
    exported = json.loads((tmp_path / "out" / "CAevil.json").read_text(encoding="utf-8"))
    assert HOSTILE in exported["turns"][1]["text"]  # the data itself is intact
