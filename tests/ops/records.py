"""Build realistic call records for the ops tests, through the real CallRecorder.

A record is described by a CallSpec (who called, when, how it ended) and its Exchanges
(one caller utterance and the bot's answer each). `build_call` turns that into what the
server would have recorded: caller.wav with speech-like audio over a faint line noise,
bot.wav with the greeting and replies where the caller heard them (cut short at a
barge-in), the timeline events the agent emits (typed, from callevents: SpeechStart,
SpeechStop, EndOfTurn, CallerTurn, TurnTiming, BotTurn, BargeIn, Clear, Error),
transcript.json and meta.json with the call's summary.

Timing follows the cascade agent: a caller turn starts 200 ms before speech (the VAD's
preroll) and ends at vad_stop, 60 ms after the last voiced sample; mouth to mouth runs
from vad_stop to the first sample of the reply. A caller who starts talking while a
reply plays barges in 600 ms later (BARGE_IN_MIN_SPEECH_MS): BargeIn and Clear are
logged and the reply is cut there.

The recorder stamps started_at and duration with the wall clock of the test; a record
of a call placed days ago, or lasting longer than it took to build, gets those three
meta fields rewritten afterwards, as the real call would have left them.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

import numpy as np

from callevents import (
    BargeIn,
    BotTurn,
    CallerTurn,
    CallEvent,
    Clear,
    EndOfTurn,
    Error,
    SpeechStart,
    SpeechStop,
    StreamStart,
    StreamStop,
    TurnTiming,
)
from recordings.jsonio import write_json_atomic
from recordings.layout import format_time
from recordings.privacy import mask_number
from recordings.record import CallRecord
from recordings.recorder import CallRecorder
from recordings.store import RecordStore

RATE: Final = 8000
PREROLL_MS: Final = 200.0
VAD_HANGOVER_MS: Final = 60.0
END_OF_TURN_MS: Final = 240.0
STT_MS: Final = 85.0
LLM_FIRST_TOKEN_MS: Final = 120.0
BARGE_IN_MS: Final = 600.0
GREETING_AT_MS: Final = 300.0


@dataclass(frozen=True)
class Exchange:
    """The caller speaks from start_ms for speech_ms; the bot answers latency_ms after
    vad_stop (None: no answer) with reply_ms of audio."""

    text: str
    start_ms: float
    speech_ms: float = 1000.0
    reply: str = "Sure, I can help with that."
    latency_ms: float | None = 500.0
    reply_ms: float = 1200.0

    @property
    def vad_stop_ms(self) -> float:
        return self.start_ms + self.speech_ms + VAD_HANGOVER_MS

    @property
    def reply_start_ms(self) -> float | None:
        return None if self.latency_ms is None else self.vad_stop_ms + self.latency_ms


@dataclass(frozen=True)
class CallSpec:
    call_sid: str
    exchanges: tuple[Exchange, ...]
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    from_number: str = "+15551234567"
    to_number: str = "+15550199000"
    agent: str = "cascade"
    fallbacks: tuple[str, ...] = ()
    ended_with: str = "hangup"
    error: str | None = None
    # Backend failures logged (Error, stage "llm") just after the first caller turn.
    backend_errors: int = 0
    greeting: str = "Hello! Thanks for calling. How can I help you today?"
    greeting_ms: float = 1200.0
    tail_ms: float = 1000.0  # line time after the last sound


# A three-exchange call (12.5 s): a plain question, a long answer the caller
# interrupts 1.2 s in, and the interruption answered. Every reply 500 ms mouth to mouth.
THREE_TURNS: Final = (
    Exchange("What time do you open tomorrow?", 2200.0, 1200.0, "We open at nine.", 500.0),
    Exchange(
        "And on Sunday?",
        6000.0,
        1000.0,
        "On Sunday we open at ten and close at four, except on public holidays.",
        500.0,
        3000.0,
    ),
    Exchange("Sorry, what about holidays?", 8700.0, 1200.0, "Closed on holidays.", 500.0, 1000.0),
)


def caller_speech(ms: float, seed: int = 0) -> np.ndarray:
    """Voiced, speech-like int16: a 140 Hz buzz with harmonics, syllable-rate loudness."""
    n = round(ms * RATE / 1000)
    t = np.arange(n) / RATE
    rng = np.random.default_rng(seed)
    phases = rng.uniform(0, 2 * np.pi, 4)
    buzz = sum(np.sin(2 * np.pi * 140 * k * t + phases[k - 1]) / k for k in range(1, 5))
    loudness = 0.6 + 0.4 * np.sin(2 * np.pi * 3.5 * t + phases[0])
    return _fade(0.22 * buzz * loudness)


def bot_speech(ms: float) -> np.ndarray:
    """A steady two-tone int16 'voice', unmistakable on a plot next to the caller's."""
    n = round(ms * RATE / 1000)
    t = np.arange(n) / RATE
    return _fade(0.2 * np.sin(2 * np.pi * 440 * t) + 0.1 * np.sin(2 * np.pi * 660 * t))


def _fade(x: np.ndarray, fade_ms: float = 5.0) -> np.ndarray:
    ramp = min(len(x) // 2, round(fade_ms * RATE / 1000))
    if ramp:
        window = np.linspace(0.0, 1.0, ramp)
        x[:ramp] *= window
        x[-ramp:] *= window[::-1]
    return np.rint(np.clip(x, -1, 1) * 32767).astype(np.int16)


def _samples(ms: float) -> int:
    return round(ms * RATE / 1000)


def _latency(m2m: float) -> dict[str, float]:
    return {
        "end_of_turn_ms": END_OF_TURN_MS,
        "stt_ms": STT_MS,
        "llm_first_token_ms": LLM_FIRST_TOKEN_MS,
        "tts_first_audio_ms": round(m2m - END_OF_TURN_MS - STT_MS, 1),
        "mouth_to_mouth_ms": m2m,
    }


def _turn(speaker: str, text: str, start: float, end: float, **extra: Any) -> dict[str, Any]:
    return {
        "speaker": speaker,
        "text": text,
        "start_ms": start,
        "end_ms": end,
        "truncated": extra.get("truncated", False),
        "intended": extra.get("intended", text),
        "latency": extra.get("latency"),
    }


def line(t_ms: float, event: CallEvent) -> dict[str, Any]:
    """The timeline line the recorder writes for `event` at `t_ms`."""
    return {"t_ms": t_ms, "event": event.name, **event.data()}


def record_event(recorder: CallRecorder, t_ms: float, event: CallEvent) -> None:
    recorder.event(t_ms, event.name, **event.data())


def build_call(root: Path, spec: CallSpec) -> CallRecord:
    """Record the call `spec` describes under `root` (a calls/ folder); returns it."""
    events: list[tuple[float, CallEvent]] = []
    turns: list[dict[str, Any]] = []
    pieces: list[tuple[float, np.ndarray]] = []  # bot audio (start ms, pcm)
    latencies: list[float] = []
    barge_ins = 0

    greeting_end = GREETING_AT_MS + spec.greeting_ms
    turns.append(_turn("bot", spec.greeting, GREETING_AT_MS, greeting_end))
    bot_turns: list[tuple[int, dict[str, Any]]] = [(0, turns[0])]
    pieces.append((GREETING_AT_MS, bot_speech(spec.greeting_ms)))
    # The reply still playing when the next caller starts: (its transcript turn, start).
    playing: tuple[dict[str, Any], int, float, float] | None = (
        turns[0],
        0,
        GREETING_AT_MS,
        greeting_end,
    )
    end_of_call = greeting_end
    for number, exchange in enumerate(spec.exchanges, start=1):
        start, stop = exchange.start_ms, exchange.vad_stop_ms
        if playing is not None and start < playing[3]:
            bot, turn_id, reply_start, _ = playing
            cleared = start + BARGE_IN_MS
            heard_words = bot["intended"].split()
            share = (cleared - reply_start) / (playing[3] - reply_start)
            heard = " ".join(heard_words[: max(1, int(len(heard_words) * share))])
            bot.update(text=heard, truncated=True, end_ms=cleared)
            events.append((cleared, BargeIn(turn_id=turn_id, heard=heard, truncated=True)))
            events.append((cleared, Clear(reason="barge_in")))
            at, audio = pieces[-1]
            pieces[-1] = (at, audio[: _samples(cleared - at)])
            barge_ins += 1
        events.append((start, SpeechStart(sample=_samples(start) * 2)))
        events.append((stop, SpeechStop(sample=_samples(stop) * 2)))
        decided = stop + END_OF_TURN_MS
        eot = EndOfTurn(
            probability=0.91, silence_ms=round(END_OF_TURN_MS), text=exchange.text, hearing="heard"
        )
        events.append((decided, eot))
        events.append((decided, CallerTurn(text=exchange.text)))
        turns.append(_turn("caller", exchange.text, max(0.0, start - PREROLL_MS), stop))
        end_of_call = max(end_of_call, stop)
        if number == 1:
            for _ in range(spec.backend_errors):
                events.append((decided, Error(stage="llm", error="llm timed out after 8 s")))
        reply_start = exchange.reply_start_ms
        if reply_start is None or exchange.latency_ms is None:
            playing = None
            continue
        reply_end = reply_start + exchange.reply_ms
        latency = _latency(exchange.latency_ms)
        latencies.append(exchange.latency_ms)
        turn_id = 2 * number
        bot = _turn("bot", exchange.reply, reply_start, reply_end, latency=latency)
        turns.append(bot)
        pieces.append((reply_start, bot_speech(exchange.reply_ms)))
        events.append((reply_start, TurnTiming(speech_end_ms=stop, **latency)))
        bot_turns.append((turn_id, bot))
        playing = (bot, turn_id, reply_start, reply_end)
        end_of_call = max(end_of_call, reply_end)
    # The agent logs a bot turn once it has all been said; one cut short never is.
    events += [
        (bot["end_ms"], BotTurn(turn_id=turn_id, text=bot["text"]))
        for turn_id, bot in bot_turns
        if not bot["truncated"]
    ]
    length = _samples(end_of_call + spec.tail_ms)

    caller = np.random.default_rng(7).normal(0, 30, length)  # line noise, about -60 dBFS
    for number, exchange in enumerate(spec.exchanges):
        speech = caller_speech(exchange.speech_ms, seed=number).astype(np.float64)
        at = _samples(exchange.start_ms)
        caller[at : at + len(speech)] += speech
    caller_pcm = np.rint(np.clip(caller, -32768, 32767)).astype(np.int16)

    stream_sid = "MZ" + spec.call_sid[2:]
    meta = {
        "stream_sid": stream_sid,
        "account_sid": "ACfixture",
        "from": mask_number(spec.from_number),
        "to": spec.to_number,
        "agent": spec.agent,
        "fallbacks": list(spec.fallbacks),
        "error": spec.error,
        "versions": {"offhook": "0.1.0"},
    }
    recorder = CallRecorder(root, spec.call_sid, meta=meta)
    record_event(recorder, 0.0, StreamStart(stream_sid=stream_sid, tracks=["inbound"]))
    for t_ms, event in sorted(events, key=lambda e: e[0]):
        record_event(recorder, t_ms, event)
    record_event(recorder, length * 1000 / RATE, StreamStop(outcome=spec.ended_with))
    recorder.caller_audio(caller_pcm)
    for at, audio in pieces:
        recorder.bot_audio(_samples(at), audio)
    summary = {
        "turns": len(turns),
        "barge_ins": barge_ins,
        "errors": spec.backend_errors,
        "protocol_errors": 0,
        "mouth_to_mouth_ms": {
            "p50": statistics.median_high(latencies) if latencies else None,
            "max": max(latencies) if latencies else None,
        },
    }
    recorder.close(
        ended_with=spec.ended_with, transcript={"turns": turns}, meta_updates={"summary": summary}
    )
    store = RecordStore(root)
    record = store.open(spec.call_sid)
    duration = length / RATE
    write_json_atomic(
        record.path / "meta.json",
        {
            **record.meta,
            "started_at": format_time(spec.started_at),
            "ended_at": format_time(spec.started_at + timedelta(seconds=duration)),
            "duration_s": duration,
        },
    )
    return store.open(spec.call_sid)
