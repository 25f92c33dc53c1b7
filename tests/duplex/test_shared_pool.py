"""Many gateways, one worker registry: real worker processes that register themselves in
a real redis-server, and gateway-side pools (each with its own Redis client, as separate
gateway processes have) leasing them and opening real sessions.

Each test keys its Redis state under a prefix of its own (the server is shared); a test
that restarts Redis starts one of its own.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager

import httpx
import numpy as np
import pytest
from prometheus_client import CollectorRegistry
from redis.asyncio import Redis

from agents.duplex.client import WorkerBusy, WorkerSession
from agents.duplex.gateway import DuplexAgent
from agents.duplex.pool import Lease, NoWorker, PoolMetrics, PoolWorkerState, WorkerPool
from agents.duplex.protocol import Prepare
from agents.duplex.registry import open_redis, registered_workers
from agents.duplex.shared_pool import SharedWorkerPool
from agents.duplex.supervisor import WorkerSupervisor
from app.services import Services, open_pool
from tests.conftest import test_settings as settings_for
from tests.services import RedisServer, free_port, free_ports

pytestmark = pytest.mark.timeout(120)

PREPARE = Prepare(system_prompt="You are a test.")


@pytest.fixture
def prefix() -> str:
    return f"test-{uuid.uuid4().hex[:10]}"


class Workers:
    """Real `registry_worker` processes, each registering itself under the prefix."""

    def __init__(self, redis_url: str, prefix: str) -> None:
        self.redis_url = redis_url
        self.prefix = prefix
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, port: int | None = None) -> str:
        port = port or free_port()
        url = f"ws://127.0.0.1:{port}"
        self.procs[url] = subprocess.Popen(
            [sys.executable, "-m", "tests.duplex.registry_worker", str(port),
             self.redis_url, self.prefix],
        )  # fmt: skip
        return url

    async def registered(self, *urls: str, state: str = "idle", timeout_s: float = 30) -> None:
        """Until each of `urls` is in the registry in `state`."""
        redis = open_redis(self.redis_url)
        try:
            async with asyncio.timeout(timeout_s):
                while True:
                    seen = {
                        w["url"]: w["state"] for w in await registered_workers(redis, self.prefix)
                    }
                    if all(seen.get(url) == state for url in urls):
                        return
                    await asyncio.sleep(0.05)
        finally:
            await redis.aclose()

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)


@pytest.fixture
def workers(redis_url: str, prefix: str) -> Iterator[Workers]:
    made = Workers(redis_url, prefix)
    yield made
    made.stop()


@asynccontextmanager
async def gateway(
    redis_url: str, prefix: str, name: str, **options: object
) -> AsyncIterator[SharedWorkerPool]:
    """One gateway's pool, on a Redis client of its own."""
    client = Redis.from_url(redis_url, client_name=f"{prefix}-{name}", decode_responses=True)
    pool = SharedWorkerPool(client, gateway_id=name, prefix=prefix, **options)  # type: ignore[arg-type]
    async with pool:
        yield pool


async def health(url: str) -> dict[str, object]:
    async with httpx.AsyncClient() as client:
        body: dict[str, object] = (
            await client.get(url.replace("ws://", "http://") + "/health")
        ).json()
        return body


async def one_unit(session: WorkerSession) -> None:
    """The session works: a unit goes out and its result comes back."""
    await session.send_unit(0, np.zeros(16000, dtype=np.float32))
    result = await session.next_result(timeout_s=5)
    assert result.seq == 0


async def test_two_gateways_racing_for_one_worker_take_turns_and_blame_nobody(
    redis_url: str, prefix: str, workers: Workers
) -> None:
    url = workers.start()
    await workers.registered(url)
    blamed: list[tuple[str, str]] = []

    def report(worker: str, reason: str) -> None:
        blamed.append((worker, reason))

    holding = asyncio.Event()
    timeline: list[str] = []

    async def call(pool: SharedWorkerPool, name: str) -> None:
        async with await pool.acquire(timeout_s=20) as lease:
            assert not holding.is_set(), "two gateways hold the one worker at once"
            holding.set()
            timeline.append(f"{name} leased")
            async with WorkerSession() as session:
                await session.connect(lease.url, PREPARE)
                await one_unit(session)
                timeline.append(f"{name} served")
                holding.clear()  # before Stop: the worker cannot be free before that

    async with (
        gateway(redis_url, prefix, "a", on_unhealthy=report) as a,
        gateway(redis_url, prefix, "b", on_unhealthy=report) as b,
    ):
        await asyncio.gather(call(a, "a"), call(b, "b"))
    first, second = timeline[0][0], timeline[2][0]
    assert timeline == [
        f"{first} leased",
        f"{first} served",
        f"{second} leased",
        f"{second} served",
    ]
    assert {first, second} == {"a", "b"}
    assert blamed == []
    assert (await health(url))["sessions_served"] == 2


async def test_one_queue_is_first_come_first_served_across_gateways(
    redis_url: str, prefix: str, workers: Workers
) -> None:
    busy = workers.start()  # a worker on someone's call: the others' calls wait
    await workers.registered(busy)
    async with (
        gateway(redis_url, prefix, "a") as a,
        gateway(redis_url, prefix, "b") as b,
        gateway(redis_url, prefix, "c") as c,
    ):
        held = await c.acquire(timeout_s=5)
        served: list[str] = []
        redis = open_redis(redis_url)

        async def blocked() -> int:
            clients = await redis.client_list()
            return sum(1 for c in clients if c.get("name", "").startswith(prefix)
                       and "b" in c.get("flags", ""))  # fmt: skip

        async def call(pool: SharedWorkerPool, name: str) -> Lease:
            lease = await pool.acquire(timeout_s=60)
            served.append(name)
            return lease

        waiters = []
        for n, pool in enumerate([a, b, a, b]):
            waiters.append(asyncio.create_task(call(pool, f"{pool.gateway_id}{n}")))
            async with asyncio.timeout(5):
                while await blocked() < n + 1:  # noqa: ASYNC110 - Redis has no event to wait on
                    await asyncio.sleep(0.01)
        for _ in range(4):  # workers come up one by one; each goes to the longest waiter
            url = workers.start()
            await workers.registered(url, state="idle")
            await asyncio.sleep(0.1)
        await asyncio.gather(*waiters)
        held.release()
        await redis.aclose()
    assert served == ["a0", "b1", "a2", "b3"]


async def test_without_any_registered_worker_a_call_goes_to_the_cascade_without_waiting(
    redis_url: str, prefix: str
) -> None:
    async with gateway(redis_url, prefix, "a") as pool:
        started = asyncio.get_running_loop().time()
        with pytest.raises(NoWorker):
            await pool.acquire(timeout_s=5)
        assert asyncio.get_running_loop().time() - started < 1


async def test_a_worker_whose_heartbeat_stopped_is_not_leased_until_it_registers_again(
    redis_url: str, prefix: str, workers: Workers
) -> None:
    url, other = workers.start(), workers.start()
    await workers.registered(url, other)
    port = int(url.rsplit(":", 1)[1])
    workers.procs[url].kill()  # SIGKILL: no deregistration, its offer stays queued
    workers.procs[url].wait()
    redis = open_redis(redis_url)
    async with asyncio.timeout(10):  # the heartbeat key expires (3 s)
        while len(await registered_workers(redis, prefix)) > 1:  # noqa: ASYNC110 - Redis has no event to wait on
            await asyncio.sleep(0.1)
    async with gateway(redis_url, prefix, "a") as pool:
        held = [await pool.acquire(timeout_s=1)]  # the live worker, on a call
        assert held[0].url == other
        with pytest.raises(NoWorker):
            await pool.acquire(timeout_s=0.5)
        assert await redis.llen(f"{prefix}:idle") == 0, "a dead worker's offer is dropped"
        workers.start(port)  # the same address, registering again
        await workers.registered(url)
        held.append(await pool.acquire(timeout_s=5))
        assert held[1].url == url
        for lease in held:
            lease.release()
    await redis.aclose()


async def test_a_worker_stopped_cleanly_leaves_the_registry_at_once(
    redis_url: str, prefix: str, workers: Workers
) -> None:
    url = workers.start()
    await workers.registered(url)
    workers.procs[url].send_signal(signal.SIGTERM)
    workers.procs[url].wait(timeout=10)
    redis = open_redis(redis_url)
    assert await registered_workers(redis, prefix) == []
    assert await redis.llen(f"{prefix}:idle") == 0
    await redis.aclose()


async def test_a_busy_worker_at_connect_hands_the_call_to_the_next_one_unblamed(
    redis_url: str, prefix: str, workers: Workers
) -> None:
    first, second = workers.start(), workers.start()
    await workers.registered(first, second)
    blamed: list[tuple[str, str]] = []
    async with gateway(
        redis_url, prefix, "a", on_unhealthy=lambda u, r: blamed.append((u, r))
    ) as pool:
        lease = await pool.acquire(timeout_s=5)
        # Someone outside the registry (a gateway with DUPLEX_WORKERS) got there first.
        outsider = WorkerSession()
        await outsider.connect(lease.url, PREPARE)
        agent = DuplexAgent(lease, None, None, fallback=None, metrics=None)  # type: ignore[arg-type]
        await agent._connect(PREPARE)
        assert agent.lease.url != lease.url
        assert lease.released and not agent.lease.released
        await one_unit(agent._session)
        await agent._session.stop()
        agent.lease.release()
        await outsider.stop()
        # The busy worker was not blamed: once free it is offered and leased again.
        again = [await pool.acquire(timeout_s=10), await pool.acquire(timeout_s=10)]
        assert {lease.url for lease in again} == {first, second}
        for each in again:
            each.release()
    assert blamed == []


async def test_a_static_pool_passes_a_busy_local_worker_over_without_killing_it() -> None:
    """The same fix without Redis: the loser of a race used to release the worker as
    unhealthy, and `serve --local-workers` then SIGKILLed a healthy process."""

    def command(index: int, port: int) -> list[str]:
        return [sys.executable, "-m", "tests.duplex.idle_worker", str(port)]

    options = {"command": command, "interval_s": 0.2, "backoff_s": 0.1}
    async with WorkerSupervisor(2, free_ports(2), **options) as supervisor:  # type: ignore[arg-type]
        ready = await supervisor.wait_ready(60)
        assert ready, [(w.url, w.state, w.spawned) for w in supervisor.workers]
        watch = asyncio.create_task(supervisor.run())
        pids = [w.process.pid for w in supervisor.workers if w.process is not None]
        pool = WorkerPool(supervisor.urls, on_unhealthy=supervisor.report)
        await pool.check_health()
        lease = await pool.acquire(timeout_s=1)
        outsider = WorkerSession()  # another gateway's call on the same worker
        await outsider.connect(lease.url, PREPARE)
        with pytest.raises(WorkerBusy):
            await WorkerSession().connect(lease.url, PREPARE)
        agent = DuplexAgent(lease, None, None, fallback=None, metrics=None)  # type: ignore[arg-type]
        await agent._connect(PREPARE)
        assert agent.lease.url != lease.url
        busy = next(w for w in pool.workers if w.url == lease.url)
        assert busy.state is PoolWorkerState.STARTING  # back once it says idle, not ERROR
        await agent._session.stop()
        agent.lease.release()
        await outsider.stop()
        await asyncio.sleep(0.6)  # a few supervisor passes
        assert [w.process.pid for w in supervisor.workers if w.process] == pids
        assert all(w.spawned == 1 for w in supervisor.workers)
        watch.cancel()
        await asyncio.gather(watch, return_exceptions=True)
        await pool.aclose()


async def test_redis_down_sends_calls_to_the_cascade_at_once_and_live_calls_go_on(
    prefix: str,
) -> None:
    server = RedisServer().start()
    worker = Workers(server.url, prefix)
    try:
        url = worker.start()
        await worker.registered(url)
        registry = CollectorRegistry()
        async with gateway(server.url, prefix, "a", metrics=PoolMetrics(registry)) as pool:
            async with await pool.acquire(timeout_s=5) as lease, WorkerSession() as session:
                await session.connect(lease.url, PREPARE)
                server.stop()
                await one_unit(session)  # the call's audio never passes through Redis
                started = asyncio.get_running_loop().time()
                with pytest.raises(NoWorker):
                    await pool.acquire(timeout_s=0.3)
                assert asyncio.get_running_loop().time() - started < 3
                errors = registry.get_sample_value(
                    "offhook_pool_registry_errors_total", {"operation": "acquire"}
                )
                assert errors is not None and errors >= 1
                await pool.renew()  # renewing fails quietly; the call is unaffected
                await one_unit(session)
                server.start()  # back, and empty: the workers rebuild the registry
            # The session ended; the worker offers itself to the new Redis.
            await worker.registered(url, timeout_s=10)
            async with await pool.acquire(timeout_s=5) as again:
                assert again.url == url
    finally:
        worker.stop()
        server.stop()


async def test_a_gateway_leases_from_the_registry_with_redis_url_and_no_static_list(
    redis_url: str,
) -> None:
    async with AsyncExitStack() as stack:
        shared = await open_pool(Services(settings_for(redis_url=redis_url)), stack)
        assert isinstance(shared, SharedWorkerPool)
        static = await open_pool(
            Services(settings_for(redis_url=redis_url, duplex_workers="ws://127.0.0.1:1")), stack
        )
        assert isinstance(static, WorkerPool)  # DUPLEX_WORKERS stays a static list
        assert await open_pool(Services(settings_for()), stack) is None
