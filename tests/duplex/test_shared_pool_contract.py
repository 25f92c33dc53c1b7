"""One contract for both pools a call can lease a duplex worker from:

- `static`: `WorkerPool` over DUPLEX_WORKERS, in this process (health checks faked);
- `redis`:  `SharedWorkerPool` over the worker registry on a real redis-server, the
  workers' side played by real `WorkerRegistration`s whose state the test sets.

Both must lease an idle worker at once and exclusively, serve waiters first come first
served, pass over a worker that said busy without blaming it, report a broken one, and
never lease a dead one.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import pytest_asyncio
from prometheus_client import CollectorRegistry
from redis.asyncio import Redis

from agents.duplex.pool import (
    DuplexPool,
    Lease,
    NoWorker,
    PoolMetrics,
    QueueFull,
    WorkerPool,
)
from agents.duplex.registry import WorkerRegistration, open_redis
from agents.duplex.shared_pool import SharedWorkerPool

A = "ws://10.0.0.1:22400"
B = "ws://10.0.0.2:22400"
C = "ws://10.0.0.3:22400"


class World:
    """Workers and the pools that lease them; `finish` plays a worker's session end."""

    unhealthy: list[tuple[str, str]]

    async def pool(self, **options: Any) -> DuplexPool:
        raise NotImplementedError

    async def add(self, *urls: str) -> None:
        """Workers that are up and idle."""
        raise NotImplementedError

    async def finish(self, lease: Lease) -> None:
        """The call is over: the lease is released and the worker is idle again."""
        raise NotImplementedError

    async def add_busy(self, url: str) -> None:
        """A worker that is up and serving someone else's call."""
        raise NotImplementedError

    async def kill(self, url: str) -> None:
        """The worker dies (its health check fails / its heartbeat expires)."""
        raise NotImplementedError

    async def waiting(self, count: int) -> None:
        """Until `count` calls are queued for a worker (over every pool)."""
        raise NotImplementedError


class StaticWorld(World):
    def __init__(self) -> None:
        self.unhealthy = []
        self.up: dict[str, bool] = {}
        self.pools: list[WorkerPool] = []

    async def health(self, url: str) -> dict[str, Any] | None:
        return {"state": "idle"} if self.up.get(url) else None

    async def pool(self, **options: Any) -> DuplexPool:
        assert not self.pools, "a static pool is one gateway's"
        pool = WorkerPool(
            [A, B, C], health=self.health, on_unhealthy=self._report, **options
        )  # fmt: skip
        await pool.check_health()
        self.pools.append(pool)
        return pool

    def _report(self, url: str, reason: str) -> None:
        self.unhealthy.append((url, reason))

    async def add(self, *urls: str) -> None:
        self.up.update(dict.fromkeys(urls, True))
        for pool in self.pools:
            await pool.check_health()

    async def finish(self, lease: Lease) -> None:
        lease.release()

    async def add_busy(self, url: str) -> None:
        pass  # a static pool knows only its own list

    async def kill(self, url: str) -> None:
        self.up[url] = False
        for pool in self.pools:
            await pool.check_health()

    async def waiting(self, count: int) -> None:
        async with asyncio.timeout(5):
            while self.pools[0].snapshot()["queued"] < count:  # noqa: ASYNC110 - the pool's queue has no event
                await asyncio.sleep(0)

    async def aclose(self) -> None:
        for pool in self.pools:
            await pool.aclose()


class RedisWorld(World):
    def __init__(self, redis_url: str) -> None:
        self.unhealthy = []
        self.url = redis_url
        self.prefix = f"test-{uuid.uuid4().hex[:10]}"
        self.redis = open_redis(redis_url)
        self.states: dict[str, str] = {}
        self.workers: dict[str, WorkerRegistration] = {}
        self.pools: list[SharedWorkerPool] = []

    async def pool(self, **options: Any) -> DuplexPool:
        # A client of its own, as another gateway process would have.
        name = f"{self.prefix}-gw{len(self.pools)}"
        client = Redis.from_url(self.url, client_name=name, decode_responses=True)
        pool = SharedWorkerPool(
            client, gateway_id=name, prefix=self.prefix, on_unhealthy=self._report, **options
        )
        await pool.start()
        self.pools.append(pool)
        return pool

    def _report(self, url: str, reason: str) -> None:
        self.unhealthy.append((url, reason))

    async def add(self, *urls: str, state: str = "idle") -> None:
        for url in urls:
            self.states[url] = state
            self.workers[url] = WorkerRegistration(
                self.redis, url, state=lambda url=url: self.states[url],  # type: ignore[misc]
                backend="fake", worker_id=url, prefix=self.prefix,
            )  # fmt: skip
            await self.workers[url].beat()

    async def finish(self, lease: Lease) -> None:
        # The gateway ends the call; the worker's session ends and it says idle.
        url = lease.url
        self.states[url] = "duplex_active"
        await self.workers[url].beat()
        lease.release()
        self.states[url] = "idle"
        await self.workers[url].beat()

    async def add_busy(self, url: str) -> None:
        await self.add(url, state="duplex_active")

    async def kill(self, url: str) -> None:
        # Its heartbeat stops; the key expires (here: at once).
        await self.redis.delete(f"{self.prefix}:worker:{url}")

    async def waiting(self, count: int) -> None:
        async with asyncio.timeout(5):
            while await self._blocked() < count:  # noqa: ASYNC110 - Redis has no event to wait on
                await asyncio.sleep(0.005)

    async def _blocked(self) -> int:
        clients = await self.redis.client_list()
        return sum(
            1
            for c in clients
            if c.get("name", "").startswith(self.prefix) and "b" in c.get("flags", "")
        )

    async def aclose(self) -> None:
        for pool in self.pools:
            await pool.aclose()
        await self.redis.aclose()


@pytest_asyncio.fixture(params=["static", "redis"], loop_scope="function")
async def world(request: pytest.FixtureRequest) -> AsyncIterator[World]:
    made: StaticWorld | RedisWorld
    if request.param == "static":
        made = StaticWorld()
    else:
        made = RedisWorld(request.getfixturevalue("redis_url"))
    try:
        yield made
    finally:
        await made.aclose()


async def test_an_idle_worker_is_leased_at_once(world: World) -> None:
    await world.add(A)
    pool = await world.pool()
    lease = await pool.acquire(timeout_s=1)
    assert lease.url == A
    assert lease.waited_s < 1


async def test_a_leased_worker_is_never_leased_twice(world: World) -> None:
    await world.add(A)
    pool = await world.pool()
    await pool.acquire(timeout_s=1)
    with pytest.raises(NoWorker):
        await pool.acquire(timeout_s=0.2)


async def test_a_worker_whose_call_ended_is_leased_again(world: World) -> None:
    await world.add(A)
    pool = await world.pool()
    await world.finish(await pool.acquire(timeout_s=1))
    assert (await pool.acquire(timeout_s=1)).url == A


async def test_waiters_are_served_first_come_first_served(world: World) -> None:
    await world.add_busy("ws://10.0.0.9:22400")  # workers exist, none free: calls wait
    pool = await world.pool()
    order: list[int] = []

    async def call(n: int) -> Lease:
        lease = await pool.acquire(timeout_s=5)
        order.append(n)
        return lease

    waiters = []
    for n in range(3):
        waiters.append(asyncio.create_task(call(n)))
        await world.waiting(n + 1)
    for url in (A, B, C):
        await world.add(url)
        await asyncio.sleep(0.05)
    leases = await asyncio.gather(*waiters)
    assert order == [0, 1, 2]
    assert [lease.url for lease in leases] == [A, B, C]


async def test_a_worker_that_said_busy_is_passed_over_and_not_blamed(world: World) -> None:
    await world.add(A, B)
    pool = await world.pool()
    lease = await pool.acquire(timeout_s=1)
    assert lease.url == A
    nxt = await lease.next_after_busy()
    assert nxt.url == B
    assert lease.released
    assert world.unhealthy == []


async def test_a_worker_given_back_broken_is_reported(world: World) -> None:
    await world.add(A)
    pool = await world.pool()
    lease = await pool.acquire(timeout_s=1)
    lease.release(healthy=False, reason="worker_stalled")
    assert world.unhealthy == [(A, "worker_stalled")]


async def test_a_dead_worker_is_not_leased(world: World) -> None:
    await world.add(A)
    pool = await world.pool()
    await world.kill(A)
    with pytest.raises(NoWorker):
        await pool.acquire(timeout_s=0.2)


async def test_a_full_queue_is_refused_at_once(world: World) -> None:
    await world.add_busy("ws://10.0.0.9:22400")
    pool = await world.pool(max_queue=1)
    waiter = asyncio.create_task(pool.acquire(timeout_s=5))
    await world.waiting(1)
    with pytest.raises(QueueFull):
        await pool.acquire(timeout_s=5)
    await world.add(A)
    assert (await waiter).url == A


async def test_waiting_and_leasing_are_in_the_metrics(world: World) -> None:
    registry = CollectorRegistry()
    await world.add(A)
    pool = await world.pool(metrics=PoolMetrics(registry))
    lease = await pool.acquire(timeout_s=1)
    value: Callable[..., float | None] = registry.get_sample_value
    assert value("offhook_pool_workers", {"state": "busy"}) == 1
    assert value("offhook_pool_wait_seconds_count") == 1
    with pytest.raises(NoWorker):
        await pool.acquire(timeout_s=0.1)
    assert value("offhook_pool_fallbacks_total", {"reason": "no_worker"}) == 1
    await world.finish(lease)
    assert value("offhook_pool_workers", {"state": "busy"}) == 0
