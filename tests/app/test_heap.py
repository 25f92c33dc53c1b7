"""A finished call is freed when it ends, by one garbage-collection pass shared by the
calls that end together (app/heap.py)."""

from __future__ import annotations

import asyncio
import gc
import weakref

from app.heap import SWEEP_DELAY_S, CallSweeper


class _Session:
    """A call's objects in miniature: it hands its own bound method out as a callback."""

    def __init__(self) -> None:
        self.audio = bytearray(1 << 20)
        self.callbacks = [self.on_event]

    def on_event(self) -> None:
        pass


async def test_a_call_held_only_by_its_own_cycles_is_freed_after_it_ends() -> None:
    sweeps: list[float] = []
    sweeper = CallSweeper(on_sweep=sweeps.append)
    gc.disable()  # no collection of Python's own may free it meanwhile
    try:
        session = weakref.ref(_Session())
        assert session() is not None, "a cycle outlives its last reference"
        sweeper.call_ended()
        await asyncio.sleep(SWEEP_DELAY_S + 0.2)
    finally:
        gc.enable()
    assert session() is None
    assert len(sweeps) == 1 and sweeps[0] >= 0


async def test_calls_ending_together_share_one_pass() -> None:
    sweeps: list[float] = []
    sweeper = CallSweeper(on_sweep=sweeps.append)
    for _ in range(5):
        sweeper.call_ended()
    await asyncio.sleep(SWEEP_DELAY_S + 0.2)
    assert len(sweeps) == 1


async def test_a_closed_sweeper_runs_no_pass() -> None:
    sweeps: list[float] = []
    sweeper = CallSweeper(on_sweep=sweeps.append)
    sweeper.call_ended()
    sweeper.close()
    await asyncio.sleep(SWEEP_DELAY_S + 0.2)
    assert sweeps == []
