"""The gateway's session with one leased duplex worker, over the worker's /session socket.

Errors, mapped here from websockets and the protocol so callers never see either:

    WorkerError               anything that means "fall back from this worker"
    ├── WorkerUnavailable     no Prepared within the connect timeout (refused, slow, error)
    │   └── WorkerBusy        closed with 1013 at connect: serving someone else, healthy
    ├── WorkerDied            socket dropped, fatal Error, or a frame that breaks protocol
    └── WorkerStalled         no result within the caller's deadline; the socket is still up

A session is used by one task at a time: `connect`, then `send_unit` and `next_result`
(or `results()`), then `stop`, which never raises.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from enum import Enum
from types import TracebackType

import numpy as np
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from agents.duplex.protocol import (
    Error,
    Keypad,
    Message,
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
    ToWorker,
    Unit,
    decode,
    encode,
    pcm16_bytes,
)

log = logging.getLogger(__name__)

BUSY_CLOSE_CODE = 1013  # the worker's "another session holds me" (agents.duplex.worker)

# A unit is 1 s of 16 kHz PCM16 as base64 JSON (~43 kB); results carry speech audio too.
_MAX_FRAME_BYTES = 4 * 1024 * 1024


class WorkerError(Exception):
    """The worker cannot serve this session."""


class WorkerUnavailable(WorkerError):
    """The worker did not accept the session in time."""


class WorkerBusy(WorkerUnavailable):
    """The worker closed the session with 1013 ("try again later"): another session
    holds it. Not a fault of the worker: take the next one."""


class WorkerDied(WorkerError):
    """The session ended underneath us."""


class WorkerStalled(WorkerError):
    """The worker stopped producing results in time."""


class SessionState(Enum):
    NEW = "new"
    ACTIVE = "active"
    PAUSED = "paused"
    CLOSED = "closed"


class WorkerSession:
    def __init__(self) -> None:
        self._ws: ClientConnection | None = None
        self.state = SessionState.NEW
        self.url = ""
        self.prepared: Prepared | None = None

    async def connect(
        self, url: str, prepare: Prepare, *, connect_timeout_s: float = 2.0, token: str = ""
    ) -> Prepared:
        """Open `url`/session, send `prepare` and wait for Prepared.

        `token`: the workers' shared secret (WORKER_TOKEN), sent in the handshake; over
        anything but loopback use wss:// so it does not cross the network in clear.
        """
        if self.state is not SessionState.NEW:
            raise RuntimeError(f"connect() on a session that is {self.state.value}")
        self.url = url.rstrip("/") + "/session"
        headers = {"Authorization": f"Bearer {token}"} if token else None
        try:
            async with asyncio.timeout(connect_timeout_s):
                self._ws = await connect(
                    self.url,
                    max_size=_MAX_FRAME_BYTES,
                    close_timeout=1.0,
                    open_timeout=None,
                    additional_headers=headers,
                )
                await self._ws.send(encode(prepare))
                reply = decode(await self._ws.recv())
        except ConnectionClosed as exc:
            await self._close()
            if exc.rcvd is not None and exc.rcvd.code == BUSY_CLOSE_CODE:
                raise WorkerBusy(f"{self.url} is busy with another session") from exc
            raise WorkerUnavailable(f"{self.url}: no session ({exc!r})") from exc
        except (TimeoutError, OSError, InvalidHandshake, InvalidURI,
                ProtocolViolation) as exc:  # fmt: skip
            await self._close()
            raise WorkerUnavailable(f"{self.url}: no session ({exc!r})") from exc
        if isinstance(reply, Error):
            await self._close()
            raise WorkerUnavailable(f"{self.url} refused the session: {reply.message}")
        if not isinstance(reply, Prepared):
            await self._close()
            raise WorkerUnavailable(f"{self.url}: expected prepared, got {reply.type}")
        self.state = SessionState.ACTIVE
        self.prepared = reply
        return reply

    async def send_unit(
        self, seq: int, audio_16k: np.ndarray, speech: Sequence[float] | None = None
    ) -> None:
        await self._send(
            Unit(
                seq=seq,
                audio=pcm16_bytes(audio_16k),
                speech=None if speech is None else tuple(speech),
            )
        )

    async def send_keypad(self, digits: str) -> None:
        await self._send(Keypad(digits=digits))

    async def next_result(self, timeout_s: float) -> Result:
        """The next Result; acknowledgements and non-fatal errors on the way are absorbed."""
        ws = self._socket()
        try:
            async with asyncio.timeout(timeout_s):
                while True:
                    message = decode(await ws.recv())
                    if isinstance(message, Result):
                        return message
                    self._absorb(message)
        except TimeoutError:
            # recv() is cancel-safe in websockets' asyncio client: no frame is lost.
            raise WorkerStalled(f"{self.url}: no result within {timeout_s:g} s") from None
        except ConnectionClosed as exc:
            await self._close()
            raise WorkerDied(f"{self.url}: connection lost ({exc})") from exc
        except ProtocolViolation as exc:
            await self._close()
            raise WorkerDied(f"{self.url} broke protocol: {exc}") from exc
        except WorkerDied:
            await self._close()
            raise

    async def results(self, timeout_s: float) -> AsyncIterator[Result]:
        """Results as they come, each within `timeout_s` of the last."""
        while True:
            yield await self.next_result(timeout_s)

    async def pause(self) -> None:
        await self._send(Pause())
        self.state = SessionState.PAUSED

    async def resume(self) -> None:
        await self._send(Resume())
        self.state = SessionState.ACTIVE

    async def stop(self, timeout_s: float = 0.5) -> None:
        """Send Stop, wait briefly for Stopped and close. Never raises for a dead worker."""
        ws = self._ws
        if ws is None:
            self.state = SessionState.CLOSED
            return
        try:
            async with asyncio.timeout(timeout_s):
                await ws.send(encode(Stop()))
                while not isinstance(decode(await ws.recv()), Stopped):
                    pass  # late results of a call that is over
        except (TimeoutError, OSError, ConnectionClosed, ProtocolViolation) as exc:
            log.info("%s: stop without a clean Stopped (%r)", self.url, exc)
        finally:
            await self._close()

    async def __aenter__(self) -> WorkerSession:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    def _socket(self) -> ClientConnection:
        if self.state is SessionState.CLOSED:
            raise WorkerDied(f"{self.url}: the session is closed")
        if self._ws is None:
            raise RuntimeError("the session is not connected")
        return self._ws

    async def _send(self, message: ToWorker) -> None:
        ws = self._socket()
        try:
            await ws.send(encode(message))
        except (ConnectionClosed, OSError) as exc:
            await self._close()
            raise WorkerDied(f"{self.url}: connection lost ({exc})") from exc

    def _absorb(self, message: Message) -> None:
        match message:
            case Error(fatal=True):
                raise WorkerDied(f"{self.url}: fatal worker error: {message.message}")
            case Error():
                log.warning("%s: worker error: %s", self.url, message.message)
            case Stopped():
                raise WorkerDied(f"{self.url}: the worker ended the session ({message.reason})")
            case Paused() | Resumed():
                pass  # acknowledgements; `pause`/`resume` already moved our state
            case _:
                raise ProtocolViolation(f"expected a worker→gateway message, got {message.type}")

    async def _close(self) -> None:
        self.state = SessionState.CLOSED
        ws, self._ws = self._ws, None
        if ws is not None:
            # Shielded: a cancelled caller must still not leave the socket open.
            with contextlib.suppress(Exception):
                await asyncio.shield(ws.close())
