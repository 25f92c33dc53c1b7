"""The bot's voice on the way out: PCM → 8 kHz mu-law chunks, each followed by a mark.

`Playback` keeps the `PlayoutClock` in step with what was sent, echoed and cleared, so
at any moment the agent knows whether the caller can hear the bot and, after a barge-in,
exactly which words were heard.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

from media.codec import mulaw_encode
from media.playout import Heard, PlayoutClock
from media.resample import resample

PHONE_RATE = 8000


class AudioSink(Protocol):
    """Where outbound audio goes: the telephony side of the call."""

    async def send_media(self, mulaw: bytes) -> None: ...
    async def send_mark(self, name: str) -> None: ...
    async def send_clear(self) -> None: ...


class Playback:
    def __init__(
        self,
        sink: AudioSink,
        now: Callable[[], int],
        *,
        chunk_ms: int = 100,
        min_latency_ms: int = 0,
        on_played: Callable[[int, np.ndarray], None] | None = None,
        on_event: Callable[[str, dict[str, object]], None] | None = None,
    ) -> None:
        self._sink = sink
        self.now = now  # call clock, in 8 kHz samples of caller audio received
        self.clock = PlayoutClock(
            PHONE_RATE,
            on_played=on_played,
            min_latency=PHONE_RATE * min_latency_ms // 1000,
            learn_latency=min_latency_ms > 0,
        )
        self._emit = on_event or (lambda _name, _data: None)
        self._chunk = PHONE_RATE * chunk_ms // 1000
        self.first_audio_at: int | None = None  # clock position of the last turn's first chunk

    async def play(self, pcm: np.ndarray, rate: int, text: str, turn_id: int) -> int:
        """Send one clause; returns the call-clock sample where it is expected to start."""
        audio = resample(pcm.astype(np.float32, copy=False), rate, PHONE_RATE)
        pcm16 = np.clip(audio * 32767.0, -32768, 32767).astype(np.int16)
        now = self.now()
        starts_at = now + self.clock.pending_samples(now)
        pieces = _share_text(text, len(pcm16), self._chunk)
        for offset, piece in pieces:
            chunk = pcm16[offset : offset + self._chunk]
            name = self.clock.new_mark_name()
            await self._sink.send_media(mulaw_encode(chunk))
            await self._sink.send_mark(name)
            self.clock.sent(name, len(chunk), piece, turn_id, self.now(), pcm=chunk)
            self._emit("mark_sent", {"name": name, "samples": len(chunk)})
        return starts_at

    def echoed(self, name: str) -> bool:
        played = self.clock.echoed(name, self.now()) is not None
        self._emit("mark_echoed", {"name": name, "played": played})
        return played

    async def clear(self) -> list[Heard]:
        await self._sink.send_clear()
        return self.clock.cleared(self.now())

    def audible(self) -> bool:
        return self.clock.audible(self.now())

    def reference_level_db(self) -> float:
        return self.clock.reference_level_db(self.now())


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
