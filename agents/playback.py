"""The bot's voice on the way out: PCM → 8 kHz mu-law chunks, each followed by a mark.

`Playback` keeps the `PlayoutClock` in step with what was sent, echoed and cleared, so
at any moment the agent knows whether the caller can hear the bot and, after a barge-in,
exactly which words were heard.

A caller who starts talking over the bot is answered by `hold()` while their words are
judged. Twilio is told to `clear` at once, and what the caller had not heard yet is sent
again lowered by `hold_duck_db` (the bot goes on under them, quietly), or, with no duck,
kept back (the bot stops at the caller's ear within a network hop). A lowered bot is
`silence()`d when the caller goes on talking (an interruption must not be talked over
for long, however quietly) and `lower()`ed again when they stop, until their words are
judged. `resume()` brings it back to full level when it was only a "mhm" (a stopped bot
from a moment before the cut, so the caller hears the interrupted word whole); `clear()`
drops the rest for a real interruption. A stopped bot's new clauses wait with the rest;
a lowered one's play lowered.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from callevents import Clear, EventSink, MarkEchoed, MarkSent
from media.codec import mulaw_encode
from media.playout import Heard, PlayoutClock, Unplayed
from media.resample import resample

PHONE_RATE = 8000
# Resumed audio starts this far before where the caller stopped hearing it: the cut
# word is heard whole, not from its middle.
RESUME_BACKUP_MS = 250
# A lowered bot is brought back to full level from what was sent lowered: past this,
# the int16 rounding of the lowered copy, raised again, is heard over mu-law's own noise.
MAX_DUCK_DB = 30.0
_FADE = PHONE_RATE // 200  # 5 ms fade on resumed or re-levelled audio: no click at the splice


class AudioSink(Protocol):
    """Where outbound audio goes: the telephony side of the call."""

    async def send_media(self, mulaw: bytes) -> None: ...
    async def send_mark(self, name: str) -> None: ...
    async def send_clear(self) -> None: ...


@dataclass
class _Piece:
    """Audio waiting to be sent (held): 16-bit PCM at 8 kHz with its words."""

    pcm16: np.ndarray
    text: str
    turn_id: int


class Playback:
    def __init__(
        self,
        sink: AudioSink,
        now: Callable[[], int],
        *,
        line_now: Callable[[], int] | None = None,
        chunk_ms: int = 100,
        min_latency_ms: int = 0,
        on_played: Callable[[int, np.ndarray], None] | None = None,
        on_event: EventSink | None = None,
        hold_duck_db: float = 0.0,
    ) -> None:
        """`hold_duck_db`: how far a hold lowers the bot; 0 stops it."""
        if not 0 <= hold_duck_db <= MAX_DUCK_DB:
            raise ValueError(f"hold_duck_db is an attenuation of 0..{MAX_DUCK_DB:g} dB")
        self._sink = sink
        self.now = now  # call clock, in 8 kHz samples of caller audio received
        # ...and where the caller's line is on it, which our reading of the stream may
        # lag: audio sent now is scheduled from there.
        self._line_now = line_now or now
        self.clock = PlayoutClock(
            PHONE_RATE,
            on_played=on_played,
            min_latency=PHONE_RATE * min_latency_ms // 1000,
            learn_latency=min_latency_ms > 0,
            # Twilio plays 20 ms frames: learnt against a call's line, the schedule
            # starts fresh audio on their boundaries.
            frame=PHONE_RATE // 50 if min_latency_ms > 0 else 0,
        )
        self._emit = on_event or (lambda _event: None)
        self._chunk = PHONE_RATE * chunk_ms // 1000
        self.first_audio_at: int | None = None  # clock position of the last turn's first chunk
        self._held: list[_Piece] | None = None  # None: not holding
        self._held_heard: list[Heard] = []
        self._held_at = 0
        self._silenced_at = 0  # where a lowered bot was last silenced
        # While held with a duck: the gain the bot plays at (None: not lowered).
        self._duck = 10.0 ** (-hold_duck_db / 20.0) if hold_duck_db > 0 else None
        self._lowered: float | None = None
        self._echo = asyncio.Event()  # set at each echo or clear: `played_out` rechecks
        self._unheld = asyncio.Event()  # set while not holding
        self._unheld.set()
        # One change to what Twilio plays at a time: a clause sent while a hold re-sends
        # the rest (or a mark echo then) would be scheduled, or counted, out of order.
        self._sending = asyncio.Lock()

    @property
    def holding(self) -> bool:
        """The caller holds the bot: it is stopped, or lowered, while their words are judged."""
        return self._held is not None or self._lowered is not None

    async def until_unheld(self) -> None:
        """Return once the bot is not held (at once if it is not)."""
        await self._unheld.wait()

    def stopped_at(self) -> int:
        """Where on the call clock the caller stopped hearing the bot, were it cleared now:
        at the hold if it is stopped, else now (a lowered bot is still heard), or where
        its audio ran out if that was earlier (a lowered reply can play out under the
        caller's words long before they are judged an interruption)."""
        if self._held is None:
            return min(self.now(), self.clock.sent_until)
        return self._silenced_at if self._lowered is not None else self._held_at

    async def play(self, pcm: np.ndarray, rate: int, text: str, turn_id: int) -> int:
        """Send one clause; returns the call-clock sample where it is expected to start.

        While held, the clause waits with the held audio (and the return value is where
        it would start if resumed now).
        """
        audio = resample(pcm.astype(np.float32, copy=False), rate, PHONE_RATE)
        pcm16 = np.clip(audio * 32767.0, -32768, 32767).astype(np.int16)
        async with self._sending:
            return await self._play(pcm16, text, turn_id)

    async def _play(self, pcm16: np.ndarray, text: str, turn_id: int) -> int:
        now = self.now()
        if not pcm16.size:
            # No sound, no message: a media message with an empty payload is a protocol
            # error at Twilio's end.
            return now + self.clock.pending_samples(now)
        if self._held is not None:
            # Kept at full level: a silenced bot is lowered again only when it is sent.
            self._held.append(_Piece(pcm16, text, turn_id))
            return now + self.clock.min_latency + sum(len(p.pcm16) for p in self._held[:-1])
        starts_at = now + self.clock.pending_samples(now)
        if self._lowered is not None:
            pcm16 = _scaled(pcm16, self._lowered)
        await self._send(pcm16, text, turn_id)
        return starts_at

    async def _send(self, pcm16: np.ndarray, text: str, turn_id: int) -> None:
        for offset, piece in _share_text(text, len(pcm16), self._chunk):
            chunk = pcm16[offset : offset + self._chunk]
            name = self.clock.new_mark_name()
            await self._sink.send_media(mulaw_encode(chunk))
            await self._sink.send_mark(name)
            self.clock.sent(name, len(chunk), piece, turn_id, self._line_now(), pcm=chunk)
            self._emit(MarkSent(mark=name, samples=len(chunk)))

    def awaits_echo(self, name: str) -> bool:
        """`name` is a mark this call sent whose echo is due: anything else is not ours
        to record (a peer can echo marks with any name, as long as it likes)."""
        return self.clock.awaits_echo(name)

    def echoed(self, name: str) -> bool:
        played = self.clock.echoed(name, self.now()) is not None
        self._emit(MarkEchoed(mark=name, played=played))
        self._echo.set()
        return played

    async def played_out(self, timeout_s: float) -> bool:
        """Wait until Twilio has echoed every mark sent (all the audio has played, or was
        cleared); False if `timeout_s` passed first (echoes lost, or the call is gone)."""
        try:
            async with asyncio.timeout(timeout_s):
                while self.clock.marks_pending or self._held:
                    self._echo.clear()
                    await self._echo.wait()
        except TimeoutError:
            return False
        return True

    async def hold(self) -> list[Heard]:
        """Stop, or lower, the bot at the caller's ear now, keeping what they have not
        heard; returns what they have heard at full level."""
        async with self._sending:
            return await self._hold()

    async def _hold(self) -> list[Heard]:
        if self.holding:
            return []
        now = self.now()
        if self._duck is not None:
            return await self._lower(now, self._duck)
        self._held_at = now
        await self._stop(now, 1.0, "hold")
        self._unheld.clear()
        return self._held_heard

    async def _stop(self, now: int, gain: float, reason: str) -> None:
        """Clear Twilio and keep what the caller has not heard, at full level (it was
        sent at `gain` since the hold)."""
        rest = self.clock.unplayed(now)
        # The moment before the cut, which the caller did hear: resumed audio starts
        # with it (the clock keeps ~1 s of played audio). Of a lowered bot, only what
        # played lowered: it is all brought back by one gain.
        since = now - PHONE_RATE * RESUME_BACKUP_MS // 1000
        backup = self.clock.render(since if gain == 1.0 else max(since, self._held_at), now)
        # The clock first: a mark echoed while `clear` is on its way is of cleared audio.
        self._held_heard = self.clock.cleared(now)
        await self._sink.send_clear()
        self._emit(Clear(reason=reason))
        restore = np.float32(1.0 / gain)
        pieces = [_Piece(_pcm16(u.pcm * restore), u.text, u.turn_id) for u in rest]
        if pieces and np.any(backup):
            lead = _pcm16(backup[np.argmax(backup != 0) :] * restore)
            pieces.insert(0, _Piece(lead, "", pieces[0].turn_id))
        if pieces:
            _fade_in(pieces[0].pcm16)
        self._held = pieces
        self._echo.set()

    async def silence(self) -> None:
        """Stop a lowered bot at the caller's ear, keeping the rest: they are still
        talking, perhaps interrupting. (A stopped bot, or one not held, stays as it is.)"""
        async with self._sending:
            if self._lowered is None or self._held is not None:
                return
            now = self.now()
            self._silenced_at = now
            await self._stop(now, self._lowered, "silence")

    async def lower(self) -> None:
        """Play a silenced bot on, lowered, while the caller's words are judged. (A bot
        not silenced stays as it is.)"""
        async with self._sending:
            gain, pieces = self._lowered, self._held
            if gain is None or pieces is None:
                return
            self._held = None
            self._echo.set()
            for piece in pieces:
                await self._send(_scaled(piece.pcm16, gain), piece.text, piece.turn_id)

    async def _lower(self, now: int, gain: float) -> list[Heard]:
        """Send what is left again at `gain`: the caller goes on hearing the bot's words,
        under their own, and none is lost whichever way their words are judged."""
        rest = self.clock.unplayed(now)
        self._held_heard = self.clock.cleared(now)
        self._held_at = now
        self._lowered = gain
        self._unheld.clear()
        self._echo.set()
        await self._sink.send_clear()
        self._emit(Clear(reason="hold"))
        await self._send_again(rest, gain)
        return self._held_heard

    async def _send_again(self, rest: list[Unplayed], gain: float) -> None:
        """Send unplayed audio again scaled by `gain`, faded in from the level it had."""
        for index, piece in enumerate(rest):
            pcm16 = _pcm16(piece.pcm * np.float32(gain))
            if index == 0:
                _ramp(pcm16, 1.0 / gain)
            await self._send(pcm16, piece.text, piece.turn_id)

    async def resume(self) -> int:
        """Send the held audio, or bring a lowered bot back to full level; returns how
        long it was held, in 8 kHz samples."""
        async with self._sending:
            return await self._resume()

    async def _resume(self) -> int:
        if self._lowered is not None and self._held is not None:
            self._lowered = None  # silenced: what is kept is at full level already
        if (gain := self._lowered) is not None:
            self._lowered = None
            self._unheld.set()
            now = self.now()
            rest = self.clock.unplayed(now)
            if rest:  # (played out while lowered: nothing to bring back)
                self.clock.cleared(now)
                self._echo.set()
                await self._sink.send_clear()
                self._emit(Clear(reason="resume"))
                await self._send_again(rest, 1.0 / gain)
            return now - self._held_at
        pieces, self._held = self._held, None
        self._unheld.set()
        self._echo.set()
        if pieces is None:
            return 0
        for piece in pieces:
            await self._send(piece.pcm16, piece.text, piece.turn_id)
        return self.now() - self._held_at

    async def clear(self, reason: str = "barge_in") -> list[Heard]:
        """Drop everything not yet heard: what the caller heard of each turn."""
        async with self._sending:
            return await self._clear(reason)

    async def _clear(self, reason: str = "barge_in") -> list[Heard]:
        if self._lowered is not None:
            self._lowered = None  # what a lowered bot played was heard, if quietly
            self._unheld.set()
        if self._held is not None:
            # Twilio was cleared at the hold; what was heard was decided then.
            self._held = None
            self._unheld.set()
            heard, self._held_heard = self._held_heard, []
            return heard
        heard = self.clock.cleared(self.now())
        self._echo.set()
        await self._sink.send_clear()
        self._emit(Clear(reason=reason))
        return heard

    def audible(self) -> bool:
        return self.clock.audible(self.now())

    def reference_level_db(self) -> float:
        return self.clock.reference_level_db(self.now())


def _pcm16(audio: np.ndarray) -> np.ndarray:
    return np.clip(audio * 32768.0, -32768, 32767).astype(np.int16)


def _scaled(pcm16: np.ndarray, gain: float) -> np.ndarray:
    return np.clip(pcm16.astype(np.float32) * np.float32(gain), -32768, 32767).astype(np.int16)


def _ramp(pcm16: np.ndarray, start_gain: float) -> None:
    """Start `pcm16` at `start_gain` of its level and reach its own level in 5 ms."""
    n = min(_FADE, len(pcm16))
    if n:
        ramp = np.linspace(start_gain, 1.0, n, endpoint=False, dtype=np.float32)
        pcm16[:n] = np.clip(pcm16[:n].astype(np.float32) * ramp, -32768, 32767).astype(np.int16)


def _fade_in(pcm16: np.ndarray) -> None:
    n = min(_FADE, len(pcm16))
    if n:
        ramp = np.linspace(0.0, 1.0, n, endpoint=False, dtype=np.float32)
        pcm16[:n] = (pcm16[:n].astype(np.float32) * ramp).astype(np.int16)


def _share_text(text: str, samples: int, chunk: int) -> list[tuple[int, str]]:
    """Split a clause's words over its chunks in proportion to time, for truthful truncation."""
    offsets = list(range(0, max(samples, 1), chunk))
    words = text.split()
    if not words:
        return [(o, "") for o in offsets]
    shares: list[list[str]] = [[] for _ in offsets]
    for index, word in enumerate(words):
        # A word belongs to the chunk in which it is (proportionally) half spoken.
        position = (index + 0.5) / len(words) * samples
        shares[min(int(position // chunk), len(offsets) - 1)].append(word)
    return [(o, " ".join(s)) for o, s in zip(offsets, shares, strict=True)]
