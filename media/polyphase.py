"""Low-latency streaming resampler: a windowed-sinc polyphase FIR in numpy.

libsoxr's streaming mode releases output in FFT-sized blocks: at 8 kHz input an HQ
stream emits nothing for 5-8 consecutive 20 ms frames and then a burst, which delays
the VAD by up to ~200 ms through the 8k -> 48k -> 16k chain. This resampler emits
every output sample as soon as the input it depends on has arrived, so the only
latency is half the filter length (a few ms). Best for small rational ratios
(8k <-> 16k <-> 48k); arbitrary ratios work but cost one matmul per polyphase branch.
"""

from __future__ import annotations

from math import ceil, gcd, pi

import numpy as np

__all__ = ["PolyphaseResampler"]


def _design_branches(
    up: int, down: int, transition: float, attenuation_db: float
) -> tuple[np.ndarray, int]:
    """Kaiser-windowed sinc split into `up` branches over a common input span.

    Returns (weights of shape (up, span), offset of the span's first input sample
    relative to the cycle's base input sample). Output `cycle * up + i` is
    ``weights[i] @ x[cycle * down + offset : ... + span]``.
    """
    fs_up = up  # work in units of the input rate: the upsampled rate is `up`
    nyquist = min(1.0, up / down) / 2.0  # passband limit, in input-rate units
    width = transition * nyquist
    cutoff = nyquist - width / 2.0  # -6 dB point sits mid-transition
    n_taps = ceil((attenuation_db - 8.0) / (2.285 * 2.0 * pi * width / fs_up)) + 1
    half = n_taps // 2
    n_taps = 2 * half + 1  # odd length keeps the group delay an integer, so output stays aligned
    if attenuation_db > 50.0:
        beta = 0.1102 * (attenuation_db - 8.7)
    else:
        beta = 0.5842 * (attenuation_db - 21.0) ** 0.4 + 0.07886 * (attenuation_db - 21.0)
    t = np.arange(n_taps) - half
    # Gain `up` restores the energy lost by zero-stuffing.
    h = up * (2.0 * cutoff / fs_up) * np.sinc(2.0 * cutoff / fs_up * t) * np.kaiser(n_taps, beta)

    # Output i of a cycle reads upsampled index k = i*down; input n contributes
    # h[k + half - n*up] when that index is inside the filter.
    phase_k = np.arange(up) * down
    lo = min(-((n_taps - 1 - half - k) // up) for k in phase_k)  # ceil((k+half-N+1)/up)
    hi = max((k + half) // up for k in phase_k)
    span = hi - lo + 1
    weights = np.zeros((up, span), dtype=np.float64)
    for i, k in enumerate(phase_k):
        for r in range(lo, hi + 1):
            j = k + half - r * up
            if 0 <= j < n_taps:
                weights[i, r - lo] = h[j]
    return weights.astype(np.float32), int(lo)


class PolyphaseResampler:
    """Streaming mono float32 resampler with no block buffering.

    Output sample k is aligned with input time k / out_rate (the filter delay is
    compensated by holding back the last few input samples), so sample clocks on
    both sides agree exactly, as with soxr.
    """

    def __init__(
        self,
        in_rate: int,
        out_rate: int,
        transition: float = 0.15,
        attenuation_db: float = 80.0,
    ) -> None:
        if in_rate <= 0 or out_rate <= 0:
            raise ValueError(f"rates must be positive, got {in_rate} -> {out_rate}")
        g = gcd(in_rate, out_rate)
        self.in_rate = in_rate
        self.out_rate = out_rate
        self._up = out_rate // g
        self._down = in_rate // g
        self._passthrough = self._up == 1 and self._down == 1
        weights, self._lo = _design_branches(self._up, self._down, transition, attenuation_db)
        # Split taps by input phase p = r mod down so every matmul below reads a
        # contiguous, unit-stride input sequence (strided windows force slow copies).
        taps_per_phase = -(-weights.shape[1] // self._down)
        padded = np.zeros((self._up, taps_per_phase * self._down), dtype=np.float32)
        padded[:, : weights.shape[1]] = weights
        # _phase_weights[p][q, i] = weights[i, q*down + p]
        self._phase_weights = [
            np.ascontiguousarray(padded[:, p :: self._down].T) for p in range(self._down)
        ]
        self._taps_per_phase = taps_per_phase
        self._span = taps_per_phase * self._down
        self.reset()

    @property
    def latency_samples(self) -> int:
        """Input samples held back before the output covering them can be emitted."""
        return self._lo + self._span - 1

    def reset(self) -> None:
        # History starts with zeros standing in for the input before time 0.
        self._history = np.zeros(max(0, -self._lo), dtype=np.float32)
        self._history_start = min(0, self._lo)  # absolute input index of _history[0]
        self._n_in = 0
        self._next_cycle = 0
        self._n_out = 0

    def process(self, samples: np.ndarray) -> np.ndarray:
        x = np.asarray(samples, dtype=np.float32)
        if self._passthrough:
            return np.ascontiguousarray(x)
        self._history = np.concatenate((self._history, x))
        self._n_in += x.size
        return self._emit_ready()

    def flush(self) -> np.ndarray:
        """Emit the held-back tail (as if followed by silence); call once at the end."""
        if self._passthrough:
            return np.zeros(0, dtype=np.float32)
        total_out = -(-self._n_in * self._up // self._down)  # ceil: every input instant covered
        already = self._n_out
        last_cycle = (total_out - 1) // self._up
        needed_in = last_cycle * self._down + self._lo + self._span
        pad = max(0, needed_in - self._n_in)
        self._history = np.concatenate((self._history, np.zeros(pad, dtype=np.float32)))
        self._n_in += pad
        out = self._emit_ready()[: max(0, total_out - already)]
        self._n_out = already + out.size
        return out

    def _emit_ready(self) -> np.ndarray:
        # Cycle c (outputs c*up .. c*up+up-1) needs inputs up to c*down + lo + span - 1.
        last_ready = (self._n_in - self._lo - self._span) // self._down
        count = last_ready - self._next_cycle + 1
        if count <= 0:
            return np.zeros(0, dtype=np.float32)
        first = self._next_cycle * self._down + self._lo - self._history_start
        segment = self._history[first : first + count * self._down + self._span - self._down]
        out = self._phase_output(segment, 0, count)
        for p in range(1, self._down):
            out += self._phase_output(segment, p, count)
        out = out.reshape(-1)
        self._next_cycle += count
        self._n_out += out.size
        # Drop history no later cycle can reach.
        keep_from = self._next_cycle * self._down + self._lo - self._history_start
        self._history = self._history[keep_from:].copy()
        self._history_start += keep_from
        return out

    def _phase_output(self, segment: np.ndarray, p: int, count: int) -> np.ndarray:
        """Contribution of input phase p (samples p, p + down, ...) to `count` cycles."""
        weights = self._phase_weights[p]
        branch = segment if self._down == 1 else np.ascontiguousarray(segment[p :: self._down])
        if self._up == 1:
            # Pure decimation: one FIR per phase; correlate beats a strided matvec.
            return np.correlate(branch, weights[:, 0], "valid")[:count, np.newaxis]
        # Row c is branch[c : c + taps], cycle c's inputs for this phase, as an
        # overlapping view that is only read (np.ndarray is ~5x cheaper than as_strided).
        windows = np.ndarray(
            (count, self._taps_per_phase),
            dtype=np.float32,
            buffer=branch,
            strides=(branch.itemsize, branch.itemsize),
        )
        return windows @ weights
