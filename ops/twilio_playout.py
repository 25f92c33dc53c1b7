"""A model of Twilio's outbound playout buffer, as the caller's ear experiences it.

Twilio queues the mu-law audio a bot sends and plays it in order at 8 kHz; a mark is
echoed once everything sent before it has played (at once if nothing is buffered), and
a `clear` drops the unplayed audio and echoes every pending mark immediately. The
simulator ticks this model every 20 ms to learn what the caller hears and when to echo
marks, so the bot under test sees the same mark timing it would get from Twilio.

Time here is counted in samples played, never in wall-clock time, so tests are exact.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from media.codec import mulaw_decode

__all__ = ["SAMPLE_RATE", "TwilioPlayout"]

SAMPLE_RATE = 8000


class TwilioPlayout:
    """Twilio's per-stream outbound buffer: audio queued in order, marks at positions.

    Positions are absolute sample counts since the stream began: a mark queued after
    `n` samples were fed becomes due once `n` samples have been played.

    `gap_window_ms` decides what counts as an underrun: a dry buffer that gets more
    audio within this long after the last played sample was a hole in the middle of an
    utterance (the caller hears choppy speech); a longer silence is a deliberate pause
    between utterances and is not counted.
    """

    def __init__(self, gap_window_ms: float = 200.0) -> None:
        if gap_window_ms < 0:
            raise ValueError(f"expected gap_window_ms >= 0, got {gap_window_ms}")
        self._gap_window = round(gap_window_ms * SAMPLE_RATE / 1000)
        self._buffer = bytearray()
        self._marks: deque[tuple[int, str]] = deque()
        self._fed = 0
        self._played = 0
        # Silence samples played since the last real audio sample; None when no audio
        # has played yet or a clear ended the utterance on purpose.
        self._dry_samples: int | None = None
        self._dry_ticks = 0
        self.underruns = 0
        self.underrun_samples = 0

    @property
    def buffered_samples(self) -> int:
        """Audio received but not yet played."""
        return len(self._buffer)

    @property
    def pending_marks(self) -> list[str]:
        """Names of marks not yet echoed, in order."""
        return [name for _, name in self._marks]

    @property
    def played_samples(self) -> int:
        """Audio samples (not silence fill) played so far."""
        return self._played

    @property
    def underrun_ms(self) -> float:
        """Total length of the gaps heard inside utterances."""
        return self.underrun_samples * 1000 / SAMPLE_RATE

    def feed_media(self, payload: bytes) -> None:
        """Append mu-law audio the bot sent."""
        if not payload:
            return
        if (
            not self._buffer
            and self._dry_samples is not None
            and 0 < self._dry_samples <= self._gap_window
        ):
            # The buffer ran dry shortly after playing audio and the bot had more to
            # say: the silence the caller just heard was a hole, not a pause.
            self.underruns += self._dry_ticks
            self.underrun_samples += self._dry_samples
            self._dry_samples = None
            self._dry_ticks = 0
        self._buffer += payload
        self._fed += len(payload)

    def feed_mark(self, name: str) -> None:
        """Queue a mark at the current end of the buffered audio."""
        self._marks.append((self._fed, name))

    def clear(self) -> list[str]:
        """Drop all unplayed audio; return every pending mark, which Twilio echoes at once."""
        self._fed -= len(self._buffer)
        self._buffer.clear()
        names = [name for _, name in self._marks]
        self._marks.clear()
        # Silence after a clear is the bot stopping on purpose, never an underrun.
        self._dry_samples = None
        self._dry_ticks = 0
        return names

    def tick(self, samples: int = 160) -> tuple[np.ndarray, list[str]]:
        """Play the next `samples` samples; return them and the marks now due.

        The marks returned are those whose audio had all been played when this tick
        began: a tick stands for "now and the next 20 ms", and a mark may only be
        echoed once its audio has actually finished. A mark queued with nothing before
        it is therefore returned by the very next tick. Where the buffer runs dry the
        returned audio is silence (zeros), as on a real call.
        """
        if samples <= 0:
            raise ValueError(f"expected a positive sample count, got {samples}")
        due: list[str] = []
        while self._marks and self._marks[0][0] <= self._played:
            due.append(self._marks.popleft()[1])

        take = min(samples, len(self._buffer))
        audio = np.zeros(samples, dtype=np.int16)
        if take:
            audio[:take] = mulaw_decode(bytes(self._buffer[:take]))
            del self._buffer[:take]
            self._played += take
        self._track_dryness(take, samples)
        return audio, due

    def _track_dryness(self, take: int, samples: int) -> None:
        if take == samples:
            self._dry_samples = 0
            self._dry_ticks = 0
        elif take > 0:
            # Ran dry part-way through this tick: the gap starts here.
            self._dry_samples = samples - take
            self._dry_ticks = 1
        elif self._dry_samples is not None:
            self._dry_samples += samples
            self._dry_ticks += 1
