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
        # Texts being synthesised now. A drafted reply's first clause is synthesised by
        # the draft and, when the turn ends while that runs, by the reply too: the same
        # clause twice at once, each on both cores, and both ~130 ms later than one.
        self._running: dict[str, _Synthesis] = {}

    def synthesize(self, text: str) -> np.ndarray:
        with self._cache_lock:
            if (cached := self._cache.get(text)) is not None:
                self._cache.move_to_end(text)
                return cached
            running = self._running.get(text)
            if running is None:
                mine = self._running[text] = _Synthesis()
        if running is not None:
            return running.result()  # the same words are being spoken: wait for them
        try:
            audio = self._synthesize(text)
        except BaseException as exc:
            mine.fail(exc)
            raise
        else:
            mine.done(audio)
        finally:
            with self._cache_lock:
                del self._running[text]
        return audio

    def _synthesize(self, text: str) -> np.ndarray:
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


class _Synthesis:
    """One text being synthesised, for the threads that ask for it meanwhile."""

    def __init__(self) -> None:
        self._finished = threading.Event()
        self._audio: np.ndarray | None = None
        self._error: BaseException | None = None

    def done(self, audio: np.ndarray) -> None:
        self._audio = audio
        self._finished.set()

    def fail(self, error: BaseException) -> None:
        self._error = error
        self._finished.set()

    def result(self) -> np.ndarray:
        self._finished.wait()
        if self._audio is None:
            if isinstance(self._error, TextToSpeechError):
                raise TextToSpeechError(str(self._error)) from self._error
            raise TextToSpeechError(f"piper failed: {self._error!r}")
        return self._audio


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
