"""Speech to text with faster-whisper's CTranslate2 Whisper, loaded from the model cache.

Whisper's encoder is trained on 30 s windows, and faster-whisper always pads to 30 s,
so the encoder costs the same for a two-second phone turn as for thirty seconds of
speech. CTranslate2 accepts shorter windows: we pad to the next 5 s step (at least
10 s), which keeps transcripts the same on phone-turn audio and makes the encoder
3-5x faster. That time is the largest part of what a caller waits for.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from agents.errors import SpeechToTextError

log = logging.getLogger(__name__)

FRAMES_PER_SECOND = 100  # Whisper log-mel frames (10 ms hop)
MIN_WINDOW_S = 10  # shorter windows degrade transcripts noticeably
WINDOW_STEP_S = 5
MAX_WINDOW_S = 30


@dataclass(frozen=True, slots=True)
class Transcript:
    text: str
    no_speech_prob: float


class SpeechToText(Protocol):
    def transcribe(self, audio_16k: np.ndarray) -> Transcript:
        """Blocking: call it from a worker thread."""
        ...


def window_frames(content_frames: int, min_window_s: int = MIN_WINDOW_S) -> int:
    """Encoder window for `content_frames` of audio: ≥ 10 s, in 5 s steps, ≤ 30 s."""
    seconds = max(
        min_window_s, -(-content_frames // (FRAMES_PER_SECOND * WINDOW_STEP_S)) * WINDOW_STEP_S
    )
    return min(seconds, MAX_WINDOW_S) * FRAMES_PER_SECOND


class WhisperTranscriber:
    """Whisper on one phone turn (the last 30 s at most), without timestamps.

    Greedy with a 10 s window by default; `offhook bench stt` measures the choices.
    """

    def __init__(
        self,
        model_dir: Path,
        *,
        threads: int = 2,
        language: str = "en",
        min_window_s: int = MIN_WINDOW_S,
        beam_size: int = 1,
    ) -> None:
        from faster_whisper import WhisperModel
        from faster_whisper.tokenizer import Tokenizer

        self._whisper = WhisperModel(
            str(model_dir), device="cpu", compute_type="int8", cpu_threads=threads, num_workers=1
        )
        multilingual = self._whisper.model.is_multilingual
        self._tokenizer = Tokenizer(
            self._whisper.hf_tokenizer,
            multilingual,
            task="transcribe",
            language=language if multilingual else "en",
        )
        self._prompt = [*self._tokenizer.sot_sequence, self._tokenizer.no_timestamps]
        self._min_window_s = min_window_s
        self._beam_size = beam_size
        # The feature extractor keeps per-call state; CTranslate2 serialises on its own.
        self._features_lock = threading.Lock()

    def transcribe(self, audio_16k: np.ndarray) -> Transcript:
        import ctranslate2

        audio = np.ascontiguousarray(audio_16k[-MAX_WINDOW_S * 16000 :], dtype=np.float32)
        try:
            with self._features_lock:
                features = self._whisper.feature_extractor(audio)
            content = features.shape[-1] - 1  # the extractor adds one frame of padding
            frames = window_frames(content, self._min_window_s)
            window = np.zeros((1, features.shape[0], frames), dtype=np.float32)
            window[0, :, :content] = features[:, :content]
            encoded = self._whisper.model.encode(ctranslate2.StorageView.from_array(window))
            result = self._whisper.model.generate(
                encoded,
                [self._prompt],
                beam_size=self._beam_size,
                max_length=min(224, 48 + content // 8),
                return_no_speech_prob=True,
                suppress_blank=True,
                suppress_tokens=[-1],
            )[0]
        except Exception as exc:  # CTranslate2 raises plain RuntimeErrors
            raise SpeechToTextError(f"whisper failed: {exc}") from exc
        tokens = [t for t in result.sequences_ids[0] if t < self._tokenizer.eot]
        text = self._tokenizer.decode(tokens).strip()
        no_speech = float(result.no_speech_prob)
        if no_speech > 0.8 and len(text.split()) <= 3:
            text = ""
        return Transcript(text=_strip_hallucination(text), no_speech_prob=no_speech)


# Whisper's well-known inventions on silence or noise; a caller never means these.
_HALLUCINATIONS = {
    "thank you.",
    "thanks for watching!",
    "thank you for watching.",
    "you",
    "bye.",
    "thanks for watching.",
    "[music]",
    "(music)",
    "[blank_audio]",
    "",
}


def _strip_hallucination(text: str) -> str:
    return "" if text.lower() in _HALLUCINATIONS else text
