"""Speech to text with faster-whisper, loaded from the verified model cache."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from agents.errors import SpeechToTextError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Transcript:
    text: str
    no_speech_prob: float


class SpeechToText(Protocol):
    def transcribe(self, audio_16k: np.ndarray) -> Transcript:
        """Blocking: call it from a worker thread."""
        ...


class WhisperTranscriber:
    """faster-whisper, greedy and without timestamps: a phone turn is a few seconds."""

    def __init__(self, model_dir: Path, *, threads: int = 2, language: str = "en") -> None:
        from faster_whisper import WhisperModel

        self.language = language
        self._model = WhisperModel(
            str(model_dir), device="cpu", compute_type="int8", cpu_threads=threads, num_workers=1
        )
        # An English-only model must not be asked for a language.
        self._multilingual = self._model.model.is_multilingual

    def transcribe(self, audio_16k: np.ndarray) -> Transcript:
        try:
            segments, _info = self._model.transcribe(
                np.ascontiguousarray(audio_16k, dtype=np.float32),
                language=self.language if self._multilingual else None,
                beam_size=1,
                best_of=1,
                temperature=0.0,
                condition_on_previous_text=False,
                without_timestamps=True,
                vad_filter=False,
            )
            parts = list(segments)
        except Exception as exc:  # CTranslate2 raises plain RuntimeErrors
            raise SpeechToTextError(f"whisper failed: {exc}") from exc
        text = " ".join(p.text.strip() for p in parts if p.no_speech_prob < 0.8).strip()
        no_speech = min((p.no_speech_prob for p in parts), default=1.0)
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
