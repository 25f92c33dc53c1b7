import subprocess
import sys

import numpy as np
import pytest

from media.resample import resample
from media.turn import EndOfTurnModel, bundled_smart_turn_path


@pytest.fixture(scope="module")
def model() -> EndOfTurnModel:
    return EndOfTurnModel(bundled_smart_turn_path())


def test_bundled_model_is_found_without_importing_pipecat():
    path = bundled_smart_turn_path()
    assert path.name == "smart-turn-v3.2-cpu.onnx"
    assert path.stat().st_size > 1_000_000
    # A fresh interpreter, since other tests may import pipecat themselves.
    probe = (
        "import sys; from media.turn import bundled_smart_turn_path; "
        "bundled_smart_turn_path(); sys.exit('pipecat' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", probe], check=False).returncode == 0


def test_a_finished_question_scores_as_a_complete_turn(model, speak):
    audio = resample(speak("What time does the pharmacy close today?"), 8000, 16000)
    assert model.predict(audio) > 0.5


def test_a_sentence_trailing_off_scores_below_a_finished_one(model, speak):
    # Smart Turn keys on prosody and fillers. With TTS's falling pitch a bare
    # "...a table for" still scores as complete (> 0.9 with espeak and Piper),
    # so the cut-off utterance ends in a hesitation, as real callers' do.
    complete = model.predict(
        resample(speak("What time does the pharmacy close today?"), 8000, 16000)
    )
    cut_off = model.predict(resample(speak("I would like to book a table for, um"), 8000, 16000))
    assert cut_off < 0.5 < complete
    assert complete - cut_off > 0.5


def test_only_the_last_8_seconds_matter(model, speak):
    audio = resample(speak("What time does the pharmacy close today?"), 8000, 16000)
    noise = np.random.default_rng(0).standard_normal(16000 * 9).astype(np.float32) * 0.3
    assert model.predict(np.concatenate((noise, audio))) == pytest.approx(
        model.predict(np.concatenate((noise[-(128000 - audio.size) :], audio))), abs=1e-6
    )
