"""`offhook calls show ID`: one call's summary, its turns with their latencies, how the
call was controlled (Twilio's status, tools, transfers, hang-ups) and its incidents
(barge-ins, holds never resumed, re-prompts, errors)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Mapping
from typing import Any, Final

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from callevents import (
    AnsweredBy,
    BargeIn,
    CallEnded,
    CallEnding,
    CallEvent,
    CallStatus,
    Clear,
    Error,
    Fallback,
    Hold,
    PatienceRaised,
    ProtocolErrorEvent,
    Reprompt,
    Resume,
    ToolCalled,
    Transfer,
    TransferRequested,
    TurnCapped,
    parse_timeline,
)
from ops.calls_format import (
    as_mapping,
    format_agent,
    format_clock,
    format_duration,
    format_ms,
    format_size,
    format_when,
)
from recordings.catalog import RecordCatalog
from recordings.record import CallRecord, CallSummary

__all__ = ["control_events", "incidents", "show_call"]

_LATENCY_KEYS: Final = (
    "end_of_turn_ms",
    "stt_ms",
    "llm_first_token_ms",
    "tts_first_audio_ms",
    "mouth_to_mouth_ms",
)
# Timeline events `show` lists after the turns: what went wrong or was cut short. A Hold
# is one only while nothing resolved it (see `incidents`); the rest always are. Yellow:
# the call went on as designed, cut short; red: something failed.
_CUT_SHORT: Final[tuple[type[CallEvent], ...]] = (
    BargeIn,
    Clear,
    Hold,
    Reprompt,
    TurnCapped,
    PatienceRaised,
)
_INCIDENTS: Final[tuple[type[CallEvent], ...]] = (
    *_CUT_SHORT,
    Error,
    ProtocolErrorEvent,
    Fallback,
)


def _summary_panel(record: CallRecord, summary: CallSummary, where: str) -> Panel:
    meta = record.meta
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    latency = as_mapping(as_mapping(meta.get("summary")).get("mouth_to_mouth_ms"))
    recorder = as_mapping(meta.get("recorder"))
    rows: list[tuple[str, str]] = [
        ("call", summary.call_sid),
        ("from → to", f"{summary.from_ or '-'} → {summary.to or '-'}"),
        ("started", f"{format_when(summary.started_at)} UTC"),
        (
            "duration",
            "-"
            if summary.duration_s is None
            else f"{format_duration(summary.duration_s)} ({summary.duration_s:.1f} s)",
        ),
        ("ended with", summary.ended_with or "in progress (or its process died)"),
        ("agent", format_agent(summary)),
        ("turns", f"{summary.turns}, {summary.barge_ins} barge-ins, {summary.errors} errors"),
        (
            "mouth to mouth",
            f"p50 {format_ms(summary.mouth_to_mouth_p50_ms)} ms, "
            f"max {format_ms(latency.get('max'))} ms",
        ),
    ]
    if summary.error:
        rows.append(("error", summary.error))
    if meta.get("direction") == "outbound" or meta.get("answered_by"):
        rows.append(("outbound", f"answered by {meta.get('answered_by') or '-'}"))
    if meta.get("end_reason"):
        reason, to = meta["end_reason"], meta.get("transfer_to")
        rows.append(("bot", f"transferred to {to} ({reason})" if to else f"hung up ({reason})"))
    if meta.get("versions"):
        rows.append(("versions", json.dumps(meta["versions"], sort_keys=True)))
    if recorder.get("dropped") or recorder.get("errors"):
        rows.append(
            (
                "recorder",
                f"{recorder.get('dropped')} items dropped, {recorder.get('errors')} errors",
            )
        )
    rows.append(("record", f"{where} ({format_size(summary.size_bytes)})"))
    for name, value in rows:
        grid.add_row(name, Text(value))
    return Panel(grid, title=f"call {summary.call_sid}", title_align="left", expand=False)


def _turns_table(transcript: Mapping[str, Any]) -> Table:
    table = Table(title="turns (latencies in ms)", title_justify="left")
    table.add_column("#", justify="right")
    table.add_column("at", no_wrap=True)
    table.add_column("speaker")
    table.add_column("text", ratio=1)
    for header in ("end of turn", "STT", "LLM 1st token", "TTS 1st audio", "mouth to mouth"):
        table.add_column(header, justify="right", no_wrap=True)
    for number, turn in enumerate(transcript.get("turns", []), start=1):
        if not isinstance(turn, Mapping):
            continue
        text = Text(str(turn.get("text") or ""))
        if turn.get("truncated"):
            text.append(" [cut off]", style="yellow")
            intended = str(turn.get("intended") or "")
            if intended and intended != turn.get("text"):
                text.append(f"\nmeant: {intended}", style="dim")
        latency = as_mapping(turn.get("latency"))
        speaker = str(turn.get("speaker") or "?")
        table.add_row(
            str(number),
            format_clock(turn.get("start_ms")),
            Text(speaker, style="cyan" if speaker == "caller" else "green"),
            text,
            *(format_ms(latency.get(key)) for key in _LATENCY_KEYS),
        )
    return table


def incidents(timeline: Iterable[Mapping[str, Any]]) -> list[tuple[float | None, CallEvent]]:
    """The timeline's incidents, in order, as `calls show` lists them.

    A Hold is one only if neither a Resume (a backchannel or noise: the bot went on) nor
    a BargeIn (listed itself) followed it before the next Hold or the end of the call.
    """
    chosen: list[tuple[float | None, CallEvent]] = []
    resolved: set[int] = set()
    holding: int | None = None  # index in `chosen` of the Hold nothing has resolved yet
    for t_ms, event in parse_timeline(timeline):
        if isinstance(event, Resume | BargeIn) and holding is not None:
            resolved.add(holding)
            holding = None
        if isinstance(event, _INCIDENTS):
            if isinstance(event, Hold):
                holding = len(chosen)
            chosen.append((t_ms, event))
    return [incident for i, incident in enumerate(chosen) if i not in resolved]


def _incident(event: CallEvent) -> str:
    match event:
        case BargeIn(turn_id=turn_id, heard=heard, truncated=truncated, reason=reason):
            cut = " (cut off)" if truncated else ""
            why = f" ({reason})" if reason else ""
            return f"caller interrupted bot turn {turn_id}{why}; heard{cut}: {heard!r}"
        case Clear():
            return "bot audio cleared"
        case Error(stage=stage, error=error):
            return f"{stage}: {error}"
        case Hold(turn_id=turn_id, heard=heard):
            return f"bot held turn {turn_id} for the caller and never resumed; heard: {heard!r}"
        case Reprompt(reason=reason, speech_ms=speech_ms):
            why = f" ({reason})" if reason else ""
            return f"caller not made out{why} after {speech_ms} ms of speech; asked to repeat"
        case TurnCapped(speech_ms=speech_ms):
            return f"caller turn judged without a pause at its {speech_ms} ms cap"
        case PatienceRaised(pause_ms=pause_ms, wait_ms=wait_ms):
            return f"bot answered into a {pause_ms} ms pause; statements now wait {wait_ms} ms"
    return json.dumps(event.data(), sort_keys=True, default=str)


_CONTROL = (
    CallStatus,
    AnsweredBy,
    TransferRequested,
    Transfer,
    ToolCalled,
    CallEnding,
    CallEnded,
)


def control_events(timeline: Iterable[Mapping[str, Any]]) -> list[tuple[float | None, CallEvent]]:
    """How the call was controlled: Twilio's status callbacks and AMD verdict, tool calls,
    transfers, and the bot's decision to end it."""
    return [(t, e) for t, e in parse_timeline(timeline) if isinstance(e, _CONTROL)]


def _control_line(event: CallEvent) -> str:
    match event:
        case CallStatus(status=status, duration_s=duration_s):
            return f"Twilio: {status}" + (f" after {duration_s} s" if duration_s else "")
        case AnsweredBy(answered_by=answered_by, detection_ms=detection_ms):
            return f"answered by {answered_by} (detected in {detection_ms} ms)"
        case TransferRequested(reason=reason, refused=refused):
            return f"a person asked for ({reason})" + (f"; refused: {refused}" if refused else "")
        case Transfer(target=target, ok=ok, error=error):
            return f"transferred to {target}" if ok else f"transfer to {target} failed: {error}"
        case ToolCalled(tool=tool, arguments=arguments):
            return f"the LLM called {tool}({arguments})"
        case CallEnding(reason=reason):
            return f"the bot says goodbye ({reason})"
        case CallEnded(reason=reason, via=via, error=error):
            return f"the bot hung up ({reason}, via {via})" + (f"; {error}" if error else "")
    return json.dumps(event.data(), sort_keys=True, default=str)


def show_call(args: argparse.Namespace, store: RecordCatalog, out: Console, err: Console) -> int:
    record = store.open(args.id)
    summary = record.summary()
    transcript = record.transcript()
    listed = incidents(record.timeline())
    out.print(_summary_panel(record, summary, f"{store.root}/{record.call_sid}"))
    if transcript.get("turns"):
        out.print(_turns_table(transcript))
    else:
        out.print("no transcript turns")
    controlled = control_events(record.timeline())
    if controlled:
        table = Table(title="call control", title_justify="left")
        table.add_column("at", no_wrap=True)
        table.add_column("event", no_wrap=True)
        table.add_column("details", ratio=1)
        for t_ms, event in controlled:
            table.add_row(format_clock(t_ms), event.name, Text(_control_line(event)))
        out.print(table)
    if not listed:
        out.print("no barge-ins or errors")
        return 0
    table = Table(title="barge-ins and errors", title_justify="left")
    table.add_column("at", no_wrap=True)
    table.add_column("event", no_wrap=True)
    table.add_column("details", ratio=1)
    for t_ms, event in listed:
        table.add_row(
            format_clock(t_ms),
            Text(event.name, style="yellow" if isinstance(event, _CUT_SHORT) else "red"),
            Text(_incident(event)),
        )
    out.print(table)
    return 0
