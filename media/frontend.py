"""The per-call inbound chain: mu-law 8 kHz -> cleaned 16 kHz audio -> voice activity.

mu-law -> echo cancelled against the bot's played audio (AEC3, 8 kHz)
       -> 8k -> 48k -> RNNoise -> 16k (or 8k -> 16k without denoising)
       -> Silero VAD, gated by the call's noise floor -> speech start/stop events
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from media.codec import mulaw_decode, pcm16_to_float
from media.denoise import Denoiser
from media.echo import EchoCanceller
from media.resample import Resampler, make_stream_resampler
from media.vad import SileroVad, SpeechGate, VadEvent, VoiceActivity

__all__ = ["FrontEnd", "FrontEndOutput", "level_dbfs"]

INPUT_RATE = 8000
OUTPUT_RATE = 16000
_SILENCE_DB = -120.0


def level_dbfs(samples: np.ndarray) -> float:
    """RMS level of float samples relative to full scale 1.0; -120 for silence."""
    if samples.size == 0:
        return _SILENCE_DB
    mean_square = float(np.dot(samples, samples)) / samples.size
    if mean_square <= 0.0:
        return _SILENCE_DB
    return max(_SILENCE_DB, 10.0 * float(np.log10(mean_square)))


@dataclass
class FrontEndOutput:
    audio: np.ndarray  # float32 at 16 kHz, cleaned; may be empty while filters fill
    start_sample: int  # position of audio[0] on the 16 kHz clock
    events: list[VadEvent] = field(default_factory=list)  # samples on the 16 kHz clock
    probs: list[float] = field(default_factory=list)  # one per completed VAD window
    speaking: bool = False
    # Input after echo cancellation, before denoising: the caller's own level, which the
    # barge-in gate compares with the bot's (a second line of defence against echo).
    level_db: float = _SILENCE_DB
    noise_floor_db: float = _SILENCE_DB  # the background the speech gate measures against


class FrontEnd:
    """Decode, clean, resample and run VAD on one call's inbound audio.

    The 16 kHz clock counts output samples: sample k corresponds to inbound
    8 kHz sample k / 2, so VAD event positions convert exactly to the call clock.
    Output trails input by the filter delays (~33 ms with denoising and the
    low-latency resamplers, ~4 ms without denoising; the echo canceller adds none for
    whole 10 ms frames, and Twilio's 20 ms frames always are).
    """

    sample_rate = OUTPUT_RATE

    def __init__(
        self,
        denoise: bool = True,
        vad_start: float = 0.5,
        vad_stop: float = 0.35,
        min_speech_ms: int = 60,
        min_silence_ms: int = 100,
        low_latency: bool = True,
        echo_cancel: bool = True,
        gate_margin_db: float = 5.0,
    ) -> None:
        self._echo: EchoCanceller | None = EchoCanceller() if echo_cancel else None
        self._denoiser: Denoiser | None = (
            Denoiser(INPUT_RATE, OUTPUT_RATE, low_latency=low_latency) if denoise else None
        )
        self._clean: Callable[[np.ndarray], np.ndarray]
        if self._denoiser is not None:
            self._clean = self._denoiser.process
        else:
            resampler: Resampler = make_stream_resampler(INPUT_RATE, OUTPUT_RATE, low_latency)
            self._clean = resampler.process
        self._vad = SileroVad(OUTPUT_RATE)
        self._gate = SpeechGate(gate_margin_db)
        # The line's audio before noise suppression, for the gate's levels: the last
        # second of it, ending at 8 kHz sample `_raw_end`.
        self._raw = np.zeros(INPUT_RATE, dtype=np.float32)
        self._raw_end = 0
        self._activity = VoiceActivity(
            self._vad.window_samples,
            OUTPUT_RATE,
            start_threshold=vad_start,
            stop_threshold=vad_stop,
            min_speech_ms=min_speech_ms,
            min_silence_ms=min_silence_ms,
        )
        self._position = 0

    @property
    def position(self) -> int:
        """16 kHz samples output so far."""
        return self._position

    @property
    def activity(self) -> VoiceActivity:
        return self._activity

    def process(self, mulaw: bytes, reference: np.ndarray | None = None) -> FrontEndOutput:
        """Clean one batch of caller audio and find speech in it.

        `reference`: float32 8 kHz, one sample per input sample: the bot audio that
        played into the caller's room at those moments (silence when None).
        """
        raw = pcm16_to_float(mulaw_decode(mulaw))
        if self._echo is not None:
            far = reference if reference is not None else np.zeros(raw.size, np.float32)
            raw = self._echo.process(raw, far)
        self._remember_raw(raw)
        audio = self._clean(raw)
        start = self._position
        self._position += audio.size

        window = self._vad.window_samples
        probs = self._vad.process(audio)
        first_end = self._vad.position - (len(probs) - 1) * window
        levels = [self._raw_level(first_end + i * window, window) for i in range(len(probs))]
        probs = self._gate.apply(probs, levels)
        events: list[VadEvent] = []
        for i, prob in enumerate(probs):
            event = self._activity.update(prob, first_end + i * window)
            if event is not None:
                events.append(event)
        return FrontEndOutput(
            audio=audio,
            start_sample=start,
            events=events,
            probs=probs,
            speaking=self._activity.speaking,
            level_db=level_dbfs(raw),
            noise_floor_db=self._gate.floor.level_db,
        )

    def _remember_raw(self, raw: np.ndarray) -> None:
        keep = self._raw.size
        if raw.size >= keep:
            self._raw = raw[-keep:].astype(np.float32)
        else:
            self._raw = np.concatenate((self._raw[raw.size :], raw))
        self._raw_end += raw.size

    def _raw_level(self, window_end: int, window: int) -> float:
        """Level of the line's audio under a VAD window (16 kHz clock -> 8 kHz samples)."""
        end = window_end * INPUT_RATE // OUTPUT_RATE
        lo = max(0, end - window * INPUT_RATE // OUTPUT_RATE - (self._raw_end - self._raw.size))
        hi = max(lo, end - (self._raw_end - self._raw.size))
        return level_dbfs(self._raw[lo:hi])

    def close(self) -> None:
        if self._denoiser is not None:
            self._denoiser.close()
        if self._echo is not None:
            self._echo.close()
