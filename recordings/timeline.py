"""What a timeline says about its call: turns and headline numbers.

Used for records whose call never got to write its own transcript.json and
meta["summary"], which is every crashed call. Only the events the format documents are
read (caller_turn, bot_turn, turn_timing, barge_in, error); the rest are ignored.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["TimelineStats", "last_t_ms", "stats_from_timeline", "transcript_from_timeline"]

_SPEAKERS = {"caller_turn": "caller", "bot_turn": "bot"}


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
    """{"turns": [...]} in transcript.json's shape, from caller_turn / bot_turn events.

    Best effort: a field an event lacks gets a neutral value (times fall back to the
    event's own t_ms, `intended` to the text, `latency` to null).
    """
    turns = []
    for event in events:
        speaker = _SPEAKERS.get(str(event.get("event")))
        if speaker is None:
            continue
        t_ms = _number(event.get("t_ms"))
        start = _number(event.get("start_ms"))
        end = _number(event.get("end_ms"))
        text = str(event.get("text", ""))
        latency = event.get("latency")
        turns.append(
            {
                "speaker": speaker,
                "text": text,
                "start_ms": start if start is not None else t_ms,
                "end_ms": end if end is not None else t_ms,
                "truncated": bool(event.get("truncated", False)),
                "intended": str(event.get("intended", text)),
                "latency": latency if isinstance(latency, dict) else None,
            }
        )
    # Events are logged when a turn ends; the transcript is in order of speaking.
    turns.sort(key=lambda turn: turn["start_ms"] if turn["start_ms"] is not None else 0.0)
    return {"turns": turns}


def stats_from_timeline(events: Iterable[Mapping[str, Any]]) -> TimelineStats:
    """Turn count (caller and bot turns together), barge-ins, errors and the median
    mouth-to-mouth latency of turn_timing events."""
    turns = barge_ins = errors = 0
    latencies: list[float] = []
    for event in events:
        name = event.get("event")
        if name in _SPEAKERS:
            turns += 1
        elif name == "barge_in":
            barge_ins += 1
        elif name == "error":
            errors += 1
        elif name == "turn_timing":
            value = _number(event.get("mouth_to_mouth_ms"))
            if value is not None:
                latencies.append(value)
    p50 = statistics.median(latencies) if latencies else None
    return TimelineStats(turns, barge_ins, errors, p50)


def last_t_ms(events: Iterable[Mapping[str, Any]]) -> float | None:
    """The latest t_ms of any event, or None for an empty timeline."""
    times = [t for t in (_number(e.get("t_ms")) for e in events) if t is not None]
    return max(times) if times else None
