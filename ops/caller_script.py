"""The simulated caller: what it says and when, and what it hears of the bot.

A script of CallerTurns (text, a WAV file, raw audio or DTMF), each waiting for its
`After` condition, is played tick by tick on the sample clock (8 kHz samples since the
stream's `start` event) by CallerScript, against BotEar: the bot audio the caller has
heard so far, cut into utterances. The caller reacts only to what it has already heard.
`prepare_turns` synthesises every turn before dialling; `answering_machine` is the
script of a machine taking the call.

ops.twilio_caller drives a CallerScript over a real socket; tests drive one directly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from pathlib import Path
from typing import Final

import numpy as np

from media.codec import float_to_pcm16, mulaw_decode, mulaw_encode
from ops.caller_voice import CallerVoice, load_wav_8k
from telephony.wire import DTMF_DIGITS

__all__ = [
    "BEEP_HZ",
    "BEEP_MS",
    "BOT_DONE_SILENCE_MS",
    "BOT_GONE_MS",
    "DTMF_SPACING_MS",
    "RATE",
    "UTTERANCE_GAP_MS",
    "VOICED_DBFS",
    "After",
    "BotEar",
    "CallerScript",
    "CallerTurn",
    "PreparedTurn",
    "answering_machine",
    "ms_to_samples",
    "prepare_turns",
    "samples_to_ms",
]

RATE: Final = 8000

# A 20 ms bot frame louder than this is "bot audio heard" (RMS, dBFS): above line
# noise and comfort-noise padding, below any speech.
VOICED_DBFS: Final = -45.0
_VOICED_RMS: Final = 32768.0 * 10.0 ** (VOICED_DBFS / 20.0)
# Heard bot audio separated by less than this is one utterance (pauses inside speech).
UTTERANCE_GAP_MS: Final = 300
# A polite caller takes the bot to be done after this much silence at the ear.
BOT_DONE_SILENCE_MS: Final = 700
# A reply this long silent with nothing left in Twilio's buffer is over: longer than the
# bot's pauses inside a reply (a backchannel's hold, up to ~1 s).
BOT_GONE_MS: Final = 2000
DTMF_SPACING_MS: Final = 200  # a multiple of the 20 ms tick


def samples_to_ms(samples: int) -> float:
    """A sample count on the call clock, in ms."""
    return samples * 1000 / RATE


def ms_to_samples(ms: float) -> int:
    """ms on the call clock, in samples."""
    return round(ms * RATE / 1000)


class After(StrEnum):
    """What a caller turn waits for before it speaks."""

    BOT_DONE = "bot_done"  # the bot stopped: silent >= 700 ms at the ear
    BOT_SPEAKING = "bot_speaking"  # the bot's next utterance began (barge-in)
    START = "start"  # the previous caller turn ended, whatever the bot does


@dataclass(frozen=True)
class CallerTurn:
    """One thing the caller says (text, a WAV file or int16 8 kHz audio) or keys (DTMF).

    The turn starts `delay_ms` after its `after` condition (see After); with
    "bot_done" the start is at least the 700 ms it takes to notice the bot stopped.

    `queued_min_ms` / `queued_max_ms` hold the turn back further, until Twilio's playout
    buffer holds at least / at most that much unplayed bot audio (what Twilio knows is
    still to come): a backchannel over a reply that surely goes on, or an interruption
    near a reply's end with a known amount left. Out of patience, the caller speaks anyway.
    With `over_bot_only`, a gated turn that only makes sense over the reply (a "mhm", an
    interruption) is not said at all once the reply is over (the bot `BOT_GONE_MS`
    silent with nothing queued): a caller does not hum into silence, nor wait out their
    patience for a reply that has ended.
    """

    text: str | None = None
    wav: Path | None = None
    audio: np.ndarray | None = field(default=None, repr=False, compare=False)
    after: str = After.BOT_DONE
    delay_ms: int = 600
    dtmf: str | None = None
    queued_min_ms: int | None = None
    queued_max_ms: int | None = None
    over_bot_only: bool = False

    def __post_init__(self) -> None:
        sources = ("text", "wav", "audio", "dtmf")
        given = [name for name in sources if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError(
                f"expected exactly one of text, wav, audio, dtmf in a CallerTurn, got {given}"
            )
        After(self.after)  # ValueError names the bad value
        if self.delay_ms < 0:
            raise ValueError(f"expected delay_ms >= 0, got {self.delay_ms}")
        if self.dtmf is not None and (not self.dtmf or set(self.dtmf) - DTMF_DIGITS):
            raise ValueError(f"expected DTMF digits from 0-9 * # A-D, got {self.dtmf!r}")
        low, high = self.queued_min_ms, self.queued_max_ms
        if (low is not None and low < 0) or (high is not None and high < 0):
            raise ValueError(f"expected queued_min_ms/queued_max_ms >= 0, got {low}/{high}")
        if low is not None and high is not None and low > high:
            raise ValueError(f"expected queued_min_ms <= queued_max_ms, got {low} > {high}")

    @property
    def label(self) -> str:
        if self.text is not None:
            return self.text
        if self.wav is not None:
            return Path(self.wav).name
        if self.dtmf is not None:
            return f"DTMF {self.dtmf}"
        return "<audio>"


# --- what the caller hears -------------------------------------------------------------


def _voiced(frame: np.ndarray) -> bool:
    if frame.size == 0:
        return False
    rms = float(np.sqrt(np.mean(frame.astype(np.float64) ** 2)))
    return rms >= _VOICED_RMS


class BotEar:
    """Bot audio as the caller hears it, cut into utterances (sample clock)."""

    def __init__(self) -> None:
        self._gap = ms_to_samples(UTTERANCE_GAP_MS)
        self.utterances: list[list[int]] = []  # [start, end) samples

    @property
    def last_voiced_end(self) -> int | None:
        return self.utterances[-1][1] if self.utterances else None

    def hear(self, frame: np.ndarray, start: int) -> None:
        if not _voiced(frame):
            return
        end = start + len(frame)
        if self.utterances and start - self.utterances[-1][1] < self._gap:
            self.utterances[-1][1] = end
        else:
            self.utterances.append([start, end])

    def onset_since(self, sample: int) -> int | None:
        """Start of the first utterance that began at or after `sample`."""
        return next((start for start, _ in self.utterances if start >= sample), None)


# --- what the caller says --------------------------------------------------------------


@dataclass(frozen=True)
class PreparedTurn:
    turn: CallerTurn
    audio: np.ndarray  # int16 8 kHz; empty for a DTMF turn


class _Phase(Enum):
    WAITING = "waiting"  # for the turn's `after` condition
    ACTIVE = "active"  # scheduled: speaking (or keying digits) now or soon
    DONE = "done"  # every turn has been said


class CallerScript:
    """Decides, tick by tick, what the caller says and when (sample clock).

    `advance(now)` only looks at bot audio heard before `now` and only schedules speech
    at or after `now`: the caller cannot react to what it has not heard yet.
    """

    def __init__(self, turns: Sequence[PreparedTurn], patience_ms: float) -> None:
        self._turns = list(turns)
        self._patience = ms_to_samples(patience_ms)
        self._index = 0
        self._armed_at = 0
        self._phase = _Phase.DONE if not self._turns else _Phase.WAITING
        self._start = 0
        self._end = 0
        self._digits: list[tuple[int, str]] = []
        # [start, end) samples and label of each turn, in order; a turn left unsaid
        # (see CallerTurn.over_bot_only) has an empty span where it was dropped...
        self.spans: list[tuple[int, int, str]] = []
        self.unsaid: set[int] = set()  # ...and its index here

    @property
    def finished(self) -> bool:
        return self._phase is _Phase.DONE

    @property
    def turns(self) -> list[PreparedTurn]:
        return list(self._turns)

    def speaking(self, now: int) -> int | None:
        """The index of the turn whose audio is playing into the microphone at `now`."""
        if self._phase is _Phase.ACTIVE and self._start <= now:
            return self._index
        return None

    @property
    def last_end(self) -> int:
        """Where the last finished turn ended (0 before any)."""
        return self._armed_at

    def mic(self, start: int, count: int) -> np.ndarray:
        """The caller's speech for samples [start, start + count)."""
        out = np.zeros(count, dtype=np.int16)
        if self._phase is not _Phase.ACTIVE:
            return out
        audio = self._turns[self._index].audio
        lo = max(start, self._start)
        hi = min(start + count, self._start + len(audio))
        if hi > lo:
            out[lo - start : hi - start] = audio[lo - self._start : hi - self._start]
        return out

    def due_digits(self, now: int) -> list[str]:
        due = [digit for at, digit in self._digits if at <= now]
        self._digits = [(at, digit) for at, digit in self._digits if at > now]
        return due

    def advance(self, now: int, ear: BotEar, queued: int = 0) -> None:
        """Move the script on to `now`; `queued`: unplayed samples in Twilio's buffer."""
        while self._phase is not _Phase.DONE:
            if self._phase is _Phase.ACTIVE:
                if self._end > now or self._digits:
                    return
                label = self._turns[self._index].turn.label
                self.spans.append((self._start, self._end, label))
                self._armed_at = self._end
                self._index += 1
                self._phase = _Phase.WAITING if self._index < len(self._turns) else _Phase.DONE
                continue
            turn = self._turns[self._index].turn
            at = self._trigger(turn, now, ear)
            if at is not None and _gated(turn) and not self._queue_allows(turn, at, now, queued):
                if turn.over_bot_only and _reply_over(now, ear, queued):
                    self._leave_unsaid(now)
                    continue
                at = now if now - self._armed_at >= self._patience else None
            if at is None:
                return
            self._schedule(max(at, now))

    def _leave_unsaid(self, now: int) -> None:
        self.unsaid.add(len(self.spans))
        self.spans.append((now, now, self._turns[self._index].turn.label))
        self._index += 1
        self._phase = _Phase.WAITING if self._index < len(self._turns) else _Phase.DONE

    def _schedule(self, start: int) -> None:
        prepared = self._turns[self._index]
        self._start = start
        if prepared.turn.dtmf is not None:
            spacing = ms_to_samples(DTMF_SPACING_MS)
            self._digits = [(start + i * spacing, d) for i, d in enumerate(prepared.turn.dtmf)]
            self._end = self._digits[-1][0]
        else:
            self._end = start + len(prepared.audio)
        self._phase = _Phase.ACTIVE

    @staticmethod
    def _queue_allows(turn: CallerTurn, at: int, now: int, queued: int) -> bool:
        """A gated turn starts only on a tick at or after `at` where the queue fits."""
        if at > now:
            return False
        low, high = turn.queued_min_ms, turn.queued_max_ms
        return (low is None or queued >= ms_to_samples(low)) and (
            high is None or queued <= ms_to_samples(high)
        )

    def _trigger(self, turn: CallerTurn, now: int, ear: BotEar) -> int | None:
        delay = ms_to_samples(turn.delay_ms)
        armed = self._armed_at
        match After(turn.after):
            case After.START:
                return armed + delay
            case After.BOT_DONE:
                last = ear.last_voiced_end
                noticed = last is not None and now - last >= ms_to_samples(BOT_DONE_SILENCE_MS)
                if last is not None and last > armed and noticed:
                    return last + delay
                if now - max(armed, last or 0) >= self._patience:
                    return now
            case After.BOT_SPEAKING:
                onset = ear.onset_since(armed)
                if onset is not None:
                    return onset + delay
                if now - armed >= self._patience:
                    return now
        return None


BEEP_HZ: Final = 1000.0
BEEP_MS: Final = 600


def answering_machine(greeting: str, *, beep_ms: int = BEEP_MS) -> list[CallerTurn]:
    """An answering machine taking a call: its greeting, then a beep (a 1 kHz tone), then
    silence while it records. Turn 1 is the beep: it ends `beep_ms` after it starts."""
    t = np.arange(RATE * beep_ms // 1000) / RATE
    beep = (0.3 * 32767 * np.sin(2 * np.pi * BEEP_HZ * t)).astype(np.int16)
    return [
        CallerTurn(text=greeting, after=After.START, delay_ms=400),
        CallerTurn(audio=beep, after=After.START, delay_ms=300),
    ]


def _gated(turn: CallerTurn) -> bool:
    return turn.queued_min_ms is not None or turn.queued_max_ms is not None


def _reply_over(now: int, ear: BotEar, queued: int) -> bool:
    last = ear.last_voiced_end
    return queued == 0 and last is not None and now - last >= ms_to_samples(BOT_GONE_MS)


def prepare_turns(turns: Sequence[CallerTurn], engine: str) -> list[PreparedTurn]:
    """Synthesise every turn before dialling, so speech is ready the moment it is due."""
    voice: CallerVoice | None = None
    prepared = []
    for turn in turns:
        if turn.text is not None:
            voice = voice or CallerVoice(engine)
            audio = voice.speak(turn.text)
        elif turn.wav is not None:
            audio = load_wav_8k(turn.wav)
        elif turn.audio is not None:
            raw = np.asarray(turn.audio)
            pcm = raw if raw.dtype == np.int16 else float_to_pcm16(raw)
            # Through mu-law like everything else on the line.
            audio = mulaw_decode(mulaw_encode(pcm.reshape(-1)))
        else:
            audio = np.zeros(0, dtype=np.int16)
        prepared.append(PreparedTurn(turn=turn, audio=audio))
    return prepared
