"""What a simulated call reports: each caller turn and the bot's answer, mouth to mouth
at the caller's ear, and the call's marks, clears, underruns and protocol violations,
with both tracks of audio; and the report printed for `offhook simulate`.

Every time is ms since the stream's `start` event (see ops.twilio_caller's clock).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ops.caller_script import RATE, UTTERANCE_GAP_MS, VOICED_DBFS, CallerScript, samples_to_ms

__all__ = ["CallReport", "TurnResult", "print_report", "turn_results"]


@dataclass(frozen=True)
class TurnResult:
    """One caller turn and the bot's answer, in ms since `start` (see CallReport)."""

    text: str
    speech_start_ms: float
    speech_end_ms: float
    # Start of the first bot utterance heard after the caller began this turn (and
    # before the next turn); None if the bot never answered.
    bot_reply_start_ms: float | None
    # Mouth to mouth at the caller's ear: bot_reply_start_ms - speech_end_ms. Negative
    # means the bot began talking before the caller had finished.
    latency_ms: float | None
    # Unplayed bot audio in Twilio's buffer as the turn's first sample was sent: bot
    # audio the caller would still hear if nobody cleared it (None: not recorded).
    bot_queued_ms: float | None = None
    # False: left unsaid, the reply it was meant to go over having ended (its span is
    # empty, at the moment it was dropped).
    said: bool = True


# A bot heard this far under its own median level is lowered, not speaking to the caller:
# a voice's syllables stay within a few dB of their median (quieter consonants and word
# ends are joined over, as BotEar joins across short silences).
LOWERED_DB = 10.0


@dataclass
class CallReport:
    """What happened on the call, as the caller experienced it.

    Every time is ms since the `start` event. `caller_audio` (what was sent, echo
    included) and `bot_audio` (what the caller heard, silence where Twilio's buffer was
    empty) are int16 8 kHz on that same clock and of equal length.
    """

    call_sid: str
    stream_sid: str
    twiml: str
    turns: list[TurnResult] = field(default_factory=list)
    greeting_start_ms: float | None = None
    bot_utterances: list[tuple[float, float]] = field(default_factory=list)
    clears: list[float] = field(default_factory=list)
    marks_sent_back: int = 0
    dtmf_sent: int = 0
    protocol_violations: list[str] = field(default_factory=list)
    # TwiML that works here but not on Twilio (ws:// URL, query string).
    warnings: list[str] = field(default_factory=list)
    underruns: int = 0
    underrun_ms: float = 0.0
    caller_audio: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int16), repr=False)
    bot_audio: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int16), repr=False)
    server_closed: bool = False
    close_code: int | None = None
    # When the server closed the stream (it ended the call), on the call clock.
    closed_ms: float | None = None
    # Webhook request to open socket, before the stream clock starts.
    setup_ms: float = 0.0
    # Streams after a closed one that Twilio's <Redirect> led to: (closed at, the next
    # stream's start) on the call clock; the new start is None if it failed.
    redirects: list[tuple[float, float | None]] = field(default_factory=list)

    def bot_spans(self, joined_within_ms: float) -> list[tuple[float, float]]:
        """Bot utterances, joined across silences shorter than `joined_within_ms`.

        Piper pauses 180-460 ms between sentences, at random (150 syntheses of one
        greeting), so one reply can reach the ear as two utterances: a test asking
        "did the bot speak again?" joins across its sentence pauses.
        """
        spans: list[tuple[float, float]] = []
        for start, end in self.bot_utterances:
            if spans and start - spans[-1][1] < joined_within_ms:
                spans[-1] = (spans[-1][0], end)
            else:
                spans.append((start, end))
        return spans

    def bot_full_level_spans(self, below_db: float = LOWERED_DB) -> list[tuple[float, float]]:
        """Bot utterances at the bot's own level: its heard 20 ms frames less than
        `below_db` under their median level, joined as BotEar joins them.

        A bot lowered under a caller's words (HOLD_DUCK_DB) is still in `bot_utterances`,
        which count any audible frame; here it is a gap.
        """
        frame = RATE // 50
        usable = self.bot_audio[: self.bot_audio.size // frame * frame].astype(np.float64)
        if not usable.size:
            return []
        rms = np.sqrt(np.mean(usable.reshape(-1, frame) ** 2, axis=1))
        level = 20 * np.log10(np.maximum(rms, 1e-9) / 32768.0)
        voiced = level >= VOICED_DBFS
        if not voiced.any():
            return []
        full = voiced & (level >= float(np.median(level[voiced])) - below_db)
        frame_ms = 1000 * frame / RATE
        spans: list[tuple[float, float]] = []
        for index in np.flatnonzero(full):
            start, end = index * frame_ms, (index + 1) * frame_ms
            if spans and start - spans[-1][1] < UTTERANCE_GAP_MS:
                spans[-1] = (spans[-1][0], end)
            else:
                spans.append((start, end))
        return spans

    def longest_silence_ms(self, start_ms: float, end_ms: float) -> float:
        """The longest the caller heard nothing at all of the bot between two times, in
        whole 20 ms frames: where Twilio's buffer was empty, or the bot sent silence.

        A bot lowered under a caller's words (HOLD_DUCK_DB) is quiet, not silent: its
        quietest frames can fall under `bot_utterances`' voiced level, so the gaps
        between utterances move with what the bot was saying; this does not.
        """
        frame = RATE // 50
        audio = self.bot_audio_between(start_ms, end_ms)
        frames = audio[: audio.size // frame * frame].reshape(-1, frame)
        longest = run = 0
        for silent in (np.abs(frames.astype(np.int32)).max(axis=1) == 0).tolist():
            run = run + 1 if silent else 0
            longest = max(longest, run)
        return longest * 1000 * frame / RATE

    def bot_audio_between(self, start_ms: float, end_ms: float) -> np.ndarray:
        """The bot as heard between two report times."""
        start = max(0, round(start_ms * RATE / 1000))
        end = max(start, round(end_ms * RATE / 1000))
        return self.bot_audio[start:end]


def turn_results(
    script: CallerScript,
    utterances: Sequence[tuple[float, float]],
    queued_at_start: Mapping[int, int] | None = None,
) -> list[TurnResult]:
    """Each turn of `script` with the first bot utterance heard after it began (and before
    the next turn said): the latencies CallReport.turns holds."""
    queued_at_start = queued_at_start or {}
    results = []
    spans = script.spans
    for i, (start, end, label) in enumerate(spans):
        start_ms, end_ms = samples_to_ms(start), samples_to_ms(end)
        if i in script.unsaid:
            results.append(TurnResult(label, start_ms, end_ms, None, None, said=False))
            continue
        later = [s for k, (s, _, _) in enumerate(spans) if k > i and k not in script.unsaid]
        next_start = samples_to_ms(later[0]) if later else float("inf")
        reply = next(
            (u_start for u_start, _ in utterances if start_ms < u_start < next_start), None
        )
        results.append(
            TurnResult(
                text=label,
                speech_start_ms=start_ms,
                speech_end_ms=end_ms,
                bot_reply_start_ms=reply,
                latency_ms=None if reply is None else reply - end_ms,
                bot_queued_ms=samples_to_ms(queued_at_start[i]) if i in queued_at_start else None,
            )
        )
    return results


def _fmt_ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def print_report(report: CallReport) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False)
    table = Table(title=f"call {report.call_sid}")
    table.add_column("#", justify="right")
    table.add_column("caller")
    table.add_column("spoke (ms)", justify="right")
    table.add_column("bot replied (ms)", justify="right")
    table.add_column("latency (ms)", justify="right")
    for number, turn in enumerate(report.turns, start=1):
        table.add_row(
            str(number),
            turn.text,
            f"{turn.speech_start_ms:.0f}-{turn.speech_end_ms:.0f}",
            _fmt_ms(turn.bot_reply_start_ms),
            _fmt_ms(turn.latency_ms),
        )
    console.print(table)
    console.print(
        f"setup (webhook + socket): {report.setup_ms:.0f} ms; greeting heard at "
        f"{_fmt_ms(report.greeting_start_ms)} ms after start; "
        f"{len(report.bot_utterances)} bot utterances"
    )
    console.print(
        f"clears: {len(report.clears)}  marks echoed: {report.marks_sent_back}  "
        f"underruns: {report.underruns} ({report.underrun_ms:.0f} ms)  "
        f"server closed: {report.server_closed}"
    )
    for warning in report.warnings:
        console.print(f"[yellow]warning:[/] {warning}", markup=True)
    for violation in report.protocol_violations:
        console.print(f"[red]protocol violation:[/] {violation}", markup=True)
