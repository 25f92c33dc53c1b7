"""`offhook calls list`: the recorded calls, newest first (or slowest, or longest),
filtered by age, caller number, agent or errors, one table row each."""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from datetime import datetime

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn
from rich.table import Table
from rich.text import Text

from ops.calls_format import PROG, format_agent, format_duration, format_ms, format_when
from recordings.catalog import RecordCatalog
from recordings.errors import RecordError
from recordings.privacy import mask_number
from recordings.record import CallSummary

__all__ = ["list_calls", "select"]


def _matches_number(query: str, number: str | None) -> bool:
    """A substring of the stored number, or a full number that masks to it."""
    if not number:
        return False
    return query in number or mask_number(query) == number


def select(
    summaries: Iterable[CallSummary],
    *,
    since: datetime | None = None,
    from_: str | None = None,
    agent: str | None = None,
    errors: bool = False,
    sort: str = "start",
    limit: int | None = None,
) -> list[CallSummary]:
    """The calls `offhook calls list` shows, in its order."""
    chosen = [
        s
        for s in summaries
        if (since is None or s.started_at >= since)
        and (from_ is None or _matches_number(from_, s.from_))
        and (agent is None or s.agent == agent or agent in s.fallbacks)
        and (not errors or s.ended_with == "error" or s.errors > 0 or s.error is not None)
    ]
    # Newest first; the other orders are stable sorts on top, so ties stay newest first
    # and calls without the number (no timed turn, still in progress) go last.
    chosen.sort(key=lambda s: (s.started_at, s.call_sid), reverse=True)
    if sort == "latency":
        chosen.sort(
            key=lambda s: (s.mouth_to_mouth_p50_ms is None, -(s.mouth_to_mouth_p50_ms or 0))
        )
    elif sort == "duration":
        chosen.sort(key=lambda s: (s.duration_s is None, -(s.duration_s or 0.0)))
    return chosen[:limit] if limit is not None else chosen


def _read_summaries(store: RecordCatalog, err: Console) -> tuple[list[CallSummary], list[str]]:
    ids = store.ids()
    summaries: list[CallSummary] = []
    problems: list[str] = []
    with Progress(
        TextColumn("reading records"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        console=err,
        transient=True,
    ) as progress:
        for call_sid in progress.track(ids):
            try:
                summaries.append(store.summary(call_sid))
            except (RecordError, OSError) as exc:
                # One damaged record must not hide the others: list it as a problem.
                problems.append(str(exc))
    return summaries, problems


def list_calls(args: argparse.Namespace, store: RecordCatalog, out: Console, err: Console) -> int:
    summaries, problems = _read_summaries(store, err)
    for problem in problems:
        err.print(f"{PROG}: skipped an unreadable record: {escape(problem)}")
    chosen = select(
        summaries,
        since=args.since,
        from_=args.from_,
        agent=args.agent,
        errors=args.errors,
        sort=args.sort,
        limit=args.limit,
    )
    if not chosen:
        out.print(
            f"no calls under {escape(str(store.root))} match"
            if summaries
            else f"no calls under {escape(str(store.root))}"
        )
        return 0
    table = Table(title=f"{len(chosen)} of {len(summaries)} calls", title_justify="left")
    table.add_column("id", no_wrap=True)
    table.add_column("started (UTC)", no_wrap=True)
    table.add_column("duration", justify="right", no_wrap=True)
    table.add_column("from", no_wrap=True)
    table.add_column("agent")
    table.add_column("turns", justify="right")
    table.add_column("barge-ins", justify="right")
    table.add_column("m2m p50 ms", justify="right", no_wrap=True)
    table.add_column("ended with")
    for s in chosen:
        ended = Text(s.ended_with or "in progress")
        if s.ended_with in ("error", "crashed") or s.errors:
            ended.stylize("red")
            if s.errors:
                ended.append(f" ({s.errors} errors)")
        table.add_row(
            s.call_sid,
            format_when(s.started_at),
            format_duration(s.duration_s),
            Text(s.from_ or "-"),
            Text(format_agent(s)),
            str(s.turns),
            str(s.barge_ins),
            format_ms(s.mouth_to_mouth_p50_ms),
            ended,
        )
    out.print(table)
    return 0
