"""Local duplex worker processes, kept serving: `offhook serve --local-workers N`.

The supervisor starts the workers, lets the gateway wait until they are ready, and then
watches them. A worker is killed (SIGKILL: a stalled process may not heed SIGTERM) and
started again when

- its process exited;
- its /health has not answered for `stall_s` (a hung event loop, a SIGSTOPped process);
- the pool reports a lease given back broken (`report`: the worker stalled on a unit,
  died, or broke protocol) — the pool only knows the worker failed one call, but a
  local worker that did is cheaper to restart than to trust.

Restarts back off exponentially per worker (`backoff_s`, doubling up to `max_backoff_s`)
so a worker that cannot start does not spin; the backoff resets once a worker has been
idle for `stable_s`. A worker whose backend failed to load (health state `error`) is
left alone: starting it again would fail the same way.

Processes are started from the event loop's own thread, on purpose: PR_SET_PDEATHSIG
fires when the *thread* that forked the child ends, so a child forked from a pool thread
would be killed when that thread retires.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from agents.duplex.local import spawn_worker
from agents.duplex.pool import http_health
from agents.environment import SERVER_SECRETS, child_environment

log = logging.getLogger(__name__)

Health = Callable[[str], Awaitable[dict[str, Any] | None]]
LOCAL_WORKER_DROPS = SERVER_SECRETS | {"REDIS_URL", "WORKER_URL"}
Command = Callable[[int, int], list[str]]  # (index, port) → argv


@dataclass(slots=True)
class LocalWorker:
    index: int
    port: int
    url: str
    process: subprocess.Popen[bytes] | None = None
    started: float = 0.0  # monotonic
    last_answer: float = 0.0  # monotonic time of the last health answer
    idle_since: float | None = None
    restarts: int = 0  # since it was last stable: the backoff exponent
    respawn_at: float | None = None  # waiting to be started again
    delay_s: float = 0.0  # the wait before the latest restart
    spawned: int = 0  # processes started for this slot, ever
    state: str = ""  # what its /health last said


class WorkerSupervisor:
    def __init__(
        self,
        count: int,
        first_port: int,
        *,
        env: Mapping[str, str] | None = None,
        worker_envs: Sequence[Mapping[str, str]] = (),
        backend: str = "cascade",
        log_dir: Path | None = None,
        command: Command | None = None,
        health: Health | None = None,
        interval_s: float = 1.0,
        stall_s: float = 10.0,
        start_grace_s: float = 60.0,
        backoff_s: float = 1.0,
        max_backoff_s: float = 60.0,
        stable_s: float = 60.0,
    ) -> None:
        self.workers = [
            LocalWorker(index, first_port + index, f"ws://127.0.0.1:{first_port + index}")
            for index in range(count)
        ]
        # No Twilio secrets. No registry either: local workers serve this gateway's own
        # static list, and on 127.0.0.1 they are unreachable from any other gateway.
        env = {**child_environment(drop=LOCAL_WORKER_DROPS), **(env or {})}
        # Each worker's own variables over the common ones (its LLM server).
        self._envs = [
            {**env, **(worker_envs[index] if index < len(worker_envs) else {})}
            for index in range(count)
        ]
        self._backend = backend
        self._log_dir = log_dir
        self._command = command
        self._health = health or (lambda url: http_health(url, timeout_s=min(2.0, stall_s / 2)))
        self.interval_s = interval_s
        self.stall_s = stall_s
        self.start_grace_s = start_grace_s
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.stable_s = stable_s
        self._kicked = asyncio.Event()  # a report: look now, not at the next interval

    @property
    def urls(self) -> list[str]:
        return [w.url for w in self.workers]

    async def __aenter__(self) -> WorkerSupervisor:
        for worker in self.workers:
            self._spawn(worker)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def wait_ready(self, timeout_s: float) -> bool:
        """Watch until every worker says idle; False (naming the rest) at the timeout."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            await self.check()
            if all(w.state == "idle" for w in self.workers):
                log.info("local workers ready: %s", ", ".join(self.urls))
                return True
            await self._pause(min(0.2, self.interval_s))
        waiting = [f"{w.url} ({w.state or 'no answer'})" for w in self.workers if w.state != "idle"]
        log.error("local workers not ready after %g s: %s", timeout_s, ", ".join(waiting))
        return False

    async def run(self) -> None:
        """Watch the workers until cancelled."""
        while True:
            await self.check()
            await self._pause(self.interval_s)

    async def _pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._kicked.wait()
        self._kicked.clear()

    def report(self, url: str, reason: str) -> None:
        """The pool gave this worker's lease back broken: restart it (the pool's hook)."""
        worker = next((w for w in self.workers if w.url == url), None)
        if worker is None or worker.process is None:
            return  # not one of ours (a remote worker), or already being restarted
        log.warning("local worker %s failed a call (%s): restarting it", url, reason)
        self._kill(worker)
        self._kicked.set()

    async def check(self) -> None:
        """One pass over every worker: start, kill, or note what it says."""
        now = time.monotonic()
        for worker in self.workers:
            if worker.process is None:
                if worker.respawn_at is not None and now >= worker.respawn_at:
                    self._spawn(worker)
            elif (code := worker.process.poll()) is not None:
                log.warning("local worker %s exited with %s", worker.url, code)
                self._schedule_respawn(worker)
        alive = [(w, w.process) for w in self.workers if w.process is not None]
        answers = await asyncio.gather(*(self._ask(w.url) for w, _ in alive))
        now = time.monotonic()
        for (worker, asked), answer in zip(alive, answers, strict=True):
            if worker.process is asked:  # not killed (and perhaps restarted) meanwhile
                self._note(worker, answer, now)

    async def _ask(self, url: str) -> dict[str, Any] | None:
        try:
            return await self._health(url)
        except Exception as exc:  # an injected check that raises is a check that failed
            log.info("health of %s raised %r", url, exc)
            return None

    def _note(self, worker: LocalWorker, answer: dict[str, Any] | None, now: float) -> None:
        if answer is not None:
            worker.last_answer = now
            state = answer.get("state")
            worker.state = state if isinstance(state, str) else ""
            if worker.state == "idle":
                if worker.idle_since is None:
                    worker.idle_since = now
                if now - worker.idle_since >= self.stable_s:
                    worker.restarts = 0
            else:
                worker.idle_since = None
            return
        worker.idle_since = None
        worker.state = ""
        # A starting process takes a while to answer at all; after that, silence is a stall.
        quiet_since = worker.last_answer or worker.started + self.start_grace_s - self.stall_s
        if now - quiet_since > self.stall_s:
            log.warning(
                "local worker %s has not answered its health check for %.1f s: killing it",
                worker.url,
                now - (worker.last_answer or worker.started),
            )
            self._kill(worker)

    def _kill(self, worker: LocalWorker) -> None:
        process = worker.process
        if process is None:
            return
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(1)  # SIGKILL is not refused: this reaps at once
        self._schedule_respawn(worker)

    def _schedule_respawn(self, worker: LocalWorker) -> None:
        delay = min(self.max_backoff_s, self.backoff_s * 2**worker.restarts)
        worker.delay_s = delay
        worker.restarts += 1
        worker.process = None
        worker.state = ""
        worker.idle_since = None
        worker.respawn_at = time.monotonic() + delay
        log.info("local worker %s starts again in %.1f s", worker.url, delay)

    def _spawn(self, worker: LocalWorker) -> None:
        command = self._command(worker.index, worker.port) if self._command is not None else None
        worker.process = spawn_worker(
            worker.index,
            worker.port,
            env=self._envs[worker.index],
            backend=self._backend,
            log_dir=self._log_dir,
            command=command,
        )
        worker.started = time.monotonic()
        worker.last_answer = 0.0
        worker.state = ""
        worker.idle_since = None
        worker.respawn_at = None
        worker.spawned += 1

    async def aclose(self, timeout_s: float = 10.0) -> None:
        """Stop every worker: SIGTERM, then SIGKILL for any still there after `timeout_s`."""
        processes = [w.process for w in self.workers if w.process is not None]
        for worker in self.workers:
            worker.process = None
            worker.respawn_at = None
        for process in processes:
            if process.poll() is None:
                process.terminate()
        deadline = time.monotonic() + timeout_s
        for process in processes:
            while process.poll() is None and time.monotonic() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(0.05)  # Popen has nothing to await
            if process.poll() is None:
                process.kill()
                await asyncio.to_thread(process.wait)
