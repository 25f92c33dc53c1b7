import importlib.util
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from media.features import whisper_log_mel
from media.turn import bundled_smart_turn_path


def _pipecat_reference() -> ModuleType:
    """pipecat's vendored WhisperFeatureExtractor port, loaded without pipecat's __init__."""
    try:
        path = bundled_smart_turn_path().parent.parent / "_whisper_features.py"
    except FileNotFoundError:
        pytest.skip("pipecat-ai is not installed, so its reference features are unavailable")
    spec = importlib.util.spec_from_file_location("pipecat_whisper_features", path)
    if spec is None or spec.loader is None or not Path(path).is_file():
        pytest.skip(f"pipecat reference feature code not found at {path}")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # pragma: no cover - depends on the installed pipecat
        pytest.skip(f"pipecat reference feature code failed to import: {exc}")
    return module


def _normalise(x: np.ndarray) -> np.ndarray:
    return (x - x.mean()) / np.sqrt(x.var() + np.float32(1e-7))


def test_features_match_the_whisper_reference_used_by_smart_turn(speak):
    reference = _pipecat_reference()
    speech = np.repeat(speak("Is the pharmacy open on Sunday?"), 2)  # crude 16 kHz is enough
    audio = np.zeros(128000, dtype=np.float32)
    audio[-speech.size :] = speech
    expected = reference.compute_whisper_log_mel_features(audio, do_normalize=True)
    got = whisper_log_mel(_normalise(audio))
    assert got.shape == expected.shape == (80, 800)
    np.testing.assert_allclose(got, expected, atol=1e-4)


def test_feature_frames_follow_the_10_ms_hop():
    audio = np.random.default_rng(0).standard_normal(16000).astype(np.float32)
    features = whisper_log_mel(audio)
    assert features.shape == (80, 100)
    assert features.dtype == np.float32


def test_features_keep_8_decades_of_dynamic_range():
    audio = np.zeros(16000, dtype=np.float32)
    audio[8000:] = np.random.default_rng(1).standard_normal(8000)
    features = whisper_log_mel(audio)
    # log10 power is floored 8 below its maximum, then mapped by (x + 4) / 4.
    assert features.max() - features.min() == pytest.approx(2.0, abs=1e-5)
    assert features[:, 20].max() == pytest.approx(features.min())
