"""The Redis ledger when Redis misbehaves, and what it leaves in Redis: real redis-servers.

Redis going away must cost no call: every decision is then taken with the gateway's own
checks, within the command timeout, and the outage is logged once and counted. When it
comes back (empty, as a Redis without persistence does) it is used again, and the live
calls are written into it again by the next heartbeat.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time

import pytest

from app.call_ledger import LocalCallLedger, Sighting
from app.metrics import Metrics
from app.redis_ledger import HEARTBEAT_S, LIVE_TTL_S, TIMEOUT_S, RedisCallLedger, redis_client
from tests.services import RedisServer, free_port

pytestmark = pytest.mark.timeout(60)


def sid() -> str:
    return "CA" + secrets.token_hex(16)


def ledger(
    url: str,
    holder: str = "gateway-a",
    *,
    prefix: str = "",
    heartbeat_s: float = HEARTBEAT_S,
    live_ttl_s: float = LIVE_TTL_S,
) -> RedisCallLedger:
    return RedisCallLedger(
        redis_client(url),
        local=LocalCallLedger(15.0),
        holder=holder,
        metrics=Metrics(),
        prefix=prefix or f"test-{secrets.token_hex(4)}:",  # the server is shared
        heartbeat_s=heartbeat_s,
        live_ttl_s=live_ttl_s,
    )


def sample(gateway: RedisCallLedger, name: str, **labels: str) -> float:
    return gateway.metrics.registry.get_sample_value(name, labels) or 0.0


async def test_a_live_call_is_held_in_redis_by_its_gateway_until_that_gateway_dies(
    redis_url: str,
) -> None:
    beating = ledger(redis_url, "gateway-a", heartbeat_s=0.1, live_ttl_s=0.4)
    dead = ledger(redis_url, "gateway-b", prefix=beating.prefix, heartbeat_s=0.1, live_ttl_s=0.4)
    await beating.start()  # `dead` never beats: a gateway SIGKILLed after `live`
    reader = redis_client(redis_url)
    try:
        kept, lost = sid(), sid()
        beating.live(kept)
        dead.live(lost)
        await asyncio.sleep(0.1)
        assert await reader.get(f"{beating.prefix}{{{kept}}}:live") == "gateway-a"
        assert await reader.get(f"{beating.prefix}{{{lost}}}:live") == "gateway-b"
        await asyncio.sleep(0.8)  # two TTLs
        assert await reader.get(f"{beating.prefix}{{{kept}}}:live") == "gateway-a"
        assert await reader.get(f"{beating.prefix}{{{lost}}}:live") is None
        for key in await reader.keys(f"{beating.prefix}*"):
            assert await reader.pttl(key) > 0, f"{key!r} would never expire"
    finally:
        await reader.aclose()
        await beating.aclose()
        await dead.aclose()


async def test_without_redis_decisions_are_local_counted_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gateway = ledger(f"redis://127.0.0.1:{free_port()}/0")  # nothing listens there
    try:
        with caplog.at_level(logging.WARNING, logger="app.redis_ledger"):
            first, again = sid(), sid()
            assert await gateway.reserve(first) is Sighting.NEW
            assert await gateway.reserve(first) is Sighting.PENDING
            assert await gateway.claim_stream(first)
            assert not await gateway.claim_stream(first), "this gateway's own check holds"
            gateway.live(first)
            assert await gateway.reserve(first) is Sighting.REPEATED
            assert await gateway.reserve(again) is Sighting.NEW
            await asyncio.sleep(0.05)  # the background write of `live` fails too
    finally:
        await gateway.aclose()
    assert sample(gateway, "offhook_redis_errors_total", op="reserve") >= 1
    assert sample(gateway, "offhook_redis_fallbacks_total", op="reserve") == 4
    assert sample(gateway, "offhook_redis_fallbacks_total", op="claim_stream") == 1
    assert sample(gateway, "offhook_redis_up") == 0
    outage = [r for r in caplog.records if "Redis unavailable" in r.getMessage()]
    assert len(outage) == 1, "an outage is one line, not one per decision"


async def test_a_redis_that_hangs_costs_a_webhook_at_most_the_timeout() -> None:
    async def accept_and_say_nothing(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await reader.read()  # until the client gives up
        writer.close()

    silent = await asyncio.start_server(accept_and_say_nothing, "127.0.0.1", 0)
    port = silent.sockets[0].getsockname()[1]
    gateway = ledger(f"redis://127.0.0.1:{port}/0")
    try:
        began = time.monotonic()
        assert await gateway.reserve(sid()) is Sighting.NEW
        assert time.monotonic() - began < TIMEOUT_S + 0.2
        assert sample(gateway, "offhook_redis_errors_total", op="reserve") == 1
    finally:
        await gateway.aclose()
        silent.close()
        await silent.wait_closed()
        await asyncio.sleep(0.05)  # the handler sees the client gone and closes its end


async def test_after_a_redis_restart_it_is_used_again_and_learns_the_live_calls_again() -> None:
    server = RedisServer().start()
    a = ledger(server.url, "gateway-a", heartbeat_s=0.1, live_ttl_s=0.5)
    b = ledger(server.url, "gateway-b", prefix=a.prefix, heartbeat_s=0.1, live_ttl_s=0.5)
    await a.start()
    await b.start()
    try:
        live = sid()
        assert await a.claim_stream(live)
        a.live(live)
        await asyncio.to_thread(server.stop)
        await asyncio.sleep(0.3)  # heartbeats fail meanwhile
        fresh = sid()
        assert await b.reserve(fresh) is Sighting.NEW, "decided locally while Redis is down"
        assert sample(a, "offhook_redis_up") == 0
        await asyncio.to_thread(server.start)  # empty: no persistence
        await asyncio.sleep(0.5)  # a heartbeat or more
        assert sample(a, "offhook_redis_up") == 1
        assert sample(a, "offhook_redis_errors_total", op="heartbeat") >= 1
        assert not await b.claim_stream(live), "the live call is known again, on B"
        assert await b.reserve(live) is Sighting.REPEATED
        later = sid()
        assert await a.reserve(later) is Sighting.NEW
        assert await b.reserve(later) is Sighting.PENDING, "A's reservation went through Redis"
    finally:
        await a.aclose()
        await b.aclose()
        server.stop()
