"""`offhook calls replay`: call a running server with a recorded caller, and compare.

The recorded caller is cut into utterances: the transcript's caller turns and the
timeline's SpeechStart → SpeechStop spans (vad_start → vad_stop), merged where less than
700 ms apart (a caller's pause inside one thought). `ops.simulate.simulate_call` then
dials the server exactly as Twilio would and plays each utterance at its original time
on the call clock: each is a CallerTurn(after="start") whose delay is the silence since
the previous one ended (the first one's since the stream's `start`), so the caller
speaks as in the recording whatever the bot does. The caller does not react to the new
bot: that is the point of a replay, and why a bot that is now slower may be talked over.

Both calls are then measured the same way, at the caller's ear, with the simulator's
rule (ops.simulate.BotEar: bot audio above -45 dBFS, pauses under 300 ms inside one
utterance): a caller utterance is answered by the first bot utterance that starts after
the caller began it and before the caller's next one, and mouth to mouth runs from
the end of the utterance to that start. The recorded figure is measured on the
recorded bot.wav rather than taken from the agent's own turn_timing, so the two
columns of the diff differ only by what the bot did, not by how it was measured.
Barge-ins are compared by `Clear`s (one per barge-in that stopped the bot) in each
utterance's window.

At speed != 1 the simulator sends frames faster than real time while timestamps stay
on the 20 ms call clock; the server's processing still takes wall time, so new
latencies in call-clock ms are inflated by `speed` and are not comparable with the
recording's. ReplayResult.warnings says so.
"""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from callevents import Clear, parse_timeline
from ops.plot import speech_spans
from ops.simulate import (
    FRAME_SAMPLES,
    After,
    BotEar,
    CallerTurn,
    CallReport,
    SimulationConfig,
    simulate_call,
)
from recordings.record import CallRecord

__all__ = [
    "MERGE_GAP_MS",
    "ReplayResult",
    "Segment",
    "TurnDiff",
    "caller_segments",
    "replay",
    "speed_warning",
    "verdict",
]

RATE: Final = 8000
# Caller speech closer together than this is one utterance (a pause, not a new turn).
MERGE_GAP_MS: Final = 700.0
# However long the recording, give the replay this much more before giving up.
_SLACK_S: Final = 60.0

Transcribe = Callable[[np.ndarray], str]


@dataclass(frozen=True)
class Segment:
    """One caller utterance of the recording: [start_ms, end_ms) on the call clock."""

    start_ms: int
    end_ms: int
    text: str  # the caller's words from the transcript; "" where only the VAD heard speech


@dataclass(frozen=True)
class TurnDiff:
    """One caller utterance, and how the bot answered it then and now."""

    number: int
    caller_text: str
    start_ms: float
    end_ms: float
    recorded_latency_ms: float | None  # None: not answered
    new_latency_ms: float | None
    recorded_text: str | None  # what the bot said then (transcript), None if nothing
    new_text: str | None  # transcribed new reply; None without a transcriber or reply
    recorded_clears: int  # barge-ins that stopped the bot during this utterance
    new_clears: int

    @property
    def recorded_answered(self) -> bool:
        return self.recorded_latency_ms is not None

    @property
    def new_answered(self) -> bool:
        return self.new_latency_ms is not None


@dataclass
class ReplayResult:
    call_sid: str  # the recorded call
    speed: float
    turns: list[TurnDiff]
    report: CallReport = field(repr=False)  # the new call, as the simulator saw it
    warnings: list[str] = field(default_factory=list)

    @property
    def recorded_p50_ms(self) -> float | None:
        return _median([t.recorded_latency_ms for t in self.turns])

    @property
    def new_p50_ms(self) -> float | None:
        return _median([t.new_latency_ms for t in self.turns])

    @property
    def recorded_barge_ins(self) -> int:
        return sum(t.recorded_clears for t in self.turns)

    @property
    def new_barge_ins(self) -> int:
        return sum(t.new_clears for t in self.turns)


def _median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


# --- the recording ------------------------------------------------------------------------


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def caller_segments(
    transcript: Mapping[str, Any],
    timeline: Sequence[Mapping[str, Any]],
    *,
    end_ms: float,
    merge_gap_ms: float = MERGE_GAP_MS,
) -> list[Segment]:
    """The recording's caller utterances, in order, in whole ms within [0, end_ms].

    Transcript turns carry the VAD's preroll (speech onset included) but leave out
    speech that never became a turn (a backchannel, a cough); VAD spans catch those.
    Both together, merged, replay everything the bot reacted to.
    """
    spans: list[tuple[float, float, str]] = []
    for turn in transcript.get("turns", []):
        if not isinstance(turn, Mapping) or turn.get("speaker") != "caller":
            continue
        start, end = _number(turn.get("start_ms")), _number(turn.get("end_ms"))
        if start is not None and end is not None and end > start:
            spans.append((start, end, str(turn.get("text") or "")))
    spans += [(start, end, "") for start, end in speech_spans(timeline, end_ms)]
    merged: list[list[Any]] = []
    for start, end, text in sorted(spans, key=lambda s: (s[0], s[1])):
        start, end = max(0.0, start), min(end, end_ms)
        if end <= start:
            continue
        if merged and start - merged[-1][1] <= merge_gap_ms:
            last = merged[-1]
            last[1] = max(last[1], end)
            if text:
                last[2].append(text)
        else:
            merged.append([start, end, [text] if text else []])
    # Whole milliseconds: every delay between turns is then exact on the 8 kHz clock.
    return [
        Segment(round(start), max(round(start) + 1, round(end)), " ".join(texts))
        for start, end, texts in merged
    ]


def _ear_utterances(bot: np.ndarray) -> list[tuple[float, float]]:
    """Bot utterances in recorded bot audio, by the simulator's own rule."""
    ear = BotEar()
    for start in range(0, len(bot) - FRAME_SAMPLES + 1, FRAME_SAMPLES):
        ear.hear(bot[start : start + FRAME_SAMPLES], start)
    return [(a * 1000 / RATE, b * 1000 / RATE) for a, b in ear.utterances]


def _answer(
    utterances: Sequence[tuple[float, float]], start_ms: float, next_start_ms: float
) -> list[tuple[float, float]]:
    """The bot utterances that answer a caller turn (ops.simulate_report.turn_results' window)."""
    return [(a, b) for a, b in utterances if start_ms < a < next_start_ms]


@dataclass(frozen=True)
class _Recorded:
    segments: list[Segment]
    audio: list[np.ndarray]  # the caller's audio of each segment
    latency_ms: list[float | None]
    bot_text: list[str | None]
    clears: list[int]
    length_ms: float


def _read_recording(record: CallRecord) -> _Recorded:
    """Everything the replay needs from the record (blocking file reads)."""
    caller = record.caller_audio()
    bot = record.bot_audio()
    timeline = list(record.timeline())
    transcript = record.transcript()
    length_ms = len(caller) * 1000 / RATE
    segments = caller_segments(transcript, timeline, end_ms=length_ms)
    utterances = _ear_utterances(bot)
    clears = [
        t for t, event in parse_timeline(timeline) if isinstance(event, Clear) and t is not None
    ]
    bot_turns = [
        (start, str(turn.get("text") or ""))
        for turn in transcript.get("turns", [])
        if isinstance(turn, Mapping)
        and turn.get("speaker") == "bot"
        and (start := _number(turn.get("start_ms"))) is not None
    ]
    latency: list[float | None] = []
    texts: list[str | None] = []
    counts: list[int] = []
    for i, segment in enumerate(segments):
        after = segments[i + 1].start_ms if i + 1 < len(segments) else float("inf")
        answer = _answer(utterances, segment.start_ms, after)
        latency.append(answer[0][0] - segment.end_ms if answer else None)
        said = [text for start, text in bot_turns if segment.start_ms <= start < after and text]
        texts.append(" ".join(said) if said else None)
        counts.append(sum(1 for t in clears if segment.start_ms <= t < after))
    audio = [caller[s.start_ms * RATE // 1000 : s.end_ms * RATE // 1000] for s in segments]
    return _Recorded(segments, audio, latency, texts, counts, length_ms)


def _caller_turns(recorded: _Recorded, voice: str | None) -> list[CallerTurn]:
    """One CallerTurn per segment, each at its recorded start (see the module doc)."""
    turns = []
    previous_end = 0
    for segment, audio in zip(recorded.segments, recorded.audio, strict=True):
        delay = max(0, segment.start_ms - previous_end)
        if voice is None:
            turns.append(CallerTurn(audio=audio, after=After.START, delay_ms=delay))
        else:
            turns.append(CallerTurn(text=segment.text, after=After.START, delay_ms=delay))
        previous_end = segment.end_ms
    return turns


# --- the replay ------------------------------------------------------------------------


def speed_warning(speed: float) -> str:
    return (
        f"speed {speed:g}: frames are sent at {speed:g}x real time, so the new latencies "
        "(call-clock ms) are not comparable with the recorded ones"
    )


async def replay(
    record: CallRecord,
    *,
    base_url: str,
    auth_token: str | None,
    speed: float = 1.0,
    transcribe: Transcribe | None = None,
    voice: str | None = None,
    hangup_after_ms: int = 4000,
    connect_to: str | None = None,
) -> ReplayResult:
    """Replay a recorded caller against the server at `base_url` and compare the bots.

    `transcribe` (int16 8 kHz audio → text, blocking; run in a thread after the call)
    gives each new reply's words; without it only timing is compared. `voice` ("espeak"
    or "piper") re-speaks the transcript's caller words instead of playing the
    recorded audio, for records whose audio is unusable; utterances without words are
    then left out, and as synthetic speech is not as long as the original, the silences
    between utterances are kept rather than their start times. Raises SimulationError
    when the call cannot be set up.
    """
    recorded = await asyncio.to_thread(_read_recording, record)
    warnings: list[str] = []
    if voice is not None:
        keep = [i for i, s in enumerate(recorded.segments) if s.text]
        if len(keep) < len(recorded.segments):
            warnings.append(
                f"{len(recorded.segments) - len(keep)} caller utterance(s) without words "
                f"are left out: --voice {voice} can only speak the transcript"
            )
        recorded = _Recorded(
            [recorded.segments[i] for i in keep],
            [recorded.audio[i] for i in keep],
            [recorded.latency_ms[i] for i in keep],
            [recorded.bot_text[i] for i in keep],
            [recorded.clears[i] for i in keep],
            recorded.length_ms,
        )
    if not recorded.segments:
        warnings.append("the recording holds no caller speech: only the greeting is compared")
    if speed != 1.0:
        warnings.append(speed_warning(speed))
    config = SimulationConfig(
        base_url=base_url,
        auth_token=auth_token,
        turns=_caller_turns(recorded, voice),
        connect_to=connect_to,
        hangup_after_ms=hangup_after_ms,
        max_call_s=recorded.length_ms / 1000 + _SLACK_S,
        voice_engine=voice or "espeak",
        speed=speed,
    )
    report = await simulate_call(config)
    if len(report.turns) < len(recorded.segments):
        warnings.append(
            f"the new call ended after {len(report.turns)} of "
            f"{len(recorded.segments)} caller utterances"
        )
    warnings += report.protocol_violations
    rows = []
    for i, segment in enumerate(recorded.segments):
        new = report.turns[i] if i < len(report.turns) else None
        new_text: str | None = None
        new_clears = 0
        if new is not None:
            after = (
                report.turns[i + 1].speech_start_ms if i + 1 < len(report.turns) else float("inf")
            )
            start = new.speech_start_ms
            new_clears = sum(1 for t in report.clears if start <= t < after)
            answer = _answer(report.bot_utterances, start, after)
            if answer and transcribe is not None:
                audio = np.concatenate([report.bot_audio_between(a, b) for a, b in answer])
                try:
                    new_text = await asyncio.to_thread(transcribe, audio)
                except Exception as exc:  # a model that fails to load or run: timing stands
                    warnings.append(f"could not transcribe the new replies: {exc}")
                    transcribe = None
        rows.append(
            TurnDiff(
                number=i + 1,
                caller_text=segment.text,
                start_ms=segment.start_ms,
                end_ms=segment.end_ms,
                recorded_latency_ms=recorded.latency_ms[i],
                new_latency_ms=None if new is None else new.latency_ms,
                recorded_text=recorded.bot_text[i],
                new_text=new_text,
                recorded_clears=recorded.clears[i],
                new_clears=new_clears,
            )
        )
    return ReplayResult(
        call_sid=record.call_sid, speed=speed, turns=rows, report=report, warnings=warnings
    )


def verdict(result: ReplayResult, threshold_ms: float = 300.0) -> tuple[bool, list[str]]:
    """(worse, reasons): worse when the new p50 mouth to mouth exceeds the recorded one
    by more than `threshold_ms`, an answered utterance went unanswered, or a barge-in
    that stopped the bot no longer does."""
    reasons = []
    recorded, new = result.recorded_p50_ms, result.new_p50_ms
    if recorded is not None and new is not None and new - recorded > threshold_ms:
        reasons.append(
            f"mouth-to-mouth p50 {new:.0f} ms, recorded {recorded:.0f} ms: "
            f"+{new - recorded:.0f} ms is over the {threshold_ms:.0f} ms threshold"
        )
    for turn in result.turns:
        label = f"caller turn {turn.number}" + (
            f" ({turn.caller_text!r})" if turn.caller_text else ""
        )
        if turn.recorded_answered and not turn.new_answered:
            reasons.append(f"{label} was answered in the recording and is not now")
        if turn.recorded_clears and not turn.new_clears:
            reasons.append(
                f"{label} barged in and stopped the bot in the recording; now it does not"
            )
    return bool(reasons), reasons
