"""Refused requests are logged a few at a time per kind; the rest are summed up."""

from __future__ import annotations

import logging

import pytest

from app.refusal_log import RefusalLog


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records]


def test_a_burst_is_logged_then_the_rest_only_counted(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    log = RefusalLog(logging.getLogger("test.refusals"), burst=3, window_s=60, clock=clock)
    with caplog.at_level(logging.WARNING):
        for n in range(100):
            log.warning("signature", "forged %d", n)
    assert messages(caplog) == ["forged 0", "forged 1", "forged 2"]


def test_the_next_window_says_how_many_went_unlogged(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    log = RefusalLog(logging.getLogger("test.refusals"), burst=2, window_s=60, clock=clock)
    with caplog.at_level(logging.WARNING):
        for n in range(10):
            clock.now = n
            log.warning("signature", "forged %d", n)
        clock.now = 70
        log.warning("signature", "forged again")
    assert messages(caplog) == [
        "forged 0",
        "forged 1",
        "8 more signature refusal(s) in 70 s were not logged",
        "forged again",
    ]


def test_kinds_are_limited_apart(clock: Clock, caplog: pytest.LogCaptureFixture) -> None:
    log = RefusalLog(logging.getLogger("test.refusals"), burst=1, window_s=60, clock=clock)
    with caplog.at_level(logging.WARNING):
        for _ in range(5):
            log.warning("signature", "forged")
            log.warning("stream", "no start")
    assert messages(caplog) == ["forged", "no start"]
