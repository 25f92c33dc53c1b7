"""`offhook calls`: find any call, see what happened turn by turn, listen to it, and
replay it against the current bot to check a change.

    offhook calls list     [--since 7d] [--from NUMBER] [--agent NAME] [--errors]
                           [--sort start|latency|duration] [--limit N]
    offhook calls show     ID
    offhook calls export   ID [--out DIR]        stereo WAV (caller left, bot right) + transcript
    offhook calls plot     ID [--out FILE.png]   waveforms, turns, barge-ins, latencies
    offhook calls cleanup  [--retention-days N] [--max-storage-gb G] [--dry-run]
    offhook calls replay   ID --to URL [--auth-token T] [--speed F] [--threshold-ms 300]

Records are read from `<data dir>/calls` (--data-dir, else $DATA_DIR, else ./data), or,
with --records-url (else $RECORDS_URL) s3://BUCKET/PREFIX, from the S3-compatible store
every gateway uploads to (endpoint and credentials: the standard AWS_* variables).
Exit status: 0 done; 1 the replayed bot did worse than the recording; 2 bad input (an
invalid call id, a missing or unreadable record, a server that cannot be called),
reported in one line on stderr.

The command line (`build_parser`, `main`) lives here; each subcommand in its own module:
ops.calls_list, ops.calls_show, ops.calls_export (export and plot), ops.calls_cleanup,
ops.calls_replay; ops.calls_format formats what they print.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

from rich.console import Console

from ops.calls_cleanup import cleanup_calls
from ops.calls_export import RATE, export_call, plot_call, transcript_lines
from ops.calls_format import PROG
from ops.calls_list import list_calls, select
from ops.calls_replay import LazyWhisper, Transcribe, replay_call
from ops.calls_show import control_events, incidents, show_call
from ops.terminal import Neutralise, neutralise
from recordings.catalog import RecordCatalog
from recordings.errors import RecordError
from recordings.layout import parse_time
from recordings.s3_records import S3Records
from recordings.s3_store import S3RecordStore
from recordings.store import RecordStore

__all__ = [
    "PIPE_WIDTH",
    "PROG",
    "RATE",
    "Command",
    "LazyWhisper",
    "Transcribe",
    "build_parser",
    "control_events",
    "incidents",
    "main",
    "open_catalog",
    "parse_since",
    "select",
    "transcript_lines",
]

# Piped output (grep, less, a CI log) is not a terminal; rich would fold rows at 80
# columns. Wide enough for every column of `list` on one line.
PIPE_WIDTH: Final = 200
_RELATIVE = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")
_UNITS: Final = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


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
    parser.add_argument(
        "--records-url",
        default=os.environ.get("RECORDS_URL", ""),
        metavar="s3://BUCKET/PREFIX",
        help="read every gateway's records from this S3 store instead; '' for the local "
        "folder (default: $RECORDS_URL)",
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
    listing.set_defaults(run=list_calls)

    show = commands.add_parser("show", help="one call: summary, turns with latencies, incidents")
    show.add_argument("id", metavar="ID")
    show.set_defaults(run=show_call)

    export = commands.add_parser("export", help="stereo WAV and transcript of one call")
    export.add_argument("id", metavar="ID")
    export.add_argument("--out", type=Path, default=Path("."), help="folder (default: .)")
    export.set_defaults(run=export_call)

    plot = commands.add_parser("plot", help="PNG timeline of one call")
    plot.add_argument("id", metavar="ID")
    plot.add_argument("--out", type=Path, help="PNG file (default: ./<ID>.png)")
    plot.set_defaults(run=plot_call)

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
    cleanup.set_defaults(run=cleanup_calls)

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
    replay.set_defaults(run=replay_call)
    return parser


# --- entry point --------------------------------------------------------------------------

Command = Callable[[argparse.Namespace, RecordCatalog, Console, Console], int]


def main(argv: list[str] | None = None) -> int:
    """`offhook calls ...`; see the module docstring for the exit status."""
    from ops.caller_voice import CallerVoiceError
    from ops.twilio_webhook import SimulationError

    args = build_parser().parse_args(argv)
    out = Console(highlight=False, width=None if sys.stdout.isatty() else PIPE_WIDTH)
    # Messages on stderr stay one line each, whatever the width: they get grepped.
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    # Records hold strangers' strings (a `to` parameter, transcripts): never let them
    # drive the terminal.
    out.push_render_hook(Neutralise())
    err.push_render_hook(Neutralise())
    run: Command = args.run
    store: RecordCatalog | None = None
    try:
        store = open_catalog(args.records_url, args.data_dir)
        return run(args, store, out, err)
    except (RecordError, SimulationError, CallerVoiceError, ValueError, OSError) as exc:
        # Expected failures: one line, no traceback. (CorruptRecord names the file.)
        print(f"{PROG}: {neutralise(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    finally:
        if store is not None:
            store.close()


def open_catalog(records_url: str, data_dir: Path) -> RecordCatalog:
    """The S3 store at `records_url`, else the local folder `data_dir`/calls."""
    if records_url:
        return S3RecordStore(S3Records.from_url(records_url))
    return RecordStore(data_dir / "calls")


if __name__ == "__main__":
    raise SystemExit(main())
