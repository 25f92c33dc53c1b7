"""`offhook calls plot`: one call as a PNG timeline an operator can read at a glance.

Two waveforms on one time axis (caller on top, bot below, seconds since the stream's
`start`, the clock every record uses), with what the bot's turn taking saw drawn over
them: caller speech as the VAD heard it (SpeechStart → SpeechStop), bot turns (where the bot
audio is not silent), end-of-turn decisions, barge-ins, and each reply's mouth-to-mouth
latency as an arrow from the end of the caller's speech to the start of the reply.

matplotlib is imported inside `plot_timeline`, and only the object-oriented `Figure` is
used (no pyplot): nothing is registered globally, so plotting many calls in one process
leaks no figures.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np

from callevents import BargeIn, EndOfTurn, SpeechStart, SpeechStop, parse_timeline
from recordings.record import CallRecord

__all__ = [
    "TimelineMarks",
    "marks_from_record",
    "plot_record",
    "plot_timeline",
    "speech_spans",
    "voiced_spans",
]

RATE: Final = 8000
FRAME_SAMPLES: Final = 160  # 20 ms, Twilio's frame
# The simulator's rule for "bot audio heard" (ops.simulate.BotEar): a 20 ms frame above
# -45 dBFS RMS is voiced, and pauses shorter than 300 ms stay inside one utterance.
VOICED_DBFS: Final = -45.0
UTTERANCE_GAP_MS: Final = 300
# Points per waveform: about two per horizontal pixel at 1600 px, so a long call draws
# as fast as a short one and still shows every syllable's envelope.
ENVELOPE_BINS: Final = 3200
WIDTH_PX: Final = 1600
HEIGHT_PX: Final = 800
DPI: Final = 100

_CALLER_COLOUR: Final = "#1f77b4"
_BOT_COLOUR: Final = "#2ca02c"
_EOT_COLOUR: Final = "#7f3fbf"
_BARGE_COLOUR: Final = "#d62728"


@dataclass(frozen=True)
class TimelineMarks:
    """What is drawn over the waveforms, in ms on the call clock."""

    caller_speech: list[tuple[float, float]] = field(default_factory=list)
    end_of_turn: list[float] = field(default_factory=list)
    barge_ins: list[float] = field(default_factory=list)
    # (caller speech end, reply start, mouth-to-mouth ms) for each answered turn.
    latencies: list[tuple[float, float, float]] = field(default_factory=list)


def voiced_spans(
    audio: np.ndarray, *, threshold_dbfs: float = VOICED_DBFS, gap_ms: float = UTTERANCE_GAP_MS
) -> list[tuple[float, float]]:
    """[start, end) ms of the non-silent stretches of int16 8 kHz audio, 20 ms frames."""
    frames = len(audio) // FRAME_SAMPLES
    if frames == 0:
        return []
    blocks = audio[: frames * FRAME_SAMPLES].astype(np.float64).reshape(frames, FRAME_SAMPLES)
    rms = np.sqrt(np.mean(blocks**2, axis=1))
    voiced = np.flatnonzero(rms >= 32768.0 * 10.0 ** (threshold_dbfs / 20.0))
    frame_ms = FRAME_SAMPLES * 1000 / RATE
    spans: list[list[float]] = []
    for index in voiced.tolist():
        start = index * frame_ms
        if spans and start - spans[-1][1] < gap_ms:
            spans[-1][1] = start + frame_ms
        else:
            spans.append([start, start + frame_ms])
    return [(start, end) for start, end in spans]


def speech_spans(timeline: Iterable[Mapping[str, Any]], end_ms: float) -> list[tuple[float, float]]:
    """SpeechStart → SpeechStop pairs; speech still open when the call ended closes at
    end_ms. A line without a time is skipped."""
    spans: list[tuple[float, float]] = []
    opened: float | None = None
    for t_ms, event in parse_timeline(timeline):
        if t_ms is None:
            continue
        if isinstance(event, SpeechStart) and opened is None:
            opened = t_ms
        elif isinstance(event, SpeechStop) and opened is not None:
            spans.append((opened, t_ms))
            opened = None
    if opened is not None:
        spans.append((opened, max(opened, end_ms)))
    return spans


def marks_from_record(
    timeline: Sequence[Mapping[str, Any]], transcript: Mapping[str, Any], end_ms: float
) -> TimelineMarks:
    """Turn-taking marks from a record's timeline, latencies from its transcript."""
    latencies = []
    for turn in transcript.get("turns", []):
        latency = turn.get("latency") or {}
        m2m = latency.get("mouth_to_mouth_ms")
        start = turn.get("start_ms")
        if m2m is None or start is None:
            continue
        latencies.append((float(start) - float(m2m), float(start), float(m2m)))
    events = [(t, event) for t, event in parse_timeline(timeline) if t is not None]
    return TimelineMarks(
        caller_speech=speech_spans(timeline, end_ms),
        end_of_turn=[t for t, event in events if isinstance(event, EndOfTurn)],
        barge_ins=[t for t, event in events if isinstance(event, BargeIn)],
        latencies=latencies,
    )


def _envelope(audio: np.ndarray, bins: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(times s, min, max) per bin, as fractions of full scale."""
    x = audio.astype(np.float32) / 32768.0
    if len(x) == 0:
        return np.zeros(1), np.zeros(1), np.zeros(1)
    per_bin = max(1, -(-len(x) // bins))
    padded = np.zeros(-(-len(x) // per_bin) * per_bin, dtype=np.float32)
    padded[: len(x)] = x
    blocks = padded.reshape(-1, per_bin)
    times = (np.arange(len(blocks)) * per_bin + per_bin / 2) / RATE
    return times, blocks.min(axis=1), blocks.max(axis=1)


def plot_timeline(
    caller: np.ndarray,
    bot: np.ndarray,
    marks: TimelineMarks,
    out: Path,
    *,
    title: str = "",
    width_px: int = WIDTH_PX,
    height_px: int = HEIGHT_PX,
) -> Path:
    """Draw the call and write it as a PNG of width_px x height_px; returns `out`."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    duration_s = max(len(caller), len(bot), 1) / RATE
    figure = Figure(figsize=(width_px / DPI, height_px / DPI), dpi=DPI)
    caller_ax, bot_ax = figure.subplots(2, 1, sharex=True)
    for ax, audio, colour, name in (
        (caller_ax, caller, _CALLER_COLOUR, "caller"),
        (bot_ax, bot, _BOT_COLOUR, "bot"),
    ):
        times, low, high = _envelope(audio, ENVELOPE_BINS)
        ax.fill_between(times, low, high, color=colour, linewidth=0.4)
        ax.set_ylim(-1.05, 1.05)
        ax.set_ylabel(name, fontsize=12)
        ax.set_yticks([-1, 0, 1])
        ax.grid(axis="x", alpha=0.3)
    for start, end in marks.caller_speech:
        caller_ax.axvspan(start / 1000, end / 1000, color=_CALLER_COLOUR, alpha=0.12, lw=0)
    for start, end in voiced_spans(bot):
        bot_ax.axvspan(start / 1000, end / 1000, color=_BOT_COLOUR, alpha=0.12, lw=0)
    for t in marks.end_of_turn:
        for ax in (caller_ax, bot_ax):
            ax.axvline(t / 1000, color=_EOT_COLOUR, linestyle="--", linewidth=1.2)
    for t in marks.barge_ins:
        caller_ax.plot([t / 1000], [0.92], marker="v", color=_BARGE_COLOUR, markersize=11)
        bot_ax.axvline(t / 1000, color=_BARGE_COLOUR, linewidth=1.2)
    for speech_end, reply_start, m2m in marks.latencies:
        bot_ax.annotate(
            "",
            xy=(reply_start / 1000, 0.8),
            xytext=(speech_end / 1000, 0.8),
            arrowprops={"arrowstyle": "<->", "color": "black", "lw": 1.0},
        )
        bot_ax.text(
            (speech_end + reply_start) / 2000,
            0.86,
            f"{m2m:.0f} ms",
            ha="center",
            va="bottom",
            fontsize=10,
            bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.8},
        )
    bot_ax.set_xlim(0, duration_s)
    bot_ax.set_xlabel("seconds since stream start", fontsize=11)
    legend = [
        Patch(color=_CALLER_COLOUR, alpha=0.25, label="caller speech (VAD)"),
        Patch(color=_BOT_COLOUR, alpha=0.25, label="bot audio"),
        Line2D([], [], color=_EOT_COLOUR, linestyle="--", label="end of turn"),
        Line2D([], [], color=_BARGE_COLOUR, marker="v", linestyle="", label="barge-in"),
        Line2D([], [], color="black", marker="$\u2194$", linestyle="", label="mouth to mouth"),
    ]
    figure.legend(handles=legend, loc="upper right", ncols=len(legend), fontsize=10)
    if title:
        figure.suptitle(title, x=0.01, ha="left", fontsize=13)
    figure.subplots_adjust(left=0.05, right=0.99, top=0.9, bottom=0.08, hspace=0.08)
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, format="png", dpi=DPI)
    return out


def plot_record(record: CallRecord, out: Path) -> Path:
    """plot_timeline for a stored call record."""
    caller = record.caller_audio()
    bot = record.bot_audio()
    timeline = list(record.timeline())
    end_ms = max(len(caller), len(bot)) * 1000 / RATE
    marks = marks_from_record(timeline, record.transcript(), end_ms)
    meta = record.meta
    title = f"call {meta.get('call_sid', record.path.name)}"
    started = meta.get("started_at")
    if isinstance(started, str) and started:
        title += f"  ·  {started.replace('T', ' ').removesuffix('Z')} UTC"
    title += f"  ·  {end_ms / 1000:.1f} s"
    return plot_timeline(caller, bot, marks, out, title=title)
