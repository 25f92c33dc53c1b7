"""What a real caller's line adds to their voice: background noise and the bot's echo.

The simulator mixes these into the caller's microphone before mu-law, so the bot under
test hears what it would hear from a caller in a cafe or on a speakerphone:

- background noise, continuous from the first frame to hang-up: white, pink (1/f, like
  fans and traffic) or babble (several espeak-ng voices talking at once, the hardest:
  it is speech), at a chosen SNR against the caller's own speech level;
- echo: the bot audio the caller heard, fed back into the microphone `echo_db` down
  and `echo_delay_ms` late (a speakerphone's round trip; 60-400 ms on real lines).

Everything is deterministic for a given seed, so a benchmark condition is repeatable.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Final

import numpy as np

from ops.caller_voice import LINE_RATE, CallerVoiceError, phone_line, speak

__all__ = [
    "NOISE_KINDS",
    "EchoPath",
    "LineConditions",
    "NoiseSource",
    "active_rms",
    "babble",
    "pink_noise",
]

NOISE_KINDS: Final = ("white", "pink", "babble")
# Frames quieter than this are pauses, not speech, when measuring a speech level.
_ACTIVE_DBFS: Final = -40.0
_BABBLE_TALKERS: Final = 6
_BABBLE_SECONDS: Final = 24.0
_BABBLE_TEXT: Final = (
    "I told him we would meet at the station after lunch, but the train was late again.",
    "Have you tried the new place on the corner? The soup is good but the bread is better.",
    "She said the meeting moved to Thursday, so we have another two days to finish it.",
    "My brother is painting the kitchen this weekend and he wants me to help him.",
    "The game went into extra time and nobody could believe the final score last night.",
    "We should book the tickets early because the summer flights fill up very quickly.",
    "If the weather holds we can walk along the river and stop for coffee on the way.",
    "The children have a school trip to the museum and they need a packed lunch.",
)
# espeak-ng voice variants: different speakers, so the babble is not one voice in unison.
_BABBLE_VOICES: Final = ("en-us", "en+f3", "en-gb+m3", "en-us+f2", "en+m7", "en-gb-x-rp+f4")


@dataclass(frozen=True)
class LineConditions:
    """A caller's line: noise at `snr_db` below their speech, and the bot's echo."""

    noise: str | None = None  # one of NOISE_KINDS
    snr_db: float = 15.0
    echo_db: float | None = None  # echo level relative to the bot's audio (e.g. -20)
    echo_delay_ms: int = 0
    seed: int = 1

    def __post_init__(self) -> None:
        if self.noise is not None and self.noise not in NOISE_KINDS:
            raise ValueError(f"expected noise to be one of {NOISE_KINDS}, got {self.noise!r}")
        if self.echo_delay_ms < 0:
            raise ValueError(f"expected echo_delay_ms >= 0, got {self.echo_delay_ms}")

    @property
    def label(self) -> str:
        parts = []
        if self.echo_db is not None:
            parts.append(f"echo {-abs(self.echo_db):.0f} dB @ {self.echo_delay_ms} ms")
        if self.noise is not None:
            parts.append(f"{self.noise} {self.snr_db:g} dB SNR")
        return ", ".join(parts) or "clean"


def active_rms(pcm: np.ndarray, frame: int = 160) -> float:
    """RMS of the 20 ms frames that carry speech (pauses excluded), in int16 units."""
    x = np.asarray(pcm, dtype=np.float64)
    n = x.size // frame
    if n == 0:
        return 0.0
    frames = x[: n * frame].reshape(n, frame)
    power = np.mean(frames**2, axis=1)
    threshold = (32768.0 * 10 ** (_ACTIVE_DBFS / 20)) ** 2
    active = power[power >= threshold]
    return float(np.sqrt(np.mean(active))) if active.size else 0.0


def pink_noise(samples: int, rng: np.random.Generator) -> np.ndarray:
    """1/f noise, shaped in the frequency domain; unit RMS."""
    spectrum = np.fft.rfft(rng.standard_normal(samples))
    freqs = np.fft.rfftfreq(samples)
    freqs[0] = freqs[1]
    pink = np.fft.irfft(spectrum / np.sqrt(freqs), n=samples)
    return (pink / np.sqrt(np.mean(pink**2))).astype(np.float32)


def babble(seconds: float, rng: np.random.Generator, talkers: int = _BABBLE_TALKERS) -> np.ndarray:
    """Several espeak-ng voices talking at once, as a phone line carries them; unit RMS."""
    length = int(seconds * LINE_RATE)
    mix = np.zeros(length, dtype=np.float64)
    for talker in range(talkers):
        voice = _BABBLE_VOICES[talker % len(_BABBLE_VOICES)]
        order = rng.permutation(len(_BABBLE_TEXT))
        text = " ".join(_BABBLE_TEXT[i] for i in order)
        rate = int(rng.integers(150, 190))
        track = _espeak(text, voice, rate).astype(np.float64)
        track /= max(1e-9, active_rms(track))
        # Each talker starts at a random point and loops: no common pauses.
        track = np.roll(np.resize(track, length), int(rng.integers(0, length)))
        mix += track
    return (mix / np.sqrt(np.mean(mix**2))).astype(np.float32)


def _espeak(text: str, voice: str, rate: int) -> np.ndarray:
    try:
        return speak(text, engine="espeak", rate_wpm=rate, voice=voice)
    except (CallerVoiceError, OSError) as exc:
        raise CallerVoiceError(f"could not make babble with espeak-ng: {exc}") from exc


class NoiseSource:
    """Continuous background noise at a fixed level, handed out frame by frame."""

    def __init__(self, kind: str, rms: float, seed: int = 1) -> None:
        rng = np.random.default_rng(seed)
        if kind == "white":
            unit = rng.standard_normal(LINE_RATE * 10).astype(np.float32)
        elif kind == "pink":
            unit = pink_noise(LINE_RATE * 20, rng)
        elif kind == "babble":
            unit = babble(_BABBLE_SECONDS, rng)
        else:
            raise ValueError(f"expected noise to be one of {NOISE_KINDS}, got {kind!r}")
        # Through the phone line's band and codec first, then scaled to the wanted level.
        lined = phone_line(unit, LINE_RATE, trim=False).astype(np.float32)
        self._noise = lined * np.float32(rms / max(1e-9, float(np.sqrt(np.mean(lined**2)))))
        self._at = 0

    def take(self, count: int) -> np.ndarray:
        idx = (self._at + np.arange(count)) % self._noise.size
        self._at = (self._at + count) % self._noise.size
        return self._noise[idx]


class EchoPath:
    """The bot's audio coming back through the caller's microphone, late and quieter."""

    def __init__(self, level_db: float, delay_ms: int) -> None:
        self._gain = np.float32(10.0 ** (-abs(level_db) / 20.0))
        self._line: deque[float] = deque([0.0] * (delay_ms * LINE_RATE // 1000))

    def feed(self, heard: np.ndarray) -> None:
        """The bot audio the caller heard in the latest 20 ms."""
        self._line.extend(heard.astype(np.float32).tolist())

    def take(self, count: int) -> np.ndarray:
        """The echo in the caller's next `count` microphone samples."""
        out = np.zeros(count, dtype=np.float32)
        for i in range(min(count, len(self._line))):
            out[i] = self._line.popleft()
        return out * self._gain
