"""What a `bench judge` run saves of a line heard at a pause, for tests to vary."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from benchmarks.judge import Observation


def observation(**changes: Any) -> Observation:
    """What the models made of a line heard at a pause, as a run saves it."""
    heard = Observation(
        item=0,
        final=False,
        pause_ms=900.0,
        text="I would like to book a table for",
        hearing="heard",
        smart_turn=0.5,
        words=0.5,
        speech_s=1.8,
        words_ms=50.0,
        avg_logprob=-0.2,
    )
    return replace(heard, **changes)
