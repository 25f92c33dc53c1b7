"""Whisper log-mel features in numpy (80 mels, 25 ms Hann window, 10 ms hop, 16 kHz).

Matches transformers' WhisperFeatureExtractor, which Smart Turn v3 was trained on,
without pulling in transformers or torch.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

__all__ = ["HOP_LENGTH", "N_FFT", "N_MELS", "SAMPLE_RATE", "whisper_log_mel"]

SAMPLE_RATE = 16000
N_FFT = 400
HOP_LENGTH = 160
N_MELS = 80
_MEL_FLOOR = 1e-10


def _hz_to_mel(freq: np.ndarray | float) -> np.ndarray:
    """Slaney mel scale: linear below 1 kHz, logarithmic above."""
    freq = np.asarray(freq, dtype=np.float64)
    linear = 3.0 * freq / 200.0
    log = 15.0 + np.log(np.maximum(freq, 1e-12) / 1000.0) * (27.0 / np.log(6.4))
    return np.where(freq >= 1000.0, log, linear)


def _mel_to_hz(mels: np.ndarray) -> np.ndarray:
    mels = np.asarray(mels, dtype=np.float64)
    linear = 200.0 * mels / 3.0
    log = 1000.0 * np.exp((np.log(6.4) / 27.0) * (mels - 15.0))
    return np.where(mels >= 15.0, log, linear)


@lru_cache(maxsize=1)
def _mel_filters() -> np.ndarray:
    """Slaney-normalised triangular filters, shape (N_MELS, N_FFT // 2 + 1)."""
    fft_freqs = np.linspace(0.0, SAMPLE_RATE / 2, N_FFT // 2 + 1)
    mel_edges = np.linspace(_hz_to_mel(0.0), _hz_to_mel(SAMPLE_RATE / 2), N_MELS + 2)
    hz_edges = _mel_to_hz(mel_edges)
    widths = np.diff(hz_edges)
    slopes = hz_edges[:, None] - fft_freqs[None, :]
    rising = -slopes[:-2] / widths[:-1, None]
    falling = slopes[2:] / widths[1:, None]
    filters = np.maximum(0.0, np.minimum(rising, falling))
    # Equal area per filter, as librosa's norm="slaney".
    filters *= (2.0 / (hz_edges[2:] - hz_edges[:-2]))[:, None]
    filters.flags.writeable = False
    return filters


@lru_cache(maxsize=1)
def _hann() -> np.ndarray:
    window = np.hanning(N_FFT + 1)[:-1]  # periodic, as torch.hann_window
    window.flags.writeable = False
    return window


def whisper_log_mel(audio_16k: np.ndarray) -> np.ndarray:
    """Log-mel spectrogram of 16 kHz mono audio, shape (80, len(audio) // 160), float32.

    Centred STFT with reflect padding; the last frame is dropped, as Whisper does.
    Values are log10 power, floored at 8 (decades) below the maximum and mapped
    by (x + 4) / 4. Any waveform normalisation is the caller's business.
    """
    x = np.asarray(audio_16k, dtype=np.float64)
    if x.ndim != 1:
        raise ValueError(f"expected 1-D audio, got shape {x.shape}")
    if x.size <= N_FFT // 2:
        raise ValueError(f"need more than {N_FFT // 2} samples, got {x.size}")
    padded = np.pad(x, N_FFT // 2, mode="reflect")
    frames = sliding_window_view(padded, N_FFT)[::HOP_LENGTH]
    power = np.abs(np.fft.rfft(frames * _hann(), axis=-1)) ** 2  # (n_frames + 1, bins)
    mel = _mel_filters() @ power[:-1].T
    log_spec = np.log10(np.maximum(mel, _MEL_FLOOR))
    log_spec = np.maximum(log_spec, log_spec.max() - 8.0)
    return ((log_spec + 4.0) / 4.0).astype(np.float32)
