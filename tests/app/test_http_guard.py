"""uvicorn's lines about refused requests are rate-limited; every other line passes."""

from __future__ import annotations

import logging

from app.http_guard import RefusalLogFilter


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def access(status: int) -> logging.LogRecord:
    return logging.LogRecord(
        "uvicorn.access",
        logging.INFO,
        __file__,
        1,
        '%s - "%s %s HTTP/%s" %d',
        ("203.0.113.9:4000", "POST", "/twilio/voice", "1.1", status),
        None,
    )


def handshake(status: str) -> logging.LogRecord:
    return logging.LogRecord(
        "uvicorn.error",
        logging.INFO,
        __file__,
        1,
        '%s - "WebSocket %s" ' + status,
        ("203.0.113.9:4000", "/twilio/media"),
        None,
    )


def test_a_flood_of_refusals_writes_a_few_lines_a_minute_and_then_says_how_many() -> None:
    clock = Clock()
    limit = RefusalLogFilter(burst=5, window_s=60, clock=clock)

    passed = [limit.filter(access(403)) for _ in range(1000)]
    passed += [limit.filter(handshake("403")) for _ in range(554)]
    assert sum(passed) == 5
    clock.now = 61
    first = access(403)
    assert limit.filter(first)
    assert "1549 refused requests not logged" in first.getMessage()


def test_served_requests_and_accepted_streams_are_always_logged() -> None:
    limit = RefusalLogFilter(burst=0, clock=Clock())

    assert all(limit.filter(access(status)) for status in (200, 204, 301))
    assert limit.filter(handshake("[accepted]"))
    assert not limit.filter(access(404)) and not limit.filter(handshake("403"))
