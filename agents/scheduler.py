"""Two lanes for a small CPU: per-frame audio work, and model inference.

Every call does two kinds of blocking work off the event loop. Its front end cleans a
20 ms frame in about half a millisecond, fifty times a second, and a late frame is a
late barge-in. Its models (Smart Turn, Whisper, Piper) take 50-500 ms a job and keep
both cores busy while they run. In one shared thread pool the second kind fills every
thread and the first queues behind it.

- `FrontEndLane`: threads that run nothing but front-end frames; a call owns one.
- `ModelScheduler`: a bounded pool of threads, shared by every call, that runs model
  calls one job per free thread, taking the calls in turn (each call its own FIFO), so
  a call with a backlog cannot starve another; what each job waited is measured.

The model threads also run at a lower CPU priority (nice +5) than the front ends, so
the operating system runs a ready frame ahead of inference. Linux keeps nice per
thread, and a thread starts with its creator's: the compute threads of CTranslate2
(its replica thread and OpenMP team) and onnxruntime (its intra-op pool) are created
by the thread that *loads* the model, not the one calling it. Models loaded on these
threads (`scheduler.run(owner, "load", constructor)`) run entirely at their priority;
loaded elsewhere, only the calling thread's share (onnxruntime runs on the caller too,
and all the Python around the models) is nicer. `python -m benchmarks lanes` measured no
difference between the two for the front end (--load-on) on 2 cores.

`python -m benchmarks lanes` (benchmarks/lanes.py) measures the lanes against one shared pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import logging
import os
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable
from types import TracebackType
from typing import Any, Final, Generic, Self, TypeVar

__all__ = [
    "FRONTEND_NICENESS",
    "MODEL_NICENESS",
    "MODEL_THREADS",
    "FrontEndLane",
    "ModelScheduler",
    "SchedulerClosed",
]

log = logging.getLogger(__name__)

T = TypeVar("T")
Hook = Callable[[str, float], None]

# Measured with `python -m benchmarks lanes` on 2 cores (see ModelScheduler's docstring).
MODEL_THREADS: Final = 3
MODEL_NICENESS: Final = 5
FRONTEND_NICENESS: Final = 0
# A worker with nothing to do for this long exits; the next job starts a new one. So
# a scheduler nobody closes (a test's default instance) leaves no threads behind.
IDLE_EXIT_S: Final = 30.0


class SchedulerClosed(RuntimeError):
    """A job was submitted to a lane that has been closed."""


class _State(enum.Enum):
    QUEUED = enum.auto()
    RUNNING = enum.auto()
    FINISHED = enum.auto()
    DROPPED = enum.auto()


class _Job(Generic[T]):
    __slots__ = ("args", "fn", "future", "loop", "owner", "queued_at", "stage", "state")

    def __init__(
        self,
        owner: Hashable,
        stage: str,
        fn: Callable[..., T],
        args: tuple[Any, ...],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.owner = owner
        self.stage = stage
        self.fn = fn
        self.args = args
        self.loop = loop
        self.future: asyncio.Future[T] = loop.create_future()
        self.queued_at = time.perf_counter()
        self.state = _State.QUEUED


def _on_loop(loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
    """Run `callback` on `loop`: now when called from that loop's thread."""
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        callback()
        return
    with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting
        loop.call_soon_threadsafe(callback)


def _cancel(job: _Job[Any]) -> None:
    """Cancel a job already taken out of its queue (under the lock, marked DROPPED)."""
    _on_loop(job.loop, functools.partial(_cancel_future, job.future))


def _cancel_future(future: asyncio.Future[Any]) -> None:
    future.cancel()


def _settle(job: _Job[T], result: T | None, error: BaseException | None) -> None:
    future = job.future

    def settle() -> None:
        if future.done():  # its awaiter was cancelled while it ran: the result is dropped
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)  # type: ignore[arg-type]

    _on_loop(job.loop, settle)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def lower_thread_priority(niceness: int) -> None:
    """Make the calling thread `niceness` steps nicer (Linux: nice is per thread).

    Raising one's own niceness needs no privilege. Threads this thread creates from now
    on inherit the value. A no-op where the platform has no per-thread priority.
    """
    if niceness <= 0 or not hasattr(os, "setpriority"):
        return
    tid = threading.get_native_id()
    try:
        current = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, min(19, current + niceness))
    except OSError as exc:  # e.g. a sandbox that forbids it: run at normal priority
        log.warning("cannot lower the priority of thread %d: %s", tid, exc)


class _Lane:
    """Worker threads taking jobs from per-owner FIFOs, owners in turn.

    Everything under `_cond` except the jobs' own work. Workers start on demand, up to
    `threads`, and exit after `idle_s` without work or once the lane is closed.
    """

    def __init__(
        self,
        threads: int,
        *,
        name: str,
        niceness: int,
        on_wait: Hook | None = None,
        on_run: Hook | None = None,
        idle_s: float = IDLE_EXIT_S,
    ) -> None:
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        self.threads = threads
        self.name = name
        self.niceness = niceness
        self._on_wait = on_wait
        self._on_run = on_run
        self._idle_s = idle_s
        self._cond = threading.Condition()
        # Owners with queued jobs, in the order they get their next turn.
        self._queues: OrderedDict[Hashable, deque[_Job[Any]]] = OrderedDict()
        self._queued = 0
        self._idle = 0
        self._running = 0
        self._workers: set[threading.Thread] = set()
        self._spawned = 0
        self._closed = False
        self._exit_waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    # --- the event loop's side -----------------------------------------------------------

    async def _submit(self, owner: Hashable, stage: str, fn: Callable[..., T], args: Any) -> T:
        job = _Job(owner, stage, fn, args, asyncio.get_running_loop())
        with self._cond:
            if self._closed:
                raise SchedulerClosed(f"{self.name} is closed")
            queue = self._queues.get(owner)
            if queue is None:
                queue = self._queues[owner] = deque()
            queue.append(job)
            self._queued += 1
            if self._queued > self._idle and len(self._workers) < self.threads:
                self._spawn()
            self._cond.notify()
        try:
            return await job.future
        except asyncio.CancelledError:
            self._withdraw(job)
            raise

    def _withdraw(self, job: _Job[Any]) -> None:
        """Take a job out of its queue if it has not started; a started one runs on."""
        with self._cond:
            if job.state is not _State.QUEUED:
                return
            queue = self._queues[job.owner]  # a QUEUED job is in its owner's queue
            queue.remove(job)
            if not queue:
                del self._queues[job.owner]
            self._queued -= 1
            job.state = _State.DROPPED

    def _drop(self, owner: Hashable) -> list[_Job[Any]]:
        with self._cond:
            queue = self._queues.pop(owner, None)
            if not queue:
                return []
            self._queued -= len(queue)
            for job in queue:
                job.state = _State.DROPPED
            return list(queue)

    def close(self) -> None:
        """No more jobs; queued ones are cancelled, running ones finish. Idempotent."""
        with self._cond:
            self._closed = True
            dropped = [job for queue in self._queues.values() for job in queue]
            for job in dropped:
                job.state = _State.DROPPED
            self._queues.clear()
            self._queued = 0
            self._cond.notify_all()
        for job in dropped:
            _cancel(job)

    async def aclose(self) -> None:
        """Close, then wait for the running jobs to finish and every thread to exit."""
        self.close()
        loop = asyncio.get_running_loop()
        with self._cond:
            if not self._workers:
                return
            exited: asyncio.Future[None] = loop.create_future()
            self._exit_waiters.append((loop, exited))
        await asyncio.shield(exited)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    @property
    def closed(self) -> bool:
        return self._closed

    def stats(self) -> dict[str, int]:
        """Jobs queued and running, threads alive: a snapshot, for tests and debugging."""
        with self._cond:
            return {
                "queued": self._queued,
                "running": self._running,
                "threads": len(self._workers),
            }

    # --- the workers' side ---------------------------------------------------------------

    def _spawn(self) -> None:
        self._spawned += 1
        worker = threading.Thread(
            target=self._work, name=f"{self.name}-{self._spawned}", daemon=True
        )
        self._workers.add(worker)
        worker.start()

    def _take(self) -> _Job[Any] | None:
        """The next job: the head of the first owner's queue; that owner goes last."""
        if not self._queues:
            return None
        owner, queue = next(iter(self._queues.items()))
        job = queue.popleft()
        if queue:
            self._queues.move_to_end(owner)
        else:
            del self._queues[owner]
        self._queued -= 1
        job.state = _State.RUNNING
        self._running += 1
        return job

    def _next_job(self) -> _Job[Any] | None:
        """Wait for a job; None when this worker should exit (closed, or idle too long)."""
        with self._cond:
            while (job := self._take()) is None:
                if self._closed:
                    break
                self._idle += 1
                notified = self._cond.wait(self._idle_s)
                self._idle -= 1
                if not notified and not self._queues:
                    break
            if job is None:
                self._exit()
            return job

    def _exit(self) -> None:
        self._workers.discard(threading.current_thread())
        if self._workers:
            return
        waiters, self._exit_waiters = self._exit_waiters, []
        for loop, exited in waiters:
            _on_loop(loop, functools.partial(_resolve, exited))

    def _work(self) -> None:
        lower_thread_priority(self.niceness)
        while (job := self._next_job()) is not None:
            started = time.perf_counter()
            self._measure(self._on_wait, job.stage, started - job.queued_at)
            result: Any = None
            error: BaseException | None = None
            try:
                result = job.fn(*job.args)
            except StopIteration as exc:  # a Future refuses it; say what happened instead
                error = RuntimeError(f"{job.stage} raised StopIteration")
                error.__cause__ = exc
            except BaseException as exc:
                error = exc
            self._measure(self._on_run, job.stage, time.perf_counter() - started)
            with self._cond:
                self._running -= 1
                job.state = _State.FINISHED
            _settle(job, result, error)
            # Nothing of the job stays alive while the worker waits for the next one.
            del job, result, error

    @staticmethod
    def _measure(hook: Hook | None, stage: str, seconds: float) -> None:
        if hook is None:
            return
        try:
            hook(stage, seconds)
        except Exception:
            log.exception("scheduler measurement hook failed")


class ModelScheduler(_Lane):
    """Runs blocking model calls on a bounded pool of its own threads, fair across calls.

    Each owner (a call) has a FIFO; a free thread takes the head of the next owner's
    queue in turn, so a call with five jobs queued delays another call's one job by at
    most one of its own. Jobs run at a lower CPU priority than the front ends (nice
    +`MODEL_NICENESS`). `on_wait(stage, seconds)` gets each job's time in the queue,
    `on_run(stage, seconds)` its time running; both are called in the worker thread.

    Three threads (`MODEL_THREADS`) at nice +5 (`MODEL_NICENESS`), measured with
    `python -m benchmarks lanes` on 2 cores (4 front ends in real time, 4 callers keeping
    Whisper tiny.en on 2 threads, Piper on 2 and Smart Turn on 1 busy): one or two
    threads leave a core idle while a job's serial parts run (Smart Turn is single
    threaded; Whisper's decoder barely parallel), so queues grow: the time to a turn's
    decision was 1170 / 810-830 ms at its median against 530-580 ms with three or four
    threads. Four did no better than three, and queue less, so fairness has less to act
    on. Nice +5 halved the front end's p99 (33-37 ms -> 18-19 ms, max 55-94 -> 33-39 ms)
    at three and four threads for no measurable loss of model throughput.

    There are no stage priorities: a call's next job is the one that call is waiting
    for, whether its Whisper job or its reply's first clause, and the queue waits of
    the three stages measured alike (p90 200-460 ms under overload).
    """

    def __init__(
        self,
        threads: int | None = None,
        *,
        on_wait: Hook | None = None,
        on_run: Hook | None = None,
        niceness: int = MODEL_NICENESS,
        idle_s: float = IDLE_EXIT_S,
    ) -> None:
        super().__init__(
            MODEL_THREADS if threads is None else threads,
            name="model",
            niceness=niceness,
            on_wait=on_wait,
            on_run=on_run,
            idle_s=idle_s,
        )

    async def run(self, owner: Hashable, stage: str, fn: Callable[..., T], /, *args: Any) -> T:
        """`fn(*args)` on a model thread, in `owner`'s turn; its result or its exception.

        Cancelled before it starts, the job leaves the queue and never runs; cancelled
        while it runs, it finishes in its thread and the result is dropped. A job
        dropped by `forget` or `close` raises CancelledError here.
        """
        return await self._submit(owner, stage, fn, args)

    def forget(self, owner: Hashable) -> None:
        """`owner` is gone (its call ended): cancel its queued jobs; running ones finish."""
        for job in self._drop(owner):
            _cancel(job)


class FrontEndLane(_Lane):
    """Threads for per-frame work only, at normal priority: never behind a model job.

    A call owns a one-thread lane (`app/call.py`): its frames stay in order on one
    thread, away from every other call's, and the call needs nothing from the app.
    `python -m benchmarks lanes` found one two-thread lane shared by four calls no different
    (frame p99 14-16 ms either way, while the models kept both cores busy).
    """

    def __init__(
        self,
        threads: int = 1,
        *,
        name: str = "frontend",
        niceness: int = FRONTEND_NICENESS,
        idle_s: float = IDLE_EXIT_S,
    ) -> None:
        super().__init__(threads, name=name, niceness=niceness, idle_s=idle_s)

    async def run(self, fn: Callable[..., T], /, *args: Any) -> T:
        """`fn(*args)` on the lane's thread, after the frames submitted before it."""
        return await self._submit(None, "frontend", fn, args)
