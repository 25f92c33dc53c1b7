"""RNNoise noise suppression for caller audio, via ctypes on pyrnnoise's bundled library."""

from __future__ import annotations

import ctypes
import importlib.util
import sys
import threading
from functools import lru_cache
from pathlib import Path

import numpy as np

from media.resample import Resampler, make_stream_resampler

__all__ = ["RNNOISE_DELAY_SAMPLES", "RNNOISE_FRAME", "RNNOISE_RATE", "Denoiser"]

RNNOISE_RATE = 48000
RNNOISE_FRAME = 480  # 10 ms at 48 kHz; fixed by the library
# rnnoise_process_frame's output lags its input by two frames (analysis window plus
# one frame of lookahead), measured by cross-correlation; see tests/media/test_denoise.py.
RNNOISE_DELAY_SAMPLES = 960
# RNNoise works on float samples in int16 scale.
_PCM_SCALE = np.float32(32768.0)


def _library_name() -> str:
    if sys.platform == "darwin":
        return "librnnoise.dylib"
    if sys.platform == "win32":
        return "rnnoise.dll"
    return "librnnoise.so"


@lru_cache(maxsize=1)
def load_rnnoise() -> ctypes.CDLL:
    """Load pyrnnoise's shared library without importing pyrnnoise.

    The package's __init__ pulls in `audiolab` (and through it heavy media deps),
    which a call server neither needs nor wants at import time.
    """
    spec = importlib.util.find_spec("pyrnnoise")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("RNNoise library not found: install the `pyrnnoise` package")
    path = Path(next(iter(spec.submodule_search_locations))) / _library_name()
    if not path.is_file():
        raise FileNotFoundError(f"RNNoise library missing from pyrnnoise: {path}")
    lib = ctypes.CDLL(str(path))
    lib.rnnoise_create.argtypes = [ctypes.c_void_p]
    lib.rnnoise_create.restype = ctypes.c_void_p
    lib.rnnoise_destroy.argtypes = [ctypes.c_void_p]
    lib.rnnoise_destroy.restype = None
    lib.rnnoise_get_frame_size.argtypes = []
    lib.rnnoise_get_frame_size.restype = ctypes.c_int
    # Buffers are passed as raw addresses of numpy arrays: no ctypes objects per frame.
    lib.rnnoise_process_frame.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    lib.rnnoise_process_frame.restype = ctypes.c_float
    frame = lib.rnnoise_get_frame_size()
    if frame != RNNOISE_FRAME:
        raise RuntimeError(f"unexpected RNNoise frame size {frame} (expected {RNNOISE_FRAME})")
    return lib


class Denoiser:
    """Streaming RNNoise: mono float32 at in_rate in, cleaned float32 at out_rate out.

    Output sample k corresponds to input time k / out_rate: the resampler and
    RNNoise delays are compensated by holding audio back, so per-call output
    lengths vary but the running total trails input x out_rate / in_rate by a
    bounded amount (about 20 ms plus filter delay).
    """

    def __init__(self, in_rate: int = 8000, out_rate: int = 16000, low_latency: bool = True):
        self.in_rate = in_rate
        self.out_rate = out_rate
        self._lib = load_rnnoise()
        self._state: int | None = self._lib.rnnoise_create(None)
        if not self._state:
            raise RuntimeError("rnnoise_create failed")
        self._up: Resampler = make_stream_resampler(in_rate, RNNOISE_RATE, low_latency)
        self._down: Resampler = make_stream_resampler(RNNOISE_RATE, out_rate, low_latency)
        self._pending = np.zeros(0, dtype=np.float32)  # 48 kHz samples short of a frame
        self._in = np.zeros(RNNOISE_FRAME, dtype=np.float32)
        self._out = np.zeros(RNNOISE_FRAME, dtype=np.float32)
        self._in_addr = self._in.ctypes.data
        self._out_addr = self._out.ctypes.data
        self._to_skip = RNNOISE_DELAY_SAMPLES
        self.speech_probability = 0.0  # RNNoise's own VAD output for the last frame
        # process() runs in a worker thread; a hang-up may close() from the event loop
        # while it is still running. The lock keeps the C state alive until it is done.
        self._lock = threading.Lock()

    def process(self, samples: np.ndarray) -> np.ndarray:
        with self._lock:
            return self._process(samples)

    def _process(self, samples: np.ndarray) -> np.ndarray:
        if self._state is None:
            raise RuntimeError("Denoiser is closed")
        upsampled = self._up.process(np.asarray(samples, dtype=np.float32))
        if self._pending.size:
            upsampled = np.concatenate((self._pending, upsampled))
        n_frames = upsampled.size // RNNOISE_FRAME
        cleaned = np.empty(n_frames * RNNOISE_FRAME, dtype=np.float32)
        for i in range(n_frames):
            lo = i * RNNOISE_FRAME
            np.multiply(upsampled[lo : lo + RNNOISE_FRAME], _PCM_SCALE, out=self._in)
            self.speech_probability = self._lib.rnnoise_process_frame(
                self._state, self._out_addr, self._in_addr
            )
            cleaned[lo : lo + RNNOISE_FRAME] = self._out
        self._pending = upsampled[n_frames * RNNOISE_FRAME :].copy()
        if self._to_skip:
            # Discard RNNoise's start-up delay once so the output clock lines up with input.
            cut = min(self._to_skip, cleaned.size)
            cleaned = cleaned[cut:]
            self._to_skip -= cut
        cleaned /= _PCM_SCALE
        return self._down.process(cleaned)

    def close(self) -> None:
        lock = getattr(self, "_lock", None)
        if lock is None:  # __init__ failed before the state existed
            return
        with lock:
            state, self._state = self._state, None
            if state:
                self._lib.rnnoise_destroy(state)

    def __del__(self) -> None:
        self.close()
