"""PCM16 WAV files in and out (stdlib `wave`), for recordings, fixtures and tools."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np

from media.codec import float_to_pcm16, pcm16_to_float

__all__ = ["read_wav", "write_wav"]


def read_wav(path: str | Path) -> tuple[np.ndarray, int]:
    """(float32 mono samples in [-1, 1), sample rate). Multichannel files are averaged."""
    with wave.open(str(path), "rb") as f:
        if f.getsampwidth() != 2:
            raise ValueError(f"{path}: only 16-bit PCM is supported, got {8 * f.getsampwidth()}")
        channels = f.getnchannels()
        rate = f.getframerate()
        raw = f.readframes(f.getnframes())
    samples = pcm16_to_float(np.frombuffer(raw, dtype="<i2").astype(np.int16))
    if channels > 1:
        samples = samples.reshape(-1, channels).mean(axis=1, dtype=np.float32)
    return samples, rate


def write_wav(path: str | Path, samples: np.ndarray, rate: int, channels: int = 1) -> None:
    """Write int16 or float samples as PCM16; stereo takes shape (n, 2)."""
    arr = np.asarray(samples)
    if channels == 1 and arr.ndim != 1:
        raise ValueError(f"mono audio must be 1-D, got shape {arr.shape}")
    if channels > 1 and (arr.ndim != 2 or arr.shape[1] != channels):
        raise ValueError(f"expected shape (n, {channels}), got {arr.shape}")
    pcm = arr if arr.dtype == np.int16 else float_to_pcm16(arr)
    with wave.open(str(path), "wb") as f:
        f.setnchannels(channels)
        f.setsampwidth(2)
        f.setframerate(rate)
        f.writeframes(np.ascontiguousarray(pcm, dtype="<i2").tobytes())
