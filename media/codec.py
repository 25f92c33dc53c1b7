"""G.711 mu-law <-> linear PCM, the wire format of Twilio Media Streams."""

from __future__ import annotations

import warnings

import numpy as np

with warnings.catch_warnings():
    # audioop is deprecated in 3.11/3.12 and gone in 3.13, where the `audioop-lts`
    # package provides the same module; its C codec is far faster than numpy tables.
    warnings.simplefilter("ignore", DeprecationWarning)
    import audioop

__all__ = [
    "MULAW_SILENCE",
    "float_to_pcm16",
    "mulaw_decode",
    "mulaw_encode",
    "pcm16_to_float",
]

# 0xFF encodes linear 0; Twilio and carriers use it for digital silence.
MULAW_SILENCE = 0xFF

_PCM16_SCALE = 32768.0


def pcm16_to_float(x: np.ndarray) -> np.ndarray:
    """int16 samples -> float32 in [-1, 1)."""
    return np.asarray(x, dtype=np.int16).astype(np.float32) / np.float32(_PCM16_SCALE)


def float_to_pcm16(x: np.ndarray) -> np.ndarray:
    """float samples in [-1, 1] -> int16, clipping anything outside the range."""
    scaled = np.clip(np.asarray(x, dtype=np.float32), -1.0, 1.0) * np.float32(_PCM16_SCALE)
    # +1.0 * 32768 overflows int16, so clip again after scaling.
    return np.clip(np.rint(scaled), -32768, 32767).astype(np.int16)


def mulaw_decode(data: bytes) -> np.ndarray:
    """mu-law bytes -> int16 samples, one per byte."""
    # bytearray keeps the result writable, which ctypes consumers downstream require.
    return np.frombuffer(bytearray(audioop.ulaw2lin(data, 2)), dtype=np.int16)


def mulaw_encode(samples: np.ndarray) -> bytes:
    """int16 samples, or float samples in [-1, 1], -> mu-law bytes."""
    arr = np.asarray(samples)
    if arr.dtype == np.int16:
        pcm = arr
    elif np.issubdtype(arr.dtype, np.floating):
        pcm = float_to_pcm16(arr)
    else:
        # Other integer widths have no agreed scale; guessing would silently distort.
        raise TypeError(f"expected int16 or float samples, got {arr.dtype}")
    return audioop.lin2ulaw(np.ascontiguousarray(pcm).tobytes(), 2)
