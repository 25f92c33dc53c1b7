"""A call whose stream ends while it is still asking the worker registry for a duplex
worker ends: its slot is given back and its record is finished, even when Redis has just
failed underneath the gateway.

Seen in a benchmark: Redis had been restarted, a resumed stream flooded and was closed
while its agent task was leasing a worker, and the call never ended (active_calls 1 and a
record "in progress" for minutes). On Python 3.11 `asyncio.wait_for` (which redis-py puts
around every command it sends) loses a cancellation that arrives in the same loop turn
as the send finishes (CPython gh-86296): the lease went on, failed on the dead Redis,
the call fell back to the cascade, and nobody was left to stop that.

The race is one loop turn wide, so the test holds the agent's first Redis command on its
way (`hold_sends_until_cancelled`) until the session tells the agent to stop; then it
goes out on the real (stale) connection, and everything after it is the real app.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine, Iterator
from typing import Any

import pytest
import websockets

from agents.duplex.pool import Lease, NoWorker
from agents.duplex.registry import RegistryKeys, WorkerRegistration, open_redis
from agents.duplex.shared_pool import SharedWorkerPool
from ops.local_server import ServerThread
from recordings.store import RecordStore
from telephony.protocol import TwilioEventWriter
from tests.conftest import Bot
from tests.services import RedisServer
from tests.test_cluster_admission import gateway
from tests.test_open_internet import ACCOUNT_SID, close_code, new_sid, open_stream, until_idle

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A redis-server of this test's own, to stop and restart."""
    server = RedisServer().start()
    yield server
    server.stop()


async def register_worker(redis_url: str, state: str = "duplex_active") -> None:
    """One worker in the registry, as `offhook worker` registers itself; by default busy
    with another call, so a new call would wait for it."""
    client = open_redis(redis_url)
    try:
        registration = WorkerRegistration(
            client, "ws://127.0.0.1:9", state=lambda: state, backend="test",
            worker_id="registered-worker",
        )  # fmt: skip
        await registration.beat()
        assert registration.errors == 0
    finally:
        await client.aclose()


async def hold_sends_until_cancelled(pool: SharedWorkerPool, task_name: str = "agent") -> None:
    """Warm the pool's Redis connection (a gateway's pooled one, from earlier calls), and
    make each command sent on it wait until the task `task_name` (a call's agent task) is
    told to stop.

    redis-py sends in a task of its own under `asyncio.wait_for`; the send then finishes in
    the loop turn the cancellation is delivered in: the race, every time.
    """
    assert await pool.redis.ping()
    for connection in list(pool.redis.connection_pool._available_connections):
        send = connection._send_packed_command

        async def held(command: Any, send: Any = send) -> None:
            waiting = next(t for t in asyncio.all_tasks() if t.get_name() == task_name)
            # No event says "cancel requested"; a timer would wake us a turn too late.
            while not waiting.cancelling():  # noqa: ASYNC110
                await asyncio.sleep(0)
            await send(command)

        connection._send_packed_command = held  # type: ignore[method-assign]


def in_server(servers: ServerThread, coro: Coroutine[Any, Any, None]) -> None:
    servers.run(coro, timeout=10)


async def resumed_stream(
    bot: Bot, call_sid: str
) -> tuple[websockets.ClientConnection, TwilioEventWriter]:
    twilio = TwilioEventWriter(new_sid("MZ"), call_sid, ACCOUNT_SID)
    ws = await open_stream(bot)
    await ws.send(twilio.connected())
    token = bot.services.tokens.issue(f"{call_sid}:resume:1")
    await ws.send(twilio.start({"token": token, "from": "+15551234567", "resume": "1"}))
    return ws, twilio


async def finished(bot: Bot, record_id: str) -> dict[str, Any]:
    store = RecordStore(bot.settings.calls_dir)
    for _ in range(50):
        if record_id in set(store.ids()):
            meta = dict(store.open(record_id).meta)
            if meta.get("ended_at"):
                return meta
        await asyncio.sleep(0.05)
    raise AssertionError(f"the record {record_id} was never finished")


@pytest.mark.parametrize("redis_failure", ["stopped", "restarted"])
async def test_a_call_whose_stream_ends_while_it_leases_a_worker_ends(
    servers: ServerThread, own_redis: RedisServer, redis_failure: str
) -> None:
    bot = gateway(servers, own_redis.url)
    pool = bot.services.pool
    assert isinstance(pool, SharedWorkerPool), "REDIS_URL without DUPLEX_WORKERS: the registry"
    await register_worker(own_redis.url)
    in_server(servers, hold_sends_until_cancelled(pool))
    # The pooled connection is now stale: its Redis is gone (or a new one, empty, or with
    # the worker registered again, as workers do within a heartbeat).
    if redis_failure == "stopped":
        own_redis.stop()
    else:
        own_redis.restart()
        await register_worker(own_redis.url)

    call_sid = new_sid()
    ws, twilio = await resumed_stream(bot, call_sid)
    # Stamped 20 s into a stream that began a moment ago: closed as a flood at once,
    # while the agent is still asking the registry for a worker.
    for frame in range(3):
        await ws.send(twilio.media(b"\xff" * 160, 20_000 + frame * 20))
    with contextlib.suppress(TimeoutError):  # a call that never ends keeps it open
        await close_code(ws, within=5)

    await until_idle(bot)
    meta = await finished(bot, f"{call_sid}-resume1")
    assert meta["ended_with"] == "flood"
    assert meta["agent"] == "cascade"


@pytest.mark.parametrize("worker", ["idle", "duplex_active"])
async def test_a_lease_wait_whose_cancellation_redis_py_lost_is_still_cancelled(
    own_redis: RedisServer, worker: str
) -> None:
    """The pool itself: cancelled while its command is on the wire, `acquire` raises
    CancelledError (never NoWorker, which would start the cascade), and a worker it
    leased meanwhile is given back."""
    await register_worker(own_redis.url, worker)
    async with SharedWorkerPool(open_redis(own_redis.url)) as pool:
        await hold_sends_until_cancelled(pool, "lease")
        leasing = asyncio.create_task(pool.acquire(timeout_s=0.5), name="lease")
        await asyncio.sleep(0.05)
        leasing.cancel()
        outcome: Lease | BaseException
        try:
            outcome = await asyncio.wait_for(leasing, 5)
        except (asyncio.CancelledError, NoWorker) as exc:
            outcome = exc
        assert isinstance(outcome, asyncio.CancelledError), f"cancelled, yet: {outcome!r}"
        assert pool.snapshot() == {"busy": 0, "queued": 0, "workers": []}
    redis = open_redis(own_redis.url)
    try:
        for _ in range(50):
            if not await redis.exists(RegistryKeys().lease("ws://127.0.0.1:9")):
                break
            await asyncio.sleep(0.02)
        else:
            raise AssertionError("the lease taken for a cancelled wait was kept")
    finally:
        await redis.aclose()
