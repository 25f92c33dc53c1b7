"""STT_HOTWORDS: names an operator expects callers to say, read by Whisper before each turn
as faster-whisper's `hotwords` gives them (`<|startofprev|>` and the words, before the
start of the transcript)."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from agents.assets import STT_ASSETS, ModelCache
from agents.cascade.stt import (
    MAX_PREVIOUS_TOKENS,
    WhisperTranscriber,
    _previous_text,
    max_length,
)
from agents.loading import speech_to_text
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


def test_the_setting_reaches_the_embedded_whisper_a_call_loads(said: np.ndarray) -> None:
    settings = Settings.from_env({"STT_HOTWORDS": "Luigi's, Via Roma, Dunmore Street"})
    model = ModelCache(settings.model_cache_dir).path(STT_ASSETS["tiny.en"])
    stt = speech_to_text(settings, model, threads=2)
    assert isinstance(stt, WhisperTranscriber)
    assert "Dunmore Street" in stt.transcribe(said).text


def test_a_list_longer_than_whisper_reads_keeps_whole_names_and_logs_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    names = [f"Trattoria Number{n}" for n in range(60)]
    whisper = _whisper()
    tokenizer = whisper._tokenizer
    with caplog.at_level(logging.WARNING, logger="agents.cascade.stt"):
        prompt = _previous_text(tokenizer, ", ".join(names))
    assert prompt[0] == tokenizer.sot_prev and len(prompt) - 1 <= MAX_PREVIOUS_TOKENS
    kept = tokenizer.decode(prompt[1:]).strip()
    assert kept.endswith(".")
    listed = kept[:-1].split(", ")
    assert 0 < len(listed) < len(names)
    assert listed == names[: len(listed)]  # whole names, in the operator's order
    (warning,) = caplog.records
    assert names[len(listed)] in warning.getMessage() and names[-1] in warning.getMessage()
    assert names[len(listed) - 1] not in warning.getMessage().split("left out:")[1]


def test_a_list_that_fits_is_read_whole_and_ended_as_a_sentence(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tokenizer = _whisper()._tokenizer
    with caplog.at_level(logging.WARNING, logger="agents.cascade.stt"):
        prompt = _previous_text(tokenizer, " Luigi's, Via Roma, calzone, ")
    assert tokenizer.decode(prompt[1:]) == " Luigi's, Via Roma, calzone."
    assert not caplog.records


def test_whisper_may_write_as_many_words_after_a_list_as_without_one() -> None:
    # CTranslate2 decodes min(max_length / 2, max_length - (prompt - 1)) tokens.
    def written(prompt: int, frames: int) -> int:
        limit = max_length(prompt, frames)
        return min(limit // 2, limit - (prompt - 1))

    for frames in (100, 200, 800, 1500, 3000):
        bare = written(2, frames)
        assert bare == min(224, 48 + frames // 8) // 2
        assert written(2 + MAX_PREVIOUS_TOKENS + 1, frames) == bare
