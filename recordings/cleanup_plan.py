"""Which records a cleanup removes: one rule for the local folder and the S3 store alike."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

__all__ = ["Entry", "Removal", "carry_out", "plan_removals"]

log = logging.getLogger(__name__)

_BYTES_PER_GB = 1_000_000_000  # storage is sold in decimal gigabytes


@dataclass(frozen=True)
class Removal:
    """A record cleanup removed (or, in a dry run, would remove)."""

    call_sid: str
    reason: Literal["age", "size"]
    bytes: int


@dataclass(frozen=True)
class Entry:
    """One stored record as cleanup sees it: its age and its size."""

    call_sid: str
    started_at: datetime
    bytes: int


def plan_removals(
    entries: Iterable[Entry],
    *,
    retention_days: float | None,
    max_storage_gb: float | None,
    now: datetime | None = None,
    active: Iterable[str] = frozenset(),
) -> list[Removal]:
    """Records older than `retention_days`, then the oldest until the rest fit in
    `max_storage_gb` (decimal GB). None disables a limit. Calls in `active` are never
    planned, though their bytes count towards the total."""
    for name, limit in (("retention_days", retention_days), ("max_storage_gb", max_storage_gb)):
        if limit is not None and not limit > 0:
            raise ValueError(f"{name} must be > 0 or None (no limit), got {limit}")
    now = datetime.now(UTC) if now is None else now
    if now.tzinfo is None:
        raise ValueError("naive `now`: pass an aware datetime")
    skip = set(active)
    entries = list(entries)
    candidates = sorted(
        (e for e in entries if e.call_sid not in skip), key=lambda e: (e.started_at, e.call_sid)
    )
    plan: list[Removal] = []
    if retention_days is not None:
        cutoff = now - timedelta(days=retention_days)
        plan += [Removal(e.call_sid, "age", e.bytes) for e in candidates if e.started_at < cutoff]
    if max_storage_gb is not None:
        limit_bytes = max_storage_gb * _BYTES_PER_GB
        planned = {r.call_sid for r in plan}
        total = sum(e.bytes for e in entries) - sum(r.bytes for r in plan)
        for entry in candidates:
            if total <= limit_bytes:
                break
            if entry.call_sid not in planned:
                plan.append(Removal(entry.call_sid, "size", entry.bytes))
                total -= entry.bytes
    return plan


def carry_out(
    plan: Iterable[Removal],
    remove: Callable[[str], None],
    failure: type[Exception] | tuple[type[Exception], ...],
) -> list[Removal]:
    """Remove each planned record with `remove(call_sid)`; the removals that succeeded.
    One that fails with `failure` is logged and skipped: the next cleanup tries again."""
    removed = []
    for removal in plan:
        try:
            remove(removal.call_sid)
        except failure as exc:
            log.warning("cannot remove the record of call %s: %s", removal.call_sid, exc)
            continue
        removed.append(removal)
    return removed
