"""Acoustic echo cancellation of the caller's line against the bot's own played audio.

A caller on a speakerphone (or a phone with poor isolation) sends the bot's voice back
to us, 60-400 ms late and 10-30 dB down. Without cancellation the bot hears itself:
it transcribes its own words as the caller's turn, or stops itself mid-sentence.

The canceller is WebRTC's AEC3, as bundled in the `livekit` wheel
(`livekit.rtc.AudioProcessingModule`, a prebuilt build of WebRTC's audio processing
module). Chosen over the alternatives on the registries (measured with
`python -m benchmarks frontend`; docs/architecture.md): `pywebrtc-audio` wraps the same AEC3 but
takes only 16 kHz and up (phone audio would be resampled twice more per frame);
`speexdsp-aec` is a proprietary-licensed ctypes shim over a system library; Speex's
MDF filter needs a filter as long as the echo delay (3200 taps for 400 ms at 8 kHz) and
converges slowly. AEC3 estimates the echo delay itself (it cancels anything from about
40 to 500 ms behind the reference) and re-estimates it when it changes mid-call.

The reference is the far end: the bot audio the `PlayoutClock` says Twilio played at
each moment of the call clock, read a constant `PlayoutClock.reference_lead` (20 ms)
ahead of the caller's audio, so the echo path AEC3 finds does not move between
utterances (see app/call.py). AEC3 needs the reference to lead the echo: a delay near
zero cancels poorly, and a reference that runs behind the echo cannot be cancelled at
all.
"""

from __future__ import annotations

import atexit
import functools
import threading
import time

import numpy as np

__all__ = ["AEC_DELAY_SAMPLES", "ECHO_RATE", "REFERENCE_LEAD_MS", "EchoCanceller"]

ECHO_RATE = 8000  # the phone line's rate: cancel before anything is resampled
# How late the schedule starts audio just sent, until the call's mark echoes have measured
# it. AEC3 cancels well from ~40 ms of echo delay up; the longest real echo path (400 ms)
# plus this stays inside AEC3's ~500 ms reach. (The benches' and tests' own schedules
# read the reference this far ahead; a call reads it `PlayoutClock.reference_lead` ahead.)
REFERENCE_LEAD_MS = 60
_FRAME = ECHO_RATE // 100  # AEC3 takes exactly 10 ms per call
# The module's capture path lags its input by 88 samples at 8 kHz (its internal split
# into bands and back), measured by cross-correlation; see tests/media/test_echo.py.
AEC_DELAY_SAMPLES = 88
_SCALE = np.float32(32767.0)
# How long the process waits at exit, after the native runtime is disposed, for a callback
# it had already begun into Python (see _settle_at_exit): microseconds of work.
_EXIT_SETTLE_S = 0.1


@functools.cache
def _settle_at_exit() -> None:
    """Once per process, before the native runtime starts: an exit handler that runs
    after the runtime's own (atexit runs handlers last-registered first) and waits.

    The runtime's disposal (livekit-ffi's `livekit_ffi_dispose`) logs, and its log task
    hands each record to a Python callback on a tokio worker thread. A callback still
    waiting for the GIL when the interpreter finalizes is ended with pthread_exit, whose
    unwinding through Rust's `extern "C"` frame aborts the process ("panic in a function
    that cannot unwind", exit status 134): seen once, after a test run had passed. A
    short sleep, the GIL released, lets that callback finish first."""
    atexit.register(time.sleep, _EXIT_SETTLE_S)


class EchoCanceller:
    """Streaming AEC3: float32 8 kHz capture + the reference for the same samples in.

    `process(capture, reference)` takes two arrays of equal length (the reference is
    what played into the caller's room during those capture samples, on the same
    clock) and returns the capture with the echo removed. Audio is processed in 10 ms
    frames; a remainder waits for the next call, and the module's own 11 ms delay is
    taken out once at the start, so output sample k is always input sample k.
    """

    def __init__(self) -> None:
        _settle_at_exit()
        # Imported here: loading the native runtime costs ~100 ms, and only calls use it.
        from livekit import rtc

        self._apm = rtc.AudioProcessingModule(echo_cancellation=True, high_pass_filter=True)
        # One reusable 10 ms buffer each way: the module works on them in place.
        self._near_bytes = bytearray(_FRAME * 2)
        self._far_bytes = bytearray(_FRAME * 2)
        self._near = np.frombuffer(self._near_bytes, dtype=np.int16)
        self._far = np.frombuffer(self._far_bytes, dtype=np.int16)
        self._near_frame = rtc.AudioFrame(self._near_bytes, ECHO_RATE, 1, _FRAME)
        self._far_frame = rtc.AudioFrame(self._far_bytes, ECHO_RATE, 1, _FRAME)
        self._pending_near = np.zeros(0, dtype=np.float32)
        self._pending_far = np.zeros(0, dtype=np.float32)
        # process() runs in a worker thread; a hang-up may close() from the event loop.
        self._lock = threading.Lock()
        self._closed = False
        self._to_skip = AEC_DELAY_SAMPLES

    def process(self, capture: np.ndarray, reference: np.ndarray) -> np.ndarray:
        if capture.size != reference.size:
            raise ValueError(
                f"capture and reference must cover the same samples, "
                f"got {capture.size} and {reference.size}"
            )
        with self._lock:
            if self._closed:
                raise RuntimeError("EchoCanceller is closed")
            near = np.concatenate((self._pending_near, capture.astype(np.float32, copy=False)))
            far = np.concatenate((self._pending_far, reference.astype(np.float32, copy=False)))
            frames = near.size // _FRAME
            out = np.empty(frames * _FRAME, dtype=np.float32)
            for i in range(frames):
                lo, hi = i * _FRAME, (i + 1) * _FRAME
                # Far end first: AEC3 must have seen what played before the echo arrives.
                _to_pcm16(far[lo:hi], self._far)
                self._apm.process_reverse_stream(self._far_frame)
                _to_pcm16(near[lo:hi], self._near)
                # AEC3 finds the delay itself; the hint says nothing is known.
                self._apm.set_stream_delay_ms(0)
                self._apm.process_stream(self._near_frame)
                np.divide(self._near, _SCALE, out=out[lo:hi], casting="unsafe")
            self._pending_near = near[frames * _FRAME :].copy()
            self._pending_far = far[frames * _FRAME :].copy()
            if self._to_skip:
                # Drop the module's start-up delay once: output sample k is input sample k.
                cut = min(self._to_skip, out.size)
                out = out[cut:]
                self._to_skip -= cut
            return out

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._apm = None  # type: ignore[assignment]  # frees the native module


def _to_pcm16(samples: np.ndarray, out: np.ndarray) -> None:
    out[:] = np.rint(np.clip(samples, -1.0, 1.0) * _SCALE)
