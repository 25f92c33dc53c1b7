"""End-of-turn classification with Smart Turn v3.2 (ONNX) on the caller's audio."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import onnxruntime as ort

from media.features import SAMPLE_RATE, whisper_log_mel

__all__ = ["EndOfTurnModel", "bundled_smart_turn_path"]

_WINDOW_SAMPLES = 8 * SAMPLE_RATE  # the model sees exactly the last 8 s
_NORM_EPS = 1e-7
_BUNDLED_RELATIVE = Path("audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx")


def bundled_smart_turn_path() -> Path:
    """Path of the Smart Turn v3.2 ONNX file shipped in the `pipecat-ai` package.

    Located via the import system without importing pipecat (its __init__ is heavy).
    """
    spec = importlib.util.find_spec("pipecat")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        candidate = Path(location) / _BUNDLED_RELATIVE
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(
        "Smart Turn v3.2 model not found: install the `pipecat-ai` package "
        f"(it ships pipecat/{_BUNDLED_RELATIVE.as_posix()}) or pass a model path"
    )


class EndOfTurnModel:
    """Probability that the caller has finished their turn, from the audio alone."""

    def __init__(self, model_path: str | Path, threads: int = 1) -> None:
        options = ort.SessionOptions()
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.inter_op_num_threads = 1
        options.intra_op_num_threads = threads
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self._session = ort.InferenceSession(
            str(model_path), sess_options=options, providers=["CPUExecutionProvider"]
        )
        self._input_name = "input_features"

    def predict(self, audio_16k: np.ndarray) -> float:
        """P(turn complete) for the utterance ending at the last sample of `audio_16k`."""
        x = np.asarray(audio_16k, dtype=np.float32)[-_WINDOW_SAMPLES:]
        if x.size < _WINDOW_SAMPLES:
            # Silence goes in front: the model judges how the audio *ends*.
            x = np.concatenate((np.zeros(_WINDOW_SAMPLES - x.size, dtype=np.float32), x))
        # Zero-mean unit-variance over the padded window, in float32 as
        # WhisperFeatureExtractor(do_normalize=True) does.
        x = (x - x.mean()) / np.sqrt(x.var() + np.float32(_NORM_EPS))
        features = whisper_log_mel(x)[np.newaxis]
        (probs,) = self._session.run(None, {self._input_name: features})[:1]
        return float(np.asarray(probs).reshape(-1)[0])
