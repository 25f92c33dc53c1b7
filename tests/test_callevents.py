"""Typed call events: every event survives the trip through a timeline line, old records
stay readable, and what reads timelines back counts what the call wrote."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import callevents as events_module
from callevents import (
    BargeIn,
    BotTurn,
    CallerTurn,
    CallEvent,
    Error,
    Fallback,
    FirstAudio,
    MarkSent,
    ReplyCancelled,
    Reprompt,
    TurnTiming,
    UnknownEvent,
    event_types,
    parse_event,
    parse_timeline,
)
from recordings.jsonio import dumps_line, write_json_atomic
from recordings.layout import format_time
from recordings.store import RecordStore

# A value unlike each field type's default, so that a field written under the wrong name
# (or not read back) cannot pass for its default.
_SAMPLES: dict[str, Any] = {
    "str": "some text",
    "int": 7,
    "float": 12.5,
    "bool": True,
    "float | None": 3.25,
    "list[str]": ["inbound", "outbound"],
}


def _sample(cls: type[CallEvent]) -> CallEvent:
    values = {}
    for f in dataclasses.fields(cls):
        assert f.type in _SAMPLES, f"{cls.__name__}.{f.name}: no sample for {f.type!r}"
        values[f.name] = _SAMPLES[f.type]
    return cls(**values)


def _written(t_ms: float, event: CallEvent) -> dict[str, Any]:
    """The line the recorder writes for `event`, read back from its JSON."""
    line: dict[str, Any] = json.loads(
        dumps_line({"t_ms": t_ms, "event": event.name, **event.data()})
    )
    return line


def test_every_event_class_is_registered_under_its_own_name() -> None:
    classes = {
        cls
        for cls in vars(events_module).values()
        if isinstance(cls, type) and issubclass(cls, CallEvent) and cls.name
    }

    assert set(event_types().values()) == classes
    assert all(event_types()[cls.name] is cls for cls in classes)


def _by_name(cls: type[CallEvent]) -> str:
    return cls.name


@pytest.mark.parametrize(
    "cls", [event_types()[name] for name in sorted(event_types())], ids=_by_name
)
def test_every_event_round_trips_through_a_timeline_line(cls: type[CallEvent]) -> None:
    event = _sample(cls)
    data = event.data()

    assert "t_ms" not in data and "event" not in data  # the line's own keys
    line = _written(1234.5, event)
    assert line["event"] == cls.name
    assert parse_event(line) == event


def test_fields_with_another_name_on_the_wire_are_written_under_it() -> None:
    assert _written(0.0, MarkSent(mark="chunk-7", samples=160)) == {
        "t_ms": 0.0,
        "event": "mark_sent",
        "name": "chunk-7",
        "samples": 160,
    }
    fallback = Fallback(source="duplex", target="cascade", reason="lost")
    assert fallback.data() == {"from": "duplex", "to": "cascade", "reason": "lost"}


@pytest.mark.parametrize(
    ("line", "event"),
    [
        (
            {"t_ms": 1.0, "event": "backend_error", "stage": "llm", "error": "timed out"},
            Error(stage="llm", error="timed out"),
        ),
        (
            {"t_ms": 1.0, "event": "tts_first_audio", "ms": 180.0, "text": "Sure."},
            FirstAudio(ms=180.0, text="Sure."),
        ),
        (
            {"t_ms": 1.0, "event": "empty_transcript", "reason": "empty", "speech_ms": 400},
            Reprompt(reason="empty", speech_ms=400),
        ),
        (
            {"t_ms": 1.0, "event": "response_cancelled", "reason": "caller went on"},
            ReplyCancelled(reason="caller went on"),
        ),
    ],
    ids=lambda value: value["event"] if isinstance(value, dict) else type(value).__name__,
)
def test_old_names_parse_as_their_new_events(line: dict[str, Any], event: CallEvent) -> None:
    assert parse_event(line) == event


def test_unknown_names_become_unknown_events_that_keep_their_fields() -> None:
    event = parse_event({"t_ms": 5.0, "event": "teleport", "to": "mars", "n": 2})

    assert event == UnknownEvent(event="teleport", fields={"to": "mars", "n": 2})
    assert event.data() == {"to": "mars", "n": 2}
    assert parse_event({"t_ms": 5.0}) == UnknownEvent(event="", fields={})


def test_lines_are_read_with_tolerance() -> None:
    # Missing fields take their defaults, unknown ones are dropped, odd values are kept.
    assert parse_event({"event": "error", "message": "llm timeout"}) == Error()
    assert parse_event({"event": "bot_turn", "text": "Hi", "latency": {}}) == BotTurn(text="Hi")
    assert parse_event({"event": "barge_in", "turn_id": "2"}) == BargeIn(turn_id="2")  # type: ignore[arg-type]


def test_parse_timeline_keeps_each_lines_time() -> None:
    lines: list[dict[str, Any]] = [
        {"t_ms": 10, "event": "caller_turn", "text": "hi"},
        {"t_ms": 20.5, "event": "turn_timing", "mouth_to_mouth_ms": 480.0},
        {"t_ms": None, "event": "barge_in"},  # NaN is written as null
        {"t_ms": True, "event": "error"},
        {"event": "error"},
    ]

    assert parse_timeline(lines) == [
        (10.0, CallerTurn(text="hi")),
        (20.5, TurnTiming(mouth_to_mouth_ms=480.0)),
        (None, BargeIn()),
        (None, Error()),
        (None, Error()),
    ]


def test_a_crash_repaired_record_counts_its_errors(tmp_path: Path) -> None:
    # Repaired records used to count "error" lines that nothing wrote (the agent wrote
    # "backend_error"), so they always said 0 errors.
    folder = tmp_path / "CAcrash"
    folder.mkdir()
    write_json_atomic(
        folder / "meta.json",
        {
            "format": 1,
            "call_sid": "CAcrash",
            "started_at": format_time(datetime(2024, 6, 1, 12, 0, tzinfo=UTC)),
            "ended_at": None,
            "ended_with": None,
        },
    )
    timeline = [
        _written(500.0, CallerTurn(text="hello", start_ms=100.0, end_ms=500.0)),
        _written(700.0, Error(stage="llm", error="timed out")),
        _written(900.0, BotTurn(turn_id=2, text="Sorry, say again?", start_ms=800.0)),
        _written(950.0, TurnTiming(mouth_to_mouth_ms=300.0)),
        {"t_ms": 1200.0, "event": "backend_error", "stage": "tts", "error": "down"},
        _written(1300.0, BargeIn(turn_id=2)),
    ]
    (folder / "timeline.jsonl").write_text("".join(map(dumps_line, timeline)), "utf-8")
    store = RecordStore(tmp_path)

    assert store.repair() == ["CAcrash"]

    [summary] = store.summaries()
    assert summary.ended_with == "crashed"
    assert (summary.turns, summary.barge_ins, summary.errors) == (2, 1, 2)
    assert summary.mouth_to_mouth_p50_ms == 300.0
    turns = store.open("CAcrash").transcript()["turns"]
    assert [(t["speaker"], t["text"], t["start_ms"], t["end_ms"]) for t in turns] == [
        ("caller", "hello", 100.0, 500.0),
        ("bot", "Sorry, say again?", 800.0, 900.0),
    ]
