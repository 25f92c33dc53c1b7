"""The caller's recent audio, addressed by front-end sample: what the engine's decisions
name ("evaluate [start, end)") is cut from here.

It also keeps where speech detection heard the caller pause inside their speech, so that
what Whisper hears of a turn can leave out most of a long pause (`for_words`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

import numpy as np

from media.vad import SpeechStarted, SpeechStopped, VadEvent

__all__ = ["LONG_PAUSE_KEPT_MS", "CallerAudio"]

# Of a pause inside the caller's speech, what Whisper hears: a comma's pause, enough to
# keep the words on either side apart. Greedy Whisper stops decoding at a long pause
# inside its window: a caller who paused mid-sentence was heard up to the pause.
LONG_PAUSE_KEPT_MS = 300


class CallerAudio:
    def __init__(self, rate: int) -> None:
        self.rate = rate
        self._pieces: deque[tuple[int, np.ndarray]] = deque()  # (start sample, audio)
        self._pauses: deque[tuple[int, int]] = deque()  # [stop, start) between speech runs
        self._stopped: int | None = None  # speech stopped here and has not started again

    def add(self, start: int, audio: np.ndarray) -> None:
        if len(audio):
            self._pieces.append((start, audio))

    def speech(self, events: Iterable[VadEvent]) -> None:
        """Speech detection's events, as the engine is given them."""
        for event in events:
            if isinstance(event, SpeechStopped):
                self._stopped = event.sample
            elif isinstance(event, SpeechStarted) and self._stopped is not None:
                if event.sample > self._stopped:
                    self._pauses.append((self._stopped, event.sample))
                self._stopped = None

    def keep_from(self, sample: int) -> None:
        """Forget audio that ends before `sample`."""
        while self._pieces and self._pieces[0][0] + len(self._pieces[0][1]) <= sample:
            self._pieces.popleft()
        while self._pauses and self._pauses[0][1] <= sample:
            self._pauses.popleft()

    def slice(self, start: int, end: int) -> np.ndarray:
        """The audio in [start, end); what is missing (never received, or forgotten) is
        left out rather than filled."""
        parts = []
        for piece_start, audio in self._pieces:
            lo, hi = max(start, piece_start), min(end, piece_start + len(audio))
            if lo < hi:
                parts.append(audio[lo - piece_start : hi - piece_start])
        return np.concatenate(parts) if parts else np.zeros(0, np.float32)

    def for_words(self, start: int, end: int) -> np.ndarray:
        """The audio in [start, end) with each pause between two runs of speech inside it
        cut to `LONG_PAUSE_KEPT_MS`, half of it on each side: what Whisper is given.

        The pause after the last speech (the one being judged) is left whole."""
        kept = LONG_PAUSE_KEPT_MS * self.rate // 1000
        parts, at = [], start
        for stop, resume in self._pauses:
            if stop < start or resume > end or resume - stop <= kept:
                continue
            parts.append(self.slice(at, stop + kept // 2))
            at = resume - (kept - kept // 2)
        parts.append(self.slice(at, end))
        return np.concatenate(parts)
