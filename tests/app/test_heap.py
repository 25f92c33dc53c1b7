"""A finished call is freed when it ends, by one garbage-collection pass shared by the
calls that end together; threads share two malloc arenas (app/heap.py)."""

from __future__ import annotations

import asyncio
import gc
import os
import platform
import subprocess
import sys
import weakref

import pytest

from app.heap import ARENAS, SWEEP_DELAY_S, CallSweeper


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


# A process that starts 8 threads, each allocating, and counts glibc's malloc arenas
# (the <heap nr=...> entries of malloc_info).
_ARENA_PROBE = """
import ctypes, ctypes.util, re, sys, tempfile, threading, time
from app.heap import limit_arenas
if sys.argv[1] == "limit":
    limit_arenas()
libc = ctypes.CDLL(ctypes.util.find_library("c"))
done = threading.Event()
def allocate():
    held = [bytearray(4096) for _ in range(200)]
    done.wait()
threads = [threading.Thread(target=allocate) for _ in range(8)]
for thread in threads:
    thread.start()
time.sleep(0.3)
with tempfile.NamedTemporaryFile("r") as report:
    libc.fopen.restype = ctypes.c_void_p
    stream = ctypes.c_void_p(libc.fopen(report.name.encode(), b"w"))
    libc.malloc_info(0, stream)
    libc.fclose(stream)
    print(len(re.findall(r"<heap nr=", report.read())))
done.set()
"""


def _arenas(mode: str) -> int:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    out = subprocess.run(
        [sys.executable, "-c", _ARENA_PROBE, mode],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return int(out.stdout.strip())


@pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only"
)
def test_threads_share_at_most_two_malloc_arenas() -> None:
    assert _arenas("default") > ARENAS  # each thread would get its own
    assert _arenas("limit") <= ARENAS
