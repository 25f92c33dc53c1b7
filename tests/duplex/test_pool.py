"""WorkerPool: FIFO fairness, exclusive leases, cancellation, health and metrics.

Tests synchronise on the pool's own state (`settle`) and on events, never on wall-clock
sleeps; `asyncio.sleep(0)` only yields one loop turn.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from agents.duplex.pool import (
    NoWorker,
    PoolMetrics,
    PoolWorkerState,
    QueueFull,
    WorkerPool,
    health_url,
)

A = "ws://10.0.0.1:22400"
B = "ws://10.0.0.2:22400"
C = "ws://10.0.0.3:22400"


async def settle(done: Callable[[], bool], turns: int = 1000) -> None:
    """Yield loop turns until `done()`; fails rather than hangs."""
    for _ in range(turns):
        if done():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never became true")


class FakeHealth:
    """A health check backed by a dict: url → up?"""

    def __init__(self, *urls: str) -> None:
        self.up = dict.fromkeys(urls, True)
        self.calls = 0
        self.called = asyncio.Event()

    async def __call__(self, url: str) -> dict[str, Any] | None:
        self.calls += 1
        self.called.set()
        return {"state": "idle", "backend": "fake"} if self.up[url] else None


async def ready(urls: list[str], **options: Any) -> WorkerPool:
    """A pool whose workers have all reported idle once (a pool leases nothing before)."""
    options.setdefault("health", FakeHealth(*urls))
    pool = WorkerPool(urls, **options)
    await pool.check_health()
    return pool


def state_of(pool: WorkerPool, url: str) -> PoolWorkerState:
    return next(w.state for w in pool.workers if w.url == url)


async def test_idle_worker_is_leased_at_once_and_marked_busy() -> None:
    pool = await ready([A])
    lease = await pool.acquire(timeout_s=1)
    assert lease.url == A
    assert state_of(pool, A) is PoolWorkerState.BUSY


async def test_release_returns_worker_to_idle() -> None:
    pool = await ready([A])
    lease = await pool.acquire(timeout_s=1)
    lease.release()
    assert state_of(pool, A) is PoolWorkerState.IDLE


async def test_lease_context_manager_releases() -> None:
    pool = await ready([A])
    async with await pool.acquire(timeout_s=1) as lease:
        assert state_of(pool, lease.url) is PoolWorkerState.BUSY
    assert lease.released
    assert state_of(pool, A) is PoolWorkerState.IDLE


async def test_unhealthy_release_marks_worker_error() -> None:
    pool = await ready([A])
    lease = await pool.acquire(timeout_s=1)
    lease.release(healthy=False)
    assert state_of(pool, A) is PoolWorkerState.ERROR


async def test_release_twice_is_harmless() -> None:
    pool = await ready([A, B])
    lease = await pool.acquire(timeout_s=1)
    lease.release()
    other = await pool.acquire(timeout_s=1)
    lease.release()
    assert state_of(pool, other.url) is PoolWorkerState.BUSY


async def test_waiters_are_served_in_arrival_order() -> None:
    pool = await ready([A, B])
    held = [await pool.acquire(timeout_s=1), await pool.acquire(timeout_s=1)]
    served: list[int] = []

    async def waiter(i: int) -> None:
        lease = await pool.acquire(timeout_s=5)
        served.append(i)
        lease.release()

    tasks = []
    for i in range(6):
        tasks.append(asyncio.create_task(waiter(i)))
        await settle(lambda n=i + 1: pool.snapshot()["queued"] == n)  # type: ignore[misc]
    for lease in held:
        lease.release()
    await asyncio.gather(*tasks)
    assert served == [0, 1, 2, 3, 4, 5]


async def test_each_release_serves_the_queue_head() -> None:
    pool = await ready([A, B])
    held = [await pool.acquire(timeout_s=1), await pool.acquire(timeout_s=1)]
    got: dict[int, asyncio.Future[str]] = {}
    done = asyncio.Event()

    async def waiter(i: int) -> None:
        lease = await pool.acquire(timeout_s=5)
        got[i].set_result(lease.url)
        await done.wait()
        lease.release()

    tasks = []
    for i in range(4):
        got[i] = asyncio.get_running_loop().create_future()
        tasks.append(asyncio.create_task(waiter(i)))
        await settle(lambda n=i + 1: pool.snapshot()["queued"] == n)  # type: ignore[misc]
    held[1].release()
    assert await got[0] == B
    held[0].release()
    assert await got[1] == A
    assert not got[2].done() and not got[3].done()
    done.set()
    await asyncio.gather(*tasks)


async def test_newcomer_does_not_jump_the_queue() -> None:
    pool = await ready([A])
    held = await pool.acquire(timeout_s=1)
    first = asyncio.create_task(pool.acquire(timeout_s=5))
    await settle(lambda: pool.snapshot()["queued"] == 1)
    held.release()
    second = asyncio.create_task(pool.acquire(timeout_s=5))
    lease = await first
    await settle(lambda: pool.snapshot()["queued"] == 1)
    assert not second.done()
    lease.release()
    (await second).release()


async def test_cancelled_waiter_is_skipped() -> None:
    pool = await ready([A])
    held = await pool.acquire(timeout_s=1)
    first = asyncio.create_task(pool.acquire(timeout_s=5))
    await settle(lambda: pool.snapshot()["queued"] == 1)
    doomed = asyncio.create_task(pool.acquire(timeout_s=5))
    await settle(lambda: pool.snapshot()["queued"] == 2)
    last = asyncio.create_task(pool.acquire(timeout_s=5))
    await settle(lambda: pool.snapshot()["queued"] == 3)
    doomed.cancel()
    with pytest.raises(asyncio.CancelledError):
        await doomed
    assert pool.snapshot()["queued"] == 2
    held.release()
    (await first).release()
    lease = await last
    assert lease.url == A
    lease.release()
    assert pool.snapshot()["idle"] == 1


async def test_worker_assigned_to_a_waiter_cancelled_in_the_same_turn_goes_back() -> None:
    pool = await ready([A])
    held = await pool.acquire(timeout_s=1)
    doomed = asyncio.create_task(pool.acquire(timeout_s=5))
    await settle(lambda: pool.snapshot()["queued"] == 1)
    held.release()  # dispatch resolves doomed's future with A ...
    doomed.cancel()  # ... and the waiter is cancelled before it can resume
    with pytest.raises(asyncio.CancelledError):
        await doomed
    assert state_of(pool, A) is PoolWorkerState.IDLE
    (await pool.acquire(timeout_s=1)).release()


async def test_worker_assigned_to_a_cancelled_waiter_goes_to_the_next() -> None:
    pool = await ready([A])
    held = await pool.acquire(timeout_s=1)
    doomed = asyncio.create_task(pool.acquire(timeout_s=5))
    await settle(lambda: pool.snapshot()["queued"] == 1)
    nxt = asyncio.create_task(pool.acquire(timeout_s=5))
    await settle(lambda: pool.snapshot()["queued"] == 2)
    held.release()
    doomed.cancel()
    with pytest.raises(asyncio.CancelledError):
        await doomed
    lease = await nxt
    assert lease.url == A


async def test_leases_are_exclusive_under_random_load() -> None:
    pool = await ready([A, B, C], max_queue=50)
    rng = random.Random(1234)
    in_use: set[str] = set()
    peak = 0

    async def user() -> None:
        nonlocal peak
        async with await pool.acquire(timeout_s=10) as lease:
            assert lease.url not in in_use, f"{lease.url} leased twice"
            in_use.add(lease.url)
            peak = max(peak, len(in_use))
            for _ in range(rng.randint(0, 5)):
                await asyncio.sleep(0)
            in_use.discard(lease.url)

    await asyncio.gather(*(user() for _ in range(50)))
    assert peak == 3
    assert pool.snapshot()["idle"] == 3
    assert sum(w.sessions for w in pool.workers) == 50


async def test_queue_full_is_raised_at_once() -> None:
    metrics = PoolMetrics(CollectorRegistry())
    pool = await ready([A], max_queue=2, metrics=metrics)
    await pool.acquire(timeout_s=1)
    waiters = [asyncio.create_task(pool.acquire(timeout_s=5)) for _ in range(2)]
    await settle(lambda: pool.snapshot()["queued"] == 2)
    with pytest.raises(QueueFull):
        await pool.acquire(timeout_s=5)
    assert metrics.fallbacks.labels(reason="queue_full")._value.get() == 1
    for task in waiters:
        task.cancel()
    await asyncio.gather(*waiters, return_exceptions=True)


async def test_no_worker_after_timeout_and_waiter_removed() -> None:
    metrics = PoolMetrics(CollectorRegistry())
    pool = await ready([A], metrics=metrics)
    held = await pool.acquire(timeout_s=1)
    with pytest.raises(NoWorker):
        await pool.acquire(timeout_s=0.01)
    assert pool.snapshot()["queued"] == 0
    assert metrics.fallbacks.labels(reason="no_worker")._value.get() == 1
    held.release()
    assert state_of(pool, A) is PoolWorkerState.IDLE


async def test_failed_health_check_marks_idle_worker_error() -> None:
    health = FakeHealth(A, B)
    pool = WorkerPool([A, B], health=health)
    health.up[A] = False
    await pool.check_health()
    assert state_of(pool, A) is PoolWorkerState.ERROR
    lease = await pool.acquire(timeout_s=1)
    assert lease.url == B


async def test_recovered_worker_serves_the_queued_waiter() -> None:
    health = FakeHealth(A)
    pool = WorkerPool([A], health=health)
    health.up[A] = False
    await pool.check_health()
    waiter = asyncio.create_task(pool.acquire(timeout_s=5))
    await settle(lambda: pool.snapshot()["queued"] == 1)
    health.up[A] = True
    await pool.check_health()
    lease = await waiter
    assert lease.url == A
    assert pool.workers[0].consecutive_failures == 0
    assert pool.workers[0].backend == "fake"


async def test_busy_worker_failing_health_stays_busy_until_released() -> None:
    health = FakeHealth(A)
    pool = await ready([A], health=health)
    lease = await pool.acquire(timeout_s=1)
    health.up[A] = False
    await pool.check_health()
    assert state_of(pool, A) is PoolWorkerState.BUSY
    assert not lease.worker_alive
    lease.release()
    assert state_of(pool, A) is PoolWorkerState.ERROR


async def test_raising_health_check_counts_as_failure() -> None:
    async def broken(url: str) -> dict[str, Any] | None:
        raise ConnectionError(url)

    pool = WorkerPool([A], health=broken)
    await pool.check_health()
    assert state_of(pool, A) is PoolWorkerState.ERROR
    assert pool.workers[0].consecutive_failures == 1


async def test_start_runs_health_checks_and_aclose_stops_them() -> None:
    health = FakeHealth(A)
    pool = WorkerPool([A], health=health, health_interval_s=60)
    await pool.start()
    await health.called.wait()
    await pool.aclose()
    assert health.calls == 1
    assert pool._health_task is None


async def test_aclose_turns_waiters_away() -> None:
    pool = await ready([A])
    await pool.acquire(timeout_s=1)
    waiter = asyncio.create_task(pool.acquire(timeout_s=5))
    await settle(lambda: pool.snapshot()["queued"] == 1)
    await pool.aclose()
    with pytest.raises(NoWorker):
        await waiter


async def test_snapshot_counts_states_and_queue() -> None:
    health = FakeHealth(A, B, C)
    pool = WorkerPool([A, B, C], health=health)
    health.up[C] = False
    await pool.check_health()
    await pool.acquire(timeout_s=1)
    await pool.acquire(timeout_s=1)
    waiter = asyncio.create_task(pool.acquire(timeout_s=5))
    await settle(lambda: pool.snapshot()["queued"] == 1)
    snap = pool.snapshot()
    assert (snap["idle"], snap["busy"], snap["error"], snap["queued"]) == (0, 2, 1, 1)
    assert [w["state"] for w in snap["workers"]] == ["busy", "busy", "error"]
    waiter.cancel()
    await asyncio.gather(waiter, return_exceptions=True)


async def test_metrics_follow_states_queue_and_waits() -> None:
    registry = CollectorRegistry()
    pool = await ready([A, B], metrics=PoolMetrics(registry))
    await pool.acquire(timeout_s=1)
    await pool.acquire(timeout_s=1)
    waiter = asyncio.create_task(pool.acquire(timeout_s=5))
    await settle(lambda: pool.snapshot()["queued"] == 1)

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert value("offhook_pool_workers", state="busy") == 2
    assert value("offhook_pool_workers", state="idle") == 0
    assert value("offhook_pool_queue_length") == 1
    assert value("offhook_pool_wait_seconds_count") == 2
    assert value("offhook_pool_fallbacks_total", reason="worker_died") == 0
    waiter.cancel()
    await asyncio.gather(waiter, return_exceptions=True)
    assert value("offhook_pool_queue_length") == 0


def test_health_url_maps_websocket_to_http() -> None:
    assert health_url("ws://h:22400") == "http://h:22400/health"
    assert health_url("wss://h:22400/x") == "https://h:22400/health"


def test_pool_rejects_duplicate_urls() -> None:
    with pytest.raises(ValueError, match="duplicate"):
        WorkerPool([A, A])


class ReportedHealth:
    """Health answers as a worker gives them: 200 with the worker's own state."""

    def __init__(self, **states: str) -> None:
        self.states = {url: states.get(name, "idle") for name, url in (("A", A), ("B", B))}

    async def __call__(self, url: str) -> dict[str, Any] | None:
        return {"state": self.states[url], "backend": "minicpmo"}


async def test_a_new_pool_leases_nothing_before_a_worker_says_it_is_idle() -> None:
    pool = WorkerPool([A], health=ReportedHealth())
    assert state_of(pool, A) is PoolWorkerState.STARTING
    with pytest.raises(NoWorker):
        await pool.acquire(timeout_s=0.01)
    waiter = asyncio.create_task(pool.acquire(timeout_s=5))
    await settle(lambda: pool.snapshot()["queued"] == 1)
    await pool.check_health()  # the worker is ready: the waiting call gets it
    assert (await waiter).url == A


@pytest.mark.parametrize("reported", ["loading", "error", "duplex_active", "duplex_paused", ""])
async def test_the_pool_never_leases_a_worker_that_does_not_say_idle(reported: str) -> None:
    health = ReportedHealth(A=reported)
    pool = WorkerPool([A, B], health=health)
    await pool.check_health()
    assert state_of(pool, A) is not PoolWorkerState.IDLE
    leases = [await pool.acquire(timeout_s=1)]
    assert leases[0].url == B
    with pytest.raises(NoWorker):
        await pool.acquire(timeout_s=0.01)
    health.states[A] = "idle"
    await pool.check_health()
    assert (await pool.acquire(timeout_s=1)).url == A


async def test_an_idle_worker_that_reports_loading_again_is_taken_out() -> None:
    """A worker restarted behind the pool's back (a respawn) loads again: wait for it."""
    health = ReportedHealth()
    pool = WorkerPool([A], health=health)
    await pool.check_health()
    health.states[A] = "loading"
    await pool.check_health()
    assert state_of(pool, A) is PoolWorkerState.STARTING
    assert pool.snapshot()["workers"][0]["reported"] == "loading"


async def test_a_broken_lease_is_reported_with_its_reason() -> None:
    reports: list[tuple[str, str]] = []
    pool = await ready([A], on_unhealthy=lambda url, why: reports.append((url, why)))
    (await pool.acquire(timeout_s=1)).release(healthy=False, reason="worker_stalled")
    assert reports == [(A, "worker_stalled")]
    lease = None
    with pytest.raises(NoWorker):
        lease = await pool.acquire(timeout_s=0.01)
    assert lease is None
