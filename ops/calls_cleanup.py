"""`offhook calls cleanup`: delete records past retention, then the oldest while over
the storage limit; limits from the command line, else the server's own environment."""

from __future__ import annotations

import argparse
import os

from rich.console import Console
from rich.table import Table

from ops.calls_format import format_size, format_when
from recordings.catalog import RecordCatalog
from recordings.cleanup_plan import Removal

__all__ = ["cleanup_calls"]


def _limit_from_env(name: str, default: float) -> float:
    """A retention limit from the environment; 0 there means "no limit", as for the server."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"${name} must be a number, got {raw!r}") from None
    if value < 0:
        raise ValueError(f"${name} must be >= 0, got {raw!r}")
    return value


def cleanup_calls(
    args: argparse.Namespace, store: RecordCatalog, out: Console, err: Console
) -> int:
    days = args.retention_days
    days = _limit_from_env("RETENTION_DAYS", 30.0) if days is None else days
    gb = args.max_storage_gb
    gb = _limit_from_env("MAX_STORAGE_GB", 10.0) if gb is None else gb
    if days < 0 or gb < 0:
        raise ValueError("--retention-days and --max-storage-gb must be >= 0 (0: no limit)")
    before = store.size_bytes()
    started = {summary.call_sid: summary.started_at for summary in store.summaries()}
    with err.status("planning" if args.dry_run else "removing records"):
        removals: list[Removal] = store.cleanup(
            retention_days=days or None, max_storage_gb=gb or None, dry_run=args.dry_run
        )
    limits = (
        f"older than {days:g} days" if days else "no age limit",
        f"over {gb:g} GB" if gb else "no size limit",
    )
    if not removals:
        out.print(f"nothing to remove ({', '.join(limits)}; {format_size(before)} in use)")
        return 0
    verb = "would remove" if args.dry_run else "removed"
    table = Table(title=f"{verb} {len(removals)} records", title_justify="left")
    table.add_column("id", no_wrap=True)
    table.add_column("started (UTC)", no_wrap=True)
    table.add_column("why")
    table.add_column("size", justify="right")
    for removal in removals:
        when = started.get(removal.call_sid)
        why = f"older than {days:g} days" if removal.reason == "age" else f"over {gb:g} GB"
        table.add_row(
            removal.call_sid, format_when(when) if when else "-", why, format_size(removal.bytes)
        )
    out.print(table)
    freed = sum(r.bytes for r in removals)
    out.print(f"{verb} {format_size(freed)} of {format_size(before)}")
    return 0
