"""`offhook calls export` and `offhook calls plot`: one call written out as files, a
stereo WAV (caller left, bot right) with its transcript as text and JSON, or a PNG
timeline of it."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import numpy as np
from rich.console import Console
from rich.markup import escape

from ops.calls_format import as_mapping, format_clock, format_ms
from ops.terminal import neutralise
from recordings.catalog import RecordCatalog
from recordings.record import CallRecord

__all__ = ["export_call", "plot_call", "transcript_lines"]

RATE: Final = 8000


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
            f"[{format_clock(turn.get('start_ms'))} - {format_clock(turn.get('end_ms'))}] "
            f"{turn.get('speaker')}: {turn.get('text')}"
        )
        if turn.get("truncated"):
            line += f" [cut off; meant: {turn.get('intended')}]"
        m2m = format_ms(as_mapping(turn.get("latency")).get("mouth_to_mouth_ms"))
        if m2m != "-":
            line += f" ({m2m} ms mouth to mouth)"
        lines.append(line)
    return lines


def export_call(args: argparse.Namespace, store: RecordCatalog, out: Console, err: Console) -> int:
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


def plot_call(args: argparse.Namespace, store: RecordCatalog, out: Console, err: Console) -> int:
    from ops.plot import plot_record

    record = store.open(args.id)
    target: Path = args.out or Path(f"{record.call_sid}.png")
    with err.status("drawing"):
        plot_record(record, target)
    out.print(f"wrote {escape(str(target))}")
    return 0
