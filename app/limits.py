"""Per-call limits on what the caller's side may send: media pace and keypad presses.

Both are judged against the wall clock, which the peer does not control, unlike the
media timestamps that drive the call clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

# Twilio may deliver the first moments of a stream in a burst; beyond it, the pace holds.
MEDIA_BURST_S = 2.0
# A keypad turn (digits closer together than the agent's 800 ms collection window) holds
# at most a long card number with its expiry and code; people press ~5 keys a second.
MAX_DIGITS_PER_TURN = 32
DIGIT_TURN_GAP_S = 0.8
DIGITS_PER_S = 8.0
DIGIT_BURST = 12


@dataclass
class MediaPace:
    """Is caller audio (gap fill included) arriving faster than `max_rate` x real time?"""

    max_rate: float
    sample_rate: int = 8000
    clock: Callable[[], float] = time.monotonic
    _began: float | None = None

    def flooding(self, position_samples: int) -> bool:
        now = self.clock()
        if self._began is None:
            self._began = now
        allowed_s = self.max_rate * (now - self._began) + MEDIA_BURST_S
        return position_samples / self.sample_rate > allowed_s


@dataclass
class KeypadLimit:
    """Digits let through: a token bucket, and a cap on one keypad turn."""

    clock: Callable[[], float] = time.monotonic
    _tokens: float = DIGIT_BURST
    _last: float | None = None
    _in_turn: int = 0

    def allow(self) -> bool:
        now = self.clock()
        if self._last is not None:
            self._tokens = min(DIGIT_BURST, self._tokens + (now - self._last) * DIGITS_PER_S)
            if now - self._last >= DIGIT_TURN_GAP_S:
                self._in_turn = 0
        self._last = now
        if self._tokens < 1 or self._in_turn >= MAX_DIGITS_PER_TURN:
            return False
        self._tokens -= 1
        self._in_turn += 1
        return True
