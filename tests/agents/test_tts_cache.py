"""The TTS clause cache is bounded in bytes, whatever the clauses (agents/cascade/tts.py)."""

from __future__ import annotations

import pytest

from agents.assets import ModelCache
from agents.cascade import tts
from agents.cascade.tts import PiperSpeaker
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
