"""The duplex worker process: one backend, one exclusive session at a time, over a WebSocket.

    LOADING ──► IDLE ──► DUPLEX_ACTIVE ⇄ DUPLEX_PAUSED
       │          ▲            │               │
       ▼          └────────────┴───────────────┘  stop, disconnect, error, pause timeout
     ERROR  (the backend failed to load)

`GET /health` says where the worker stands: always 200 with `state` (the pool leases
only a worker that says `idle`). `WS /session` serves one call with the session
protocol (agents.duplex.protocol). With a token, the handshake must carry
`Authorization: Bearer TOKEN` (compared in constant time) or it is refused with 403
before any session state is touched. A session that sends nothing for
`session_timeout_s`, or stays paused that long, is stopped and the worker freed.

A backend failure mid-session is reported to the gateway as a fatal Error and the worker
goes back to IDLE: the next call may well succeed. ERROR is only for a backend that never loaded.

Deferred finalize: a unit's result is sent before `finalize_unit` runs, and the next
unit waits for that finalize (a barrier), so the bookkeeping overlaps the network.
"""

from __future__ import annotations

import asyncio
import enum
import hmac
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Protocol

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from agents.duplex.backend import DuplexBackend, UnitOutcome
from agents.duplex.protocol import (
    Error,
    Keypad,
    Pause,
    Paused,
    Prepare,
    Prepared,
    ProtocolViolation,
    Result,
    Resume,
    Resumed,
    Stop,
    Stopped,
    ToGateway,
    Unit,
    decode,
    encode,
    pcm16_array,
    pcm16_bytes,
)

log = logging.getLogger(__name__)

BUSY_CLOSE_CODE = 1013  # "try again later": another session holds the worker (the
# gateway's client, agents.duplex.client, has the same number: it takes the next worker)
POLICY_CLOSE_CODE = 1008  # before accept: the handshake is refused (HTTP 403)


class WorkerState(enum.StrEnum):
    LOADING = "loading"
    IDLE = "idle"
    DUPLEX_ACTIVE = "duplex_active"
    DUPLEX_PAUSED = "duplex_paused"
    ERROR = "error"


_LEGAL: dict[WorkerState, frozenset[WorkerState]] = {
    WorkerState.LOADING: frozenset({WorkerState.IDLE, WorkerState.ERROR}),
    WorkerState.IDLE: frozenset({WorkerState.DUPLEX_ACTIVE}),
    WorkerState.DUPLEX_ACTIVE: frozenset({WorkerState.DUPLEX_PAUSED, WorkerState.IDLE}),
    WorkerState.DUPLEX_PAUSED: frozenset({WorkerState.DUPLEX_ACTIVE, WorkerState.IDLE}),
    WorkerState.ERROR: frozenset(),
}


class IllegalTransition(RuntimeError):
    """A worker state change the state machine does not allow."""


class WorkerStateMachine:
    def __init__(self) -> None:
        self.state = WorkerState.LOADING
        # Told of every transition, after it (the registry heartbeat beats at once).
        self.on_change: Callable[[], None] | None = None

    def to(self, new: WorkerState) -> None:
        if new not in _LEGAL[self.state]:
            raise IllegalTransition(
                f"worker cannot go from {self.state.value} to {new.value}; from "
                f"{self.state.value} it may go to {sorted(s.value for s in _LEGAL[self.state])}"
            )
        self.state = new
        if self.on_change is not None:
            self.on_change()


class Announcer(Protocol):
    """Tells gateways about this worker (agents.duplex.registry.WorkerRegistration)."""

    def changed(self) -> None: ...

    async def run(self) -> None: ...

    async def deregister(self) -> None: ...


@dataclass
class WorkerStatus:
    worker_id: str
    backend: str
    machine: WorkerStateMachine = field(default_factory=WorkerStateMachine)
    load_s: float | None = None
    load_error: str = ""
    sessions_served: int = 0
    started: float = field(default_factory=time.monotonic)


class _SessionOver(Exception):
    """Ends a session from any of its tasks; the TaskGroup cancels the rest."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


async def _shielded(awaitable: Awaitable[None], what: str) -> None:
    """Run `awaitable` to completion even if we are cancelled meanwhile; log its failure."""

    async def guarded() -> None:
        try:
            await awaitable
        except Exception:
            log.exception("%s failed", what)

    task = asyncio.ensure_future(guarded())
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        await asyncio.wait([task])  # finish first, then let the cancellation go on
        raise


class DuplexSession:
    """One call on the worker: the receive loop, deferred finalizes and the pause watchdog."""

    def __init__(
        self,
        websocket: WebSocket,
        backend: DuplexBackend,
        status: WorkerStatus,
        *,
        session_timeout_s: float,
        unit_deadline_factor: float,
    ) -> None:
        self.websocket = websocket
        self.backend = backend
        self.status = status
        self.session_timeout_s = session_timeout_s
        self.unit_deadline_factor = unit_deadline_factor
        self.unit_ms = 0  # set by Prepare; 0 until then
        self._tg: asyncio.TaskGroup | None = None
        self._finalizing: asyncio.Task[bool] | None = None
        self._watchdog: asyncio.Task[None] | None = None

    @property
    def machine(self) -> WorkerStateMachine:
        return self.status.machine

    async def run(self) -> None:
        try:
            async with asyncio.TaskGroup() as tg:
                self._tg = tg
                tg.create_task(self._receive_loop())
        except* _SessionOver as group:
            log.info("session over: %s", "; ".join(str(e) for e in group.exceptions))
        finally:
            await _shielded(self.backend.cleanup(), "backend cleanup")
            if self.machine.state in (WorkerState.DUPLEX_ACTIVE, WorkerState.DUPLEX_PAUSED):
                self.machine.to(WorkerState.IDLE)
            if self.unit_ms:
                self.status.sessions_served += 1

    async def _send(self, message: ToGateway) -> None:
        try:
            await self.websocket.send_text(encode(message))
        except (WebSocketDisconnect, RuntimeError, OSError) as exc:
            raise _SessionOver(f"gateway gone while sending {message.type}") from exc

    async def _receive_loop(self) -> None:
        try:
            while True:
                try:
                    async with asyncio.timeout(self.session_timeout_s):
                        received = await self.websocket.receive()
                except TimeoutError:
                    # A gateway that went away without closing, or a client holding the
                    # worker: either way nobody is being served.
                    paused = self.machine.state is WorkerState.DUPLEX_PAUSED
                    await self._send(Stopped("pause_timeout" if paused else "idle_timeout"))
                    raise _SessionOver(
                        f"nothing received for {self.session_timeout_s:g} s"
                    ) from None
                except (WebSocketDisconnect, RuntimeError) as exc:
                    raise _SessionOver("gateway disconnected") from exc
                if received["type"] == "websocket.disconnect":
                    raise _SessionOver("gateway disconnected")
                # A binary frame is a protocol violation, answered like any other.
                frame = received.get("text")
                try:
                    message = decode(frame if frame is not None else received.get("bytes", b""))
                except ProtocolViolation as exc:
                    await self._send(Error(str(exc), fatal=False))
                    continue
                if not await self._handle(message):
                    return
        finally:
            self._stop_watchdog()

    async def _handle(self, message: object) -> bool:
        """Act on one message; False ends the session."""
        state = self.machine.state
        match message:
            case Prepare() if not self.unit_ms:
                try:
                    await self.backend.prepare(message)
                except Exception as exc:
                    log.exception("backend failed to prepare")
                    await self._send(Error(f"backend failed to prepare: {exc}", fatal=True))
                    return False
                self.unit_ms = message.unit_ms
                await self._send(
                    Prepared(
                        self.status.worker_id,
                        self.backend.name,
                        self.unit_ms,
                        keypad=self.backend.keypad_input,
                    )
                )
            case Unit() if self.unit_ms and state is WorkerState.DUPLEX_ACTIVE:
                return await self._unit(message)
            case Keypad() if self.unit_ms and state is WorkerState.DUPLEX_ACTIVE:
                return await self._keypad(message)
            case Pause() if self.unit_ms and state is WorkerState.DUPLEX_ACTIVE:
                self.machine.to(WorkerState.DUPLEX_PAUSED)
                assert self._tg is not None
                self._watchdog = self._tg.create_task(self._pause_watchdog())
                await self._send(Paused())
            case Resume() if state is WorkerState.DUPLEX_PAUSED:
                self._stop_watchdog()
                self.machine.to(WorkerState.DUPLEX_ACTIVE)
                await self._send(Resumed())
            case Stop():
                await self._send(Stopped("stop"))
                return False
            case _:
                kind = getattr(message, "type", type(message).__name__)
                await self._send(
                    Error(
                        f"unexpected {kind} in state {state.value}"
                        f"{'' if self.unit_ms else ' before prepare'}",
                        fatal=False,
                    )
                )
        return True

    async def _finalized(self) -> bool:
        """The barrier: the previous unit's finalize completes before the backend goes on."""
        if self._finalizing is None:
            return True
        finalizing, self._finalizing = self._finalizing, None
        return await finalizing

    async def _keypad(self, keypad: Keypad) -> bool:
        if not self.backend.keypad_input:
            await self._send(
                Error(f"backend {self.backend.name} takes no keypad input", fatal=False)
            )
            return True
        if not await self._finalized():
            return False
        try:
            await self.backend.keypad(keypad.digits)
        except Exception as exc:
            log.exception("backend failed on keypad input")
            await self._send(Error(f"backend failed on keypad input: {exc}", fatal=True))
            return False
        return True

    async def _unit(self, unit: Unit) -> bool:
        if not await self._finalized():
            return False
        try:
            audio = pcm16_array(unit.audio)
        except ProtocolViolation as exc:
            await self._send(Error(str(exc), fatal=False))
            return True
        deadline_s = self.unit_ms / 1000 * self.unit_deadline_factor
        started = time.perf_counter()
        try:
            async with asyncio.timeout(deadline_s):
                outcome = await self.backend.process_unit(audio, unit.speech)
        except TimeoutError:
            await self._send(Error(f"unit {unit.seq} took over {deadline_s:.1f} s", fatal=True))
            return False
        except Exception as exc:
            log.exception("backend failed on unit %d", unit.seq)
            await self._send(Error(f"backend failed on unit {unit.seq}: {exc}", fatal=True))
            return False
        wall_ms = (time.perf_counter() - started) * 1000
        try:
            result = _result(unit.seq, outcome, wall_ms)
        except ProtocolViolation as exc:  # the backend produced what the protocol forbids
            log.error("backend result for unit %d is invalid: %s", unit.seq, exc)
            await self._send(Error(f"backend result for unit {unit.seq} is invalid", fatal=True))
            return False
        await self._send(result)
        assert self._tg is not None
        self._finalizing = self._tg.create_task(self._finalize(unit.seq))
        return True

    async def _finalize(self, seq: int) -> bool:
        """Deferred finalize; False (after telling the gateway) when the backend failed."""
        try:
            await self.backend.finalize_unit()
        except Exception as exc:
            log.exception("backend finalize failed after unit %d", seq)
            await self._send(Error(f"backend finalize failed after unit {seq}: {exc}", True))
            return False
        return True

    async def _pause_watchdog(self) -> None:
        await asyncio.sleep(self.session_timeout_s)
        await self._send(Stopped("pause_timeout"))
        raise _SessionOver(f"paused for over {self.session_timeout_s:g} s")

    def _stop_watchdog(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None


def _result(seq: int, outcome: UnitOutcome, wall_ms: float) -> Result:
    return Result(
        seq=seq,
        action=outcome.action,
        text=outcome.text,
        audio=pcm16_bytes(outcome.audio) if outcome.audio.size else b"",
        sample_rate=outcome.sample_rate,
        yielded=outcome.yielded,
        caller_text=outcome.caller_text,
        end_of_turn=outcome.end_of_turn,
        timings={**outcome.timings, "unit": wall_ms},
        context_len=outcome.context_len,
    )


def create_worker_app(
    backend: DuplexBackend,
    *,
    worker_id: str,
    token: str = "",
    session_timeout_s: float = 30.0,
    unit_deadline_factor: float = 10.0,
    announcer: Callable[[WorkerStatus], Announcer] | None = None,
) -> Starlette:
    """The worker's ASGI app. The backend loads in the background; /health says when.

    `token`: the shared secret a session's handshake must present (empty: none asked).
    `announcer`: builds what registers the worker with the gateways (REDIS_URL) from
    its status; it runs while the app does and is told of every state change.
    """
    status = WorkerStatus(worker_id=worker_id, backend=backend.name)
    announcing = announcer(status) if announcer is not None else None
    if announcing is not None:
        status.machine.on_change = announcing.changed
    expected = f"Bearer {token}".encode()

    async def load() -> None:
        started = time.perf_counter()
        try:
            await backend.load()
        except Exception as exc:
            log.exception("backend %s failed to load", backend.name)
            status.load_error = str(exc)
            status.machine.to(WorkerState.ERROR)
            return
        status.load_s = time.perf_counter() - started
        status.machine.to(WorkerState.IDLE)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with asyncio.TaskGroup() as tg:
            loading = tg.create_task(load())
            beating = tg.create_task(announcing.run()) if announcing is not None else None
            try:
                yield
            finally:
                loading.cancel()
                if beating is not None:
                    beating.cancel()
        if announcing is not None:
            # Out of the registry at once (not a heartbeat TTL later), before the
            # backend closes: no gateway leases a worker on its way out.
            await _shielded(announcing.deregister(), "deregistration")
        aclose = getattr(backend, "aclose", None)  # backends that started processes
        if aclose is not None:
            await _shielded(aclose(), "backend close")

    async def health(request: Request) -> JSONResponse:
        body: dict[str, object] = {
            "worker_id": status.worker_id,
            "state": status.machine.state.value,
            "backend": status.backend,
            "load_s": status.load_s,
            "sessions_served": status.sessions_served,
            "memory_mb": backend.memory_mb(),
            "uptime_s": time.monotonic() - status.started,
        }
        if status.load_error:
            body["error"] = status.load_error
        return JSONResponse(body)

    def authorized(websocket: WebSocket) -> bool:
        if not token:
            return True
        offered = websocket.headers.get("authorization", "").encode()
        return hmac.compare_digest(offered, expected)

    async def session(websocket: WebSocket) -> None:
        if not authorized(websocket):
            log.warning("session refused: wrong or missing worker token")
            await websocket.close(POLICY_CLOSE_CODE)  # before accept: HTTP 403
            return
        await websocket.accept()
        if status.machine.state is not WorkerState.IDLE:
            await websocket.close(BUSY_CLOSE_CODE, reason="busy")
            return
        status.machine.to(WorkerState.DUPLEX_ACTIVE)  # no await since the check: exclusive
        await DuplexSession(
            websocket,
            backend,
            status,
            session_timeout_s=session_timeout_s,
            unit_deadline_factor=unit_deadline_factor,
        ).run()
        if websocket.application_state is WebSocketState.CONNECTED:
            try:
                await websocket.close(1000)
            except (WebSocketDisconnect, RuntimeError, OSError):
                pass  # the gateway went first (uvicorn says so only when we send)

    app = Starlette(
        routes=[Route("/health", health), WebSocketRoute("/session", session)],
        lifespan=lifespan,
    )
    app.state.worker = status
    return app
