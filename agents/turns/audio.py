"""The caller's recent audio, addressed by front-end sample: what the engine's decisions
name ("evaluate [start, end)") is cut from here."""

from __future__ import annotations

from collections import deque

import numpy as np

__all__ = ["CallerAudio"]


class CallerAudio:
    def __init__(self, rate: int) -> None:
        self.rate = rate
        self._pieces: deque[tuple[int, np.ndarray]] = deque()  # (start sample, audio)

    def add(self, start: int, audio: np.ndarray) -> None:
        if len(audio):
            self._pieces.append((start, audio))

    def keep_from(self, sample: int) -> None:
        """Forget audio that ends before `sample`."""
        while self._pieces and self._pieces[0][0] + len(self._pieces[0][1]) <= sample:
            self._pieces.popleft()

    def slice(self, start: int, end: int) -> np.ndarray:
        """The audio in [start, end); what is missing (never received, or forgotten) is
        left out rather than filled."""
        parts = []
        for piece_start, audio in self._pieces:
            lo, hi = max(start, piece_start), min(end, piece_start + len(audio))
            if lo < hi:
                parts.append(audio[lo - piece_start : hi - piece_start])
        return np.concatenate(parts) if parts else np.zeros(0, np.float32)
