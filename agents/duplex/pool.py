"""The gateway's pool of duplex workers: exclusive leases handed out in FIFO order.

A call asks for a worker with `WorkerPool.acquire`. When a worker is idle and nobody is
queued it is leased at once; otherwise the caller waits on a future in a FIFO queue
(bounded: `QueueFull`; timed: `NoWorker`). A worker is marked BUSY the moment it is
assigned, so it can never be handed out twice.

Every event that may free capacity — a lease released, a waiter cancelled, a worker
recovering its health — goes through the single `WorkerPool._dispatch`, which hands idle
workers to the queue's head. Having one place that assigns workers is what keeps the
ordering fair and the leasing exclusive without locks.

Worker states as the gateway sees them:

    STARTING ──health: idle──▶ IDLE ──assign──▶ BUSY ──release(healthy)──▶ IDLE
       ▲  │                   │  ▲                │
       │  └─health failed──▶  │  └─health: idle── ERROR ◀──release(unhealthy), or
       │                      ▼                        health failed while BUSY
       └──health: loading, busy elsewhere, or no state; error ──▶ ERROR

A worker is leased only after its own /health said `"state": "idle"`: a worker that is
still loading, whose backend failed, or that serves someone else's session is passed
over (STARTING or ERROR) until it says idle again. Every worker starts in STARTING, so
the pool waits for readiness rather than assuming it. `on_unhealthy` hears of every
lease given back broken (stalled, dead, broke protocol): a supervisor of local worker
processes kills and respawns those.

A worker that closes the session with 1013 ("busy": someone else's session holds it) is
healthy: `Lease.next_after_busy` gives it back as STARTING, never to `on_unhealthy`, and
leases the next one. With many gateways, `agents.duplex.shared_pool.SharedWorkerPool`
does the same over a Redis registry, behind the same `DuplexPool` interface.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from types import TracebackType
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit, urlunsplit

import httpx
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

log = logging.getLogger(__name__)

HealthCheck = Callable[[str], Awaitable[dict[str, Any] | None]]
FallbackReason = Literal[
    "no_worker", "queue_full", "worker_died", "worker_stalled", "worker_error", "worker_busy"
]
FALLBACK_REASONS: tuple[FallbackReason, ...] = (
    "no_worker",
    "queue_full",
    "worker_died",
    "worker_stalled",
    "worker_error",
    "worker_busy",
)
# A worker that said busy (1013) is passed over for the next one at most this many times
# per call: each hop is a connect attempt, and the caller is waiting.
MAX_BUSY_HOPS = 3

# Seconds. Waiting for a worker is short when the pool has room and long when it does not;
# a unit takes a fraction of its own length (1 s) when the worker keeps up.
_WAIT_BUCKETS = (0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30)
_UNIT_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 1.0, 1.25, 1.5, 2, 3, 5)


class PoolWorkerState(Enum):
    STARTING = "starting"  # not (yet, or again) reported idle by its own health check
    IDLE = "idle"
    BUSY = "busy"
    ERROR = "error"


class QueueFull(Exception):
    """`max_queue` callers are already waiting; the caller should fall back at once."""


class NoWorker(Exception):
    """No worker became free within the caller's timeout (or the pool closed)."""


@dataclass(slots=True)
class WorkerInfo:
    """One worker as the gateway sees it."""

    url: str  # ws://host:22400
    state: PoolWorkerState = PoolWorkerState.STARTING
    reported: str = ""  # the state the worker's last health answer gave
    backend: str = ""
    last_health: float | None = None  # time.time() of the last passing health check
    sessions: int = 0  # leases handed out over the worker's life
    consecutive_failures: int = 0
    # The latest health check passed. Tracked apart from `state` because a BUSY worker
    # that fails its check stays BUSY until its lease ends (the holder decides what to do).
    alive: bool = True


class PoolMetrics:
    """The pool's Prometheus metrics, on a registry the app owns."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.workers = Gauge(
            "offhook_pool_workers", "Duplex workers, by state.", ["state"], registry=r
        )
        self.queue_length = Gauge(
            "offhook_pool_queue_length", "Calls waiting for a duplex worker.", registry=r
        )
        self.wait_seconds = Histogram(
            "offhook_pool_wait_seconds",
            "Time from asking for a worker to getting one.",
            buckets=_WAIT_BUCKETS,
            registry=r,
        )
        self.fallbacks = Counter(
            "offhook_pool_fallbacks",
            "Calls that fell back from the duplex agent, by reason.",
            ["reason"],
            registry=r,
        )
        self.unit_seconds = Histogram(
            "offhook_pool_unit_seconds",
            "Time from sending a unit to its result.",
            buckets=_UNIT_BUCKETS,
            registry=r,
        )
        self.registry_errors = Counter(
            "offhook_pool_registry_errors",
            "Redis worker-registry operations that failed (REDIS_URL); calls fell back "
            "to the cascade meanwhile.",
            ["operation"],
            registry=r,
        )
        # Export every label at zero so dashboards see the series before the first event.
        for state in PoolWorkerState:
            self.workers.labels(state=state.value)
        for reason in FALLBACK_REASONS:
            self.fallbacks.labels(reason=reason)

    def fallback(self, reason: FallbackReason) -> None:
        self.fallbacks.labels(reason=reason).inc()


def health_url(worker_url: str) -> str:
    """ws://host:port[/...] → http://host:port/health (wss → https)."""
    parts = urlsplit(worker_url)
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
    return urlunsplit((scheme, parts.netloc, "/health", "", ""))


async def http_health(worker_url: str, *, timeout_s: float = 2.0) -> dict[str, Any] | None:
    """GET the worker's /health; its JSON object, or None when it does not answer well."""
    try:
        async with httpx.AsyncClient(timeout=timeout_s) as client:
            response = await client.get(health_url(worker_url))
            response.raise_for_status()
            body = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        # Debug: a worker still starting does not answer yet. Its callers say when an
        # unanswered check matters (the pool's "failed its health check", the local
        # supervisor's stall), so a logged failure is always a real one.
        log.debug("health check of %s failed: %s", worker_url, exc)
        return None
    return body if isinstance(body, dict) else None


class LeaseOwner(Protocol):
    """What a `Lease` needs of the pool that handed it out."""

    async def acquire(self, timeout_s: float) -> Lease: ...

    def _release(self, worker: WorkerInfo, *, healthy: bool, reason: str = "") -> None: ...

    def _release_busy(self, worker: WorkerInfo) -> None: ...


class DuplexPool(Protocol):
    """What a call needs of a pool: `WorkerPool` (a static list) or `SharedWorkerPool`
    (the Redis registry shared by every gateway)."""

    @property
    def metrics(self) -> PoolMetrics | None: ...

    async def acquire(self, timeout_s: float) -> Lease: ...

    async def start(self) -> None: ...

    async def aclose(self) -> None: ...


class Lease:
    """Exclusive use of one worker until `release`; also an async context manager.

    Leaving the `async with` block releases the worker as healthy unless the holder
    already released it — call `release(healthy=False)` inside the block to report a
    broken worker. `release` is synchronous so cleanup cannot be interrupted by
    cancellation halfway.
    """

    def __init__(
        self, pool: LeaseOwner, worker: WorkerInfo, waited_s: float, *, timeout_s: float = 0.0
    ) -> None:
        self._pool = pool
        self.worker = worker
        self.waited_s = waited_s
        self.timeout_s = timeout_s  # how long the holder was willing to wait for a worker
        self._released = False

    @property
    def url(self) -> str:
        return self.worker.url

    @property
    def released(self) -> bool:
        return self._released

    @property
    def worker_alive(self) -> bool:
        """False once a health check failed during this lease."""
        return self.worker.alive

    def release(self, healthy: bool = True, reason: str = "") -> None:
        """Give the worker back (ERROR instead of IDLE when unhealthy). Idempotent.

        `reason`: why an unhealthy worker is given back, for `on_unhealthy`.
        """
        if self._released:
            return
        self._released = True
        self._pool._release(self.worker, healthy=healthy, reason=reason)

    async def next_after_busy(self) -> Lease:
        """The worker closed our session with 1013 ("busy"): it is serving someone
        else, which is no fault of its own. Give it back as busy (leased again once it
        says idle; no `on_unhealthy`, so no supervisor kills it) and lease the next
        worker, waiting as long as this lease's holder would. Raises `NoWorker` or
        `QueueFull` as `acquire` does."""
        self.release_busy()
        return await self._pool.acquire(self.timeout_s)

    def release_busy(self) -> None:
        """Give back a worker that said busy (1013): healthy, but not free. Idempotent."""
        if self._released:
            return
        self._released = True
        self._pool._release_busy(self.worker)

    async def __aenter__(self) -> Lease:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


class WorkerPool:
    def __init__(
        self,
        urls: Sequence[str],
        *,
        max_queue: int = 16,
        health_interval_s: float = 5.0,
        health: HealthCheck | None = None,
        metrics: PoolMetrics | None = None,
        on_unhealthy: Callable[[str, str], None] | None = None,
    ) -> None:
        if not urls:
            raise ValueError("a worker pool needs at least one worker url")
        if len(set(urls)) != len(urls):
            raise ValueError(f"duplicate worker urls: {list(urls)}")
        self.workers: tuple[WorkerInfo, ...] = tuple(WorkerInfo(url=url) for url in urls)
        self._max_queue = max_queue
        self._health_interval_s = health_interval_s
        self._health = health if health is not None else http_health
        self._metrics = metrics
        self.metrics = metrics  # the gateway observes unit times and its fallbacks here
        # Insertion-ordered so the head is the longest waiter; keyed so a waiter that gives
        # up removes itself in O(1).
        self._waiters: OrderedDict[int, asyncio.Future[WorkerInfo]] = OrderedDict()
        self._ids = itertools.count()
        self._leased: set[str] = set()
        self._health_task: asyncio.Task[None] | None = None
        self._closed = False
        self._on_unhealthy = on_unhealthy
        self._publish()

    # -- leasing -----------------------------------------------------------------------

    async def acquire(self, timeout_s: float) -> Lease:
        """Lease a worker, waiting in FIFO order up to `timeout_s`.

        Raises `QueueFull` at once when `max_queue` callers already wait, and `NoWorker`
        when the timeout passes. A cancelled or timed-out waiter leaves the queue, and a
        worker assigned to it at that same moment goes back to the pool.
        """
        if self._closed:
            raise NoWorker("the worker pool is closed")
        loop = asyncio.get_running_loop()
        started = loop.time()
        if not self._queued():
            worker = self._take_idle()
            if worker is not None:
                return self._lease(worker, loop.time() - started, timeout_s)
        if self._queued() >= self._max_queue:
            self._fallback("queue_full")
            raise QueueFull(f"{self._max_queue} callers are already waiting for a worker")

        future: asyncio.Future[WorkerInfo] = loop.create_future()
        key = next(self._ids)
        self._waiters[key] = future
        self._publish()
        try:
            async with asyncio.timeout(timeout_s):
                worker = await future
        except BaseException as exc:
            self._waiters.pop(key, None)
            if future.done() and not future.cancelled() and future.exception() is None:
                # Dispatch assigned us a worker in the same loop turn that we gave up.
                self._return(future.result())
            else:
                self._dispatch()
            if isinstance(exc, TimeoutError):
                self._fallback("no_worker")
                raise NoWorker(f"no worker became free within {timeout_s:g} s") from None
            raise
        return self._lease(worker, loop.time() - started, timeout_s)

    def snapshot(self) -> dict[str, Any]:
        counts = {state.value: 0 for state in PoolWorkerState}
        for worker in self.workers:
            counts[worker.state.value] += 1
        return {
            **counts,
            "queued": self._queued(),
            "workers": [
                {
                    "url": w.url,
                    "state": w.state.value,
                    "backend": w.backend,
                    "reported": w.reported,
                    "alive": w.alive,
                    "sessions": w.sessions,
                    "consecutive_failures": w.consecutive_failures,
                    "last_health": w.last_health,
                }
                for w in self.workers
            ],
        }

    def _queued(self) -> int:
        return sum(1 for future in self._waiters.values() if not future.done())

    def _take_idle(self) -> WorkerInfo | None:
        """Mark the first idle worker BUSY and return it."""
        for worker in self.workers:
            if worker.state is PoolWorkerState.IDLE:
                assert worker.url not in self._leased, f"{worker.url} is IDLE but leased"
                worker.state = PoolWorkerState.BUSY
                self._leased.add(worker.url)
                worker.sessions += 1
                return worker
        return None

    def _lease(self, worker: WorkerInfo, waited_s: float, timeout_s: float) -> Lease:
        if self._metrics is not None:
            self._metrics.wait_seconds.observe(waited_s)
        self._publish()
        return Lease(self, worker, waited_s, timeout_s=timeout_s)

    def _release(self, worker: WorkerInfo, *, healthy: bool, reason: str = "") -> None:
        assert worker.url in self._leased, f"{worker.url} released but not leased"
        self._leased.discard(worker.url)
        if healthy and worker.alive:
            worker.state = PoolWorkerState.IDLE
        else:
            # Held out until a health check says idle again.
            worker.state = PoolWorkerState.ERROR
            worker.alive = False
            if not healthy and self._on_unhealthy is not None:
                try:
                    self._on_unhealthy(worker.url, reason or "unhealthy")
                except Exception:
                    log.exception("on_unhealthy failed for %s", worker.url)
        self._dispatch()

    def _release_busy(self, worker: WorkerInfo) -> None:
        """A worker that refused our session as busy (1013): not ours to use, not broken.
        STARTING until its health check says idle again, as for a worker found busy by
        that check."""
        assert worker.url in self._leased, f"{worker.url} released but not leased"
        self._leased.discard(worker.url)
        log.info("worker %s is busy elsewhere: passed over until it says idle", worker.url)
        worker.state = PoolWorkerState.STARTING
        self._dispatch()

    def _return(self, worker: WorkerInfo) -> None:
        """Undo an assignment nobody took up (the waiter was cancelled)."""
        worker.sessions -= 1
        self._release(worker, healthy=True)

    def _dispatch(self) -> None:
        """The one place that hands idle workers to waiters, head of the queue first."""
        while self._waiters:
            key, future = next(iter(self._waiters.items()))
            if future.done():  # cancelled; its task removes it too, but do not wait for that
                del self._waiters[key]
                continue
            worker = self._take_idle()
            if worker is None:
                break
            del self._waiters[key]
            future.set_result(worker)
        self._publish()

    # -- health ------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the periodic health checks (the first runs at once)."""
        if self._closed:
            raise RuntimeError("the worker pool is closed")
        if self._health_task is None:
            self._health_task = asyncio.create_task(self._health_loop(), name="pool-health")

    async def aclose(self) -> None:
        """Stop health checks and turn every waiter away with `NoWorker`."""
        self._closed = True
        task, self._health_task = self._health_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for future in self._waiters.values():
            if not future.done():
                future.set_exception(NoWorker("the worker pool closed"))
        self._waiters.clear()
        self._publish()

    async def __aenter__(self) -> WorkerPool:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _health_loop(self) -> None:
        while True:
            await self.check_health()
            await asyncio.sleep(self._health_interval_s)

    async def check_health(self) -> None:
        """Ask every worker once, concurrently, and apply the answers."""
        answers = await asyncio.gather(*(self._ask(w.url) for w in self.workers))
        for worker, answer in zip(self.workers, answers, strict=True):
            if answer is None:
                self._health_failed(worker)
            else:
                self._health_passed(worker, answer)
        self._dispatch()

    async def _ask(self, url: str) -> dict[str, Any] | None:
        # An injected check that raises counts as a failed check, not a dead health loop.
        try:
            return await self._health(url)
        except Exception as exc:
            log.warning("health check of %s raised: %r", url, exc)
            return None

    def _health_passed(self, worker: WorkerInfo, answer: dict[str, Any]) -> None:
        reported = answer.get("state")
        worker.reported = reported if isinstance(reported, str) else ""
        backend = answer.get("backend")
        if isinstance(backend, str):
            worker.backend = backend
        if reported == "error":  # its backend never loaded: it answers, but cannot serve
            self._health_failed(worker)
            return
        worker.alive = True
        worker.consecutive_failures = 0
        worker.last_health = time.time()
        if worker.state is PoolWorkerState.BUSY:
            return  # our own lease: its holder decides
        if reported == "idle":
            if worker.state is not PoolWorkerState.IDLE:
                log.info("worker %s is ready", worker.url)
            worker.state = PoolWorkerState.IDLE
        else:
            # Loading, or serving a session that is not ours (a stale one, another
            # gateway's), or an answer without a state: not leasable yet.
            worker.state = PoolWorkerState.STARTING

    def _health_failed(self, worker: WorkerInfo) -> None:
        worker.alive = False
        worker.consecutive_failures += 1
        if worker.state in (PoolWorkerState.IDLE, PoolWorkerState.STARTING):
            log.warning("worker %s failed its health check", worker.url)
            worker.state = PoolWorkerState.ERROR
        # A BUSY worker stays BUSY: its lease holder sees `worker_alive` and `_release`
        # moves it to ERROR.

    # -- metrics -----------------------------------------------------------------------

    def _fallback(self, reason: FallbackReason) -> None:
        if self._metrics is not None:
            self._metrics.fallback(reason)

    def _publish(self) -> None:
        if self._metrics is None:
            return
        for state in PoolWorkerState:
            count = sum(1 for w in self.workers if w.state is state)
            self._metrics.workers.labels(state=state.value).set(count)
        self._metrics.queue_length.set(self._queued())
