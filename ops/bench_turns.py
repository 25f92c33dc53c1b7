"""`offhook bench turns`: how well the bot takes turns, judged from the caller's side only.

Real calls through the Twilio Media Streams protocol (ops.simulate) against the bot,
on scripts this module writes (SCRIPTS, below): questions short and of one or two
words, sentences with a 0.5-1.5 s pause in the middle, backchannels over long replies,
interruptions early, mid-reply and late with a real correction, 30-60 s readings with
natural pauses (espeak and Piper voices, two rates each), farewells; each on a clean
line, a speakerphone (echo -10 dB @ 150 ms) and a cafe (babble at 15 dB SNR). Nothing is
asked of the server: every figure comes from what the simulated caller said (the script
and the simulator's spans), heard (BotEar's utterances), and what the simulated Twilio
received (`clear`s, its playout buffer).

All times are ms at the caller's ear on the simulator's clock (ms since `start`).
A bot *utterance* is heard bot audio (20 ms frames above -45 dBFS) with no silence of
300 ms or more inside; its start is a bot *onset*. A caller turn spans its first to
its last speech sample (the voice is trimmed), scripted pauses included. Turns that
*expect an answer* are every kind but backchannels.

- turn answered: a turn that expects an answer is followed by a bot onset at or after
  its last speech sample and before the caller's next turn starts (for the caller's
  last turn, within ANSWER_WINDOW_MS = 5 s). A turn the call never got to say (the
  call failed or ended early) counts as not answered. A reply that began inside the
  turn and ran over its end is not an answer to the whole turn.
- talk-over: a bot onset while the caller is speaking or inside a caller turn's
  scripted internal pause, i.e. inside any caller turn's span [first, last sample);
  every such onset counts once.
- cut-off in a pause: a pause turn (a sentence with a scripted 0.5-1.5 s pause in the
  middle) in which a bot onset lands after the pause began and before the turn's end:
  the bot took the pause for the end of the turn (its audio may reach the ear only
  after the caller resumed, the reply's latency later). Reported as count / pause
  turns; the JSON also says whether the onset was inside the pause itself.
- reading heard whole: a long reading during which (after its first sample, before its
  last) no bot audio at all was heard. Its onsets also count as talk-over.
- false stop on a backchannel: judged for backchannels spoken while a bot utterance was
  in progress (the script holds each one back until Twilio's buffer holds >= 3 s of
  unplayed reply, so an uncleared reply surely goes on). False stop if (a) no bot audio
  is heard within BACKCHANNEL_WINDOW_MS = 1.5 s after the backchannel's end, or (b) a
  `clear` arrived between the backchannel's onset and 1.5 s after its end and no bot
  audio is heard within 1.5 s after that clear (or after the backchannel's end, if
  later). A silence in the reply around the backchannel that ends within the window is
  not a false stop: its length is reported separately (informative). A caller waiting
  to backchannel or interrupt over a reply that ends first (2 s of bot silence, nothing
  queued) leaves it unsaid, as a person would, and goes on: such turns are neither
  judged nor counted as answered or not (SmolLM2 answers "a long story" in a few
  sentences at times; the caller then sat out its 10 s of patience, counted as dead air).
- bot audio after an interruption: from the interruption's speech onset (the first
  voiced sample of the caller's interrupting utterance) to the end of the bot
  utterance in progress at that onset, i.e. the last bot audio heard before >= 300 ms
  of bot silence; p50 and p90 over the interruptions spoken over bot audio. Early is
  0.5 s into the reply, mid 2 s, late >= 3 s in with 1.2-2.5 s of reply left in
  Twilio's buffer (all hold back until >= 1 s of reply is left there).
- dead air: (1) after a turn that expects an answer ends, no bot audio at all during
  the next DEAD_AIR_MS = 2 s while the caller stays silent (once per turn); (2) a
  silence of more than 2 s between two bot utterances that no answer-expecting caller
  turn overlaps (a silence inside a bot reply; backchannels do not take the floor).
- underruns: the simulated Twilio's buffer ran dry in the middle of a bot utterance and
  more audio came within 200 ms (TwilioPlayout's definition); counted as its dry
  20 ms ticks (CallReport.underruns), with their total length.
- mouth to mouth: a turn's last speech sample to the bot onset that answered it
  (answered turns only); the targets hold on the clean line.

Lanes: `--calls N` dials N callers at once, each in its own thread and event loop,
each working through every (line, script) call of the plan, rotated so the lanes are
on different scripts; lanes start 2 s apart. `--calls 1` runs the plan once in order.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from functools import partial
from itertools import pairwise
from pathlib import Path
from typing import Final

import numpy as np

from ops.caller_voice import CallerVoice, CallerVoiceError
from ops.line import LineConditions
from ops.measure import BENCH_TOKEN, machine, percentile
from ops.simulate import (
    After,
    CallerTurn,
    CallReport,
    SimulationConfig,
    SimulationError,
    TurnResult,
    simulate_call,
)

__all__ = [
    "LINES",
    "SCRIPTS",
    "Gap",
    "Kind",
    "Say",
    "Script",
    "Tally",
    "TurnFacts",
    "add_parser",
    "bench_turns",
    "score_call",
    "table_rows",
]

RATE: Final = 8000
ANSWER_WINDOW_MS: Final = 5000.0
DEAD_AIR_MS: Final = 2000.0
BACKCHANNEL_WINDOW_MS: Final = 1500.0
HANGUP_AFTER_MS: Final = 5500  # > ANSWER_WINDOW_MS: the last turn's answer is heard
LANE_STAGGER_S: Final = 2.0
MAX_CALL_S: Final = 300.0


class Kind(StrEnum):
    QUESTION = "question"
    PAUSE = "pause"  # a sentence with a scripted pause in the middle
    READING = "reading"  # 30-60 s read aloud with natural pauses: hear it all
    BACKCHANNEL = "backchannel"  # "mhm" over a long reply: the reply must go on
    INTERRUPTION = "interruption"  # a correction over a reply: stop, then answer it
    FAREWELL = "farewell"


EXPECTS_ANSWER: Final = frozenset(set(Kind) - {Kind.BACKCHANNEL})


@dataclass(frozen=True)
class Voice:
    engine: str = "piper"
    rate_wpm: int = 165

    @property
    def label(self) -> str:
        return f"{self.engine} {self.rate_wpm} wpm"


PIPER = Voice("piper", 165)  # the caller's voice unless a script says otherwise


@dataclass(frozen=True)
class Gap:
    """A natural pause whose length the seed draws from [lo_ms, hi_ms]."""

    lo_ms: int
    hi_ms: int


Part = str | int | Gap  # speech; an exact scripted pause (ms); a natural pause


@dataclass(frozen=True)
class Say:
    """One caller turn of a script: speech and pauses, when to say it, what it is."""

    kind: Kind
    parts: tuple[Part, ...]
    after: After = After.BOT_DONE
    # None: a polite caller's reaction time, drawn by the seed from 500-900 ms.
    delay_ms: int | None = None
    queued_min_ms: int | None = None
    queued_max_ms: int | None = None
    where: str = ""  # interruptions: early, mid, late
    voice: Voice | None = None  # None: the script's voice

    @property
    def text(self) -> str:
        words = [p for p in self.parts if isinstance(p, str)]
        return " … ".join(words) if any(isinstance(p, int) for p in self.parts) else " ".join(words)


@dataclass(frozen=True)
class Script:
    """One call."""

    name: str
    turns: tuple[Say, ...]
    voice: Voice = PIPER
    # How long a waiting caller waits for its cue before speaking anyway.
    patience_s: float = 10.0


# --- the scripts ---------------------------------------------------------------------


def ask(*parts: Part, kind: Kind = Kind.QUESTION, voice: Voice | None = None) -> Say:
    return Say(kind, parts, voice=voice)


def paused(first: str, pause_ms: int, rest: str) -> Say:
    return Say(Kind.PAUSE, (first, pause_ms, rest))


def bye(text: str) -> Say:
    return Say(Kind.FAREWELL, (text,))


def backchannel(word: str, *, first: bool) -> Say:
    """Over a long reply, once Twilio holds >= 3 s of it: 2 s into the reply, or 2.5 s
    after the previous backchannel."""
    if first:
        return Say(Kind.BACKCHANNEL, (word,), After.BOT_SPEAKING, 2000, queued_min_ms=3000)
    return Say(Kind.BACKCHANNEL, (word,), After.START, 2500, queued_min_ms=3000)


def interrupt(where: str) -> Say:
    """The correction, early / mid-reply / late, always with >= 1 s of reply still to come."""
    timing = {
        "early": (500, 1000, None),
        "mid": (2000, 1000, None),
        "late": (3000, 1200, 2500),
    }
    delay, low, high = timing[where]
    return Say(
        Kind.INTERRUPTION,
        (CORRECTION,),
        After.BOT_SPEAKING,
        delay,
        queued_min_ms=low,
        queued_max_ms=high,
        where=where,
    )


def read_aloud(text: str) -> tuple[Part, ...]:
    """Text read aloud: 500-800 ms between sentences, 200-350 ms at commas."""
    parts: list[Part] = []
    for sentence in re.split(r"(?<=[.?!])\s+", text.strip()):
        clauses = [c.strip() for c in re.split(r"(?<=,)\s+", sentence) if c.strip()]
        for k, clause in enumerate(clauses):
            if parts:
                parts.append(Gap(200, 350) if k else Gap(500, 800))
            parts.append(clause)
    return tuple(parts)


CORRECTION = "No wait, actually I meant Saturday, can you check Saturday instead?"
LONG_FRIDAY = (
    "Can you tell me in detail everything I need to know about booking a table for Friday evening?"
)
READING = (
    "I'm going to read you my whole order, so please let me finish. "
    "First, two large pizzas, one margherita and one with mushrooms and olives. "
    "Then a garlic bread, with extra cheese on top. "
    "For the salads, one Caesar salad without croutons, and one Greek salad. "
    "To drink, four bottles of sparkling water and two lemonades. "
    "For dessert, a chocolate cake. "
    "The address is twelve Baker Street, flat three, on the second floor. "
    "Please ring the bell twice, because the first one is broken. "
    "That's the whole order, can you read it back to me?"
)


def _reading(engine: str, rate: int) -> Script:
    return Script(
        f"reading-{engine}-{rate}",
        (ask(*read_aloud(READING), kind=Kind.READING), bye("Thanks, that's all. Bye!")),
        voice=Voice(engine, rate),
    )


def _interruption(where: str) -> Script:
    # Late waits for the reply's last seconds: up to the longest reply, 80 tokens.
    return Script(
        f"interrupt-{where}",
        (ask(LONG_FRIDAY), interrupt(where), bye("Thank you, bye!")),
        patience_s=40.0 if where == "late" else 10.0,
    )


SCRIPTS: tuple[Script, ...] = (
    Script(
        "short-questions",
        (
            ask("What time does the pharmacy close today?"),
            ask("Can you recommend a good book to read?"),
            ask("How do I reset my password?"),
            bye("Thank you, bye!"),
        ),
    ),
    Script(
        "one-two-words",
        (
            ask("Opening hours?"),
            ask("Weather?"),
            ask("Parking?"),
            ask("Delivery times?"),
            bye("That's all, goodbye."),
        ),
    ),
    Script(
        "pauses",
        (
            paused("I'd like to book a table for", 500, "four people on Friday evening."),
            paused("I'd like to book a table for", 1000, "two people on Saturday night."),
            paused("I'd like to book a table for", 1500, "six people next Tuesday at noon."),
            paused(
                "Could you check whether the pharmacy on Main Street", 800, "is open on Sunday?"
            ),
            paused("My account number is", 1200, "four five six, seven eight nine."),
            bye("Great, thanks a lot. Goodbye!"),
        ),
    ),
    Script(
        "backchannels",
        (
            ask("Tell me a long story about a lighthouse keeper and his dog."),
            backchannel("Mhm.", first=True),
            backchannel("Uh-huh.", first=False),
            ask("Explain in detail how to make fresh pasta at home."),
            backchannel("Okay.", first=True),
            backchannel("Right.", first=False),
            backchannel("Yeah.", first=False),
            bye("That's all, goodbye."),
        ),
    ),
    *(_interruption(where) for where in ("early", "mid", "late")),
    *(_reading(engine, rate) for engine in ("espeak", "piper") for rate in (145, 185)),
)

LINES: dict[str, LineConditions] = {
    "clean": LineConditions(),
    "echo": LineConditions(echo_db=-10, echo_delay_ms=150),
    "babble": LineConditions(noise="babble", snr_db=15),
    "echo+babble": LineConditions(noise="babble", snr_db=15, echo_db=-10, echo_delay_ms=150),
}


# --- the caller's audio ----------------------------------------------------------------


@dataclass(frozen=True)
class TurnFacts:
    """What the bench knows about a caller turn it wrote, the server never sees."""

    kind: Kind
    text: str
    # Scripted pauses, ms from the turn's first speech sample: (start, end).
    pauses_ms: tuple[tuple[float, float], ...] = ()
    where: str = ""


@dataclass(frozen=True)
class PreparedScript:
    script: Script
    turns: list[CallerTurn]
    facts: list[TurnFacts]


def _ms(samples: int) -> float:
    return samples * 1000 / RATE


class _Voices:
    """One synthesiser per voice (Piper loads its model once), one audio per text."""

    def __init__(self) -> None:
        self._voices: dict[Voice, CallerVoice] = {}
        self._said: dict[tuple[Voice, str], np.ndarray] = {}

    def speak(self, voice: Voice, text: str) -> np.ndarray:
        key = (voice, text)
        if key not in self._said:
            if voice not in self._voices:
                self._voices[voice] = CallerVoice(voice.engine, voice.rate_wpm)
            self._said[key] = self._voices[voice].speak(text)
        return self._said[key]


def compose(
    parts: Sequence[Part], speak: Callable[[str], np.ndarray], rng: np.random.Generator
) -> tuple[np.ndarray, tuple[tuple[float, float], ...]]:
    """Speech and pauses end to end (int16 8 kHz), and where the exact pauses lie."""
    pieces: list[np.ndarray] = []
    pauses: list[tuple[float, float]] = []
    at = 0
    for part in parts:
        if isinstance(part, str):
            audio = speak(part)
        else:
            exact = isinstance(part, int)
            ms = part if isinstance(part, int) else int(rng.integers(part.lo_ms, part.hi_ms + 1))
            audio = np.zeros(RATE * ms // 1000, np.int16)
            if exact:
                pauses.append((_ms(at), _ms(at + audio.size)))
        pieces.append(audio)
        at += audio.size
    return np.concatenate(pieces) if pieces else np.zeros(0, np.int16), tuple(pauses)


def prepare(script: Script, seed: int, voices: _Voices) -> PreparedScript:
    """Every turn synthesised before dialling; the seed draws delays and natural pauses."""
    rng = np.random.default_rng([seed, sum(map(ord, script.name))])
    turns, facts = [], []
    for say in script.turns:
        voice = say.voice or script.voice
        audio, pauses = compose(say.parts, partial(voices.speak, voice), rng)
        delay = say.delay_ms
        if delay is None:
            delay = 20 * int(rng.integers(25, 46))  # 500-900 ms, on the 20 ms tick
        turns.append(
            CallerTurn(
                audio=audio,
                after=say.after,
                delay_ms=delay,
                queued_min_ms=say.queued_min_ms,
                queued_max_ms=say.queued_max_ms,
                # A "mhm" or an interruption is for a reply still playing: when a short
                # reply is over first, the caller lets it go and goes on.
                over_bot_only=say.kind in (Kind.BACKCHANNEL, Kind.INTERRUPTION),
            )
        )
        facts.append(TurnFacts(say.kind, say.text, pauses, say.where))
    return PreparedScript(script, turns, facts)


# --- scoring -----------------------------------------------------------------------------

Span = tuple[float, float]


def _overlaps(utterances: Iterable[Span], lo: float, hi: float) -> bool:
    """Some bot audio was heard in (lo, hi)."""
    return any(start < hi and end > lo for start, end in utterances)


def _in_progress(utterances: Iterable[Span], at: float) -> Span | None:
    return next(((s, e) for s, e in utterances if s <= at < e), None)


@dataclass
class TurnScore:
    """One scripted caller turn, judged (None: the measure does not apply)."""

    kind: str
    text: str
    where: str
    said: bool
    start_ms: float | None = None
    end_ms: float | None = None
    bot_queued_ms: float | None = None
    answered: bool | None = None
    latency_ms: float | None = None
    talk_over_onsets: list[float] = field(default_factory=list)
    dead_air: bool | None = None
    cut_off: bool | None = None
    cut_off_inside_pause: bool | None = None
    heard_whole: bool | None = None
    judged: bool | None = None  # backchannels, interruptions: spoken over bot audio
    false_stop: bool | None = None
    backchannel_pause_ms: float | None = None
    tail_ms: float | None = None


@dataclass
class Tally:
    """Counts and samples over any number of calls."""

    calls: int = 0
    failed_calls: int = 0
    expect_answer: int = 0
    answered: int = 0
    talk_over: int = 0
    pause_turns: int = 0
    cut_offs: int = 0
    readings: int = 0
    readings_whole: int = 0
    backchannels: int = 0
    backchannels_judged: int = 0
    false_stops: int = 0
    backchannel_pauses_ms: list[float] = field(default_factory=list)
    interruptions: int = 0
    tails_ms: list[float] = field(default_factory=list)
    dead_air_turns: int = 0
    dead_air_in_replies: int = 0
    underruns: int = 0
    underrun_ms: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)
    protocol_violations: int = 0

    def add(self, other: Tally) -> None:
        for name, value in vars(other).items():
            mine = getattr(self, name)
            setattr(self, name, [*mine, *value] if isinstance(mine, list) else mine + value)


def score_unplaced(facts: Sequence[TurnFacts]) -> tuple[Tally, list[TurnScore]]:
    """A call that never connected: every turn unsaid, none answered."""
    tally = Tally(calls=1, failed_calls=1)
    scores = []
    for fact in facts:
        scores.append(TurnScore(fact.kind, fact.text, fact.where, said=False))
        _count_unsaid(tally, fact)
    return tally, scores


def _count_unsaid(tally: Tally, fact: TurnFacts, *, owed: bool = True) -> None:
    """Count a turn of the script; `owed`: it was not left unsaid by the caller's choice."""
    if fact.kind in EXPECTS_ANSWER and owed:
        tally.expect_answer += 1
    tally.pause_turns += fact.kind is Kind.PAUSE
    tally.readings += fact.kind is Kind.READING
    tally.backchannels += fact.kind is Kind.BACKCHANNEL
    tally.interruptions += fact.kind is Kind.INTERRUPTION


def score_call(facts: Sequence[TurnFacts], report: CallReport) -> tuple[Tally, list[TurnScore]]:
    """Judge one call against its script, from what the caller heard (see module doc)."""
    utterances = list(report.bot_utterances)
    onsets = [start for start, _ in utterances]
    said = report.turns
    tally = Tally(
        calls=1,
        underruns=report.underruns,
        underrun_ms=report.underrun_ms,
        protocol_violations=len(report.protocol_violations),
    )
    scores: list[TurnScore] = []
    for i, fact in enumerate(facts):
        left = i < len(said) and not said[i].said  # the caller let it go (see above)
        _count_unsaid(tally, fact, owed=not left)
        if i >= len(said) or left:
            scores.append(TurnScore(fact.kind, fact.text, fact.where, said=False))
            continue
        turn = said[i]
        start, end = turn.speech_start_ms, turn.speech_end_ms
        following = next((t.speech_start_ms for t in said[i + 1 :] if t.said), None)
        score = TurnScore(
            fact.kind,
            fact.text,
            fact.where,
            said=True,
            start_ms=start,
            end_ms=end,
            bot_queued_ms=turn.bot_queued_ms,
        )
        score.talk_over_onsets = [t for t in onsets if start <= t < end]
        tally.talk_over += len(score.talk_over_onsets)
        if fact.kind in EXPECTS_ANSWER:
            _judge_answer(score, tally, onsets, utterances, following)
        if fact.kind is Kind.PAUSE and fact.pauses_ms:
            pause_start = start + fact.pauses_ms[0][0]
            score.cut_off = any(pause_start <= t < end for t in onsets)
            score.cut_off_inside_pause = any(
                start + lo <= t < start + hi for lo, hi in fact.pauses_ms for t in onsets
            )
            tally.cut_offs += score.cut_off
        if fact.kind is Kind.READING:
            score.heard_whole = not _overlaps(utterances, start, end)
            tally.readings_whole += score.heard_whole
        if fact.kind is Kind.BACKCHANNEL:
            _judge_backchannel(score, tally, utterances, report.clears)
        if fact.kind is Kind.INTERRUPTION:
            reply = _in_progress(utterances, start)
            score.judged = reply is not None
            if reply is not None:
                score.tail_ms = reply[1] - start
                tally.tails_ms.append(score.tail_ms)
        scores.append(score)
    tally.dead_air_in_replies = len(_silences_in_replies(utterances, facts, said))
    return tally, scores


def _judge_answer(
    score: TurnScore,
    tally: Tally,
    onsets: Sequence[float],
    utterances: Sequence[Span],
    following: float | None,
) -> None:
    assert score.start_ms is not None and score.end_ms is not None
    end = score.end_ms
    limit = following if following is not None else end + ANSWER_WINDOW_MS
    reply = next((t for t in onsets if end <= t < limit), None)
    score.answered = reply is not None
    if reply is not None:
        score.latency_ms = reply - end
        tally.answered += 1
        tally.latencies_ms.append(score.latency_ms)
    caller_silent = following is None or following - end > DEAD_AIR_MS
    score.dead_air = caller_silent and not _overlaps(utterances, end, end + DEAD_AIR_MS)
    tally.dead_air_turns += score.dead_air


def _judge_backchannel(
    score: TurnScore, tally: Tally, utterances: Sequence[Span], clears: Sequence[float]
) -> None:
    assert score.start_ms is not None and score.end_ms is not None
    start, end = score.start_ms, score.end_ms
    reply = _in_progress(utterances, start)
    score.judged = reply is not None
    if reply is None:
        return
    tally.backchannels_judged += 1
    window = BACKCHANNEL_WINDOW_MS
    went_on = _overlaps(utterances, end, end + window)
    late_clears = [c for c in clears if start <= c <= end + window]
    if late_clears:
        clear = late_clears[-1]
        went_on = went_on and _overlaps(utterances, clear, max(clear, end) + window)
    score.false_stop = not went_on
    tally.false_stops += score.false_stop
    if went_on:
        after = next((s for s, _ in utterances if s >= reply[1]), None)
        if reply[1] >= end + window:
            score.backchannel_pause_ms = 0.0
        elif after is not None:
            score.backchannel_pause_ms = after - reply[1]
        if score.backchannel_pause_ms is not None:
            tally.backchannel_pauses_ms.append(score.backchannel_pause_ms)


def _silences_in_replies(
    utterances: Sequence[Span], facts: Sequence[TurnFacts], said: Sequence[TurnResult]
) -> list[Span]:
    """Silences over DEAD_AIR_MS between bot utterances with the floor still the bot's."""
    floor_taken = [
        (t.speech_start_ms, t.speech_end_ms)
        for t, fact in zip(said, facts, strict=False)
        if fact.kind in EXPECTS_ANSWER and t.said
    ]
    found = []
    for (_, gap_start), (gap_end, _) in pairwise(utterances):
        if gap_end - gap_start <= DEAD_AIR_MS:
            continue
        if not any(s < gap_end and e > gap_start for s, e in floor_taken):
            found.append((gap_start, gap_end))
    return found


# --- targets and tables ------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    measure: str
    result: str
    target: str
    verdict: str  # PASS, FAIL, or "-" (informative, or nothing to judge)
    value: float | None = None


def _pct(part: int, whole: int) -> float | None:
    return 100 * part / whole if whole else None


def _ratio(part: int, whole: int) -> str:
    pct = _pct(part, whole)
    return f"{part}/{whole}" + ("" if pct is None else f" ({pct:.1f} %)")


def _verdict(value: float | None, ok: Callable[[float], bool] | None) -> str:
    if ok is None or value is None or value != value:  # NaN: nothing measured
        return "-"
    return "PASS" if ok(value) else "FAIL"


def _row(
    measure: str,
    result: str,
    value: float | None,
    target: str = "-",
    ok: Callable[[float], bool] | None = None,
) -> Row:
    return Row(measure, result, target, _verdict(value, ok), value)


def _p(values: list[float], q: float) -> float | None:
    return percentile(values, q) if values else None


def _fmt_ms(value: float | None, n: int) -> str:
    return "-" if value is None else f"{value:.0f} ms (n={n})"


def table_rows(tally: Tally, *, clean: bool, concurrent: int) -> list[Row]:
    """The measures against the targets; mouth to mouth is judged on the clean line."""
    answered = _pct(tally.answered, tally.expect_answer)
    cut = _pct(tally.cut_offs, tally.pause_turns)
    stops = _pct(tally.false_stops, tally.backchannels_judged)
    tails = tally.tails_ms
    lat = tally.latencies_ms
    dead = tally.dead_air_turns + tally.dead_air_in_replies
    pauses = [p for p in tally.backchannel_pauses_ms if p > 0]
    rows = [
        _row(
            "turns answered",
            _ratio(tally.answered, tally.expect_answer),
            answered,
            ">= 98 %",
            lambda v: v >= 98,
        ),
        _row(
            "talk-over (bot onsets over the caller)",
            str(tally.talk_over),
            tally.talk_over,
            "0",
            lambda v: v == 0,
        ),
        _row(
            "cut-offs in pauses",
            _ratio(tally.cut_offs, tally.pause_turns),
            cut,
            "<= 5 %",
            lambda v: v <= 5,
        ),
        _row(
            "readings heard whole",
            f"{tally.readings_whole}/{tally.readings}",
            _pct(tally.readings_whole, tally.readings),
            "all",
            lambda v: v == 100,
        ),
        _row(
            "false stops on backchannels",
            _ratio(tally.false_stops, tally.backchannels_judged)
            + _not_judged(tally.backchannels, tally.backchannels_judged),
            stops,
            "<= 5 %",
            lambda v: v <= 5,
        ),
        _row(
            "bot pauses at a backchannel (informative)",
            f"{len(pauses)} paused" + (f", longest {max(pauses):.0f} ms" if pauses else ""),
            None,
        ),
        _row(
            "bot audio after an interruption, p50",
            _fmt_ms(_p(tails, 50), len(tails)) + _not_judged(tally.interruptions, len(tails)),
            _p(tails, 50),
            "<= 250 ms",
            lambda v: v <= 250,
        ),
        _row(
            "bot audio after an interruption, p90",
            _fmt_ms(_p(tails, 90), len(tails)),
            _p(tails, 90),
            "<= 400 ms",
            lambda v: v <= 400,
        ),
        _row(
            "dead air over 2 s",
            f"{dead} ({tally.dead_air_turns} after turns, {tally.dead_air_in_replies} in replies)",
            dead,
            "0",
            lambda v: v == 0,
        ),
        _row(
            "underruns (dry 20 ms ticks)",
            f"{tally.underruns} ({tally.underrun_ms:.0f} ms)",
            tally.underruns,
            "0",
            lambda v: v == 0,
        ),
    ]
    p50: tuple[str, Callable[[float], bool] | None]
    p90: tuple[str, Callable[[float], bool] | None]
    if concurrent > 1:
        p50 = ("-", None)
        p90 = ("<= 1500 ms", lambda v: v <= 1500) if clean else ("-", None)
    elif clean:
        p50 = ("<= 700 ms", lambda v: v <= 700)
        p90 = ("<= 1000 ms", lambda v: v <= 1000)
    else:
        p50 = p90 = ("-", None)
    rows += [
        _row("mouth to mouth, p50", _fmt_ms(_p(lat, 50), len(lat)), _p(lat, 50), *p50),
        _row("mouth to mouth, p90", _fmt_ms(_p(lat, 90), len(lat)), _p(lat, 90), *p90),
        _row(
            "calls failed",
            f"{tally.failed_calls}/{tally.calls}",
            tally.failed_calls,
            "0",
            lambda v: v == 0,
        ),
        _row(
            "protocol violations",
            str(tally.protocol_violations),
            tally.protocol_violations,
            "0",
            lambda v: v == 0,
        ),
    ]
    return rows


def _not_judged(spoken: int, judged: int) -> str:
    missed = spoken - judged
    return f"; {missed} not over bot audio" if missed else ""


def print_table(title: str, rows: Sequence[Row]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    table.add_column("measure")
    table.add_column("result", justify="right")
    table.add_column("target", justify="right")
    table.add_column("PASS/FAIL")
    for row in rows:
        style = {"PASS": "green", "FAIL": "red"}.get(row.verdict, "")
        verdict = f"[{style}]{row.verdict}[/]" if style else row.verdict
        table.add_row(row.measure, row.result, row.target, verdict)
    # Wide enough that a log or a pipe (80 columns by default) keeps one row a line.
    Console(highlight=False, width=max(110, Console().width)).print(table)


# --- running the calls -------------------------------------------------------------------


@dataclass
class CallOutcome:
    line: str
    script: str
    lane: int
    tally: Tally
    turns: list[TurnScore]
    call_sid: str | None = None
    error: str | None = None
    clears_ms: list[float] = field(default_factory=list)
    bot_utterances_ms: list[Span] = field(default_factory=list)


_print_lock = threading.Lock()


def _summary(outcome: CallOutcome) -> str:
    t = outcome.tally
    lat = ", ".join(f"{v:.0f}" for v in t.latencies_ms) or "-"
    text = (
        f"[{outcome.line}] {outcome.script} (lane {outcome.lane}): answered "
        f"{t.answered}/{t.expect_answer}, talk-over {t.talk_over}, cut-offs {t.cut_offs}, "
        f"false stops {t.false_stops}/{t.backchannels_judged}, "
        f"tails {[round(v) for v in t.tails_ms]}, dead air "
        f"{t.dead_air_turns + t.dead_air_in_replies}, underruns {t.underruns}, "
        f"mouth to mouth [{lat}] ms"
    )
    return text + (f" ERROR {outcome.error}" if outcome.error else "")


async def _place(
    url: str,
    token: str | None,
    prepared: PreparedScript,
    line_name: str,
    line: LineConditions,
    lane: int,
    record_dir: Path | None,
) -> CallOutcome:
    config = SimulationConfig(
        base_url=url,
        auth_token=token,
        turns=prepared.turns,
        line=line,
        hangup_after_ms=HANGUP_AFTER_MS,
        max_call_s=MAX_CALL_S,
        patience_s=prepared.script.patience_s,
        record_path=(
            None
            if record_dir is None
            else record_dir / f"{line_name}-{prepared.script.name}-lane{lane}.wav"
        ),
    )
    name = prepared.script.name
    try:
        report = await simulate_call(config)
    except (SimulationError, CallerVoiceError, OSError) as exc:
        tally, turns = score_unplaced(prepared.facts)
        return CallOutcome(line_name, name, lane, tally, turns, error=str(exc))
    tally, turns = score_call(prepared.facts, report)
    return CallOutcome(
        line_name,
        name,
        lane,
        tally,
        turns,
        call_sid=report.call_sid,
        clears_ms=[round(c) for c in report.clears],
        bot_utterances_ms=[(round(s), round(e)) for s, e in report.bot_utterances],
    )


Plan = list[tuple[str, LineConditions, PreparedScript]]


async def _lane(
    url: str, token: str | None, plan: Plan, lane: int, record_dir: Path | None
) -> list[CallOutcome]:
    await asyncio.sleep(lane * LANE_STAGGER_S)
    outcomes = []
    for line_name, line, prepared in plan:
        outcome = await _place(url, token, prepared, line_name, line, lane, record_dir)
        with _print_lock:
            print(_summary(outcome), flush=True)
        outcomes.append(outcome)
    return outcomes


def run_plan(
    url: str, token: str | None, plan: Plan, concurrent: int, record_dir: Path | None
) -> list[CallOutcome]:
    """Every call of the plan on each of `concurrent` lanes, lanes rotated and at once."""
    lanes = [
        plan[k * len(plan) // concurrent :] + plan[: k * len(plan) // concurrent]
        for k in range(concurrent)
    ]
    # A thread and an event loop per caller: one caller's work (babble synthesis at
    # dialling, mixing) never holds up another's 20 ms clock.
    with ThreadPoolExecutor(concurrent, thread_name_prefix="caller") as pool:
        futures = [
            pool.submit(asyncio.run, _lane(url, token, lane, k, record_dir))
            for k, lane in enumerate(lanes)
        ]
        return [outcome for future in futures for outcome in future.result()]


def _serve_and_run(
    args: argparse.Namespace, plan: Plan, record_dir: Path | None
) -> tuple[list[CallOutcome], dict[str, object]]:
    from app.main import create_app
    from app.settings import Settings
    from ops.local_server import ServerThread, free_port

    settings = Settings.from_env()
    data_dir = Path(tempfile.mkdtemp(prefix="offhook-bench-turns-"))
    servers = ServerThread()
    try:
        port = free_port()
        local = settings.replace(
            public_url=f"http://127.0.0.1:{port}",
            twilio_auth_token=BENCH_TOKEN,
            data_dir=str(data_dir),
            max_calls=max(settings.max_calls, args.calls),
        )
        app = create_app(local)
        url = servers.serve(app, port)

        async def wait_ready() -> None:
            await asyncio.wait_for(app.state.services.ready.wait(), 600)

        servers.run(wait_ready(), timeout=620)
        outcomes = run_plan(url, BENCH_TOKEN, plan, args.calls, record_dir)
    finally:
        servers.close()
        shutil.rmtree(data_dir, ignore_errors=True)
    described = {"stt_model": settings.stt_model, "max_calls": local.max_calls}
    return outcomes, described


def _select(only: str) -> list[Script]:
    scripts = [s for s in SCRIPTS if only in s.name]
    if not scripts:
        names = ", ".join(s.name for s in SCRIPTS)
        raise SystemExit(f"offhook bench turns: no script matches {only!r} (scripts: {names})")
    return scripts


def _lines(spec: str) -> list[str]:
    names = [name.strip() for name in spec.split(",") if name.strip()]
    unknown = [name for name in names if name not in LINES]
    if unknown or not names:
        raise SystemExit(f"offhook bench turns: unknown line {unknown} (lines: {', '.join(LINES)})")
    return names


def bench_turns(args: argparse.Namespace) -> dict[str, object]:
    if args.calls < 1:
        raise SystemExit("offhook bench turns: --calls must be >= 1")
    scripts = _select(args.only)
    line_names = _lines(args.lines)
    voices = _Voices()
    prepared = [prepare(script, args.seed, voices) for script in scripts]
    plan: Plan = []
    for name in line_names:
        line = replace(LINES[name], seed=args.seed)
        plan += [(name, line, p) for p in prepared]
    record_dir: Path | None = args.record_dir
    if record_dir is not None:
        record_dir.mkdir(parents=True, exist_ok=True)
    if args.url:
        outcomes = run_plan(args.url.rstrip("/"), args.auth_token, plan, args.calls, record_dir)
        described: dict[str, object] = {"url": args.url}
    else:
        outcomes, described = _serve_and_run(args, plan, record_dir)

    tables = []
    totals = Tally()
    verdicts = []
    for name in line_names:
        tally = Tally()
        for outcome in outcomes:
            if outcome.line == name:
                tally.add(outcome.tally)
        totals.add(tally)
        rows = table_rows(tally, clean=name == "clean", concurrent=args.calls)
        title = f"{name}: {LINES[name].label} — {tally.calls} calls, {args.calls} at once"
        print_table(title, rows)
        verdicts += [r.verdict for r in rows]
        tables.append({"line": name, "rows": [asdict(r) for r in rows]})
    # Totals: every line pooled, except mouth to mouth, whose targets are the clean line's.
    clean = [o.tally for o in outcomes if o.line == "clean"]
    totals.latencies_ms = [v for t in clean for v in t.latencies_ms]
    total_rows = table_rows(totals, clean=bool(clean), concurrent=args.calls)
    print_table(
        f"totals over {', '.join(line_names)} (mouth to mouth: clean line only)", total_rows
    )
    verdicts += [r.verdict for r in total_rows]
    tables.append({"line": "totals", "rows": [asdict(r) for r in total_rows]})
    return {
        "machine": machine(),
        "verdict": "FAIL" if "FAIL" in verdicts else "PASS",
        "concurrent_calls": args.calls,
        "seed": args.seed,
        **described,
        "lines": line_names,
        "scripts": [s.name for s in scripts],
        "tables": tables,
        "calls": [asdict(o) for o in outcomes],
    }


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    turns = sub.add_parser(
        "turns", help="scripted calls: turn-taking judged at the caller's ear, against targets"
    )
    turns.add_argument(
        "--only", default="", metavar="SUBSTRING", help="scripts whose name has this"
    )
    turns.add_argument("--calls", type=int, default=1, help="callers at once (lanes)")
    turns.add_argument(
        "--lines",
        default="clean,echo,babble",
        help=f"comma-separated line conditions, from: {', '.join(LINES)}",
    )
    turns.add_argument("--seed", type=int, default=1, help="delays, natural pauses, noise")
    turns.add_argument("--url", default="", help="dial a running server instead of starting one")
    turns.add_argument("--auth-token", default=os.environ.get("TWILIO_AUTH_TOKEN"))
    turns.add_argument(
        "--record-dir", type=Path, default=None, help="a stereo WAV per call (caller | bot)"
    )
    return turns
