"""Text to speech with Piper, loaded from the verified model cache."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Protocol

import numpy as np

from agents.errors import TextToSpeechError


class TextToSpeech(Protocol):
    sample_rate: int

    def synthesize(self, text: str) -> np.ndarray:
        """Blocking: float32 mono at `sample_rate`. Call it from a worker thread."""
        ...


class PiperSpeaker:
    def __init__(self, model_path: Path, *, threads: int = 2, speed: float = 1.0) -> None:
        import onnxruntime
        from piper import PiperVoice, SynthesisConfig
        from piper.config import PiperConfig
        from piper.voice import ESPEAK_DATA_DIR

        config = json.loads(Path(f"{model_path}.json").read_text(encoding="utf-8"))
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        self._voice = PiperVoice(
            config=PiperConfig.from_dict(config),
            session=onnxruntime.InferenceSession(
                str(model_path), sess_options=options, providers=["CPUExecutionProvider"]
            ),
            espeak_data_dir=Path(ESPEAK_DATA_DIR),
        )
        # length_scale > 1 is slower speech.
        self._config = SynthesisConfig(length_scale=1.0 / max(speed, 0.1))
        self.sample_rate: int = self._voice.config.sample_rate
        # Replies open with the same few clauses again and again ("Sure,", "I'm sorry,"):
        # a small cache makes those instant.
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_lock = threading.Lock()
        self._cache_bytes = 0

    def synthesize(self, text: str) -> np.ndarray:
        with self._cache_lock:
            if (cached := self._cache.get(text)) is not None:
                self._cache.move_to_end(text)
                return cached
        try:
            chunks = [c.audio_float_array for c in self._voice.synthesize(text, self._config)]
        except Exception as exc:  # onnxruntime and the phonemizer raise assorted errors
            raise TextToSpeechError(f"piper failed on {text!r}: {exc}") from exc
        if not chunks:
            return np.zeros(0, dtype=np.float32)
        audio = trim_leading_silence(np.concatenate(chunks).astype(np.float32, copy=False))
        audio.setflags(write=False)  # shared through the cache
        if len(text) <= CACHED_CLAUSE_CHARS:
            with self._cache_lock:
                if text not in self._cache:
                    self._cache_bytes += audio.nbytes
                self._cache[text] = audio
                while self._cache_bytes > CACHE_BYTES:
                    _, dropped = self._cache.popitem(last=False)
                    self._cache_bytes -= dropped.nbytes
        return audio


# Bounded in bytes, not entries: a clause of 60 characters is ~3 s of float32 audio
# (~300 kB), so 256 of them grew the server by up to ~80 MB over the first few hundred
# calls (`python -m benchmarks soak`).
CACHE_BYTES = 8 << 20
CACHED_CLAUSE_CHARS = 60
_LEAD_THRESHOLD = 10 ** (-45 / 20)  # -45 dBFS


def trim_leading_silence(audio: np.ndarray, keep: int = 110) -> np.ndarray:
    """Piper starts most sentences with ~40 ms of near-silence: the caller waits for it."""
    loud = np.flatnonzero(np.abs(audio) > _LEAD_THRESHOLD)
    if loud.size == 0:
        return audio
    return audio[max(int(loud[0]) - keep, 0) :]
