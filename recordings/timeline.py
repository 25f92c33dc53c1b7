"""What a timeline says about its call: turns and headline numbers.

Used for records whose call never got to write its own transcript.json and
meta["summary"], which is every crashed call. Each line is read as its typed event
(`callevents.parse_event`, which also reads the names older versions wrote, such as
`backend_error` for `Error`); only CallerTurn, BotTurn, TurnTiming, BargeIn and Error
count, the rest are ignored.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from callevents import BargeIn, BotTurn, CallerTurn, Error, TurnTiming, parse_timeline

__all__ = ["TimelineStats", "last_t_ms", "stats_from_timeline", "transcript_from_timeline"]


@dataclass(frozen=True)
class TimelineStats:
    turns: int
    barge_ins: int
    errors: int
    mouth_to_mouth_p50_ms: float | None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def transcript_from_timeline(events: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """{"turns": [...]} in transcript.json's shape, from CallerTurn / BotTurn events.

    Best effort: a field an event lacks gets a neutral value (times fall back to the
    event's own t_ms, `intended` to the text). `latency` is null: a turn's latencies are
    not part of its turn event.
    """
    turns = []
    for t_ms, event in parse_timeline(events):
        match event:
            case CallerTurn():
                speaker, truncated, intended = "caller", False, ""
            case BotTurn():
                speaker, truncated, intended = "bot", bool(event.truncated), str(event.intended)
            case _:
                continue
        start, end = _number(event.start_ms), _number(event.end_ms)
        text = str(event.text)
        turns.append(
            {
                "speaker": speaker,
                "text": text,
                "start_ms": start if start is not None else t_ms,
                "end_ms": end if end is not None else t_ms,
                "truncated": truncated,
                "intended": intended or text,
                "latency": None,
            }
        )
    # Events are logged when a turn ends; the transcript is in order of speaking.
    turns.sort(key=lambda turn: turn["start_ms"] if turn["start_ms"] is not None else 0.0)
    return {"turns": turns}


def stats_from_timeline(events: Iterable[Mapping[str, Any]]) -> TimelineStats:
    """Turn count (caller and bot turns together), barge-ins, errors (`Error`, however
    old the line's name) and the median mouth-to-mouth latency of TurnTiming events."""
    turns = barge_ins = errors = 0
    latencies: list[float] = []
    for _, event in parse_timeline(events):
        match event:
            case CallerTurn() | BotTurn():
                turns += 1
            case BargeIn():
                barge_ins += 1
            case Error():
                errors += 1
            case TurnTiming(mouth_to_mouth_ms=m2m) if (value := _number(m2m)) is not None:
                latencies.append(value)
    p50 = statistics.median(latencies) if latencies else None
    return TimelineStats(turns, barge_ins, errors, p50)


def last_t_ms(events: Iterable[Mapping[str, Any]]) -> float | None:
    """The latest t_ms of any event, or None for an empty timeline."""
    times = [t for t, _ in parse_timeline(events) if t is not None]
    return max(times) if times else None
