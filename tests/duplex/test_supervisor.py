"""`serve --local-workers`: real worker processes, waited for, killed and started again."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from agents.duplex.pool import PoolWorkerState, WorkerPool
from agents.duplex.supervisor import WorkerSupervisor
from ops.local_server import free_port
from tests.services import free_ports

pytestmark = pytest.mark.timeout(120)


def idle_worker(index: int, port: int) -> list[str]:
    return [sys.executable, "-m", "tests.duplex.idle_worker", str(port)]


@asynccontextmanager
async def supervised(count: int = 1, **options: Any) -> AsyncIterator[WorkerSupervisor]:
    """Workers started, waited for, and watched; everything stopped afterwards."""
    first = free_ports(count)
    options = {"command": idle_worker, "interval_s": 0.2, "backoff_s": 0.1, **options}
    async with WorkerSupervisor(count, first, **options) as supervisor:
        assert await supervisor.wait_ready(60), "the workers never became ready"
        watch = asyncio.create_task(supervisor.run())
        try:
            yield supervisor
        finally:
            watch.cancel()
            await asyncio.gather(watch, return_exceptions=True)


async def until(done: Callable[[], bool], timeout_s: float = 60) -> None:
    async with asyncio.timeout(timeout_s):
        while not done():  # noqa: ASYNC110 - the supervisor's state has no event
            await asyncio.sleep(0.05)


async def test_serve_waits_until_every_local_worker_says_idle() -> None:
    async with supervised(2) as supervisor:
        assert [w.state for w in supervisor.workers] == ["idle", "idle"]
        assert all(w.spawned == 1 for w in supervisor.workers)


async def test_a_local_worker_that_dies_is_started_again() -> None:
    async with supervised() as supervisor:
        worker = supervisor.workers[0]
        assert worker.process is not None
        first = worker.process.pid
        os.kill(first, signal.SIGKILL)
        await until(lambda: worker.spawned == 2 and worker.state == "idle")
        assert worker.process is not None and worker.process.pid != first


async def test_a_local_worker_that_stalls_is_killed_and_started_again() -> None:
    async with supervised(stall_s=1.0) as supervisor:
        worker = supervisor.workers[0]
        assert worker.process is not None
        stalled = worker.process
        os.kill(stalled.pid, signal.SIGSTOP)  # alive, listening, answering nothing
        await until(lambda: worker.spawned == 2 and worker.state == "idle")
        assert stalled.returncode == -signal.SIGKILL


async def test_a_local_worker_the_pool_reports_broken_is_restarted_and_leased_again() -> None:
    async with supervised() as supervisor:
        pool = WorkerPool(supervisor.urls, on_unhealthy=supervisor.report)
        await pool.check_health()
        lease = await pool.acquire(timeout_s=1)
        worker = supervisor.workers[0]
        assert worker.process is not None
        broken = worker.process
        lease.release(healthy=False, reason="worker_stalled")  # e.g. it broke protocol
        assert broken.returncode == -signal.SIGKILL
        assert pool.workers[0].state is PoolWorkerState.ERROR
        await until(lambda: worker.spawned == 2 and worker.state == "idle")
        await pool.check_health()
        assert pool.workers[0].state is PoolWorkerState.IDLE, pool.snapshot()
        assert (await pool.acquire(timeout_s=1)).url == supervisor.urls[0]


async def test_a_worker_that_keeps_dying_is_restarted_with_growing_backoff() -> None:
    def crashing(index: int, port: int) -> list[str]:
        return [sys.executable, "-c", "raise SystemExit(3)"]

    supervisor = WorkerSupervisor(1, free_port(), command=crashing, backoff_s=0.1)
    async with supervisor:
        worker = supervisor.workers[0]
        delays: dict[int, float] = {}  # restart number → the wait before it
        async with asyncio.timeout(30):
            while len(delays) < 4:
                await supervisor.check()
                if worker.process is None:
                    delays[worker.restarts] = worker.delay_s
                await asyncio.sleep(0.02)
        assert worker.spawned >= 4
    assert [delays[n] for n in (1, 2, 3, 4)] == [0.1, 0.2, 0.4, 0.8]


def environment_of(pid: int) -> dict[str, str]:
    environ = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in environ.decode().split("\0") if "=" in item)


async def test_each_local_worker_gets_its_own_variables_and_no_twilio_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each worker writes on an LLM server of its own (`share_embedded_llm`); none may
    # hold the gateway's Twilio token, as `offhook worker` never checks signatures.
    monkeypatch.setenv("TWILIO_AUTH_TOKEN", "tw-secret")
    own = [
        {"LLM_BASE_URL": "http://127.0.0.1:9001/v1"},
        {"LLM_BASE_URL": "http://127.0.0.1:9002/v1"},
    ]
    async with supervised(2, env={"UNIT_MS": "500"}, worker_envs=own) as supervisor:
        environs = []
        for worker in supervisor.workers:
            assert worker.process is not None
            environs.append(environment_of(worker.process.pid))
    assert [e["LLM_BASE_URL"] for e in environs] == [o["LLM_BASE_URL"] for o in own]
    assert all(e["UNIT_MS"] == "500" for e in environs)
    assert not any("TWILIO_AUTH_TOKEN" in e for e in environs)
