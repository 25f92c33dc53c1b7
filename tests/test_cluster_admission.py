"""Two gateways, one system: admission across real uvicorn servers sharing a real Redis.

Each gateway is the real app on its own port, with the same REDIS_URL and the same
CALL_TOKEN_SECRET, as behind a load balancer. What one gateway admitted, the other
refuses to repeat: a stream token replayed there, or Twilio's webhook repeated there for
a live call. Redis restarted or stopped costs no call: new calls are still answered,
with each gateway's own checks, and the outage is counted in /metrics.

The models are fakes (tests/agents/models.py): admission is what is tested, and a call
only has to be live (its greeting plays). No real-time conversation runs here.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator

import httpx
import numpy as np
import pytest
import websockets

from agents.cascade.agent import CascadeModels
from ops.local_server import ServerThread
from telephony.protocol import TwilioEventWriter
from tests.agents.models import end_of_turn, hearing, replying, speaking, words_as_tones
from tests.conftest import AUTH_TOKEN, GREETING, Bot, start_bot
from tests.services import RedisServer
from tests.test_open_internet import (
    alive,
    close_code,
    new_sid,
    post_signed,
    start_stream,
    until_idle,
    webhook_params,
)

pytestmark = pytest.mark.timeout(120)

SECRET = "cluster-call-token-secret-0123456789"


def fake_models() -> CascadeModels:
    """Enough of a bot for a call to start and play its greeting."""
    canned: dict[str, np.ndarray] = {GREETING: words_as_tones(GREETING)}
    return CascadeModels(
        stt=hearing("Hello?"),
        tts=speaking(),
        llm=replying(["Yes."]),
        end_of_turn=end_of_turn(0.9),
        canned=canned,
    )


def gateway(servers: ServerThread, redis_url: str) -> Bot:
    return start_bot(
        servers,
        fake_models(),
        twilio_auth_token=AUTH_TOKEN,
        call_token_secret=SECRET,
        redis_url=redis_url,
        max_calls=2,
    )


@pytest.fixture
def pair(servers: ServerThread, redis_url: str) -> tuple[Bot, Bot]:
    """Gateways A and B on the session's shared redis-server."""
    return gateway(servers, redis_url), gateway(servers, redis_url)


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A redis-server of this test's own, to stop and restart."""
    server = RedisServer().start()
    yield server
    server.stop()


def token_of(twiml: str) -> str:
    found = re.search(r'<Parameter name="token" value="([^"]+)"', twiml)
    assert found, f"no stream token in {twiml!r}"
    return found.group(1)


async def metric(bot: Bot, name: str, **labels: str) -> float:
    """A sample of the gateway's /metrics, read as a scraper reads it."""
    async with httpx.AsyncClient() as client:
        text = (await client.get(f"{bot.url}/metrics")).text
    wanted = name + (
        "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}" if labels else ""
    )
    for line in text.splitlines():
        if line.startswith(wanted + " "):
            return float(line.split()[-1])
    return 0.0


async def answered(bot: Bot) -> bool:
    """A new call on `bot`: its webhook streams and its stream comes alive; hung up after."""
    call_sid = new_sid()
    twiml = (await post_signed(bot, webhook_params(call_sid))).text
    if "<Stream" not in twiml:
        return False
    ws, twilio = await start_stream(bot, call_sid, token=token_of(twiml))
    async with ws:
        live = await alive(ws, twilio)
        await hang_up(ws, twilio)
    return live


async def hang_up(ws: websockets.ClientConnection, twilio: TwilioEventWriter) -> None:
    """The caller hangs up; read on to the server's close (unread bot audio would hold the
    client's close handshake back for its 10 s timeout)."""
    await ws.send(twilio.stop())
    await close_code(ws)


async def refused_stream(ws: websockets.ClientConnection) -> int | None:
    async with ws:
        return await close_code(ws)


async def test_a_token_replayed_on_the_other_gateway_is_refused(pair: tuple[Bot, Bot]) -> None:
    a, b = pair
    call_sid = new_sid()
    token = token_of((await post_signed(a, webhook_params(call_sid))).text)
    first, twilio = await start_stream(a, call_sid, token=token)
    async with first:
        assert await alive(first, twilio)
        replay, _ = await start_stream(b, call_sid, token=token)
        assert await refused_stream(replay) == 1008
        assert await metric(b, "offhook_rejected_calls_total", reason="replayed_call_token") == 1
        assert await alive(first, twilio), "the live call goes on"
        # Summed over the gateways, /metrics counts the one call once.
        assert (
            await metric(a, "offhook_active_calls") + await metric(b, "offhook_active_calls") == 1
        )
        await hang_up(first, twilio)
    await until_idle(a)


async def test_a_second_webhook_for_a_live_call_on_the_other_gateway_is_refused(
    pair: tuple[Bot, Bot],
) -> None:
    a, b = pair
    call_sid = new_sid()
    params = webhook_params(call_sid)
    token = token_of((await post_signed(a, params)).text)
    ws, twilio = await start_stream(a, call_sid, token=token)
    async with ws:
        assert await alive(ws, twilio)
        twiml = (await post_signed(b, params)).text
        assert "<Stream" not in twiml, "a second stream was offered for a live call"
        assert await metric(b, "offhook_rejected_calls_total", reason="replayed_webhook") == 1
        assert await metric(a, "offhook_rejected_calls_total", reason="replayed_webhook") == 0
        await hang_up(ws, twilio)
    await until_idle(a)


async def test_duplicate_webhooks_on_both_gateways_start_one_stream(
    pair: tuple[Bot, Bot],
) -> None:
    # Twilio's duplicate delivery, one copy per gateway, before any stream: each answers
    # with a stream (Twilio may follow either), and only one of them ever starts.
    a, b = pair
    call_sid = new_sid()
    params = webhook_params(call_sid)
    token_a = token_of((await post_signed(a, params)).text)
    token_b = token_of((await post_signed(b, params)).text)
    first, twilio = await start_stream(b, call_sid, token=token_b)
    async with first:
        assert await alive(first, twilio)
        second, _ = await start_stream(a, call_sid, token=token_a)
        assert await refused_stream(second) == 1008
        await hang_up(first, twilio)
    await until_idle(b)


async def test_calls_are_answered_while_redis_is_down_and_after_it_restarts(
    servers: ServerThread, own_redis: RedisServer
) -> None:
    a, b = gateway(servers, own_redis.url), gateway(servers, own_redis.url)
    assert await answered(a)
    assert await metric(a, "offhook_redis_up") == 1

    await asyncio.to_thread(own_redis.stop)
    assert await answered(b), "a new call, with B's own checks"
    assert await metric(b, "offhook_redis_errors_total", op="reserve") >= 1
    assert await metric(b, "offhook_redis_up") == 0

    await asyncio.to_thread(own_redis.start)  # empty, as after a crash
    assert await answered(a), "the next call after the restart"
    # Redis is used again: a token from A is refused on B once more.
    call_sid = new_sid()
    token = token_of((await post_signed(a, webhook_params(call_sid))).text)
    ws, twilio = await start_stream(a, call_sid, token=token)
    async with ws:
        assert await alive(ws, twilio)
        replay, _ = await start_stream(b, call_sid, token=token)
        assert await refused_stream(replay) == 1008
        await hang_up(ws, twilio)
    assert await metric(a, "offhook_redis_up") == 1
    for bot in (a, b):
        await until_idle(bot)
