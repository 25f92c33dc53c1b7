"""The model scheduler and the front-end lane, as the calls rely on them.

Jobs here are plain functions that block on a `Gate` until the test opens it, so every
ordering below is forced by events, never by timing.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections.abc import Callable

import pytest

from agents.scheduler import (
    MODEL_NICENESS,
    MODEL_THREADS,
    FrontEndLane,
    ModelScheduler,
    SchedulerClosed,
)

SAFETY_S = 10.0  # only ever reached when a test is failing: no hang, a clear failure


class Gate:
    """A blocking job: tells the loop when it starts, returns once the test opens it."""

    def __init__(self, value: object = None) -> None:
        self.value = value
        self.started = asyncio.Event()
        self.finished = threading.Event()
        self._loop = asyncio.get_running_loop()
        self._open = threading.Event()

    def __call__(self) -> object:
        self._loop.call_soon_threadsafe(self.started.set)
        if not self._open.wait(SAFETY_S):
            raise TimeoutError("the test never opened the gate")
        self.finished.set()
        return self.value

    def open(self) -> None:
        self._open.set()


def recorder(order: list[str], name: str) -> Callable[[], str]:
    def job() -> str:
        order.append(name)
        return name

    return job


async def until(condition: Callable[[], bool]) -> None:
    """Yield to the loop (and the workers) until `condition` holds.

    For state that changes in the workers' threads, where there is no event to await.
    """
    async with asyncio.timeout(SAFETY_S):
        while not condition():  # noqa: ASYNC110
            await asyncio.sleep(0.001)


def model_threads_alive() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("model-")]


# --- fairness and bounds --------------------------------------------------------------------


async def test_a_call_with_a_backlog_cannot_starve_another() -> None:
    """A queues five jobs, B one: B's runs before A's third (calls take turns)."""
    order: list[str] = []
    async with ModelScheduler(1) as scheduler:
        first = Gate("A1")
        a1 = asyncio.create_task(scheduler.run("A", "stt", first))
        await first.started.wait()
        a_rest = [
            asyncio.create_task(scheduler.run("A", "tts", recorder(order, f"A{k}")))
            for k in range(2, 6)
        ]
        b1 = asyncio.create_task(scheduler.run("B", "stt", recorder(order, "B1")))
        await until(lambda: scheduler.stats()["queued"] == 5)

        first.open()
        assert await a1 == "A1"
        assert await asyncio.gather(*a_rest, b1) == ["A2", "A3", "A4", "A5", "B1"]
    assert order == ["A2", "B1", "A3", "A4", "A5"]


async def test_never_more_jobs_run_at_once_than_threads() -> None:
    running = 0
    most = 0
    lock = threading.Lock()
    release = threading.Event()

    def job(k: int) -> int:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        release.wait(SAFETY_S)
        with lock:
            running -= 1
        return k

    async with ModelScheduler(2) as scheduler:
        jobs = [asyncio.create_task(scheduler.run(k % 3, "stt", job, k)) for k in range(6)]
        await until(lambda: scheduler.stats() == {"queued": 4, "running": 2, "threads": 2})
        release.set()
        assert await asyncio.gather(*jobs) == list(range(6))
    assert most == 2


async def test_jobs_get_their_arguments_and_return_their_results() -> None:
    async with ModelScheduler() as scheduler:
        assert await scheduler.run("A", "stt", pow, 2, 10) == 1024


async def test_a_default_scheduler_has_the_measured_thread_count_and_starts_none_idle() -> None:
    scheduler = ModelScheduler()
    assert scheduler.threads == MODEL_THREADS
    assert scheduler.stats()["threads"] == 0  # threads start with the first job
    await scheduler.aclose()


async def test_an_idle_scheduler_nobody_closed_leaves_no_thread_behind() -> None:
    scheduler = ModelScheduler(2, idle_s=0.0)
    await asyncio.gather(*(scheduler.run("A", "stt", abs, -k) for k in range(4)))
    await until(lambda: scheduler.stats()["threads"] == 0)
    # ...and it still works afterwards: a new job starts a new thread.
    assert await scheduler.run("A", "stt", abs, -7) == 7
    await scheduler.aclose()


# --- cancellation ---------------------------------------------------------------------------


async def test_a_job_cancelled_before_it_started_never_runs() -> None:
    order: list[str] = []
    async with ModelScheduler(1) as scheduler:
        busy = Gate()
        blocker = asyncio.create_task(scheduler.run("A", "stt", busy))
        await busy.started.wait()
        dropped = asyncio.create_task(scheduler.run("B", "stt", recorder(order, "dropped")))
        await until(lambda: scheduler.stats()["queued"] == 1)

        dropped.cancel()
        with pytest.raises(asyncio.CancelledError):
            await dropped
        assert scheduler.stats()["queued"] == 0

        busy.open()
        await blocker
        assert await scheduler.run("B", "stt", recorder(order, "next")) == "next"
    assert order == ["next"]


async def test_a_job_cancelled_while_running_finishes_in_its_thread_unheard() -> None:
    async with ModelScheduler(1) as scheduler:
        job = Gate("late result")
        waiting = asyncio.create_task(scheduler.run("A", "stt", job))
        await job.started.wait()
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        job.open()
        # The thread is free again once the job is done: the next job runs.
        assert await scheduler.run("A", "stt", abs, -1) == 1
        assert job.finished.is_set()


async def test_exceptions_reach_the_caller_as_raised() -> None:
    error = ValueError("whisper failed")

    def failing() -> None:
        raise error

    async with ModelScheduler() as scheduler:
        with pytest.raises(ValueError) as raised:
            await scheduler.run("A", "stt", failing)
        assert raised.value is error
        # The worker survives its job's failure.
        assert await scheduler.run("A", "stt", abs, -3) == 3


async def test_forget_cancels_the_ended_calls_queued_jobs_only() -> None:
    order: list[str] = []
    async with ModelScheduler(1) as scheduler:
        busy = Gate()
        blocker = asyncio.create_task(scheduler.run("A", "stt", busy))
        await busy.started.wait()
        a2 = asyncio.create_task(scheduler.run("A", "tts", recorder(order, "A2")))
        b1 = asyncio.create_task(scheduler.run("B", "tts", recorder(order, "B1")))
        await until(lambda: scheduler.stats()["queued"] == 2)

        scheduler.forget("A")
        with pytest.raises(asyncio.CancelledError):
            await a2
        busy.open()
        await blocker  # a running job of a forgotten call finishes
        assert await b1 == "B1"
    assert order == ["B1"]


async def test_aclose_cancels_queued_jobs_lets_running_ones_finish_and_stops_threads() -> None:
    order: list[str] = []
    scheduler = ModelScheduler(1)
    busy = Gate("finished")
    running = asyncio.create_task(scheduler.run("A", "stt", busy))
    await busy.started.wait()
    queued = asyncio.create_task(scheduler.run("B", "tts", recorder(order, "queued")))
    await until(lambda: scheduler.stats()["queued"] == 1)

    closing = asyncio.create_task(scheduler.aclose())
    with pytest.raises(asyncio.CancelledError):
        await queued
    await asyncio.sleep(0)
    assert not closing.done()  # it waits for the running job
    busy.open()
    await closing
    assert await running == "finished"
    assert order == []
    assert scheduler.stats()["threads"] == 0
    assert model_threads_alive() == []
    with pytest.raises(SchedulerClosed):
        await scheduler.run("A", "stt", abs, -1)


# --- measurement ----------------------------------------------------------------------------


async def test_hooks_get_the_stage_with_the_wait_at_start_and_the_run_at_the_end() -> None:
    events: list[tuple[str, str, float]] = []

    def on_wait(stage: str, seconds: float) -> None:
        events.append(("wait", stage, seconds))

    def on_run(stage: str, seconds: float) -> None:
        events.append(("run", stage, seconds))

    def job() -> None:
        events.append(("job", "", 0.0))

    async with ModelScheduler(1, on_wait=on_wait, on_run=on_run) as scheduler:
        await scheduler.run("A", "end_of_turn", job)
        await scheduler.run("A", "tts", job)
    assert [(kind, stage) for kind, stage, _ in events] == [
        ("wait", "end_of_turn"),
        ("job", ""),
        ("run", "end_of_turn"),
        ("wait", "tts"),
        ("job", ""),
        ("run", "tts"),
    ]
    assert all(seconds >= 0.0 for _, _, seconds in events)


async def test_a_queued_job_reports_at_least_the_wait_it_was_made_to_do() -> None:
    waits: dict[str, float] = {}
    async with ModelScheduler(1, on_wait=waits.__setitem__) as scheduler:
        busy = Gate()
        blocker = asyncio.create_task(scheduler.run("A", "stt", busy))
        await busy.started.wait()
        behind = asyncio.create_task(scheduler.run("B", "tts", abs, -1))
        await until(lambda: scheduler.stats()["queued"] == 1)
        queued_at = asyncio.get_running_loop().time()
        await asyncio.sleep(0.05)  # the blocker holds the only thread for at least this
        held = asyncio.get_running_loop().time() - queued_at
        busy.open()
        await asyncio.gather(blocker, behind)
    assert waits["tts"] >= held


# --- priorities -----------------------------------------------------------------------------


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice is Linux's")
async def test_model_threads_run_nicer_than_the_front_end_lane() -> None:
    def niceness() -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    base = niceness()
    async with ModelScheduler() as scheduler, FrontEndLane() as lane:
        assert await scheduler.run("A", "stt", niceness) == min(19, base + MODEL_NICENESS)
        assert await lane.run(niceness) == base


# --- the front-end lane ---------------------------------------------------------------------


async def test_a_frame_is_not_queued_behind_saturated_model_threads() -> None:
    async with ModelScheduler(2) as scheduler, FrontEndLane() as lane:
        gates = [Gate() for _ in range(4)]
        jobs = [asyncio.create_task(scheduler.run(k, "stt", gate)) for k, gate in enumerate(gates)]
        await until(lambda: scheduler.stats() == {"queued": 2, "running": 2, "threads": 2})

        # Every model thread is blocked and more jobs wait: the frame still goes through.
        async with asyncio.timeout(SAFETY_S):
            assert await lane.run(bytes.upper, b"frame") == b"FRAME"
        assert scheduler.stats()["running"] == 2

        for gate in gates:
            gate.open()
        await asyncio.gather(*jobs)


async def test_a_lane_runs_a_calls_frames_in_order_on_one_thread() -> None:
    seen: list[tuple[int, int]] = []

    def frame(k: int) -> int:
        seen.append((k, threading.get_ident()))
        return k

    async with FrontEndLane() as lane:
        results = await asyncio.gather(*(lane.run(frame, k) for k in range(20)))
    assert results == list(range(20))
    assert [k for k, _ in seen] == list(range(20))
    assert len({thread for _, thread in seen}) == 1


async def test_closing_a_lane_waits_for_the_frame_in_progress() -> None:
    """So the call can free its front end safely right after (CallSession.run)."""
    lane = FrontEndLane()
    frame = Gate()
    processing = asyncio.create_task(lane.run(frame))
    await frame.started.wait()
    processing.cancel()  # the call ends mid-frame
    closing = asyncio.create_task(lane.aclose())
    await asyncio.sleep(0)
    assert not closing.done()
    frame.open()
    await closing
    assert frame.finished.is_set()
    with pytest.raises(asyncio.CancelledError):
        await processing
