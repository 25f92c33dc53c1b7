"""Sample-rate conversion for mono float32 audio, streaming or one-shot (libsoxr)."""

from __future__ import annotations

from typing import Protocol

import numpy as np
import soxr

from media.polyphase import PolyphaseResampler

__all__ = ["Resampler", "StreamResampler", "make_stream_resampler", "resample"]


class Resampler(Protocol):
    """What the per-call pipeline needs from a streaming resampler."""

    def process(self, samples: np.ndarray) -> np.ndarray: ...

    def flush(self) -> np.ndarray: ...

    def reset(self) -> None: ...


class StreamResampler:
    """Stateful mono float32 resampler: feed chunks in order, get resampled chunks out.

    Output length per call varies, but the running total tracks input length x
    out_rate / in_rate, and output sample k sits at input time k / out_rate. soxr
    releases output in FFT-sized blocks: at 8 kHz input with "HQ" it returns nothing
    for ~5 frames of 20 ms and then ~100 ms at once. Fine for files and TTS; live
    paths that must react per frame want `make_stream_resampler(low_latency=True)`.
    """

    def __init__(self, in_rate: int, out_rate: int, quality: str = "HQ") -> None:
        if in_rate <= 0 or out_rate <= 0:
            raise ValueError(f"rates must be positive, got {in_rate} -> {out_rate}")
        self.in_rate = in_rate
        self.out_rate = out_rate
        self.quality = quality
        self._stream: soxr.ResampleStream | None = (
            None
            if in_rate == out_rate
            else soxr.ResampleStream(in_rate, out_rate, 1, dtype="float32", quality=quality)
        )

    def process(self, samples: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(samples, dtype=np.float32)
        if self._stream is None:
            return x
        return self._stream.resample_chunk(x)

    def flush(self) -> np.ndarray:
        """Drain what the filter still holds; call once at end of stream."""
        if self._stream is None:
            return np.zeros(0, dtype=np.float32)
        return self._stream.resample_chunk(np.zeros(0, dtype=np.float32), last=True)

    def reset(self) -> None:
        if self._stream is not None:
            self._stream.clear()


def make_stream_resampler(in_rate: int, out_rate: int, low_latency: bool = True) -> Resampler:
    """The live-audio resampler: polyphase (a few ms of delay) or soxr HQ.

    soxr's streaming mode emits output in FFT-sized bursts (up to ~130 ms held back
    for 8 kHz input), so real-time paths default to the polyphase FIR.
    """
    if low_latency:
        return PolyphaseResampler(in_rate, out_rate)
    return StreamResampler(in_rate, out_rate)


def resample(samples: np.ndarray, in_rate: int, out_rate: int, quality: str = "HQ") -> np.ndarray:
    """One-shot resample of a whole mono signal to float32."""
    x = np.ascontiguousarray(samples, dtype=np.float32)
    if in_rate == out_rate:
        return x
    return np.asarray(soxr.resample(x, in_rate, out_rate, quality=quality), dtype=np.float32)
