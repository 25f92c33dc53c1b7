"""The CallSid ledger's contract, kept alike by this process's memory and by Redis.

Every case runs twice: against `LocalCallLedger` (one gateway, the embedded default) and
against two `RedisCallLedger`s on one real redis-server (two gateways, A and B). Each
case acts through A and B; in one process they are the same ledger, so the contract
reads: whatever either gateway did, both know. Durations are short (tenths of a second)
so that Redis's own TTLs run out within the test; the local ledger's clock is moved.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass

import pytest

from app.call_ledger import CallLedger, LocalCallLedger, Sighting
from app.metrics import Metrics
from app.redis_ledger import RedisCallLedger, redis_client

NEW, PENDING, REPEATED = Sighting.NEW, Sighting.PENDING, Sighting.REPEATED
RESERVE_S = 0.4
REMEMBER_S = 1.2


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Gateways:
    a: CallLedger
    b: CallLedger
    # Lets time pass: the local ledger's clock is moved, Redis's TTLs are waited out.
    advance: Callable[[float], Awaitable[None]]


def sid() -> str:
    return "CA" + secrets.token_hex(16)


def redis_ledger(
    url: str, prefix: str, holder: str, *, heartbeat_s: float = 0.1, live_ttl_s: float = 0.5
) -> RedisCallLedger:
    # A heartbeat far shorter than REMEMBER_S: a live call must outlive its memory.
    return RedisCallLedger(
        redis_client(url),
        local=LocalCallLedger(RESERVE_S, remember_s=REMEMBER_S),
        holder=holder,
        metrics=Metrics(),
        prefix=prefix,
        heartbeat_s=heartbeat_s,
        live_ttl_s=live_ttl_s,
    )


@pytest.fixture(params=["local", "redis"])
def gateways(request: pytest.FixtureRequest) -> Callable[[], AbstractAsyncContextManager[Gateways]]:
    """Builds the two gateways' view of one ledger, in-process or on Redis."""
    if request.param == "local":
        return lambda: local_gateways()
    url = request.getfixturevalue("redis_url")
    return lambda: shared_gateways(url)


@asynccontextmanager
async def local_gateways() -> AsyncIterator[Gateways]:
    clock = Clock()
    ledger = LocalCallLedger(RESERVE_S, clock=clock, remember_s=REMEMBER_S)

    async def advance(seconds: float) -> None:
        clock.now += seconds

    yield Gateways(ledger, ledger, advance)


@asynccontextmanager
async def shared_gateways(url: str) -> AsyncIterator[Gateways]:
    prefix = f"test-{secrets.token_hex(4)}:"  # the server is shared between tests
    a = redis_ledger(url, prefix, "gateway-a")
    b = redis_ledger(url, prefix, "gateway-b")
    await a.start()
    await b.start()
    try:
        yield Gateways(a, b, asyncio.sleep)
    finally:
        await a.aclose()
        await b.aclose()


async def test_a_call_sid_is_reserved_once_and_a_duplicate_shares_the_reservation(
    gateways: Callable[[], AbstractAsyncContextManager[Gateways]],
) -> None:
    async with gateways() as gw:
        call = sid()
        assert await gw.a.reserve(call) is NEW
        assert await gw.b.reserve(call) is PENDING, "Twilio's duplicate, delivered to B"
        assert await gw.a.reserve(call) is PENDING
        await gw.advance(RESERVE_S + 0.1)
        assert await gw.b.reserve(call) is REPEATED, "a lapsed reservation is never made again"
        assert await gw.a.reserve(call) is REPEATED


async def test_a_call_sid_starts_one_stream_whichever_gateway_it_reaches(
    gateways: Callable[[], AbstractAsyncContextManager[Gateways]],
) -> None:
    async with gateways() as gw:
        call = sid()
        assert await gw.a.reserve(call) is NEW
        assert await gw.b.claim_stream(call), "the stream may reach another gateway"
        assert not await gw.a.claim_stream(call), "a replayed token, on the first gateway"
        assert not await gw.b.claim_stream(call), "and on the one that took it"
        assert await gw.a.reserve(call) is REPEATED, "a webhook after its stream: a replay"


async def test_a_live_call_is_remembered_for_as_long_as_it_lasts_and_a_while_after(
    gateways: Callable[[], AbstractAsyncContextManager[Gateways]],
) -> None:
    async with gateways() as gw:
        call = sid()
        assert await gw.a.claim_stream(call)
        gw.a.live(call)
        await gw.advance(REMEMBER_S + 0.3)  # past the memory of ended calls: live stays
        assert await gw.b.reserve(call) is REPEATED, "a webhook for a live call, on B"
        assert not await gw.b.claim_stream(call), "a second stream for a live call, on B"
        gw.a.ended(call)
        await gw.advance(REMEMBER_S / 2)
        assert not await gw.b.claim_stream(call), "remembered after its end"
        await gw.advance(REMEMBER_S / 2 + 0.3)
        assert not await gw.b.seen(call), "forgotten at last"


async def test_what_one_gateway_reserved_the_other_has_seen(
    gateways: Callable[[], AbstractAsyncContextManager[Gateways]],
) -> None:
    async with gateways() as gw:
        call, other = sid(), sid()
        assert not await gw.b.seen(call)
        assert await gw.a.reserve(call) is NEW
        assert await gw.b.seen(call)
        assert not await gw.b.seen(other)


async def test_a_call_sid_forgotten_after_its_memory_is_new_again(
    gateways: Callable[[], AbstractAsyncContextManager[Gateways]],
) -> None:
    async with gateways() as gw:
        call = sid()
        assert await gw.a.reserve(call) is NEW
        await gw.advance(REMEMBER_S + 0.2)
        assert await gw.b.reserve(call) is NEW
