"""STT_HOTWORDS: names an operator expects callers to say, read by Whisper before each turn
as faster-whisper's `hotwords` gives them (`<|startofprev|>` and the words, before the
start of the transcript)."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from faster_whisper.tokenizer import Tokenizer

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


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    """tiny.en's tokenizer, as the transcriber builds it (without loading the model)."""
    import tokenizers

    model = ModelCache(Settings.from_env().model_cache_dir).path(STT_ASSETS["tiny.en"])
    words = tokenizers.Tokenizer.from_file(str(model / "tokenizer.json"))
    return Tokenizer(words, False, task="transcribe", language="en")


def _read(tokenizer: Tokenizer, prompt: list[int]) -> str:
    assert prompt[0] == tokenizer.sot_prev and len(prompt) - 1 <= MAX_PREVIOUS_TOKENS
    return str(tokenizer.decode(prompt[1:])).strip()


def _left_out(caplog: pytest.LogCaptureFixture) -> list[str]:
    (warning,) = caplog.records
    return warning.getMessage().split("left out: ")[1].split(", ")


@pytest.mark.parametrize("separator", [", ", "; ", "\n"])
def test_a_list_longer_than_whisper_reads_keeps_whole_names_and_logs_the_rest(
    tokenizer: Tokenizer, caplog: pytest.LogCaptureFixture, separator: str
) -> None:
    names = [f"Trattoria Number{n}" for n in range(25)]
    with caplog.at_level(logging.WARNING, logger="agents.cascade.stt"):
        kept = _read(tokenizer, _previous_text(tokenizer, separator.join(names)))
    assert kept.endswith(".")
    listed = kept[:-1].split(", ")
    assert 0 < len(listed) < len(names)
    assert listed == names[: len(listed)]  # whole names, in the operator's order
    assert _left_out(caplog) == names[len(listed) :]


def test_a_long_list_left_out_is_logged_by_its_first_names(
    tokenizer: Tokenizer, caplog: pytest.LogCaptureFixture
) -> None:
    names = [f"Street{n}" for n in range(200)]
    with caplog.at_level(logging.WARNING, logger="agents.cascade.stt"):
        kept = _read(tokenizer, _previous_text(tokenizer, ", ".join(names)))
    first = len(kept[:-1].split(", "))
    shown = _left_out(caplog)
    assert shown[:-1] == names[first : first + 9]
    assert shown[-1] == f"{names[first + 9]} and {200 - first - 10} more"


def test_a_first_name_longer_than_whisper_reads_is_read_as_far_as_it_fits(
    tokenizer: Tokenizer, caplog: pytest.LogCaptureFixture
) -> None:
    prose = " ".join(["supercalifragilistic"] * 40)
    with caplog.at_level(logging.WARNING, logger="agents.cascade.stt"):
        prompt = _previous_text(tokenizer, f"{prose}, Bob, Alice")
    assert len(prompt) - 1 == MAX_PREVIOUS_TOKENS
    assert _read(tokenizer, prompt).startswith("supercalifragilistic")
    (warning,) = caplog.records
    assert "first name is longer" in warning.getMessage()


def test_a_list_that_fits_is_read_whole_and_ended_as_a_sentence(
    tokenizer: Tokenizer, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="agents.cascade.stt"):
        prompt = _previous_text(tokenizer, " Luigi's, Via Roma, calzone, ")
    assert _read(tokenizer, prompt) == "Luigi's, Via Roma, calzone."
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
