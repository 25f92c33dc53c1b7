"""The TTS clause cache is bounded in bytes, whatever the clauses, and a clause is never
synthesised twice at once (agents/cascade/tts.py)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from agents.assets import ModelCache
from agents.cascade import tts
from agents.cascade.tts import PiperSpeaker
from agents.errors import TextToSpeechError
from app.settings import Settings


@pytest.fixture(scope="module")
def speaker() -> PiperSpeaker:
    cache = ModelCache(Settings.from_env({}).model_cache_dir)
    return PiperSpeaker(cache.path("piper-joe-medium"), threads=1)


def test_the_clause_cache_keeps_the_newest_clauses_within_its_bytes(
    speaker: PiperSpeaker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tts, "CACHE_BYTES", 200_000)  # a few short clauses
    clauses = [f"Option {word}." for word in ("one", "two", "three", "four", "five", "six")]
    audio = [speaker.synthesize(clause) for clause in clauses]

    assert sum(a.nbytes for a in audio) > 200_000, "the clauses should overflow the cache"
    assert speaker.synthesize(clauses[-1]) is audio[-1], "the newest clause is cached"
    assert speaker.synthesize(clauses[0]) is not audio[0], "the oldest clause was dropped"


def _counting(speaker: PiperSpeaker, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The texts Piper itself is run on, from now on."""
    runs: list[str] = []
    real = speaker._synthesize

    def counted(text: str) -> np.ndarray:
        runs.append(text)
        time.sleep(0.1)  # long enough for the second ask to come while it runs
        return real(text)

    monkeypatch.setattr(speaker, "_synthesize", counted)
    return runs


def test_a_clause_asked_for_while_it_is_being_synthesised_is_synthesised_once(
    speaker: PiperSpeaker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A drafted reply's first clause: the draft synthesises it, and the reply asks for
    # it as the turn ends. Longer than the cache takes, so only the wait can share it.
    clause = "I'm sorry to hear about the trouble with your order from last week,"
    assert len(clause) > tts.CACHED_CLAUSE_CHARS
    runs = _counting(speaker, monkeypatch)
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(speaker.synthesize, clause)
        time.sleep(0.02)
        second = pool.submit(speaker.synthesize, clause)
        audio = [first.result(timeout=30), second.result(timeout=30)]

    assert runs == [clause]
    assert audio[0] is audio[1] and audio[0].size > 0
    assert speaker.synthesize(clause) is not audio[0], "a later ask synthesises it again"


def test_a_failed_synthesis_fails_every_thread_that_waited_for_it(
    speaker: PiperSpeaker, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(text: str) -> np.ndarray:
        time.sleep(0.1)
        raise TextToSpeechError(f"piper failed on {text!r}: out of memory")

    monkeypatch.setattr(speaker, "_synthesize", broken)
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(speaker.synthesize, "Hello there.")
        time.sleep(0.02)
        second = pool.submit(speaker.synthesize, "Hello there.")
        for future in (first, second):
            with pytest.raises(TextToSpeechError, match="out of memory"):
                future.result(timeout=30)
    monkeypatch.undo()
    assert speaker.synthesize("Hello there.").size > 0, "the next ask tries again"
