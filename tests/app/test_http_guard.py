"""uvicorn's lines about refused requests are rate-limited; every other line passes."""

from __future__ import annotations

import logging

import pytest

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


def garbage() -> logging.LogRecord:
    return logging.LogRecord(
        "uvicorn.error", logging.WARNING, __file__, 1, "Invalid HTTP request received.", (), None
    )


def test_a_flood_of_refusals_writes_a_few_lines_a_minute_and_then_says_how_many(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    limit = RefusalLogFilter(burst=5, window_s=60, clock=clock)

    passed = [limit.filter(access(403)) for _ in range(1000)]
    passed += [limit.filter(handshake("403")) for _ in range(554)]
    passed += [limit.filter(garbage()) for _ in range(100)]
    assert sum(passed) == 5
    clock.now = 61
    with caplog.at_level(logging.WARNING, logger="app.refusals"):
        first = access(403)
        assert limit.filter(first)
    assert first.args == ("203.0.113.9:4000", "POST", "/twilio/voice", "1.1", 403)  # as is
    assert "1649 refused requests were not logged" in caplog.text


def test_a_handshake_path_cannot_dodge_the_limit() -> None:
    # The rendered line holds the path and query as sent: a quote in it must not make
    # a refusal look like something else.
    limit = RefusalLogFilter(burst=0, clock=Clock())
    record = handshake("403")
    record.args = ("203.0.113.9:4000", '/twilio/media?a"b" 200 x')
    assert not limit.filter(record)


def test_served_requests_and_accepted_streams_are_always_logged() -> None:
    limit = RefusalLogFilter(burst=0, clock=Clock())

    assert all(limit.filter(access(status)) for status in (200, 204, 301))
    assert limit.filter(handshake("[accepted]"))
    assert not limit.filter(access(404)) and not limit.filter(handshake("403"))


def test_records_it_lets_through_stay_as_uvicorns_formatter_wants_them() -> None:
    from uvicorn.logging import AccessFormatter

    clock = Clock()
    limit = RefusalLogFilter(burst=1, window_s=60, clock=clock)
    for _ in range(3):
        limit.filter(access(403))
    clock.now = 61
    record = access(403)
    assert limit.filter(record)
    assert "403" in AccessFormatter("%(message)s", use_colors=False).format(record)
