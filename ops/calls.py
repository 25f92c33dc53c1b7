"""`offhook calls`: find any call, see what happened turn by turn, listen to it, and
replay it against the current bot to check a change.

    offhook calls list     [--since 7d] [--from NUMBER] [--agent NAME] [--errors]
                           [--sort start|latency|duration] [--limit N]
    offhook calls show     ID
    offhook calls export   ID [--out DIR]        stereo WAV (caller left, bot right) + transcript
    offhook calls plot     ID [--out FILE.png]   waveforms, turns, barge-ins, latencies
    offhook calls cleanup  [--retention-days N] [--max-storage-gb G] [--dry-run]
    offhook calls replay   ID --to URL [--auth-token T] [--speed F] [--threshold-ms 300]

Records are read from `<data dir>/calls` (--data-dir, else $DATA_DIR, else ./data).
Exit status: 0 done; 1 the replayed bot did worse than the recording; 2 bad input (an
invalid call id, a missing or unreadable record, a server that cannot be called),
reported in one line on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
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
from ops.terminal import Neutralise, neutralise
from recordings.errors import RecordError
from recordings.layout import parse_time
from recordings.privacy import mask_number
from recordings.record import CallRecord, CallSummary
from recordings.store import RecordStore, Removal

if TYPE_CHECKING:
    from ops.replay import ReplayResult

__all__ = [
    "LazyWhisper",
    "build_parser",
    "incidents",
    "main",
    "parse_since",
    "select",
    "transcript_lines",
]

PROG: Final = "offhook calls"
RATE: Final = 8000
# Piped output (grep, less, a CI log) is not a terminal; rich would fold rows at 80
# columns. Wide enough for every column of `list` on one line.
PIPE_WIDTH: Final = 200
_RELATIVE = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")
_UNITS: Final = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
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

Transcribe = Callable[[np.ndarray], str]


# --- argument types ----------------------------------------------------------------------


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """'7d', '12h', '30m', '2w' (ago), or an ISO date / time (UTC unless it says)."""
    now = datetime.now(UTC) if now is None else now
    relative = _RELATIVE.fullmatch(text.strip())
    if relative:
        amount, unit = float(relative.group(1)), relative.group(2)
        return now - timedelta(**{_UNITS[unit]: amount})
    try:
        return parse_time(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an ISO date (2024-05-01) or an age like 7d, 12h, 30m, got {text!r}"
        ) from None


def _positive(kind: type[int] | type[float]) -> Callable[[str], Any]:
    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"expected a number > 0, got {text}")
        return value

    return parse


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Find, inspect, export, plot, clean up and replay recorded calls.",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=Path(os.environ.get("DATA_DIR") or "./data"),
        help="where records live, under calls/ (default: $DATA_DIR or ./data)",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    listing = commands.add_parser("list", help="calls, newest first, with their headline numbers")
    listing.add_argument("--since", type=parse_since, help="ISO date, or an age: 7d, 12h, 30m")
    listing.add_argument(
        "--from", dest="from_", metavar="NUMBER", help="caller number (part of it, or in full)"
    )
    listing.add_argument("--agent", help="calls handled by this agent, first or as a fallback")
    listing.add_argument("--errors", action="store_true", help="only calls with errors")
    listing.add_argument(
        "--sort",
        choices=("start", "latency", "duration"),
        default="start",
        help="newest, slowest (mouth-to-mouth p50) or longest first (default: start)",
    )
    listing.add_argument("--limit", type=_positive(int), help="show at most N calls")
    listing.set_defaults(run=_list)

    show = commands.add_parser("show", help="one call: summary, turns with latencies, incidents")
    show.add_argument("id", metavar="ID")
    show.set_defaults(run=_show)

    export = commands.add_parser("export", help="stereo WAV and transcript of one call")
    export.add_argument("id", metavar="ID")
    export.add_argument("--out", type=Path, default=Path("."), help="folder (default: .)")
    export.set_defaults(run=_export)

    plot = commands.add_parser("plot", help="PNG timeline of one call")
    plot.add_argument("id", metavar="ID")
    plot.add_argument("--out", type=Path, help="PNG file (default: ./<ID>.png)")
    plot.set_defaults(run=_plot)

    cleanup = commands.add_parser("cleanup", help="delete records past retention or over size")
    cleanup.add_argument(
        "--retention-days",
        type=float,
        help="delete records older than this; 0: no age limit (default: $RETENTION_DAYS or 30)",
    )
    cleanup.add_argument(
        "--max-storage-gb",
        type=float,
        help="then the oldest until under this; 0: no limit (default: $MAX_STORAGE_GB or 10)",
    )
    cleanup.add_argument("--dry-run", action="store_true", help="only show what would go")
    cleanup.set_defaults(run=_cleanup)

    replay = commands.add_parser(
        "replay", help="play a recorded caller to a running server and compare the bots"
    )
    replay.add_argument("id", metavar="ID")
    replay.add_argument("--to", required=True, metavar="URL", help="server base URL")
    replay.add_argument(
        "--auth-token",
        default=os.environ.get("TWILIO_AUTH_TOKEN") or None,
        help="sign requests like Twilio (default: $TWILIO_AUTH_TOKEN)",
    )
    replay.add_argument(
        "--speed",
        type=_positive(float),
        default=1.0,
        help="send audio this many times faster than real time (latencies then not comparable)",
    )
    replay.add_argument(
        "--threshold-ms",
        type=float,
        default=300.0,
        help="a p50 mouth-to-mouth rise above this is worse (default: 300)",
    )
    replay.add_argument(
        "--voice",
        choices=("recorded", "espeak", "piper"),
        default="recorded",
        help="the recorded caller audio (default), or the transcript's words re-spoken",
    )
    replay.add_argument(
        "--connect-to", metavar="HOST[:PORT]", help="open the media stream here (tunnels)"
    )
    replay.add_argument(
        "--hangup-after-ms",
        type=int,
        default=4000,
        help="after the last caller utterance, hang up once the bot is this long silent",
    )
    replay.add_argument(
        "--no-transcribe",
        dest="transcribe",
        action="store_false",
        help="compare timing only: do not load Whisper to transcribe the new replies",
    )
    replay.set_defaults(run=_replay)
    return parser


# --- formatting ---------------------------------------------------------------------------


def _ms(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "-"  # None, or a field a damaged record holds as something else
    return f"{value:.0f}"


def _dict(value: Any) -> Mapping[str, Any]:
    """A JSON object from a record, or {} when the record holds something else there."""
    return value if isinstance(value, Mapping) else {}


def _clock(ms: Any) -> str:
    """mm:ss.mmm on the call clock."""
    if isinstance(ms, bool) or not isinstance(ms, int | float):
        return "--:--.---"
    total = max(0.0, float(ms)) / 1000
    return f"{int(total // 60):02d}:{total % 60:06.3f}"


def _when(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}:{rest:02d}"


def _size(count: int) -> str:
    """Decimal units, as MAX_STORAGE_GB counts them."""
    if count < 1000:
        return f"{count} B"
    value = float(count)
    for unit in ("kB", "MB", "GB"):
        value /= 1000
        if value < 1000 or unit == "GB":
            break
    return f"{value:.1f} {unit}"


def _agent(summary: CallSummary) -> str:
    agent = summary.agent or "-"
    return f"{agent} (+{', '.join(summary.fallbacks)})" if summary.fallbacks else agent


# --- list ---------------------------------------------------------------------------------


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


def _read_summaries(store: RecordStore, err: Console) -> tuple[list[CallSummary], list[str]]:
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
                summaries.append(store.open(call_sid).summary())
            except (RecordError, OSError) as exc:
                # One damaged record must not hide the others: list it as a problem.
                problems.append(str(exc))
    return summaries, problems


def _list(args: argparse.Namespace, store: RecordStore, out: Console, err: Console) -> int:
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
            _when(s.started_at),
            _duration(s.duration_s),
            Text(s.from_ or "-"),
            Text(_agent(s)),
            str(s.turns),
            str(s.barge_ins),
            _ms(s.mouth_to_mouth_p50_ms),
            ended,
        )
    out.print(table)
    return 0


# --- show ---------------------------------------------------------------------------------


def _summary_panel(record: CallRecord, summary: CallSummary) -> Panel:
    meta = record.meta
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    latency = _dict(_dict(meta.get("summary")).get("mouth_to_mouth_ms"))
    recorder = _dict(meta.get("recorder"))
    rows: list[tuple[str, str]] = [
        ("call", summary.call_sid),
        ("from → to", f"{summary.from_ or '-'} → {summary.to or '-'}"),
        ("started", f"{_when(summary.started_at)} UTC"),
        (
            "duration",
            "-"
            if summary.duration_s is None
            else f"{_duration(summary.duration_s)} ({summary.duration_s:.1f} s)",
        ),
        ("ended with", summary.ended_with or "in progress (or its process died)"),
        ("agent", _agent(summary)),
        ("turns", f"{summary.turns}, {summary.barge_ins} barge-ins, {summary.errors} errors"),
        (
            "mouth to mouth",
            f"p50 {_ms(summary.mouth_to_mouth_p50_ms)} ms, max {_ms(latency.get('max'))} ms",
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
    rows.append(("record", f"{record.path} ({_size(summary.size_bytes)})"))
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
        latency = _dict(turn.get("latency"))
        speaker = str(turn.get("speaker") or "?")
        table.add_row(
            str(number),
            _clock(turn.get("start_ms")),
            Text(speaker, style="cyan" if speaker == "caller" else "green"),
            text,
            *(_ms(latency.get(key)) for key in _LATENCY_KEYS),
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
        case BargeIn(turn_id=turn_id, heard=heard, truncated=truncated):
            cut = " (cut off)" if truncated else ""
            return f"caller interrupted bot turn {turn_id}; heard{cut}: {heard!r}"
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


def _show(args: argparse.Namespace, store: RecordStore, out: Console, err: Console) -> int:
    record = store.open(args.id)
    summary = record.summary()
    transcript = record.transcript()
    listed = incidents(record.timeline())
    out.print(_summary_panel(record, summary))
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
            table.add_row(_clock(t_ms), event.name, Text(_control_line(event)))
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
            _clock(t_ms),
            Text(event.name, style="yellow" if isinstance(event, _CUT_SHORT) else "red"),
            Text(_incident(event)),
        )
    out.print(table)
    return 0


# --- export -------------------------------------------------------------------------------


def transcript_lines(record: CallRecord, transcript: Mapping[str, Any]) -> list[str]:
    """The transcript as text: one line per turn, call-clock times."""
    meta = record.meta
    lines = [
        f"# call {record.call_sid}, from {meta.get('from') or '-'} to {meta.get('to') or '-'}, "
        f"started {meta.get('started_at')}, ended with {meta.get('ended_with')}"
    ]
    for turn in transcript.get("turns", []):
        if not isinstance(turn, Mapping):
            continue
        line = (
            f"[{_clock(turn.get('start_ms'))} - {_clock(turn.get('end_ms'))}] "
            f"{turn.get('speaker')}: {turn.get('text')}"
        )
        if turn.get("truncated"):
            line += f" [cut off; meant: {turn.get('intended')}]"
        m2m = _ms(_dict(turn.get("latency")).get("mouth_to_mouth_ms"))
        if m2m != "-":
            line += f" ({m2m} ms mouth to mouth)"
        lines.append(line)
    return lines


def _export(args: argparse.Namespace, store: RecordStore, out: Console, err: Console) -> int:
    from media.wav import write_wav

    record = store.open(args.id)
    caller = record.caller_audio()
    bot = record.bot_audio()  # padded or cut to the caller's length: one clock
    transcript = record.transcript()
    folder: Path = args.out
    folder.mkdir(parents=True, exist_ok=True)
    wav = folder / f"{record.call_sid}.wav"
    write_wav(wav, np.stack([caller, bot], axis=1), RATE, 2)
    text = folder / f"{record.call_sid}.txt"
    # Callers' words and parameters are strangers' strings: no terminal escapes in the
    # files either (`cat` would run them), here neutralised, in the JSON \u-escaped.
    lines = [neutralise(line) for line in transcript_lines(record, transcript)]
    text.write_text("\n".join(lines) + "\n", encoding="utf-8")
    data = folder / f"{record.call_sid}.json"
    data.write_text(
        json.dumps(
            {"call_sid": record.call_sid, "meta": record.meta, **transcript},
            indent=2,
            ensure_ascii=True,
        )
        + "\n",
        encoding="utf-8",
    )
    out.print(f"wrote {escape(str(wav))} ({len(caller) / RATE:.1f} s, caller left, bot right)")
    out.print(f"wrote {escape(str(text))}")
    out.print(f"wrote {escape(str(data))}")
    return 0


# --- plot ---------------------------------------------------------------------------------


def _plot(args: argparse.Namespace, store: RecordStore, out: Console, err: Console) -> int:
    from ops.plot import plot_record

    record = store.open(args.id)
    target: Path = args.out or Path(f"{record.call_sid}.png")
    with err.status("drawing"):
        plot_record(record, target)
    out.print(f"wrote {escape(str(target))}")
    return 0


# --- cleanup ------------------------------------------------------------------------------


def _cleanup(args: argparse.Namespace, store: RecordStore, out: Console, err: Console) -> int:
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
        out.print(f"nothing to remove ({', '.join(limits)}; {_size(before)} in use)")
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
        table.add_row(removal.call_sid, _when(when) if when else "-", why, _size(removal.bytes))
    out.print(table)
    freed = sum(r.bytes for r in removals)
    out.print(f"{verb} {_size(freed)} of {_size(before)}")
    return 0


# --- replay -------------------------------------------------------------------------------


class LazyWhisper:
    """The server's own Whisper, loaded on first use.

    Replay transcribes only after the call: loading the model then cannot steal CPU
    from a server running on the same machine while it is being measured.
    """

    def __init__(self) -> None:
        self._transcribe: Transcribe | None = None

    def __call__(self, pcm16: np.ndarray) -> str:
        if self._transcribe is None:
            self._transcribe = _load_whisper()
        return self._transcribe(pcm16)


def _load_whisper() -> Transcribe:
    from agents.assets import STT_ASSETS, ModelCache
    from agents.cascade.stt import WhisperTranscriber
    from app.settings import Settings
    from media.codec import pcm16_to_float
    from media.resample import resample

    settings = Settings.from_env()
    asset = STT_ASSETS.get(settings.stt_model)
    model_dir = (
        ModelCache(settings.model_cache_dir).path(asset) if asset else Path(settings.stt_model)
    )
    whisper = WhisperTranscriber(
        model_dir, threads=settings.model_threads, language=settings.stt_language
    )

    def transcribe(pcm16: np.ndarray) -> str:
        return whisper.transcribe(resample(pcm16_to_float(pcm16), RATE, 16000)).text

    return transcribe


def _new_words(text: str | None, *, answered: bool) -> Text:
    if text:
        return Text(text)
    if text == "":
        return Text("(no words)", style="dim")
    return Text("… (not transcribed)" if answered else "-", style="dim")


def _diff_table(result: ReplayResult) -> Table:
    table = Table(title=f"replay of call {result.call_sid}", title_justify="left")
    table.add_column("#", justify="right")
    table.add_column("at", no_wrap=True)
    table.add_column("caller", ratio=1)
    table.add_column("m2m then", justify="right", no_wrap=True)
    table.add_column("m2m now", justify="right", no_wrap=True)
    table.add_column("Δ ms", justify="right", no_wrap=True)
    table.add_column("bot then", ratio=1)
    table.add_column("bot now", ratio=1)
    table.add_column("barge-ins then/now", justify="right", no_wrap=True)
    for turn in result.turns:
        then, now = turn.recorded_latency_ms, turn.new_latency_ms
        delta = Text("-")
        if then is not None and now is not None:
            delta = Text(f"{now - then:+.0f}", style="red" if now - then > 0 else "green")
        elif then is not None:
            delta = Text("unanswered", style="red")
        barge = Text(f"{turn.recorded_clears}/{turn.new_clears}")
        if turn.recorded_clears and not turn.new_clears:
            barge.stylize("red")
        table.add_row(
            str(turn.number),
            _clock(turn.start_ms),
            Text(turn.caller_text or "(speech)"),
            _ms(then),
            _ms(now),
            delta,
            Text(turn.recorded_text or "-"),
            _new_words(turn.new_text, answered=now is not None),
            barge,
        )
    return table


async def _run_replay(
    record: CallRecord, args: argparse.Namespace, transcribe: Transcribe | None, err: Console
) -> ReplayResult:
    from ops.replay import replay

    # The bar runs on the recording's length: the replay places the caller's speech at
    # its recorded times, so the new call lasts about as long (plus the hang-up wait).
    wav = record.path / "caller.wav"
    recorded_s = max(wav.stat().st_size - 44, 0) / 2 / RATE if wav.exists() else 0.0
    expected_s = max(recorded_s / args.speed, 1.0)

    async def show_progress(progress: Progress, call: asyncio.Task[ReplayResult]) -> None:
        task = progress.add_task("call", total=expected_s)
        loop = asyncio.get_running_loop()
        began = loop.time()
        while not call.done():
            progress.update(task, completed=min(loop.time() - began, expected_s))
            await asyncio.wait({call}, timeout=0.25)

    with Progress(
        TextColumn("replaying"), BarColumn(), TimeElapsedColumn(), console=err, transient=True
    ) as progress:
        try:
            async with asyncio.TaskGroup() as group:
                call = group.create_task(
                    replay(
                        record,
                        base_url=args.to.rstrip("/"),
                        auth_token=args.auth_token,
                        speed=args.speed,
                        transcribe=transcribe,
                        voice=None if args.voice == "recorded" else args.voice,
                        hangup_after_ms=args.hangup_after_ms,
                        connect_to=args.connect_to,
                    )
                )
                group.create_task(show_progress(progress, call))
        except BaseExceptionGroup as group:
            # Only the replay can fail (the bar just watches it): raise its own error,
            # so that main() reports it in one line like any other.
            raise _first_leaf(group) from group
    return call.result()


def _first_leaf(error: BaseException) -> BaseException:
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


def _replay(args: argparse.Namespace, store: RecordStore, out: Console, err: Console) -> int:
    from ops.replay import speed_warning, verdict

    record = store.open(args.id)
    if args.speed != 1.0:
        # Before the call, not after: the operator may rather stop and replay at 1x.
        err.print(f"[yellow]warning:[/] {escape(speed_warning(args.speed))}")
    transcribe = LazyWhisper() if args.transcribe else None
    result = asyncio.run(_run_replay(record, args, transcribe, err))
    out.print(_diff_table(result))
    out.print(
        f"mouth-to-mouth p50: recorded {_ms(result.recorded_p50_ms)} ms, "
        f"now {_ms(result.new_p50_ms)} ms; barge-ins that stopped the bot: recorded "
        f"{result.recorded_barge_ins}, now {result.new_barge_ins}"
    )
    for warning in result.warnings:
        if warning == speed_warning(args.speed):
            continue  # said before the call
        err.print(f"[yellow]warning:[/] {escape(warning)}")
    worse, reasons = verdict(result, args.threshold_ms)
    if worse:
        out.print("[bold red]worse[/] than the recording:")
        for reason in reasons:
            out.print(f"  - {escape(reason)}")
        return 1
    out.print("[bold green]not worse[/] than the recording")
    return 0


# --- entry point --------------------------------------------------------------------------

Command = Callable[[argparse.Namespace, RecordStore, Console, Console], int]


def main(argv: list[str] | None = None) -> int:
    """`offhook calls ...`; see the module docstring for the exit status."""
    from ops.caller_voice import CallerVoiceError
    from ops.simulate import SimulationError

    args = build_parser().parse_args(argv)
    out = Console(highlight=False, width=None if sys.stdout.isatty() else PIPE_WIDTH)
    # Messages on stderr stay one line each, whatever the width: they get grepped.
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    # Records hold strangers' strings (a `to` parameter, transcripts): never let them
    # drive the terminal.
    out.push_render_hook(Neutralise())
    err.push_render_hook(Neutralise())
    store = RecordStore(args.data_dir / "calls")
    run: Command = args.run
    try:
        return run(args, store, out, err)
    except (RecordError, SimulationError, CallerVoiceError, ValueError, OSError) as exc:
        # Expected failures: one line, no traceback. (CorruptRecord names the file.)
        print(f"{PROG}: {neutralise(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
