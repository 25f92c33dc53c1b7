"""JSON in and out of a record: coercion of odd values, timeline lines, atomic files."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from datetime import datetime
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np

from recordings.errors import CorruptRecord
from recordings.layout import private_opener

__all__ = ["read_json_object", "to_jsonable", "write_json_atomic"]


def to_jsonable(value: Any) -> Any:
    """A deep copy of `value` made only of JSON types.

    numpy scalars and arrays become numbers and lists, NaN and infinities become null
    (strict JSON has neither, and jq and browsers refuse them), and anything else
    unknown becomes its str(): a record must never fail to be written over a value.
    """
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, Enum):
        return to_jsonable(value.value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.generic):
        return to_jsonable(value.item())
    if isinstance(value, np.ndarray):
        return to_jsonable(value.tolist())
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_jsonable(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def dumps_line(obj: Mapping[str, Any]) -> str:
    """One compact JSON line (with its newline) for timeline.jsonl."""
    return json.dumps(to_jsonable(obj), ensure_ascii=False, allow_nan=False) + "\n"


def write_json_atomic(path: Path, obj: Any) -> None:
    """Replace `path` with `obj` so that readers see the old file or the new, never half.

    The temporary file starts with a dot so that a crash between write and rename
    leaves nothing a reader mistakes for part of the record.
    """
    tmp = path.with_name(f".{path.name}.tmp")
    text = json.dumps(to_jsonable(obj), ensure_ascii=False, allow_nan=False, indent=2)
    with open(tmp, "w", encoding="utf-8", opener=private_opener) as f:
        f.write(text + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_json_object(path: Path) -> dict[str, Any]:
    """Parse a JSON file that must hold an object; CorruptRecord names the file otherwise."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise CorruptRecord(path, f"invalid JSON: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise CorruptRecord(path, f"not UTF-8 text: {exc}") from exc
    if not isinstance(value, dict):
        raise CorruptRecord(path, f"expected a JSON object, got {type(value).__name__}")
    return value
