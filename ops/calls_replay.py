"""`offhook calls replay ID --to URL`: play a recorded caller to a running server
(ops.replay), transcribe the new bot's replies, and show the recorded and the new bot
turn by turn, with a verdict: worse than the recording, or not."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Final

import numpy as np
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from ops.calls_format import format_clock, format_ms
from recordings.catalog import RecordCatalog
from recordings.record import CallRecord

if TYPE_CHECKING:
    from ops.replay import ReplayResult

__all__ = ["LazyWhisper", "Transcribe", "replay_call"]

RATE: Final = 8000

Transcribe = Callable[[np.ndarray], str]


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
        model_dir,
        threads=settings.model_threads,
        language=settings.stt_language,
        hotwords=settings.stt_hotwords,
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
            format_clock(turn.start_ms),
            Text(turn.caller_text or "(speech)"),
            format_ms(then),
            format_ms(now),
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


def replay_call(args: argparse.Namespace, store: RecordCatalog, out: Console, err: Console) -> int:
    from ops.replay import speed_warning, verdict

    record = store.open(args.id)
    if args.speed != 1.0:
        # Before the call, not after: the operator may rather stop and replay at 1x.
        err.print(f"[yellow]warning:[/] {escape(speed_warning(args.speed))}")
    transcribe = LazyWhisper() if args.transcribe else None
    result = asyncio.run(_run_replay(record, args, transcribe, err))
    out.print(_diff_table(result))
    out.print(
        f"mouth-to-mouth p50: recorded {format_ms(result.recorded_p50_ms)} ms, "
        f"now {format_ms(result.new_p50_ms)} ms; barge-ins that stopped the bot: recorded "
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
