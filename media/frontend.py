"""The per-call inbound chain: mu-law 8 kHz -> cleaned 16 kHz audio -> voice activity.

mu-law -> echo cancelled against the bot's played audio (AEC3, 8 kHz)
       -> 8k -> 48k -> RNNoise -> 16k (or 8k -> 16k without denoising)
       -> Silero VAD, gated by the call's noise floor -> speech start/stop events
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from media.codec import mulaw_decode, pcm16_to_float
from media.denoise import Denoiser
from media.echo import EchoCanceller
from media.echo_path import BOT_SILENT_DB, EchoPathTest
from media.resample import Resampler, make_stream_resampler
from media.vad import SileroVad, SpeechGate, VadEvent, VoiceActivity

__all__ = ["FrontEnd", "FrontEndOutput", "level_dbfs"]

INPUT_RATE = 8000
OUTPUT_RATE = 16000
_SILENCE_DB = -120.0
# Echo cancellation takes the bot's echo at least this far below the bot's own level
# once it has converged (measured 40-60 dB on 60-450 ms paths); a caller talking over
# the bot is within ~10 dB of it. Line audio quieter than that, while the bot plays or
# its echo may still be coming back, is the echo's residue, not the caller.
_ECHO_RESIDUE_DB = 30.0
_ECHO_TAIL_FRAMES = 30  # 600 ms: the longest echo path (400 ms) plus the reference lead
# AEC3 finds a new echo path within about 1.5 s of the bot talking (tests/media/test_echo.py).
_ECHO_TRAINING_SAMPLES = 2 * INPUT_RATE
# After the echo reference moved under it (a reply's start placed a frame off), AEC3
# leaks ~300 ms of echo once it arrives, up to ~400 ms later.
_REALIGNING_SAMPLES = INPUT_RATE * 800 // 1000


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
    # The echo canceller has heard enough of the bot to have found the echo path (or
    # there is none to find): before, some echo gets through and looks like a caller.
    echo_settled: bool = True


class FrontEnd:
    """Decode, clean, resample and run VAD on one call's inbound audio.

    The 16 kHz clock counts output samples: sample k corresponds to inbound
    8 kHz sample k / 2, so VAD event positions convert exactly to the call clock.
    Output trails input by the filter delays: the echo canceller's 11 ms, then ~33 ms
    with denoising and the low-latency resamplers or ~4 ms without. Speech events come
    from the line itself, ~4 ms behind it.
    """

    sample_rate = OUTPUT_RATE

    def __init__(
        self,
        denoise: bool = False,
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
        # Silero listens to the line as it came in (only upsampled): the echo canceller's
        # suppressor and RNNoise both chop a caller's voice while the bot talks over it,
        # and Silero then misses two thirds of a real interruption. The echo it hears
        # there instead is kept out by the gate, which measures the cancelled signal.
        self._line_up: Resampler = make_stream_resampler(INPUT_RATE, OUTPUT_RATE, low_latency)
        self._vad = SileroVad(OUTPUT_RATE)
        self._gate = SpeechGate(gate_margin_db)
        # Levels for the gate: the line after echo cancellation, where the bot's echo
        # is gone, so what stands out while the bot talks is the caller.
        self._cancelled_levels = _RecentAudio()
        # The bot's level over the last 600 ms, per batch: its echo may still be arriving.
        self._bot_levels: deque[float] = deque([_SILENCE_DB], maxlen=_ECHO_TAIL_FRAMES)
        self._line_unmatched = np.zeros(0, dtype=np.float32)
        self._echo_training = 0  # samples of bot audio the canceller has worked against
        self._realigning = 0  # samples left until a moved reference is surely relearnt
        # Whether the line carries the bot's echo, judged over the bot's first 1-2 s on
        # the call (and again while the answer is no). Until then, the line is taken for
        # a speakerphone.
        self._echo_path = EchoPathTest()
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

    def process(
        self, mulaw: bytes, reference: np.ndarray | None = None, reference_moved: bool = False
    ) -> FrontEndOutput:
        """Clean one batch of caller audio and find speech in it.

        `reference`: float32 8 kHz, one sample per input sample: the bot audio that
        played into the caller's room at those moments (silence when None).
        `reference_moved`: the playout schedule moved audio whose reference was already
        read (a mark echo contradicted it): the canceller has to find the path again.
        """
        line = pcm16_to_float(mulaw_decode(mulaw))
        cancelled = content = line
        self._realigning = _REALIGNING_SAMPLES if reference_moved else self._realigning - line.size
        echo_path = False
        if self._echo is not None:
            far = reference if reference is not None else np.zeros(line.size, np.float32)
            cancelled = self._echo.process(line, far)
            self._bot_levels.append(level_dbfs(far))
            if self._bot_levels[-1] > BOT_SILENT_DB:
                self._echo_training += far.size
            # Is there an echo to cancel at all? Without one, AEC3 still holds the
            # caller down 30-70 dB while the bot talks, for seconds: its output would
            # only chop the caller. Then the line itself is what is heard and measured,
            # as if there were no canceller.
            echo_path = self._echo_path.feed(line, far, max(self._bot_levels)) is not False
        bot_level = max(self._bot_levels)
        bot_echoing = bot_level > BOT_SILENT_DB
        if self._echo is not None:
            # The line, sample for sample with the canceller's output.
            pending = np.concatenate((self._line_unmatched, line))
            aligned, self._line_unmatched = pending[: cancelled.size], pending[cancelled.size :]
            if not echo_path:
                cancelled = aligned
            # Whisper hears the cancelled line only while the bot's echo may be in it:
            # with nothing to cancel, the canceller's processing still costs words
            # (measured with `python -m benchmarks stt`), so the line goes through untouched.
            content = cancelled if bot_echoing else aligned
        self._cancelled_levels.add(cancelled)
        audio = self._clean(content)
        start = self._position
        self._position += audio.size

        window = self._vad.window_samples
        probs = self._vad.process(self._line_up.process(line))
        first_end = self._vad.position - (len(probs) - 1) * window
        levels = [
            self._cancelled_levels.level(first_end + i * window, window) for i in range(len(probs))
        ]
        residue = bot_level - _ECHO_RESIDUE_DB if bot_echoing and echo_path else None
        probs = self._gate.apply(probs, levels, echo_residue_db=residue)
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
            level_db=level_dbfs(cancelled),
            noise_floor_db=self._gate.level_db,
            echo_settled=not echo_path
            or (self._echo_training >= _ECHO_TRAINING_SAMPLES and self._realigning <= 0),
        )

    def close(self) -> None:
        if self._denoiser is not None:
            self._denoiser.close()
        if self._echo is not None:
            self._echo.close()


class _RecentAudio:
    """The last second of 8 kHz audio, for the level under any 16 kHz VAD window."""

    def __init__(self) -> None:
        self._audio = np.zeros(INPUT_RATE, dtype=np.float32)
        self._end = 0  # 8 kHz sample just after the last one kept

    def add(self, audio: np.ndarray) -> None:
        keep = self._audio.size
        if audio.size >= keep:
            self._audio = audio[-keep:].astype(np.float32)
        else:
            self._audio = np.concatenate((self._audio[audio.size :], audio))
        self._end += audio.size

    def level(self, window_end: int, window: int) -> float:
        """dBFS of the audio under the VAD window ending at 16 kHz sample `window_end`."""
        first = self._end - self._audio.size
        end = window_end * INPUT_RATE // OUTPUT_RATE - first
        lo = max(0, end - window * INPUT_RATE // OUTPUT_RATE)
        return level_dbfs(self._audio[lo : max(lo, end)])
