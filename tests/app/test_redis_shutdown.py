"""A gateway's Redis-backed services stop in bounded time, whatever the client does.

On Python 3.11 a cancel can be lost inside redis-py (its writes go through
`asyncio.wait_for`, which returns the result when the cancel lands just after the write
finished: CPython gh-86296), and a client can turn one into an error. A heartbeat that
only listened for the cancel beat on, and its service's `aclose` waited for ever (once,
in CI, a ledger's waited until the test's 300 s timeout, probably so). The clients here
talk to a real redis-server; each fault is put into the one command or close a test is
about.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from agents.bounded_stop import STOP_S
from agents.duplex.shared_pool import SharedWorkerPool
from app.call_ledger import LocalCallLedger
from app.call_owners import RedisCallOwners
from app.metrics import Metrics
from app.redis_ledger import RedisCallLedger, redis_client

pytestmark = pytest.mark.timeout(30)


async def command_that_loses_the_cancel() -> bool:
    """Waits on Redis; cancelled, it returns as if the answer had come (wait_for on 3.11)."""
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        pass
    return True


async def command_that_turns_the_cancel_into_an_error() -> bool:
    """Waits on Redis; cancelled, it raises what a connection torn down mid-command does."""
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        raise RedisConnectionError("Connection closed by server.") from None
    return True


FAULTS = [command_that_loses_the_cancel, command_that_turns_the_cancel_into_an_error]
Command = Callable[[], Awaitable[bool]]


def ledger(url: str) -> RedisCallLedger:
    return RedisCallLedger(
        redis_client(url),
        local=LocalCallLedger(15.0),
        holder="gateway-a",
        metrics=Metrics(),
        prefix=f"test-{secrets.token_hex(4)}:",
        heartbeat_s=0.05,
        timeout_s=10.0,  # the heartbeat is surely inside its command when cancelled
    )


def shutdown_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "agents.bounded_stop"]


async def closes_within_the_bound_without(
    gateway: RedisCallLedger, step: str, caplog: pytest.LogCaptureFixture
) -> None:
    """`aclose` ends within the bound, leaving behind the one step named, and says so."""
    began = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="agents.bounded_stop"):
        await gateway.aclose()
    assert time.monotonic() - began < STOP_S + 0.5
    assert shutdown_warnings(caplog) == [
        f"{step} did not end within {STOP_S:.1f} s at shutdown; going on without it"
    ]


@pytest.mark.parametrize("ping", FAULTS)
async def test_the_ledger_stops_its_heartbeat_whatever_became_of_the_cancel(
    redis_url: str, caplog: pytest.LogCaptureFixture, ping: Command
) -> None:
    gateway = ledger(redis_url)
    gateway.client.ping = ping  # type: ignore[method-assign,assignment]
    await gateway.start()
    await asyncio.sleep(0.1)  # the heartbeat waits on its ping
    began = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="agents.bounded_stop"):
        await gateway.aclose()
    assert time.monotonic() - began < STOP_S / 2, "the heartbeat ends itself, not the bound"
    assert shutdown_warnings(caplog) == []


async def test_a_client_close_that_never_ends_costs_the_ledger_at_most_the_bound(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    gateway = ledger(redis_url)
    real_close = gateway.client.aclose

    async def close_that_never_ends() -> None:
        await asyncio.Event().wait()

    gateway.client.aclose = close_that_never_ends  # type: ignore[method-assign,assignment]
    try:
        await gateway.start()
        await closes_within_the_bound_without(gateway, "Closing the Redis ledger's client", caplog)
    finally:
        await real_close()


async def test_writes_that_never_end_cost_the_ledger_at_most_the_bound(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    gateway = ledger(redis_url)

    async def mark_live_that_never_ends(call_sids: list[str]) -> None:
        await asyncio.Event().wait()  # inside the 10 s command timeout

    gateway._mark_live = mark_live_that_never_ends  # type: ignore[method-assign]
    gateway.live("CA" + secrets.token_hex(16))
    await closes_within_the_bound_without(gateway, "The Redis ledger's last writes", caplog)


@pytest.mark.parametrize("write", FAULTS)
async def test_the_call_owners_stop_their_heartbeat_whatever_became_of_the_cancel(
    redis_url: str, caplog: pytest.LogCaptureFixture, write: Command
) -> None:
    owners = RedisCallOwners(
        redis_client(redis_url),
        gateway="http://gateway-a",
        metrics=Metrics(),
        prefix=f"t{secrets.token_hex(4)}:",
        heartbeat_s=0.05,
        timeout_s=10.0,  # the heartbeat is surely inside its command when cancelled
    )
    await owners.hold("CA" + secrets.token_hex(16))  # a live call: the heartbeat writes it

    async def set_live(call_sids: list[str]) -> None:
        await write()

    owners._set_live = set_live  # type: ignore[method-assign]
    await owners.start(lambda sid, reports: None)
    await asyncio.sleep(0.1)
    began = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="agents.bounded_stop"):
        await owners.aclose()
    assert time.monotonic() - began < STOP_S / 2, "the heartbeat ends itself, not the bound"
    assert shutdown_warnings(caplog) == []


async def test_a_worker_pool_whose_renewer_and_client_never_end_closes_within_the_bounds(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    pool = SharedWorkerPool(
        redis_client(redis_url), gateway_id="gateway-a", prefix=f"t{secrets.token_hex(4)}:"
    )
    real_close = pool.redis.aclose
    let_go = asyncio.Event()  # at the test's end, so the loop can close

    async def renew_that_never_ends() -> None:
        while not let_go.is_set():  # a client that swallows every cancel
            with contextlib.suppress(asyncio.CancelledError):
                await let_go.wait()

    async def close_that_never_ends() -> None:
        await let_go.wait()

    pool._renew_loop = renew_that_never_ends  # type: ignore[method-assign]
    pool.redis.aclose = close_that_never_ends  # type: ignore[method-assign,assignment]
    try:
        await pool.start()
        await asyncio.sleep(0.05)
        with caplog.at_level(logging.WARNING, logger="agents.bounded_stop"):
            # Waited for with a bound of its own: unbounded, it would hang, not fail.
            closing = asyncio.ensure_future(pool.aclose())
            done, _ = await asyncio.wait({closing}, timeout=2 * STOP_S + 0.5)
        assert done, "the pool's close waited on a step that never ends"
        steps = ("The worker pool's lease renewer", "Closing the worker pool's Redis client")
        assert shutdown_warnings(caplog) == [
            f"{step} did not end within {STOP_S:.1f} s at shutdown; going on without it"
            for step in steps
        ]
    finally:
        let_go.set()
        await real_close()
