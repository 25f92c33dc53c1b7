"""The worker registry's heartbeat against a real redis-server: when a worker is offered
on the one idle queue, when it is taken off, and how a lost offer heals itself.

Each test keys its Redis state under a prefix of its own (the server is shared).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from redis.asyncio import Redis

from agents.duplex.registry import (
    RegistryKeys,
    WorkerRegistration,
    open_redis,
    registered_workers,
    registry_state,
)
from agents.duplex.supervisor import WorkerSupervisor
from agents.duplex.worker_cli import _worker_url, worker_main
from tests.conftest import test_settings as settings_for
from tests.services import free_port

URL = "ws://10.0.0.1:22400"


class Worker:
    """A registration whose worker state the test sets (the worker's WorkerState value)."""

    def __init__(self, redis: Redis, prefix: str, url: str = URL, **options: float) -> None:
        self.state = "idle"
        self.registration = WorkerRegistration(
            redis, url, state=lambda: self.state, backend="fake", worker_id=url, prefix=prefix,
            **options,
        )  # fmt: skip

    def go(self, state: str) -> None:
        self.state = state
        self.registration.changed()

    async def beat(self) -> bool:
        return await self.registration.beat()


@pytest_asyncio.fixture(loop_scope="function")  # the client lives on the test's loop
async def redis(redis_url: str) -> AsyncIterator[Redis]:
    client = open_redis(redis_url)
    yield client
    await client.aclose()


@pytest.fixture
def keys() -> RegistryKeys:
    return RegistryKeys(f"test-{uuid.uuid4().hex[:10]}")


async def idle_list(redis: Redis, keys: RegistryKeys) -> list[str]:
    return [str(u) for u in await redis.lrange(keys.idle, 0, -1)]  # type: ignore[misc]


def test_a_worker_in_a_session_shows_as_busy_to_gateways() -> None:
    assert registry_state("duplex_active") == "busy"
    assert registry_state("duplex_paused") == "busy"
    assert registry_state("idle") == "idle"
    assert registry_state("loading") == "loading"
    assert registry_state("error") == "error"


async def test_an_idle_worker_offers_itself_once(redis: Redis, keys: RegistryKeys) -> None:
    worker = Worker(redis, keys.prefix)
    assert await worker.beat()
    assert not await worker.beat()
    assert await idle_list(redis, keys) == [URL]
    [entry] = await registered_workers(redis, keys.prefix)
    assert entry["url"] == URL and entry["state"] == "idle" and entry["backend"] == "fake"


async def test_a_loading_worker_is_registered_but_not_offered(
    redis: Redis, keys: RegistryKeys
) -> None:
    worker = Worker(redis, keys.prefix)
    worker.state = "loading"
    assert not await worker.beat()
    assert await idle_list(redis, keys) == []
    worker.go("idle")
    assert await worker.beat()
    assert await idle_list(redis, keys) == [URL]


async def test_the_heartbeat_key_expires_when_the_beats_stop(
    redis: Redis, keys: RegistryKeys
) -> None:
    worker = Worker(redis, keys.prefix, ttl_s=0.3)
    await worker.beat()
    assert await redis.exists(keys.worker(URL))
    await asyncio.sleep(0.5)
    assert not await redis.exists(keys.worker(URL))
    assert await registered_workers(redis, keys.prefix) == []


async def test_a_busy_worker_leaves_the_queue_and_a_finished_session_ends_its_lease(
    redis: Redis, keys: RegistryKeys
) -> None:
    worker = Worker(redis, keys.prefix)
    await worker.beat()
    await redis.set(keys.lease(URL), "gateway-a")
    worker.go("duplex_active")
    await worker.beat()
    assert await idle_list(redis, keys) == []
    assert await redis.get(keys.lease(URL)) == "gateway-a"  # the call's lease stands
    worker.go("idle")
    assert await worker.beat(), "a worker whose session ended offers itself at once"
    assert not await redis.exists(keys.lease(URL))
    assert await idle_list(redis, keys) == [URL]


async def test_a_stale_offer_of_a_worker_gone_busy_is_withdrawn(
    redis: Redis, keys: RegistryKeys
) -> None:
    worker = Worker(redis, keys.prefix)
    await worker.beat()
    worker.go("duplex_active")  # someone reached it without the registry
    await worker.beat()
    assert await idle_list(redis, keys) == []


async def test_a_lost_offer_is_repaired_only_after_a_grace(
    redis: Redis, keys: RegistryKeys
) -> None:
    worker = Worker(redis, keys.prefix, repair_after_s=0.3)
    await worker.beat()
    await redis.lpop(keys.idle)  # a gateway popped it and died before leasing
    assert not await worker.beat()
    assert not await worker.beat(), "a gateway may be leasing it right now"
    await asyncio.sleep(0.35)
    assert await worker.beat()
    assert await idle_list(redis, keys) == [URL]


async def test_a_leased_idle_worker_is_not_offered_again(redis: Redis, keys: RegistryKeys) -> None:
    worker = Worker(redis, keys.prefix, repair_after_s=0.0)
    await worker.beat()
    await redis.lpop(keys.idle)
    await redis.set(keys.lease(URL), "gateway-a")  # leased, its session not begun yet
    for _ in range(3):
        assert not await worker.beat()
    assert await idle_list(redis, keys) == []


async def test_a_redis_that_lost_everything_is_rebuilt_by_the_next_beat(
    redis: Redis, keys: RegistryKeys
) -> None:
    worker = Worker(redis, keys.prefix)
    await worker.beat()
    await redis.delete(keys.worker(URL), keys.idle, keys.workers)  # a restart, no AOF
    assert await worker.beat()
    assert await idle_list(redis, keys) == [URL]


async def test_deregistering_removes_the_worker_at_once(redis: Redis, keys: RegistryKeys) -> None:
    worker = Worker(redis, keys.prefix)
    await worker.beat()
    await worker.registration.deregister()
    assert await idle_list(redis, keys) == []
    assert not await redis.exists(keys.worker(URL))
    assert await registered_workers(redis, keys.prefix) == []


async def test_an_unreachable_redis_is_counted_and_the_worker_goes_on(keys: RegistryKeys) -> None:
    down = open_redis(f"redis://127.0.0.1:{free_port()}/0")  # nothing listens there
    worker = Worker(down, keys.prefix)
    assert not await worker.beat()
    assert not await worker.beat()
    assert worker.registration.errors == 2
    await down.aclose()


async def test_the_heartbeat_runs_on_its_own_and_beats_at_once_on_a_change(
    redis: Redis, keys: RegistryKeys
) -> None:
    worker = Worker(redis, keys.prefix, interval_s=30.0)
    task = asyncio.create_task(worker.registration.run())
    try:
        async with asyncio.timeout(5):
            while await idle_list(redis, keys) != [URL]:  # noqa: ASYNC110 - Redis has no event to wait on
                await asyncio.sleep(0.01)
            worker.go("duplex_active")  # not 30 s later: at once
            while await idle_list(redis, keys) != []:  # noqa: ASYNC110 - Redis has no event to wait on
                await asyncio.sleep(0.01)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def test_a_worker_registers_under_worker_url_or_the_one_address_it_listens_on() -> None:
    assert _worker_url("wss://gpu1.example.com:22443", "127.0.0.1", 22400) == (
        "wss://gpu1.example.com:22443"
    )
    assert _worker_url("", "127.0.0.1", 22400) == "ws://127.0.0.1:22400"
    assert _worker_url("", "10.0.0.7", 22401) == "ws://10.0.0.7:22401"
    assert _worker_url("", "::1", 22400) == "ws://[::1]:22400"
    # A wildcard says nothing about where gateways reach it: WORKER_URL is required.
    assert _worker_url("", "0.0.0.0", 22400) == ""


def test_local_workers_of_serve_never_join_the_shared_registry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("REDIS_URL", "redis://10.0.0.9:6379/0")
    monkeypatch.setenv("WORKER_URL", "ws://10.0.0.5:22400")
    supervisor = WorkerSupervisor(2, 22400)
    for env in supervisor._envs:
        assert "REDIS_URL" not in env and "WORKER_URL" not in env


def test_offhook_worker_with_redis_url_and_a_wildcard_host_asks_for_worker_url(
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings = settings_for(redis_url="redis://127.0.0.1:1/0", worker_token="secret")
    assert worker_main(["--host", "0.0.0.0"], load_settings=lambda: settings) == 2
    assert "WORKER_URL" in capsys.readouterr().err


@pytest.mark.asyncio(loop_scope="function")
async def test_a_stopping_worker_stops_even_if_redis_py_lost_the_cancellation(
    redis: Redis, keys: RegistryKeys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On Python 3.11 redis-py's wait_for can swallow a cancellation that lands as a
    command is sent (gh-86296): the heartbeat loop must still end."""
    worker = Worker(redis, keys.prefix)
    real_beat = worker.registration.beat
    swallowed = asyncio.Event()

    async def beat_that_loses_a_cancel() -> bool:
        try:
            await asyncio.sleep(0.05)
        except asyncio.CancelledError:
            swallowed.set()  # as wait_for does: the task still says it is cancelling
        return await real_beat()

    monkeypatch.setattr(worker.registration, "beat", beat_that_loses_a_cancel)
    running = asyncio.create_task(worker.registration.run())
    await asyncio.sleep(0.01)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(running, 3)
    assert swallowed.is_set()
