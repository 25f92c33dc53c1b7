"""Keeping the server's memory flat: a finished call is freed when it ends.

A call's objects refer to each other (the session hands its bound methods to its
playback, agent and controls as callbacks), so a finished call is freed by Python's
cyclic garbage collector, not by reference counting. That collector's full pass comes
only after ten passes of the middle generation *and* once the objects that survived
earlier passes have grown by a quarter; with the models' objects counted among those,
that took about thirty calls on the bundled models, each call held whole meanwhile
(`python -m benchmarks soak`: the server's RSS rose ~10 MB a call, then fell ~100 MB).

So: once the models are loaded, what loading left is frozen (neither counted nor
scanned again), and a call's end schedules one full pass, a moment later, so that the
handler's frames are gone. Several calls ending together share one pass. After it, glibc
is asked to hand freed pages back (`malloc_trim`): each call builds and drops native
state (its VAD's ONNX session, the echo canceller, decoder buffers) whose freed memory
glibc otherwise keeps, 8-30 MB of RSS that crept up call after call (~2 ms a pass).

And glibc's malloc arenas are limited to two (`limit_arenas`, at start-up): by default
every thread that allocates while another holds the lock gets an arena of its own, up
to 8 per core, and each keeps its own high-water mark that trimming does not undo.
`python -m benchmarks abuse` measured it: eight media-flood calls raised RSS in steps by 12 MB
with the default, and not at all after the first with two arenas (and 23 MB less to
begin with); the Python heap itself stayed flat in both.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
import os
import time
from collections.abc import Callable

SWEEP_DELAY_S = 0.5
ARENAS = 2
_M_ARENA_MAX = -8  # glibc <malloc.h>


def settle() -> None:
    """After loading: collect what loading dropped, and set the rest aside for good."""
    gc.collect()
    gc.freeze()


def limit_arenas(count: int = ARENAS) -> None:
    """At start-up, before threads allocate: at most `count` glibc malloc arenas.

    An operator's own MALLOC_ARENA_MAX (which glibc reads itself) wins. Nothing happens
    where the C library is not glibc.
    """
    if "MALLOC_ARENA_MAX" in os.environ:
        return
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    mallopt(_M_ARENA_MAX, count)


def _malloc_trim() -> Callable[[], None]:
    """glibc's malloc_trim(0), or nothing where the C library has none (musl, macOS)."""
    try:
        trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return lambda: None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int

    def release() -> None:
        trim(0)

    return release


class CallSweeper:
    """One full garbage-collection pass shortly after calls end (never one per call)."""

    def __init__(self, on_sweep: Callable[[float], None] | None = None) -> None:
        self._on_sweep = on_sweep
        self._pending: asyncio.TimerHandle | None = None
        self._trim = _malloc_trim()

    def call_ended(self) -> None:
        if self._pending is None:
            loop = asyncio.get_running_loop()
            self._pending = loop.call_later(SWEEP_DELAY_S, self._sweep)

    def close(self) -> None:
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None

    def _sweep(self) -> None:
        self._pending = None
        began = time.perf_counter()
        gc.collect()
        self._trim()
        if self._on_sweep is not None:
            self._on_sweep(time.perf_counter() - began)
