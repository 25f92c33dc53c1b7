"""A scripted call for the turn-taking engine: no models, no sleeps, a sample clock.

The caller's part is a list of segments (speech with its level, silence); speech
detection is a plain rule (starts after 64 ms of speech dated back to its onset, stops
after 100 ms of quiet dated back to its end). The bot's part is a reply of a given length
that starts playing a fixed time after the engine commits a turn, stops at a hold,
continues at a resume and ends at a clear (with a duck configured, a hold lowers it, a
silence stops it and a lower plays it on, lowered). Evaluations come back a fixed time after they
are asked for, with what the script says the transcript and the end-of-turn model say.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import numpy as np

from agents.turns.engine import (
    Answer,
    Clear,
    Decision,
    DropEvaluation,
    Evaluate,
    Evaluation,
    Frame,
    Hearing,
    Hold,
    Lower,
    Reopen,
    Reprompt,
    Resume,
    Silence,
    TurnEngine,
    TurnTaking,
)
from agents.turns.judge import TurnJudge, VoiceJudge
from callevents import CallEvent
from media.vad import SpeechStarted, SpeechStopped, VadEvent

RATE = 16000
FRAME = RATE // 50
START_MS = 64
STOP_MS = 100
CALLER_DB = -20.0
FLOOR_DB = -60.0
BOT_DB = -18.0  # the bot's level at the caller's ear (its echo is far below, cancelled)


@dataclass(frozen=True)
class Say:
    """Caller speech: `ms` long at `level_db` (what the engine sees on their line)."""

    ms: int
    level_db: float = CALLER_DB


@dataclass(frozen=True)
class Quiet:
    ms: int


Segment = Say | Quiet


@dataclass(frozen=True)
class Hears:
    """What the models say about the utterance ending at or before a time: the first
    rule whose `until_ms` is at or after the evaluated end applies."""

    until_ms: int
    text: str
    probability: float = 0.1
    hearing: Hearing = Hearing.HEARD
    words: float | None = None  # the words judge's score (None: no words judge)


@dataclass
class Outcome:
    decisions: list[tuple[int, Decision]] = field(default_factory=list)  # (ms, decision)
    events: list[tuple[int, CallEvent]] = field(default_factory=list)
    # Frames the bot was heard; None where the driver does not play the audio itself.
    bot_audible_ms: list[int] | None = field(default_factory=list)

    def at(self, kind: type) -> list[int]:
        return [ms for ms, d in self.decisions if isinstance(d, kind)]

    def of(self, kind: type) -> list:
        return [d for _, d in self.decisions if isinstance(d, kind)]

    def heard_bot_between(self, lo_ms: int, hi_ms: int) -> int:
        assert self.bot_audible_ms is not None
        return sum(1 for ms in self.bot_audible_ms if lo_ms <= ms < hi_ms) * 20


@dataclass
class Bot:
    """The bot's side: a reply plays `reply_ms` of audio, `latency_ms` after it starts."""

    reply_ms: int = 4000
    latency_ms: int = 300
    greeting_ms: int = 0
    remaining: int = 0  # ms of reply audio left
    starts_at: int | None = None  # ms when the pending reply becomes audible
    held: bool = False  # not heard while held
    lowered: bool = False  # heard quieter while lowered
    # The reply is all made (every clause sent) this long after it becomes audible; its
    # audio plays on (made after its audio ends: the reply stalled, silent but busy).
    # None: made just as its last audio plays.
    made_ms: int | None = None
    made_at: int | None = None
    last: bool = False  # its replies end the call (a farewell)


def run(
    script: list[Segment],
    hears: list[Hears],
    *,
    config: TurnTaking | None = None,
    bot: Bot | None = None,
    eval_ms: int = 100,
    echo_settled: bool = True,
    floor_db: float = FLOOR_DB,
    tail_ms: int = 4000,
    judge: TurnJudge | None = None,
) -> Outcome:
    engine_events: list[tuple[int, CallEvent]] = []
    now = [0]
    config = config or TurnTaking()
    # Without a words judge, as the duplex backend is scripted here: Smart Turn and the
    # silence (each Hears' probability) judge the turn.
    judge = judge or VoiceJudge(config)
    engine = TurnEngine(config, emit=lambda e: engine_events.append((now[0], e)), judge=judge)
    bot = bot or Bot()
    audible_ms: list[int] = []
    out = Outcome(events=engine_events, bot_audible_ms=audible_ms)
    speaking_frames = _frames(script, tail_ms)
    vad = _Vad()
    pending_eval: list[tuple[int, Evaluate]] = []  # (due ms, ticket)

    def reply(ms: int) -> None:
        engine.reply_started(last=bot.last)
        bot.remaining = bot.reply_ms
        bot.starts_at = ms + bot.latency_ms
        bot.made_at = None if bot.made_ms is None else bot.starts_at + bot.made_ms

    def apply(ms: int, decisions: list[Decision]) -> None:
        for decision in decisions:
            out.decisions.append((ms, decision))
            match decision:
                case Evaluate():
                    pending_eval[:] = [(ms + eval_ms, decision)]
                case DropEvaluation():
                    pending_eval.clear()
                case Answer() | Reprompt():
                    reply(ms)
                case Reopen():
                    bot.remaining, bot.starts_at = 0, None
                    engine.reply_done()
                case Hold():
                    if config.hold_duck_db > 0:
                        bot.lowered = True
                    else:
                        bot.held = True
                case Silence():
                    bot.held = True
                case Lower():
                    bot.held = False
                case Resume():
                    bot.held = bot.lowered = False
                case Clear():
                    bot.held, bot.lowered, bot.remaining, bot.starts_at = False, False, 0, None
                    engine.reply_done()

    if bot.greeting_ms:
        engine.reply_started()
        bot.remaining, bot.starts_at = bot.greeting_ms, 0
    for index, (speaking, level) in enumerate(speaking_frames):
        ms = index * 20
        now[0] = ms
        end = (index + 1) * FRAME
        # The bot's audio at the ear during this frame.
        audible = False
        if bot.starts_at is not None and ms >= bot.starts_at and not bot.held:
            if bot.remaining > 0:
                engine.reply_audible()
                audible = True
                bot.remaining -= 20
            if bot.remaining <= 0:
                bot.starts_at = None
                if bot.made_at is None:  # (else more is still being made: a stall)
                    engine.reply_done()
        if bot.made_at is not None and ms >= bot.made_at:
            bot.made_at = None
            engine.reply_done()
        if audible:
            audible_ms.append(ms)
        events = vad.update(speaking, end)
        frame = Frame(
            end=end,
            samples=FRAME,
            events=events,
            level_db=level if speaking else floor_db,
            noise_floor_db=floor_db,
            echo_settled=echo_settled,
            bot_audible=audible,
            bot_level_db=(BOT_DB - config.hold_duck_db * bot.lowered) if audible else -120.0,
        )
        apply(ms, engine.frame(frame))
        while pending_eval and pending_eval[0][0] <= ms:
            _, ticket = pending_eval.pop(0)
            rule = _rule(hears, ticket.end * 1000 // RATE)
            result = Evaluation(
                end=ticket.end,
                probability=rule.probability,
                text=rule.text,
                hearing=rule.hearing,
                capped=ticket.capped,
                words=rule.words,
            )
            apply(ms, engine.evaluated(result))
    return out


def _rule(hears: list[Hears], end_ms: int) -> Hears:
    for rule in hears:
        if end_ms <= rule.until_ms:
            return rule
    return hears[-1]


def _frames(script: list[Segment], tail_ms: int) -> list[tuple[bool, float]]:
    frames: list[tuple[bool, float]] = []
    for segment in [*script, Quiet(tail_ms)]:
        count = segment.ms // 20
        if isinstance(segment, Say):
            frames += [(True, segment.level_db)] * count
        else:
            frames += [(False, FLOOR_DB)] * count
    return frames


class _Vad:
    def __init__(self) -> None:
        self.speaking = False
        self.run_start: int | None = None

    def update(self, speech: bool, end: int) -> list[VadEvent]:
        start = end - FRAME
        if speech != self.speaking:
            if self.run_start is None:
                self.run_start = start
            need = START_MS if speech else STOP_MS
            if end - self.run_start >= need * RATE // 1000:
                self.speaking = speech
                at, self.run_start = self.run_start, None
                return [SpeechStarted(at) if speech else SpeechStopped(at)]
        else:
            self.run_start = None
        return []


def ms_of(segments: list[Segment]) -> int:
    return sum(s.ms for s in segments)


Check = Callable[[Outcome], None]


# --- the same script through the duplex `cascade` backend ----------------------------------

WINDOW = 512  # the gateway's speech windows


async def run_duplex(
    script: list[Segment],
    hears: list[Hears],
    *,
    config: TurnTaking | None = None,
    bot: Bot | None = None,
    unit_ms: int = 200,
    tail_ms: int = 4000,
) -> Outcome:
    """Drive CascadeDuplexBackend with the script: the caller's audio in units with the
    gateway's speech windows, fakes that answer by the script. Decisions are read off the
    engine the backend drives; the bot's audio is not followed (the gateway plays it)."""
    from agents.cascade.stt import Transcript
    from agents.duplex.cascade_backend import CascadeDuplexBackend, CascadeDuplexConfig
    from agents.duplex.protocol import Prepare

    bot = bot or Bot()
    out = Outcome(bot_audible_ms=None)
    reply_s = bot.reply_ms / 1000

    def end_ms(audio: np.ndarray) -> int:
        return int((float(audio.max()) + 1) * 1000 // RATE) if audio.size else 0

    class Stt:
        def transcribe(self, audio: np.ndarray) -> Transcript:
            rule = _rule(hears, end_ms(audio))
            # Evidence that `assess` reads as the rule's verdict.
            no_speech = 0.9 if rule.hearing is Hearing.NOTHING else 0.0
            logprob = -0.2 if rule.hearing is Hearing.HEARD else -3.0
            return Transcript(rule.text, no_speech, logprob)

    class EndOfTurn:
        def predict(self, audio: np.ndarray) -> float:
            return _rule(hears, end_ms(audio)).probability

    class Tts:
        sample_rate = RATE

        def synthesize(self, text: str) -> np.ndarray:
            return np.full(int(reply_s * RATE), 0.1, np.float32)

    class Llm:
        async def stream(self, messages: object) -> AsyncIterator[str]:
            yield "Here is the reply."

    backend = CascadeDuplexBackend(
        stt=Stt(),
        tts=Tts(),
        llm=Llm(),
        end_of_turn=EndOfTurn(),
        vad_factory=lambda: None,  # type: ignore[arg-type, return-value]
        config=CascadeDuplexConfig(turn_taking=config or TurnTaking()),
    )
    await backend.prepare(Prepare(system_prompt="", unit_ms=unit_ms))
    engine = backend.engine
    engine._emit_to = lambda event: out.events.append((_pos_ms(engine), event))

    def spy(method: Callable[..., list[Decision]]) -> Callable[..., list[Decision]]:
        def wrapped(*args: object) -> list[Decision]:
            decisions = method(*args)
            out.decisions.extend((_pos_ms(engine), d) for d in decisions)
            return decisions

        return wrapped

    engine.frame = spy(engine.frame)  # type: ignore[method-assign]
    engine.evaluated = spy(engine.evaluated)  # type: ignore[method-assign]
    engine.failed = spy(engine.failed)  # type: ignore[method-assign]

    speaking = [s for s, _ in _frames(script, tail_ms)]
    total = len(speaking) * FRAME
    unit = RATE * unit_ms // 1000
    position = 0
    while position + unit <= total:
        audio = np.arange(position, position + unit, dtype=np.float32)
        first = -(-position // WINDOW)
        last = (position + unit) // WINDOW
        probs = [
            1.0 if speaking[min(len(speaking) - 1, (w * WINDOW + WINDOW // 2) // FRAME)] else 0.0
            for w in range(first, last)
        ]
        await backend.process_unit(audio, probs)
        position += unit
    return out


def _pos_ms(engine: TurnEngine) -> int:
    return engine.position * 1000 // RATE - 20
