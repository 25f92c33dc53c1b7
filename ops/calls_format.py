"""How `offhook calls` writes to the terminal: its name in messages, and the cells its
tables share (call-clock times, wall-clock times, durations, sizes, agents).

Records may be damaged or from an older version: every formatter takes what a record
holds, whatever its type, and shows "-" (or a blank clock) for what it cannot show.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

from recordings.record import CallSummary

__all__ = [
    "PROG",
    "as_mapping",
    "format_agent",
    "format_clock",
    "format_duration",
    "format_ms",
    "format_size",
    "format_when",
]

PROG: Final = "offhook calls"


def format_ms(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "-"  # None, or a field a damaged record holds as something else
    return f"{value:.0f}"


def as_mapping(value: Any) -> Mapping[str, Any]:
    """A JSON object from a record, or {} when the record holds something else there."""
    return value if isinstance(value, Mapping) else {}


def format_clock(ms: Any) -> str:
    """mm:ss.mmm on the call clock."""
    if isinstance(ms, bool) or not isinstance(ms, int | float):
        return "--:--.---"
    total = max(0.0, float(ms)) / 1000
    return f"{int(total // 60):02d}:{total % 60:06.3f}"


def format_when(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}:{rest:02d}"


def format_size(count: int) -> str:
    """Decimal units, as MAX_STORAGE_GB counts them."""
    if count < 1000:
        return f"{count} B"
    value = float(count)
    for unit in ("kB", "MB", "GB"):
        value /= 1000
        if value < 1000 or unit == "GB":
            break
    return f"{value:.1f} {unit}"


def format_agent(summary: CallSummary) -> str:
    agent = summary.agent or "-"
    return f"{agent} (+{', '.join(summary.fallbacks)})" if summary.fallbacks else agent
