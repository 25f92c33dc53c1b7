"""Small shared helpers for the recordings tests."""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def wait_until(condition: Callable[[], bool], timeout_s: float = 2.0) -> bool:
    """Poll `condition` until it holds or `timeout_s` passes (the writer is a thread)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if condition():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)


def header_sizes(path: Path) -> tuple[int, int]:
    """(RIFF size, data size) as the 44-byte header of `path` states them."""
    head = path.read_bytes()[:44]
    return struct.unpack("<I", head[4:8])[0], struct.unpack("<I", head[40:44])[0]


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def timeline_lines(path: Path) -> list[dict[str, Any]]:
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    return [json.loads(line) for line in text.splitlines()]
