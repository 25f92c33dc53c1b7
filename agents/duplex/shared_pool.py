"""The gateway's side of the worker registry: leases from workers every gateway shares.

`SharedWorkerPool` is what a gateway with REDIS_URL (and no DUPLEX_WORKERS) uses instead
of `WorkerPool`, behind the same `DuplexPool` interface. The registry's keys are in
agents.duplex.registry; here:

- **One FIFO queue for all gateways.** A call waits with `BLPOP PREFIX:idle`; Redis
  serves the clients blocked on a list longest-waiter first, whichever gateway they
  came from, and hands each pushed worker to exactly one of them.
- **Exactly one call per worker.** A popped worker is leased only by an atomic script:
  its heartbeat says idle, and `SET PREFIX:lease:URL TOKEN NX PX ttl` succeeds. The
  lease is renewed every third of its TTL while the call lasts and deleted (only if
  still ours) when it ends. The worker also refuses a second session with 1013.
- **A dead worker is never leased.** A popped worker whose heartbeat key has expired
  is dropped, not pushed back; it returns only by registering again.
- **A worker that says busy (1013)** is given back without blame (`_release_busy`),
  and the call takes the next one (agents.duplex.gateway); `on_unhealthy` hears only
  of workers that broke a call.
- **Redis failing never stalls a call.** Every command has a deadline; an error is
  logged (once per outage), counted in `offhook_pool_registry_errors_total`, and the
  call goes to the cascade at once (`NoWorker`). Calls already on a worker go on: their
  audio never passes through Redis, and a lease that cannot be renewed is only a key.
- **A cancelled wait stays cancelled.** redis-py sends every command under
  `asyncio.wait_for`, which on Python 3.11 loses a cancellation that arrives in the loop
  turn the send finishes in (CPython gh-86296). A call that ended while it leased then
  went on to the cascade with nobody left to stop it. `acquire` checks its task's
  `cancelling()` after each command and raises `CancelledError`, never `NoWorker`, and
  gives back a lease it took meanwhile.

Metrics are this gateway's own share, so they add up across gateways: its leases
(`offhook_pool_workers{state="busy"}`) and its waiting calls; the registry's idle
workers are not counted here, since every gateway would count the same ones.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from types import TracebackType
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from agents.bounded_stop import cancel_within, finish_within
from agents.duplex.pool import (
    FallbackReason,
    Lease,
    NoWorker,
    PoolMetrics,
    PoolWorkerState,
    QueueFull,
    WorkerInfo,
)
from agents.duplex.registry import (
    COMMAND_TIMEOUT_S,
    DEFAULT_PREFIX,
    HEARTBEAT_TTL_S,
    IDLE,
    LIVE_WORKERS_LUA,
    RegistryKeys,
)

log = logging.getLogger(__name__)

LEASE_TTL_S = 15.0
HEARTBEAT_TTL_MS = int(HEARTBEAT_TTL_S * 1000)
# BLPOP's timeout 0 means "forever": a wait is never shorter than this.
_MIN_BLOCK_S = 0.01

# KEYS: worker hash, lease. ARGV: token, ttl_ms. 1: leased; 0: dead, not idle, or taken.
LEASE_LUA = """
if redis.call('HGET', KEYS[1], 'state') ~= ARGV[3] then return 0 end
if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
return 0
"""
# KEYS: lease, worker hash. ARGV: token, ttl_ms. 1: renewed (2: and the worker is gone).
RENEW_LUA = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if redis.call('EXISTS', KEYS[2]) == 0 then return 2 end
return 1
"""
# KEYS: lease. ARGV: token. Compare-and-delete: never end another gateway's lease.
RELEASE_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

RedisFailure = (RedisError, OSError, TimeoutError)


class _CancelWatch:
    """Whether the current task was asked to stop since this was made, though the
    CancelledError never reached us (lost inside redis-py's `asyncio.wait_for` on Python
    3.11): `Task.cancel` counts every request in `cancelling()`, and only an `uncancel`
    (asyncio.timeout's, when it turns its own cancellation into TimeoutError) takes one
    back."""

    def __init__(self) -> None:
        self._task = asyncio.current_task()
        self._before = self._task.cancelling() if self._task is not None else 0

    def requested(self) -> bool:
        return self._task is not None and self._task.cancelling() > self._before

    def check(self) -> None:
        """Raise the cancellation that was lost, if one was."""
        if self.requested():
            raise asyncio.CancelledError


class SharedWorkerPool:
    def __init__(
        self,
        redis: Redis,
        *,
        gateway_id: str = "",
        prefix: str = DEFAULT_PREFIX,
        max_queue: int = 16,
        metrics: PoolMetrics | None = None,
        lease_ttl_s: float = LEASE_TTL_S,
        on_unhealthy: Callable[[str, str], None] | None = None,
    ) -> None:
        """`redis`: the pool's own client (blocking waits hold a connection each); the
        pool closes it in `aclose`."""
        self.redis = redis
        self.keys = RegistryKeys(prefix)
        self.gateway_id = gateway_id or uuid.uuid4().hex[:8]
        self.metrics = metrics
        self._max_queue = max_queue
        self._lease_ttl_ms = int(lease_ttl_s * 1000)
        self._renew_every_s = lease_ttl_s / 3
        self._on_unhealthy = on_unhealthy
        self._lease_script = redis.register_script(LEASE_LUA)
        self._renew_script = redis.register_script(RENEW_LUA)
        self._release_script = redis.register_script(RELEASE_LUA)
        self._live_script = redis.register_script(LIVE_WORKERS_LUA)
        self._held: dict[str, tuple[WorkerInfo, str]] = {}  # url → (worker, lease token)
        self._waiting = 0
        self._renewer: asyncio.Task[None] | None = None
        self._releases: set[asyncio.Task[None]] = set()
        self._closed = False
        self._failing = False
        self._publish()

    # -- leasing -----------------------------------------------------------------------

    async def acquire(self, timeout_s: float) -> Lease:
        """Lease a registered idle worker, in FIFO order across every gateway, within
        `timeout_s`. Raises `QueueFull` at once when `max_queue` calls of this gateway
        already wait, and `NoWorker` at the timeout or when Redis fails."""
        if self._closed:
            raise NoWorker("the worker pool is closed")
        if self._waiting >= self._max_queue:
            self._fallback("queue_full")
            raise QueueFull(f"{self._max_queue} callers are already waiting for a worker")
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + timeout_s
        stop = _CancelWatch()
        self._waiting += 1
        self._publish()
        try:
            # A cluster with no duplex workers at all (cascade only) must not make every
            # call wait DUPLEX_WAIT_MS for one: no live heartbeat, no wait.
            registered = await self._any_registered()
            stop.check()
            if not registered:
                self._ok()
                self._fallback("no_worker")
                raise NoWorker("no duplex worker is registered")
            while (remaining := deadline - loop.time()) > 0:
                url = await self._pop(remaining)
                stop.check()
                if url is None:
                    break
                token = f"{self.gateway_id}:{uuid.uuid4().hex}"
                if await self._take(url, token):
                    self._ok()
                    lease = self._lease(url, token, loop.time() - started, timeout_s)
                    if stop.requested():
                        lease.release()
                        raise asyncio.CancelledError
                    return lease
                stop.check()
                # Dead (its heartbeat expired), no longer idle, or leased already: never
                # pushed back; a live worker offers itself again when it is idle.
                log.info("worker %s was offered but is not leasable: passed over", url)
        except RedisFailure as exc:
            self._error("acquire", exc)
            stop.check()  # the caller is gone: no fallback to serve it with
            self._fallback("no_worker")
            raise NoWorker(f"the worker registry is unavailable: {exc!r}") from None
        finally:
            self._waiting -= 1
            self._publish()
        self._ok()
        self._fallback("no_worker")
        raise NoWorker(f"no worker became free within {timeout_s:g} s")

    async def _any_registered(self) -> bool:
        async with asyncio.timeout(COMMAND_TIMEOUT_S):
            live = await self._live_script(keys=[self.keys.workers], args=[HEARTBEAT_TTL_MS])
        return bool(live)

    async def _pop(self, wait_s: float) -> str | None:
        block_s = max(wait_s, _MIN_BLOCK_S)
        # Redis ends the wait itself (so a popped worker is never lost to our own
        # timeout); ours is only against a Redis that stopped answering.
        async with asyncio.timeout(block_s + COMMAND_TIMEOUT_S):
            popped = await self.redis.blpop([self.keys.idle], timeout=round(block_s, 3))
        if popped is None:
            return None
        return str(popped[1])

    async def _take(self, url: str, token: str) -> bool:
        async with asyncio.timeout(COMMAND_TIMEOUT_S):
            taken = await self._lease_script(
                keys=[self.keys.worker(url), self.keys.lease(url)],
                args=[token, self._lease_ttl_ms, IDLE],
            )
        return bool(taken)

    def _lease(self, url: str, token: str, waited_s: float, timeout_s: float) -> Lease:
        worker = WorkerInfo(url=url, state=PoolWorkerState.BUSY, reported=IDLE, sessions=1)
        self._held[url] = (worker, token)
        if self.metrics is not None:
            self.metrics.wait_seconds.observe(waited_s)
        self._publish()
        return Lease(self, worker, waited_s, timeout_s=timeout_s)

    def _release(self, worker: WorkerInfo, *, healthy: bool, reason: str = "") -> None:
        self._forget(worker)
        if not healthy and self._on_unhealthy is not None:
            try:
                self._on_unhealthy(worker.url, reason or "unhealthy")
            except Exception:
                log.exception("on_unhealthy failed for %s", worker.url)

    def _release_busy(self, worker: WorkerInfo) -> None:
        log.info("worker %s is busy elsewhere: taking the next one", worker.url)
        self._forget(worker)

    def _forget(self, worker: WorkerInfo) -> None:
        """End our lease. The worker is not pushed back: it offers itself once idle."""
        held = self._held.pop(worker.url, None)
        worker.state = PoolWorkerState.IDLE
        self._publish()
        if held is None:
            return
        # `release` is synchronous (cleanup must not be cut by cancellation); the key is
        # deleted in the background, and expires anyway if that fails.
        task = asyncio.get_running_loop().create_task(self._delete(worker.url, held[1]))
        self._releases.add(task)
        task.add_done_callback(self._releases.discard)

    async def _delete(self, url: str, token: str) -> None:
        try:
            async with asyncio.timeout(COMMAND_TIMEOUT_S):
                await self._release_script(keys=[self.keys.lease(url)], args=[token])
        except RedisFailure as exc:
            self._error("release", exc)

    # -- renewing ----------------------------------------------------------------------

    async def start(self) -> None:
        if self._closed:
            raise RuntimeError("the worker pool is closed")
        if self._renewer is None:
            self._renewer = asyncio.create_task(self._renew_loop(), name="pool-renew")

    async def _renew_loop(self) -> None:
        stop = _CancelWatch()
        while True:
            await asyncio.sleep(self._renew_every_s)
            await self.renew()
            stop.check()  # else `aclose` could wait for this loop forever

    async def renew(self) -> None:
        """Extend every lease this gateway holds; note workers whose heartbeat is gone."""
        for url, (worker, token) in list(self._held.items()):
            try:
                async with asyncio.timeout(COMMAND_TIMEOUT_S):
                    renewed = await self._renew_script(
                        keys=[self.keys.lease(url), self.keys.worker(url)],
                        args=[token, self._lease_ttl_ms],
                    )
            except RedisFailure as exc:
                # The call goes on: the worker still refuses anyone else (1013).
                self._error("renew", exc)
                return
            self._ok()
            worker.alive = renewed != 2
            if renewed == 0:
                log.info("lease on %s ended underneath its call (Redis restarted?)", url)

    async def aclose(self) -> None:
        """Stop renewing, finish pending lease deletions, close the client: each step
        bounded, so a gateway's shutdown never waits on Redis (agents.bounded_stop)."""
        self._closed = True
        renewer, self._renewer = self._renewer, None
        if renewer is not None:
            await cancel_within(renewer, "The worker pool's lease renewer")
        for worker, _ in list(self._held.values()):
            self._forget(worker)
        if self._releases:
            deletions = asyncio.gather(*self._releases)
            await finish_within(deletions, "The worker pool's lease deletions")
        await finish_within(self.redis.aclose(), "Closing the worker pool's Redis client")
        self._publish()

    async def __aenter__(self) -> SharedWorkerPool:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -- what it says ------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """This gateway's share: its leases and its waiting calls."""
        return {
            "busy": len(self._held),
            "queued": self._waiting,
            "workers": [{"url": url, "state": "busy"} for url in self._held],
        }

    def _error(self, operation: str, exc: BaseException) -> None:
        if self.metrics is not None:
            self.metrics.registry_errors.labels(operation=operation).inc()
        if not self._failing:
            log.warning(
                "worker registry unavailable (%s: %r): calls use the cascade until it is back",
                operation,
                exc,
            )
        self._failing = True

    def _ok(self) -> None:
        if self._failing:
            log.info("worker registry reachable again")
        self._failing = False

    def _fallback(self, reason: FallbackReason) -> None:
        if self.metrics is not None:
            self.metrics.fallback(reason)

    def _publish(self) -> None:
        if self.metrics is None:
            return
        for state in PoolWorkerState:
            count = len(self._held) if state is PoolWorkerState.BUSY else 0
            self.metrics.workers.labels(state=state.value).set(count)
        self.metrics.queue_length.set(self._waiting)
