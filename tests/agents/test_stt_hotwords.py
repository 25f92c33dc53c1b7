"""STT_HOTWORDS: names an operator expects callers to say, read by Whisper before each turn
as faster-whisper's `hotwords` gives them (`<|startofprev|>` and the words, before the
start of the transcript)."""

from __future__ import annotations

import numpy as np
import pytest

from agents.assets import STT_ASSETS, ModelCache
from agents.cascade.stt import MAX_PREVIOUS_TOKENS, WhisperTranscriber, max_length
from app.settings import Settings
from benchmarks.judge_material import to_16k
from ops.caller_voice import CallerVoice


@pytest.fixture(scope="module")
def said() -> np.ndarray:
    speech = CallerVoice("espeak", 160, "en-us").speak("I live on Dunmore Street.")
    return np.concatenate([np.zeros(4800), to_16k(speech), np.zeros(1600)]).astype(np.float32)


def _whisper(hotwords: str = "") -> WhisperTranscriber:
    model = ModelCache(Settings.from_env().model_cache_dir).path(STT_ASSETS["tiny.en"])
    return WhisperTranscriber(model, threads=2, hotwords=hotwords)


def test_a_street_name_whisper_mishears_is_heard_once_it_is_given(said: np.ndarray) -> None:
    assert "Dunmore" not in _whisper().transcribe(said).text
    heard = _whisper("Ragazzi, Okonkwo, Dunmore Street").transcribe(said).text
    assert "Dunmore Street" in heard
    assert "Ragazzi" not in heard and "Okonkwo" not in heard


def test_hotwords_longer_than_whisper_keeps_for_them_are_cut_not_an_error(
    said: np.ndarray,
) -> None:
    many = ", ".join(f"Street{n}" for n in range(200))
    assert _whisper(many).transcribe(said).text  # words, not a decoding error


def test_the_setting_reaches_the_transcriber(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STT_HOTWORDS", "Luigi's, Via Roma, calzone")
    assert Settings.from_env().stt_hotwords == "Luigi's, Via Roma, calzone"


def test_whisper_may_write_as_many_words_after_a_list_as_without_one() -> None:
    # CTranslate2 decodes min(max_length / 2, max_length - (prompt - 1)) tokens.
    def written(prompt: int, frames: int) -> int:
        limit = max_length(prompt, frames)
        return min(limit // 2, limit - (prompt - 1))

    for frames in (100, 200, 800, 1500, 3000):
        bare = written(2, frames)
        assert bare == min(224, 48 + frames // 8) // 2
        assert written(2 + MAX_PREVIOUS_TOKENS + 1, frames) == bare
