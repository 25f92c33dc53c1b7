"""Fakes for the agents' collaborators: the telephony side of a call and its clock."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Media:
    payload: bytes


@dataclass(frozen=True)
class Mark:
    name: str


@dataclass(frozen=True)
class Clear:
    pass


Sent = Media | Mark | Clear


@dataclass
class RecordingSink:
    """An `AudioSink` that records every message, in order."""

    sent: list[Sent] = field(default_factory=list)

    async def send_media(self, mulaw: bytes) -> None:
        self.sent.append(Media(mulaw))

    async def send_mark(self, name: str) -> None:
        self.sent.append(Mark(name))

    async def send_clear(self) -> None:
        self.sent.append(Clear())

    def media(self) -> list[bytes]:
        return [m.payload for m in self.sent if isinstance(m, Media)]

    def marks(self) -> list[str]:
        return [m.name for m in self.sent if isinstance(m, Mark)]

    def clears(self) -> int:
        return sum(isinstance(m, Clear) for m in self.sent)


@dataclass
class Clock:
    """The call clock: 8 kHz samples of caller audio received, moved by the test."""

    samples: int = 0

    def __call__(self) -> int:
        return self.samples


def tone(seconds: float, rate: int, *, amplitude: float = 0.3, hz: float = 440.0) -> np.ndarray:
    """A sine tone as float32: audio that is anything but silence."""
    t = np.arange(round(seconds * rate)) / rate
    return (amplitude * np.sin(2 * np.pi * hz * t)).astype(np.float32)


@dataclass
class TwilioLine(RecordingSink):
    """A sink that also plays what it is sent in real time on the call clock, like Twilio.

    `due_marks()` gives the marks whose audio has finished playing by now, and after a
    clear every mark still queued (Twilio echoes those at once).
    """

    clock: Clock = field(default_factory=Clock)
    _cursor: int = 0
    _queued: list[tuple[int, str]] = field(default_factory=list)
    _flushed: list[str] = field(default_factory=list)

    async def send_media(self, mulaw: bytes) -> None:
        await super().send_media(mulaw)
        self._cursor = max(self._cursor, self.clock()) + len(mulaw)

    async def send_mark(self, name: str) -> None:
        await super().send_mark(name)
        self._queued.append((self._cursor, name))

    async def send_clear(self) -> None:
        await super().send_clear()
        self._flushed += [name for _, name in self._queued]
        self._queued.clear()
        self._cursor = self.clock()

    def due_marks(self) -> list[str]:
        now = self.clock()
        due = self._flushed + [name for end, name in self._queued if end <= now]
        self._flushed = []
        self._queued = [(end, name) for end, name in self._queued if end > now]
        return due
