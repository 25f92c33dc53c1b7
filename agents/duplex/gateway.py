"""One call served by a duplex worker, with the in-process cascade as the safety net.

The caller's cleaned 16 kHz audio is cut into units and streamed to the leased worker;
each result is mapped onto the telephony side exactly like the cascade's speech: audio
through Playback (mu-law chunks with marks), `clear` when the model yields to the
caller, the bot's turn cut to what was heard. When the worker dies or stalls, the call
continues on the cascade with the same conversation and the same playback, so the
caller hears at most about a second of silence: the cascade hears the caller's
unanswered turn again from its start, answers a turn the worker took but did not
answer, and finishes a reply the worker was cut off in.

Key presses go to the worker when its backend takes them (`Prepared.keypad`); a
speech-only model cannot, so the first key press hands the call to the cascade.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from agents.cascade.agent import CarryOn, CascadeAgent
from agents.conversation import Conversation, Speaker, Turn
from agents.duplex.barge_in import GatewayBargeIn
from agents.duplex.client import (
    WorkerBusy,
    WorkerDied,
    WorkerError,
    WorkerSession,
    WorkerStalled,
)
from agents.duplex.handover import UnansweredInput
from agents.duplex.pool import MAX_BUSY_HOPS, NoWorker, QueueFull
from agents.duplex.protocol import Prepare, Result, pcm16_array
from agents.inputs import Digits
from agents.playback import Playback
from agents.turns.engine import TurnTaking
from callevents import BargeIn, BotTurn, CallerTurn, EventSink, Fallback
from media.frontend import FrontEndOutput

if TYPE_CHECKING:
    from agents.duplex.pool import Lease, PoolMetrics

log = logging.getLogger(__name__)

RATE = 16000
VAD_WINDOW = 512  # the front end's speech windows: 32 ms at 16 kHz


class CallInputs:
    """The call's agent inputs as a cancellation-safe iterator.

    An async generator is closed when a task waiting on it is cancelled; the duplex
    agent must hand the very same stream to the cascade when it falls back, so this is
    a plain object over the session's queue.
    """

    def __init__(self, queue: asyncio.Queue[FrontEndOutput | Digits | object], end: object) -> None:
        self._queue = queue
        self._end = end
        self._replay: list[FrontEndOutput | Digits] = []

    def replay_first(self, items: list[FrontEndOutput | Digits]) -> None:
        """Hand these out again, before anything new: a takeover's unanswered turn."""
        self._replay = [*items, *self._replay]

    def __aiter__(self) -> CallInputs:
        return self

    async def __anext__(self) -> FrontEndOutput | Digits:
        if self._replay:
            return self._replay.pop(0)
        item = await self._queue.get()
        if item is self._end:
            raise StopAsyncIteration
        return item  # type: ignore[return-value]


class KeypadUnsupported(WorkerError):
    """The caller pressed a key and the worker's model cannot take key presses."""


class DuplexAgent:
    def __init__(
        self,
        lease: Lease,
        playback: Playback,
        conversation: Conversation,
        *,
        fallback: Callable[[], CascadeAgent],
        metrics: PoolMetrics | None,
        unit_ms: int = 1000,
        greeting_pcm: np.ndarray | None = None,
        greeting_rate: int = 22050,
        greeting: str = "",
        stall_grace_s: float = 1.0,
        on_event: EventSink | None = None,
        worker_token: str = "",
        turn_taking: TurnTaking | None = None,
    ) -> None:
        self.lease = lease
        self.playback = playback
        self.conversation = conversation
        self._fallback = fallback
        self._metrics = metrics
        self.unit_samples = RATE * unit_ms // 1000
        self._unit_ms = unit_ms
        self._greeting = greeting
        self._greeting_pcm = greeting_pcm
        self._greeting_rate = greeting_rate
        self._stall_grace_s = stall_grace_s
        self._emit: EventSink = on_event or (lambda _event: None)
        self._token = worker_token
        self._session = WorkerSession()
        self._bot_turn: Turn | None = None
        self._sent_at: dict[int, float] = {}
        self._unanswered = UnansweredInput()
        self.fell_back: str | None = None  # why the call left the worker, if it did
        # Barge-in at the gateway: the worker only hears the caller a unit at a time, so
        # the gateway holds the bot's audio itself at the caller's first loud words (the
        # engine's rule) and lets the worker's results decide what follows.
        self._barge_in = GatewayBargeIn(
            playback,
            turn_taking or TurnTaking(),
            unit_ms=unit_ms,
            cut=self._cut,
            turn_id=lambda: self._bot_turn.turn_id if self._bot_turn else 0,
            emit=self._emit,
        )

    async def run(self, inputs: CallInputs) -> None:
        try:
            await self._connect(
                Prepare(
                    system_prompt=self.conversation.persona,
                    history=self.conversation.messages()[1:],
                    unit_ms=self._unit_ms,
                )
            )
            if self._greeting and self._greeting_pcm is not None:
                turn = self.conversation.start_bot()
                await self.playback.play(
                    self._greeting_pcm, self._greeting_rate, self._greeting, turn.turn_id
                )
                turn.text = turn.intended = self._greeting
            async with asyncio.TaskGroup() as tasks:
                sender = tasks.create_task(self._send_units(inputs), name="duplex-send")
                await self._receive_results()
                sender.cancel()
        except* WorkerError as group:
            await self._fall_back(_reason(group), inputs)
        finally:
            await self._session.stop()
            # The lease this call ended on: after a busy hop, not the one it was given.
            self.lease.release()

    async def _connect(self, prepare: Prepare) -> None:
        """Open the session. A worker that says busy (1013) serves someone else and is
        healthy: it is passed over for the next worker, never reported broken."""
        hops = 0
        while True:
            try:
                await self._session.connect(self.lease.url, prepare, token=self._token)
                return
            except WorkerBusy:
                if hops == MAX_BUSY_HOPS:
                    self.lease.release_busy()  # so the fallback reports nobody broken
                    raise
                hops += 1
                log.info("duplex worker %s is busy: taking the next one", self.lease.url)
                try:
                    self.lease = await self.lease.next_after_busy()
                except (NoWorker, QueueFull) as exc:
                    raise WorkerBusy(f"no other worker free: {exc}") from exc
                self._session = WorkerSession()

    async def _fall_back(self, reason: str, inputs: CallInputs) -> None:
        self.fell_back = reason
        self.lease.release(healthy=False, reason=reason)
        if self._metrics is not None:
            self._metrics.fallbacks.labels(reason=reason).inc()
        self._emit(Fallback(source="duplex", target="cascade", reason=reason))
        log.warning(
            "duplex worker %s failed (%s): the call continues on the cascade",
            self.lease.url,
            reason,
        )
        # The cascade picks up the same conversation, playback and input stream.
        inputs.replay_first(self._unanswered.take())
        await self._fallback().run(inputs, greet=False, carry_on=self._owed())

    def _owed(self) -> CarryOn | None:
        """What the caller is waiting for from the bot that takes over."""
        if self._bot_turn is not None and self._bot_turn.text:
            return "resume"  # the worker died in the middle of a reply
        turns = [t for t in self.conversation.turns if t.text]
        if turns and turns[-1].speaker is Speaker.CALLER:
            return "answer"  # the worker took the turn and died before answering
        return None

    async def _send_units(self, inputs: CallInputs) -> None:
        pending: list[np.ndarray] = []
        size = 0
        seq = 0
        probs: list[float] = []  # the front end's speech windows not yet sent
        sent = 0  # samples sent in units so far
        keypad = self._session.prepared is not None and self._session.prepared.keypad
        async for item in inputs:
            self._unanswered.note(item, bot_audible=self.playback.audible())
            if isinstance(item, Digits):
                if not keypad:
                    raise KeypadUnsupported(f"{self.lease.url} takes no keypad input")
                await self._session.send_keypad(item.digits)
                continue
            await self._barge_in.hear(item)
            pending.append(item.audio)
            probs.extend(item.probs)
            size += len(item.audio)
            while size >= self.unit_samples:
                audio = np.concatenate(pending)
                unit, rest = audio[: self.unit_samples], audio[self.unit_samples :]
                pending, size = ([rest], len(rest)) if len(rest) else ([], 0)
                # The windows that end inside this unit go with it.
                windows = (sent + self.unit_samples) // VAD_WINDOW - sent // VAD_WINDOW
                speech, probs = probs[:windows], probs[windows:]
                sent += self.unit_samples
                seq += 1
                self._sent_at[seq] = time.perf_counter()
                await self._session.send_unit(seq, unit, speech)

    async def _cut(self, reason: str) -> None:
        """The caller has the turn: what they had not heard of the bot is dropped."""
        for heard in await self.playback.clear(reason):
            self.conversation.heard(heard.turn_id, heard.text)
            self._emit(BargeIn(turn_id=heard.turn_id, heard=heard.text, truncated=heard.truncated))
        self._bot_turn = None

    async def _receive_results(self) -> None:
        # A worker that keeps up answers each unit within its length of sending it; a
        # unit and the grace late means it is stalled. With no unit out, the next one
        # is due within a unit, and its answer within a unit and the grace after that.
        allowance = self._unit_ms / 1000 + self._stall_grace_s
        while True:
            oldest = min(self._sent_at.values(), default=None)
            if oldest is None:
                timeout = allowance + self._unit_ms / 1000
            else:
                timeout = max(0.05, oldest + allowance - time.perf_counter())
            result = await self._session.next_result(timeout_s=timeout)
            sent = self._sent_at.pop(result.seq, None)
            if sent is None:  # a result for a unit never sent, or answered twice
                raise WorkerDied(f"{self.lease.url} answered unit {result.seq}, which is not out")
            if self._metrics is not None:
                self._metrics.unit_seconds.observe(time.perf_counter() - sent)
            await self._apply(result)

    async def _apply(self, result: Result) -> None:
        await self._barge_in.settle(result)
        if result.caller_text:
            self._unanswered.answered()
            self.conversation.add_caller(result.caller_text)
            self._emit(CallerTurn(text=result.caller_text))
        elif result.yielded:
            self._unanswered.barged_in()
        if result.yielded and self.playback.audible():
            for heard in await self.playback.clear():
                self.conversation.heard(heard.turn_id, heard.text)
                self._emit(
                    BargeIn(turn_id=heard.turn_id, heard=heard.text, truncated=heard.truncated)
                )
            self._bot_turn = None
        if result.action in ("speak", "backchannel") and result.audio:
            if self._bot_turn is None:
                self._bot_turn = self.conversation.start_bot()
            turn = self._bot_turn
            pcm = pcm16_array(result.audio)
            await self.playback.play(pcm, result.sample_rate, result.text, turn.turn_id)
            turn.intended = f"{turn.intended} {result.text}".strip()
            if not turn.truncated:
                turn.text = turn.intended
        if result.end_of_turn and self._bot_turn is not None:
            turn = self._bot_turn
            self._emit(
                BotTurn(
                    turn_id=turn.turn_id, text=turn.text, intended=turn.intended, truncated=False
                )
            )
            self._bot_turn = None


def _reason(group: BaseExceptionGroup[WorkerError]) -> str:
    """The fallbacks metric's label for why the call left its worker."""
    if group.subgroup(WorkerBusy) is not None:
        return "worker_busy"
    if group.subgroup(KeypadUnsupported) is not None:
        return "keypad_unsupported"
    if group.subgroup(WorkerStalled) is not None:
        return "worker_stalled"
    if group.subgroup(WorkerDied) is not None:
        return "worker_died"
    return "worker_error"
