"""The worker registry on Redis: where `offhook worker` announces itself to every gateway.

With REDIS_URL and WORKER_URL a worker keeps, under a key prefix (default `offhook`):

    PREFIX:worker:URL   hash {state, backend, worker_id, seen}, expiring after `ttl_s`;
                        the heartbeat (every `interval_s`, and at once on a state change)
                        renews it. A worker that dies stops renewing it, so it vanishes.
    PREFIX:workers      sorted set URL → last heartbeat (ms): who is out there.
    PREFIX:idle         list of idle worker URLs, each at most once: the one FIFO queue.
                        Gateways wait on it with BLPOP, and Redis serves blocked clients
                        longest-waiter first, across every gateway.
    PREFIX:lease:URL    the lease: one gateway's token, SET NX with a TTL the gateway
                        renews while the call lasts (agents.duplex.shared_pool).

A worker offers itself (RPUSH to idle) when it becomes idle: after loading, after a
session, and after Redis lost its keys (a restart). A session that ended ends its lease
too, in the same script, so the worker is offered exactly when it can serve again. An
offer can be lost (a gateway popped it and then crashed or gave up before leasing); a
worker that stays idle, unleased and out of the list for `repair_after_s` offers itself
again. Exclusivity never depends on the list: a lease is SET NX, and the worker itself
refuses a second session with 1013.

Everything here is short-lived and self-healing: keys expire, and the workers rebuild
the registry within a heartbeat of Redis coming back. No audio passes through Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

log = logging.getLogger(__name__)

DEFAULT_PREFIX = "offhook"
# Heartbeat every second; a worker missing three is gone. Gateways drop a popped worker
# whose key is gone, so a dead worker is leased at most never once its key expires.
HEARTBEAT_S = 1.0
HEARTBEAT_TTL_S = 3.0
REPAIR_AFTER_S = 2.0
# Every Redis command gets this long before it counts as failed: a hung Redis must cost
# a heartbeat, never stall the worker (or, at the gateway, a call).
COMMAND_TIMEOUT_S = 2.0

# Registry states: what gateways see of a worker (its own WorkerState, coarsened).
IDLE = "idle"
BUSY = "busy"
LOADING = "loading"
ERROR = "error"


@dataclass(frozen=True, slots=True)
class RegistryKeys:
    """The registry's key names under one prefix (tests use a prefix each)."""

    prefix: str = DEFAULT_PREFIX

    @property
    def workers(self) -> str:
        return f"{self.prefix}:workers"

    @property
    def idle(self) -> str:
        return f"{self.prefix}:idle"

    def worker(self, url: str) -> str:
        return f"{self.prefix}:worker:{url}"

    def lease(self, url: str) -> str:
        return f"{self.prefix}:lease:{url}"


# Redis's own clock, so that workers and gateways on different hosts agree on "when".
_NOW_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

# KEYS: worker hash, workers zset, idle list, lease
# ARGV: url, state, backend, worker_id, ttl_ms, (unused), repair_after_ms, session_ended
# Returns 1 when the worker was (re)offered on the idle list, else 0.
HEARTBEAT_LUA = (
    _NOW_LUA
    + """
local was = redis.call('HGET', KEYS[1], 'state')
redis.call('HSET', KEYS[1], 'state', ARGV[2], 'backend', ARGV[3],
           'worker_id', ARGV[4], 'seen', now)
redis.call('PEXPIRE', KEYS[1], ARGV[5])
redis.call('ZADD', KEYS[2], now, ARGV[1])
if ARGV[2] ~= 'idle' then
  redis.call('HDEL', KEYS[1], 'absent_since')
  redis.call('LREM', KEYS[3], 0, ARGV[1])
  return 0
end
if ARGV[8] == '1' then
  redis.call('DEL', KEYS[4])
end
if redis.call('LPOS', KEYS[3], ARGV[1]) or redis.call('EXISTS', KEYS[4]) == 1 then
  redis.call('HDEL', KEYS[1], 'absent_since')
  return 0
end
local offer = ARGV[8] == '1' or was ~= 'idle'
if not offer then
  local since = redis.call('HGET', KEYS[1], 'absent_since')
  if not since then
    redis.call('HSET', KEYS[1], 'absent_since', now)
    return 0
  end
  offer = now - tonumber(since) >= tonumber(ARGV[7])
end
if offer then
  redis.call('HDEL', KEYS[1], 'absent_since')
  redis.call('RPUSH', KEYS[3], ARGV[1])
  return 1
end
return 0
"""
)

# KEYS: workers zset. ARGV: within_ms. How many workers beat within the last within_ms.
LIVE_WORKERS_LUA = (
    _NOW_LUA
    + """
return redis.call('ZCOUNT', KEYS[1], now - tonumber(ARGV[1]), '+inf')
"""
)

# KEYS: worker hash, workers zset, idle list. ARGV: url
DEREGISTER_LUA = """
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('LREM', KEYS[3], 0, ARGV[1])
return 1
"""


def registry_state(worker_state: str) -> str:
    """A worker's own state (agents.duplex.worker.WorkerState) as the registry shows it."""
    if worker_state in ("duplex_active", "duplex_paused"):
        return BUSY
    if worker_state in (IDLE, LOADING, ERROR):
        return worker_state
    return ERROR


def open_redis(url: str) -> Redis:
    """A client for the registry. Timeouts are applied per command with asyncio, since
    a socket timeout would cut the gateways' blocking waits short. One immediate retry
    takes a fresh connection for a pooled one a restarted Redis closed."""
    return Redis.from_url(
        url,
        socket_connect_timeout=COMMAND_TIMEOUT_S,
        decode_responses=True,
        retry=Retry(NoBackoff(), 1),
    )


class WorkerRegistration:
    """One worker's entry in the registry, kept alive by a heartbeat.

    `state()` reads the worker's own state (agents.duplex.worker.WorkerState's value);
    call `changed()` on every transition so the registry hears of it at once. `run`
    beats until cancelled; `deregister` removes the worker on a clean shutdown. Redis
    errors are logged (once per outage) and counted in `errors`; the worker serves on.
    """

    def __init__(
        self,
        redis: Redis,
        url: str,
        *,
        state: Callable[[], str],
        backend: str,
        worker_id: str,
        prefix: str = DEFAULT_PREFIX,
        interval_s: float = HEARTBEAT_S,
        ttl_s: float = HEARTBEAT_TTL_S,
        repair_after_s: float = REPAIR_AFTER_S,
    ) -> None:
        self.redis = redis
        self.url = url
        self.keys = RegistryKeys(prefix)
        self._state = state
        self._backend = backend
        self._worker_id = worker_id
        self._interval_s = interval_s
        self._ttl_ms = int(ttl_s * 1000)
        self._repair_after_ms = int(repair_after_s * 1000)
        self._changed = asyncio.Event()
        self._served = False  # a session began since the last beat that saw the worker idle
        self._heartbeat = redis.register_script(HEARTBEAT_LUA)
        self._deregister = redis.register_script(DEREGISTER_LUA)
        self.errors = 0
        self.offers = 0  # times the worker put itself on the idle list
        self._failing = False

    def changed(self) -> None:
        """The worker's state changed: beat now rather than at the next interval."""
        if registry_state(self._state()) == BUSY:
            self._served = True
        self._changed.set()

    async def run(self) -> None:
        log.info("registering worker %s in %s", self.url, self.keys.prefix)
        task = asyncio.current_task()
        cancels = task.cancelling() if task is not None else 0
        while True:
            self._changed.clear()
            await self.beat()
            # redis-py on Python 3.11 can drop a cancellation that lands as a command is
            # sent (asyncio.wait_for, gh-86296): a worker stopping must still stop.
            if task is not None and task.cancelling() > cancels:
                raise asyncio.CancelledError
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._interval_s):
                    await self._changed.wait()

    async def beat(self) -> bool:
        """One heartbeat; True when it (re)offered the worker on the idle list."""
        state = registry_state(self._state())
        if state == BUSY:
            self._served = True
        # A session seen to begin (or still on) is over once the worker says idle: its
        # lease goes with it in the same script that offers the worker again.
        session_ended = state == IDLE and self._served
        k = self.keys
        try:
            async with asyncio.timeout(COMMAND_TIMEOUT_S):
                offered = await self._heartbeat(
                    keys=[k.worker(self.url), k.workers, k.idle, k.lease(self.url)],
                    args=[
                        self.url,
                        state,
                        self._backend,
                        self._worker_id,
                        self._ttl_ms,
                        0,  # the script reads Redis's clock
                        self._repair_after_ms,
                        "1" if session_ended else "0",
                    ],
                )
        except (RedisError, OSError, TimeoutError) as exc:
            self.errors += 1
            if not self._failing:
                log.warning("worker registry heartbeat failed (Redis down?): %r", exc)
            self._failing = True
            return False
        if self._failing:
            log.info("worker registry heartbeat works again")
            self._failing = False
        if session_ended:
            self._served = False
        if offered == 1:
            self.offers += 1
        return offered == 1

    async def deregister(self) -> None:
        """Leave the registry at once (a clean shutdown) rather than by expiry."""
        k = self.keys
        try:
            async with asyncio.timeout(COMMAND_TIMEOUT_S):
                await self._deregister(
                    keys=[k.worker(self.url), k.workers, k.idle], args=[self.url]
                )
        except (RedisError, OSError, TimeoutError) as exc:
            log.warning("could not deregister %s (its key expires anyway): %r", self.url, exc)
        else:
            log.info("worker %s left the registry", self.url)


async def registered_workers(redis: Redis, prefix: str = DEFAULT_PREFIX) -> list[dict[str, Any]]:
    """The workers whose heartbeat is alive, with what they last said (for operators and
    tests); entries of workers gone for good are pruned from the sorted set."""
    keys = RegistryKeys(prefix)
    workers: list[dict[str, Any]] = []
    async with asyncio.timeout(COMMAND_TIMEOUT_S):
        for member in await redis.zrange(keys.workers, 0, -1):
            url = str(member)
            # decode_responses: every field and value is a str.
            entry = {str(f): str(v) for f, v in (await redis.hgetall(keys.worker(url))).items()}
            if not entry:
                await redis.zrem(keys.workers, url)
                continue
            leased = await redis.exists(keys.lease(url))
            workers.append({"url": url, **entry, "leased": bool(leased)})
    return workers
