"""The scripts of `python -m benchmarks turns`, the line conditions, and the caller's
audio: every turn synthesised before dialling, with the facts the server never sees."""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import partial
from typing import Final

import numpy as np

from benchmarks.turns.recordings import Clip, Recordings
from ops.caller_voice import CallerVoice
from ops.line import LineConditions
from ops.simulate import After, CallerTurn

RATE: Final = 8000


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
    name: str = "en-us"  # an espeak-ng voice (with variant); for Piper, the bundled one

    @property
    def label(self) -> str:
        if self.engine == RECORDED:
            return f"recorded ({self.name})"
        named = f" {self.name}" if self.name != "en-us" else ""
        return f"{self.engine}{named} {self.rate_wpm} wpm"


PIPER = Voice("piper", 165)  # the caller's voice unless a script says otherwise
RECORDED: Final = "recording"  # a person recorded: the call's turns are Clips


@dataclass(frozen=True)
class Gap:
    """A natural pause whose length the seed draws from [lo_ms, hi_ms]."""

    lo_ms: int
    hi_ms: int


# Speech to synthesise; an exact scripted pause (ms); a natural pause; recorded speech.
Part = str | int | Gap | Clip
# A sentence said with a pause in it: its audio, and where the pause begins and ends.
Paused = tuple[np.ndarray, int, int]


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
        words = [
            p.label if isinstance(p, Clip) else p for p in self.parts if isinstance(p, str | Clip)
        ]
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
    # The words said and when, ms from the turn's first sample: what a listener who
    # heard every word would have heard (`--hear-said`).
    said: tuple[Said, ...] = ()


@dataclass(frozen=True)
class Said:
    """A stretch of speech and its words, in ms from the start of its turn."""

    start_ms: float
    end_ms: float
    text: str


@dataclass(frozen=True)
class PreparedScript:
    script: Script
    turns: list[CallerTurn]
    facts: list[TurnFacts]


def _ms(samples: int) -> float:
    return samples * 1000 / RATE


class Voices:
    """One synthesiser per voice (Piper loads its model once), one audio per text; and
    the recorded people."""

    def __init__(self, recordings: Recordings | None = None) -> None:
        self._voices: dict[Voice, CallerVoice] = {}
        self._said: dict[tuple[Voice, str], np.ndarray] = {}
        self._paused: dict[tuple[Voice, str, int, str], Paused] = {}
        self.recordings = recordings or Recordings()

    def speak(self, voice: Voice, text: str) -> np.ndarray:
        key = (voice, text)
        if key not in self._said:
            self._said[key] = self._voice(voice).speak(text)
        return self._said[key]

    def speak_paused(self, voice: Voice, first: str, pause_ms: int, rest: str) -> Paused:
        if voice.engine != "espeak":
            # Said apart: each part as it is said anywhere else in the run (Piper draws
            # a voice anew at every synthesis).
            before, after = self.speak(voice, first), self.speak(voice, rest)
            gap = np.zeros(RATE * pause_ms // 1000, np.int16)
            return np.concatenate([before, gap, after]), before.size, before.size + gap.size
        key = (voice, first, pause_ms, rest)
        if key not in self._paused:
            self._paused[key] = self._voice(voice).speak_paused(first, pause_ms, rest)
        return self._paused[key]

    def _voice(self, voice: Voice) -> CallerVoice:
        if voice not in self._voices:
            self._voices[voice] = CallerVoice(voice.engine, voice.rate_wpm, voice.name)
        return self._voices[voice]


def compose(
    parts: Sequence[Part],
    speak: Callable[[str], np.ndarray],
    rng: np.random.Generator,
    recorded: Callable[[Clip], np.ndarray] | None = None,
    speech_in: Callable[[Clip], list[tuple[int, int, str]]] | None = None,
    speak_paused: Callable[[str, int, str], Paused] | None = None,
) -> tuple[np.ndarray, tuple[tuple[float, float], ...], tuple[Said, ...]]:
    """Speech and pauses end to end (int16 8 kHz), where the exact pauses lie, and
    where each stretch of speech lies with its words (a recording's from `speech_in`).

    Words, an exact pause and words again are one sentence paused in the middle: with
    `speak_paused`, said as one (the voice's intonation carries on across the pause)."""
    pieces: list[np.ndarray] = []
    pauses: list[tuple[float, float]] = []
    said: list[Said] = []
    at = 0
    parts = list(parts)
    while parts:
        part = parts.pop(0)
        if speak_paused is not None and isinstance(part, str) and _paused_sentence(parts):
            pause_ms, rest = parts.pop(0), parts.pop(0)
            assert isinstance(pause_ms, int) and isinstance(rest, str)
            audio, start, end = speak_paused(part, pause_ms, rest)
            said += [
                Said(_ms(at), _ms(at + start), part),
                Said(_ms(at + end), _ms(at + audio.size), rest),
            ]
            pauses.append((_ms(at + start), _ms(at + end)))
        elif isinstance(part, str):
            audio = speak(part)
            said.append(Said(_ms(at), _ms(at + audio.size), part))
        elif isinstance(part, Clip):
            if recorded is None:
                raise ValueError(f"no recordings to play {part.label} from")
            audio = recorded(part)
            runs = speech_in(part) if speech_in is not None else []
            # Each of the reader's runs of speech where it lies in the clip: the bot's
            # STT hears the pauses between them cut short.
            origin = _ms(at) - part.start_ms
            said += [Said(origin + a, origin + b, text) for a, b, text in runs]
        else:
            exact = isinstance(part, int)
            ms = part if isinstance(part, int) else int(rng.integers(part.lo_ms, part.hi_ms + 1))
            audio = np.zeros(RATE * ms // 1000, np.int16)
            if exact:
                pauses.append((_ms(at), _ms(at + audio.size)))
        pieces.append(audio)
        at += audio.size
    audio = np.concatenate(pieces) if pieces else np.zeros(0, np.int16)
    return audio, tuple(pauses), tuple(said)


def _paused_sentence(following: Sequence[Part]) -> bool:
    """Words are followed by an exact pause and more words."""
    return len(following) >= 2 and isinstance(following[0], int) and isinstance(following[1], str)


def prepare(script: Script, seed: int, voices: Voices) -> PreparedScript:
    """Every turn synthesised before dialling; the seed draws delays and natural pauses."""
    # crc32, not a sum of characters: "corpus-01" and "corpus-10" must draw apart.
    rng = np.random.default_rng([seed, zlib.crc32(script.name.encode())])
    turns, facts = [], []
    for say in script.turns:
        voice = say.voice or script.voice
        speak = partial(voices.speak, voice)
        recordings = voices.recordings
        audio, pauses, said = compose(
            say.parts,
            speak,
            rng,
            recordings.clip,
            recordings.speech_in,
            partial(voices.speak_paused, voice),
        )
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
        facts.append(TurnFacts(say.kind, say.text, pauses, say.where, said))
    return PreparedScript(script, turns, facts)
