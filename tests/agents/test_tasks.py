"""A cancelled task's frames die with it (agents/tasks.py)."""

from __future__ import annotations

import asyncio
import gc
import weakref

from agents.tasks import cancel_and_wait, create_task, shed_traceback


class _Payload:
    """Stands for what a call's frames hold: its session, audio, front end."""


async def _serving(held: list[weakref.ref[_Payload]]) -> None:
    payload = _Payload()
    held.append(weakref.ref(payload))
    async with asyncio.TaskGroup() as group:
        group.create_task(asyncio.sleep(3600))
        await asyncio.sleep(3600)


async def _cancelled_and_freed_without_gc(wrap: bool) -> bool:
    held: list[weakref.ref[_Payload]] = []
    gc.disable()
    try:
        work = _serving(held)
        task = asyncio.create_task(shed_traceback(work) if wrap else work)
        await asyncio.sleep(0.01)
        await cancel_and_wait(task)
        del task, work
        return held[0]() is None
    finally:
        gc.enable()
        gc.collect()


async def test_a_task_cancelled_inside_a_task_group_frees_its_frames_at_once() -> None:
    assert await _cancelled_and_freed_without_gc(wrap=True)


async def test_without_it_python_3_11_keeps_them_in_a_cycle() -> None:
    # What shed_traceback is for: TaskGroup.__aexit__ holds the CancelledError whose
    # traceback holds that frame (fixed in later Pythons, so only a fact on 3.11).
    import sys

    if sys.version_info[:2] == (3, 11):
        assert not await _cancelled_and_freed_without_gc(wrap=False)


async def test_a_cancelled_task_still_reads_as_cancelled() -> None:
    task = asyncio.create_task(shed_traceback(asyncio.sleep(3600)))
    await asyncio.sleep(0)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert task.cancelled()


async def test_what_the_task_returns_or_raises_passes_through() -> None:
    async def answer() -> int:
        return 42

    async def fail() -> None:
        raise ValueError("no")

    assert await shed_traceback(answer()) == 42
    try:
        await shed_traceback(fail())
    except ValueError as exc:
        assert str(exc) == "no"
    else:
        raise AssertionError("the error was swallowed")


async def test_a_task_cancelled_before_it_starts_leaves_no_unawaited_coroutine() -> None:
    started: list[bool] = []

    async def work() -> None:
        started.append(True)

    coro = work()
    async with asyncio.TaskGroup() as group:
        task = create_task(group, coro, name="never-started")
        task.cancel()  # before its first step
    assert task.cancelled() and started == []
    assert coro.cr_frame is None, "the coroutine was left open: 'never awaited' on collection"
