"""The real cascade models behind the duplex unit loop: a spoken question gets an answer.

Loads Whisper, Smart Turn, Piper and the embedded llama.cpp server from the model cache
(a few seconds), so it is the one slow-ish test here.
"""

from __future__ import annotations

import numpy as np
import pytest

from agents.duplex.backend import UnitOutcome
from agents.duplex.cascade_backend import CascadeDuplexBackend
from agents.duplex.protocol import Prepare
from app.settings import Settings
from media.resample import resample
from ops.caller_voice import speak

pytestmark = pytest.mark.slow  # the real models

UNIT = 16000  # 1 s units


async def test_a_spoken_question_gets_a_spoken_answer() -> None:
    settings = Settings.from_env(greeting="", apology="")
    backend = await CascadeDuplexBackend.from_settings(settings)
    try:
        await backend.prepare(Prepare(system_prompt=settings.persona()))
        question = speak("What is the capital of France?")
        audio = resample(question.astype(np.float32) / 32768.0, 8000, 16000)
        padded = np.concatenate((audio, np.zeros(3 * UNIT - audio.size % UNIT, np.float32)))
        outcomes: list[UnitOutcome] = []
        for start in range(0, padded.size, UNIT):
            outcomes.append(await backend.process_unit(padded[start : start + UNIT]))
            await backend.finalize_unit()
            if outcomes[-1].action == "speak":
                break
    finally:
        await backend.cleanup()
        await backend.aclose()

    spoken = [o for o in outcomes if o.action == "speak"]
    assert spoken, [o.action for o in outcomes]
    first = spoken[0]
    assert first.text.strip() and first.audio.size > 0
    assert first.sample_rate == backend.tts.sample_rate
    assert "france" in first.caller_text.lower()
    assert len(outcomes) <= audio.size // UNIT + 3
