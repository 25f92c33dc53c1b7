"""Audio helpers for media tests: a simulated phone line and simple measurements."""

from __future__ import annotations

import numpy as np

from media.codec import mulaw_decode, mulaw_encode, pcm16_to_float
from media.resample import resample

PHONE_RATE = 8000
# What the bot says in the echo tests: long enough for the canceller to settle on.
BOT_LINE = (
    "Hello! Thanks for calling. How can I help you today? We are open from nine to "
    "five every weekday, and on Saturday mornings until noon."
)


def phone_line(samples: np.ndarray, rate: int) -> np.ndarray:
    """What a caller's audio looks like after the PSTN: 8 kHz, mu-law quantised, float32."""
    return pcm16_to_float(mulaw_decode(mulaw_encode(resample(samples, rate, PHONE_RATE))))


def speech_bounds(samples: np.ndarray, threshold: float = 0.01) -> tuple[int, int]:
    """First and one-past-last sample whose magnitude exceeds `threshold`."""
    loud = np.flatnonzero(np.abs(samples) > threshold)
    return int(loud[0]), int(loud[-1]) + 1


def rms_db(samples: np.ndarray) -> float:
    return float(10.0 * np.log10(np.mean(np.square(samples, dtype=np.float64)) + 1e-20))


def frames(mulaw: bytes, size: int = 160) -> list[bytes]:
    """Split a mu-law stream into Twilio-sized 20 ms frames (dropping a short tail)."""
    return [mulaw[i : i + size] for i in range(0, len(mulaw) - size + 1, size)]
