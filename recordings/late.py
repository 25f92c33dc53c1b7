"""Events that arrive after a call's record was closed (Twilio's `completed` status
callback comes once the stream is gone): appended to its timeline at the call's end."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from recordings.jsonio import dumps_line
from recordings.layout import META, TIMELINE, record_dir


def append_late_event(root: Path, call_sid: str, name: str, data: Mapping[str, Any]) -> bool:
    """Append `{"t_ms": <end of call>, "event": name, **data}` to a closed record's
    timeline; False if there is no closed record for the call (still open, or none)."""
    folder = record_dir(root, call_sid)
    try:
        meta = json.loads((folder / META).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(meta, dict) or not meta.get("ended_at"):
        return False  # open: its writer owns the timeline
    duration = meta.get("duration_s")
    t_ms = float(duration) * 1000 if isinstance(duration, int | float) else None
    with open(folder / TIMELINE, "a", encoding="utf-8") as timeline:
        timeline.write(dumps_line({"t_ms": t_ms, "event": name, **data}))
    return True
