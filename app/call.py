"""One phone call: Twilio events in, front end, agent, bot audio out.

Frames flow one way. The receive loop turns Twilio's messages into inbound audio (on the
clock of `media.timestamp`), keypad digits and mark echoes; the front-end task cleans
the audio and finds speech in a worker thread; the agent decides what to say; Playback
sends it back. One TaskGroup owns every task; the call ends when the caller hangs up,
the socket drops, or a task fails, and everything is cancelled with it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

import numpy as np

from agents.cascade.agent import CascadeAgent, CascadeModels
from agents.cascade.llm import ToolChat
from agents.control import CallPolicy
from agents.conversation import REDACTED_KEY, Conversation
from agents.duplex.gateway import CallInputs, DuplexAgent
from agents.duplex.pool import DuplexPool, Lease, NoWorker, QueueFull
from agents.inputs import Digits
from agents.playback import Playback
from agents.tasks import cancel_and_wait, create_task
from agents.turns.settings import turn_taking
from app.call_resume import is_resumed
from app.control import Ended, SessionControls, rest_client
from app.limits import KeypadLimit, MediaPace
from callevents import (
    AnsweredBy,
    BargeIn,
    CallEvent,
    Error,
    Fallback,
    ProtocolErrorEvent,
    StreamStart,
    StreamStop,
)
from media.codec import float_to_pcm16, mulaw_decode
from media.echo import REFERENCE_LEAD_MS
from media.frontend import FrontEnd, FrontEndOutput
from media.inbound import InboundAudioClock
from recordings.recorder import CallRecorder
from telephony.errors import ProtocolError, ProtocolErrorKind
from telephony.protocol import Dtmf, Mark, Media, Start, Stop
from telephony.stream import TwilioStream

if TYPE_CHECKING:
    from app.metrics import Metrics
    from app.settings import Settings

log = logging.getLogger(__name__)

_END = object()
# The bot says its goodbye this long before MAX_CALL_S, when the receive loop closes
# the stream whatever is under way (ended_with max_length).
GOODBYE_LEAD_S = 10.0
# Twilio's answering-machine detection gives up after 30 s (MachineDetectionTimeout);
# no verdict by then is taken for a person.
AMD_WAIT_S = 35.0
# AnsweredBy values that mean a machine took the call (DetectMessageEnd: after its beep).
# https://www.twilio.com/docs/voice/answering-machine-detection
MACHINE = ("machine_end_beep", "machine_end_silence", "machine_end_other", "machine_start", "fax")
# Caller audio waiting for the front end: 5 s of 8 kHz mu-law (it keeps up in ms).
MAX_QUEUED_AUDIO_BYTES = 5 * 8000
# Front-end outputs and digits waiting for the agent: about 10 s of 20 ms frames.
MAX_AGENT_INPUTS = 500
# Protocol errors a call's record keeps; the rest are counted in the metrics only.
MAX_RECORDED_PROTOCOL_ERRORS = 50
# What the agent and the record see of a digit under REDACT_DTMF (agents.conversation).
REDACTED_DIGIT = REDACTED_KEY
# Event fields that carry what the caller said or keyed: in logs at DEBUG only. The
# bot's words (a turn's `intended`) and an LLM tool call's arguments may repeat it.
_PRIVATE_FIELDS = frozenset(
    {"text", "intended", "digits", "heard", "meant", "said", "transcript", "arguments"}
)


def public_fields(event: CallEvent) -> dict[str, object]:
    """What an INFO log line may say of `event`: none of what the caller said or keyed."""
    return {k: v for k, v in event.data().items() if k not in _PRIVATE_FIELDS}


class CallSession:
    def __init__(
        self,
        start: Start,
        stream: TwilioStream,
        *,
        settings: Settings,
        models: CascadeModels,
        metrics: Metrics,
        persona: str,
        recorder: CallRecorder | None = None,
        pool: DuplexPool | None = None,
    ) -> None:
        self.start = start
        self.recorder = recorder
        self.pool = pool
        self.models = models
        self.call_sid = start.call_sid
        self.stream = stream
        self.settings = settings
        self.metrics = metrics
        self.inbound = InboundAudioClock(sample_rate=8000)
        self.inbound.started(time.monotonic())  # made on the stream's start event
        self.frontend = FrontEnd(
            denoise=settings.denoise,
            vad_start=settings.vad_threshold,
            min_silence_ms=64,
            echo_cancel=settings.echo_cancellation,
            gate_margin_db=settings.speech_gate_db,
        )
        self.playback = Playback(
            stream,
            self.now,
            line_now=self.line_now,
            chunk_ms=settings.chunk_ms,
            min_latency_ms=REFERENCE_LEAD_MS,
            on_played=self._record_bot_audio if recorder else None,
            on_event=self._record if recorder else None,
            hold_duck_db=settings.hold_duck_db,
        )
        self.conversation = Conversation(persona, max_turns=settings.history_turns)
        # Placed by us (offhook call, POST /calls): its greeting and AMD come with it.
        self.outbound = start.parameters.get("direction", "") == "outbound-api"
        self.greeting = (
            start.parameters.get("greeting") or settings.outbound_greeting
            if self.outbound
            else settings.greeting
        )
        if is_resumed(start):
            # The call carries on from a gateway that died: the TwiML has said "sorry,
            # we were cut off" already, and the caller is not greeted twice.
            self.greeting = ""
        self.ended: Ended | None = None
        self.answered_by: asyncio.Future[tuple[str, int | None]] = (
            asyncio.get_running_loop().create_future()
        )
        self.controls = SessionControls(
            self.call_sid,
            settings,
            rest_client(settings),
            close=self.stream.close,
            record=self._log_event,
            ended=self._ended,
        )
        llm = models.llm
        tools = isinstance(llm, ToolChat) and llm.offers_tools
        # The cascade always exists: it serves the call, or stands by to take it over.
        self.agent = CascadeAgent(
            models,
            self.playback,
            self.conversation,
            turn_taking=turn_taking(settings),
            metrics=metrics,
            greeting=self.greeting,
            apology=settings.apology,
            reprompt=settings.reprompt,
            farewell=settings.farewell,
            on_event=self._log_event,
            controls=self.controls,
            policy=CallPolicy(
                transfer_to=settings.transfer_to,
                transfer_announcement=settings.transfer_announcement,
                transfer_refusal=settings.transfer_unavailable_text,
                transfer_key=settings.transfer_key,
                silence_timeout_s=settings.silence_timeout_s,
                words=not tools,
            ),
            draft_replies=settings.llm_drafts,
        )
        # Caller audio, the bot audio that played into the caller's room meanwhile (the
        # echo reference), and whether the schedule moved under that reference since the
        # last batch. Bounded in bytes: a stalled front end drops (counted), never grows
        # the process.
        self._audio: asyncio.Queue[tuple[bytes, np.ndarray, bool]] = asyncio.Queue()
        self._schedule_moves = 0
        self._audio_bytes = 0
        self._agent_inputs: asyncio.Queue[FrontEndOutput | Digits | object] = asyncio.Queue(
            maxsize=MAX_AGENT_INPUTS
        )
        self._pace = MediaPace(settings.max_media_rate)
        self._keypad = KeypadLimit()
        self._protocol_errors = 0
        self.outcome = "hangup"
        self.counts = {"barge_in": 0, "error": 0, "protocol_error": 0}
        self.agent_used = "cascade"
        self.fallbacks: list[str] = []

    def now(self) -> int:
        """The call clock: 8 kHz samples of caller audio received (gaps filled)."""
        return self.inbound.position

    def line_now(self) -> int:
        """Where the caller's line is on the call clock, though we may not have read it."""
        return self.inbound.line_position(time.monotonic())

    def _log_event(self, event: CallEvent) -> None:
        self._log(event)
        self._record(event)

    def _log(self, event: CallEvent) -> None:
        if log.isEnabledFor(logging.DEBUG):
            log.debug("call %s: %s %s", self.call_sid, event.name, event.data())
        else:
            log.info("call %s: %s %s", self.call_sid, event.name, public_fields(event))

    def record_event(self, event: CallEvent, *, t_ms: float | None = None) -> None:
        """Put an event that came from outside the call (Twilio's status callbacks) on
        its timeline, at `t_ms` on the call clock (default: now)."""
        self._log(event)
        self._record(event, t_ms=t_ms)

    def _record(self, event: CallEvent, *, t_ms: float | None = None) -> None:
        match event:
            case BargeIn():
                self.counts["barge_in"] += 1
            case Error():
                self.counts["error"] += 1
        if self.recorder is not None:
            try:
                at = self.now() / 8 if t_ms is None else t_ms
                self.recorder.event(at, event.name, **event.data())
            except (ValueError, TypeError):  # a malformed event must not cost the call
                log.exception("call %s: event %r not recorded", self.call_sid, event.name)

    def _record_bot_audio(self, start: int, pcm: object) -> None:
        assert self.recorder is not None
        self.recorder.bot_audio(start, float_to_pcm16(pcm))  # type: ignore[arg-type]

    def _ended(self, ended: Ended) -> None:
        self.ended = ended
        self.outcome = ended.outcome

    def amd_result(self, answered_by: str, detection_ms: int | None) -> None:
        """Twilio's answering-machine verdict for this (outbound) call."""
        self._log_event(AnsweredBy(answered_by=answered_by, detection_ms=detection_ms or 0))
        if not self.answered_by.done():
            self.answered_by.set_result((answered_by, detection_ms))

    def protocol_error(self, exc: ProtocolError) -> None:
        """Recorded in the call's timeline, the first MAX_RECORDED_PROTOCOL_ERRORS only:
        a peer sending nothing but bad messages must not grow the record (the metrics
        count every one)."""
        self.counts["protocol_error"] += 1
        self._protocol_errors += 1
        if self._protocol_errors <= MAX_RECORDED_PROTOCOL_ERRORS:
            self._record(ProtocolErrorEvent(kind=str(exc.kind), error=str(exc)[:200]))
        elif self._protocol_errors == MAX_RECORDED_PROTOCOL_ERRORS + 1:
            log.warning("call %s: more protocol errors, counted, not recorded", self.call_sid)

    async def run(self) -> None:
        self._record(StreamStart(stream_sid=self.start.stream_sid, tracks=list(self.start.tracks)))
        try:
            async with asyncio.TaskGroup() as tasks:
                frontend = create_task(tasks, self._frontend_loop(), name="frontend")
                agent = create_task(tasks, self._serve(), name="agent")
                limit = create_task(tasks, self._time_limit(), name="max-call")
                await self._receive_loop()
                # The caller is gone: nothing more to say or hear.
                await cancel_and_wait(limit)
                await cancel_and_wait(agent)
                await cancel_and_wait(frontend)
        except* Exception as group:
            self.outcome = "error"
            for exc in group.exceptions:
                self.metrics.errors.labels(stage="call").inc()
                log.error("call %s failed", self.call_sid, exc_info=exc)
        finally:
            self.frontend.close()
            self._record(StreamStop(outcome=self.outcome))
            await self._close_record()

    async def _close_record(self) -> None:
        """Finish the record whatever ended the call; a cancellation must not cut it short."""
        if self.recorder is None:
            return
        closing = asyncio.to_thread(
            self.recorder.close,
            ended_with=self.outcome,
            transcript=self.conversation.transcript(),
            meta_updates={
                "summary": self.summary(),
                "agent": self.agent_used,
                "fallbacks": self.fallbacks,
                **self._call_control_meta(),
            },
        )
        try:
            await asyncio.shield(closing)
        except asyncio.CancelledError:
            raise
        except Exception:
            self.metrics.errors.labels(stage="recording").inc()
            log.exception("call %s: closing the record failed", self.call_sid)

    def _call_control_meta(self) -> dict[str, object]:
        """How the bot controlled the call: why it ended it, whom it transferred to, who
        answered an outbound call."""
        meta: dict[str, object] = {"direction": "outbound" if self.outbound else "inbound"}
        if self.ended is not None:
            meta["end_reason"] = self.ended.reason
            if self.ended.transfer_to:
                meta["transfer_to"] = self.ended.transfer_to
        if self.answered_by.done():
            meta["answered_by"] = self.answered_by.result()[0]
        return meta

    async def _time_limit(self) -> None:
        """GOODBYE_LEAD_S before MAX_CALL_S: the bot's goodbye, after which it ends the
        call (bot_hangup, end_reason max_duration). Whatever is under way at MAX_CALL_S
        itself, the receive loop closes the stream then (max_length): a goodbye that
        stalls, a call the duplex agent serves, a limit too short for a goodbye."""
        limit_s = self.settings.max_call_s
        if limit_s <= GOODBYE_LEAD_S:
            return
        await asyncio.sleep(limit_s - GOODBYE_LEAD_S)
        if self.agent.running:
            log.info("call %s: MAX_CALL_S (%.0f s) is near: goodbye", self.call_sid, limit_s)
            self.agent.say_goodbye("max_duration")

    def summary(self) -> dict[str, object]:
        latencies = sorted(
            t.mouth_to_mouth_ms for t in self.agent.timings if t.mouth_to_mouth_ms is not None
        )
        return {
            "turns": sum(1 for t in self.conversation.turns if t.text),
            "barge_ins": self.counts["barge_in"],
            "errors": self.counts["error"],
            "protocol_errors": self.counts["protocol_error"],
            "mouth_to_mouth_ms": {
                "p50": latencies[len(latencies) // 2] if latencies else None,
                "max": latencies[-1] if latencies else None,
            },
        }

    async def _receive_loop(self) -> None:
        """Until `stop`, a drop, MEDIA_TIMEOUT_S without media, MAX_CALL_S, or a flood."""
        loop = asyncio.get_running_loop()
        idle_s = self.settings.media_timeout_s
        ends = loop.time() + self.settings.max_call_s
        try:
            async with asyncio.timeout_at(min(loop.time() + idle_s, ends)) as deadline:
                while (event := await self.stream.receive()) is not None:
                    if isinstance(event, Media):
                        deadline.reschedule(min(loop.time() + idle_s, ends))
                        if not self._on_media(event):
                            return
                    elif not self._on_event(event):
                        return
        except TimeoutError:
            self.outcome = "max_length" if loop.time() >= ends else "timeout"
            log.warning("call %s: closed (%s)", self.call_sid, self.outcome)
            return
        if self.ended is None:  # else the bot closed the stream itself: it ended the call
            self.outcome = "disconnected"

    def _on_media(self, event: Media) -> bool:
        """Feed one media frame; False when the peer floods (the call must end)."""
        if event.track not in ("inbound", "inbound_track"):
            return True
        audio = self.inbound.push(event.timestamp_ms, event.payload, time.monotonic())
        # Gap fill counts: a timestamp jump is as much audio as the bytes it stands for.
        if self._pace.flooding(self.inbound.position):
            self.outcome = "flood"
            self.metrics.rejected_calls.labels(reason="media_flood").inc()
            log.warning("call %s: media faster than real time, closed", self.call_sid)
            return False
        if self._audio_bytes + len(audio) > MAX_QUEUED_AUDIO_BYTES:
            self.metrics.dropped.labels(what="caller_audio").inc()
        else:
            self._audio_bytes += len(audio)
            moves = self.playback.clock.moves
            moved, self._schedule_moves = moves != self._schedule_moves, moves
            self._audio.put_nowait((audio, self._echo_reference(len(audio)), moved))
        if self.recorder is not None:
            self.recorder.caller_audio(mulaw_decode(audio))
        return True

    def _on_event(self, event: object) -> bool:
        """Anything but media; False at `stop`."""
        if isinstance(event, Mark):
            if not self.playback.awaits_echo(event.name):
                self.stream.on_protocol_error(
                    ProtocolError(
                        f"a mark echo for a mark never sent ({len(event.name)} characters)",
                        kind=ProtocolErrorKind.BAD_VALUE,
                    )
                )
            elif not self.playback.echoed(event.name):
                log.debug("call %s: mark %r not pending (after clear?)", self.call_sid, event.name)
        elif isinstance(event, Dtmf):
            if not self._keypad.allow():
                self.metrics.dropped.labels(what="dtmf").inc()
            else:
                digit = REDACTED_DIGIT if self.settings.redact_dtmf else event.digit
                self._to_agent(Digits(digit))
        elif isinstance(event, Stop):
            if self.ended is None:
                self.outcome = "completed"
            return False
        elif isinstance(event, Start):
            log.warning("call %s: second start event ignored", self.call_sid)
        return True

    def _to_agent(self, item: FrontEndOutput | Digits) -> None:
        try:
            self._agent_inputs.put_nowait(item)
        except asyncio.QueueFull:
            what = "dtmf" if isinstance(item, Digits) else "agent_input"
            self.metrics.dropped.labels(what=what).inc()

    def _echo_reference(self, samples: int) -> np.ndarray:
        """What the schedule says played during the `samples` just received, read ahead.

        Read here, on the event loop, because the playout clock changes on it; the
        front end's thread only gets the copy.
        """
        end = self.inbound.position + self.playback.clock.reference_lead
        return self.playback.clock.render(end - samples, end)

    async def _frontend_loop(self) -> None:
        from agents.scheduler import FrontEndLane

        # The call's own front-end thread, at normal priority: a frame never queues
        # behind model inference (agents/scheduler.py) or another call's frames. Closing
        # it waits for the frame in progress, so `run` frees the front end after it.
        lane = FrontEndLane(name=f"frontend-{self.call_sid[-8:]}")
        try:
            while True:
                batch = [await self._audio.get()]
                while not self._audio.empty():
                    batch.append(self._audio.get_nowait())
                self._audio_bytes -= sum(len(audio) for audio, _, _ in batch)
                # One thread hop per batch: cheap when frames arrive one by one, and it
                # catches up in one go after a stall.
                data = b"".join(audio for audio, _, _ in batch)
                reference = np.concatenate([far for _, far, _ in batch])
                moved = any(moved for _, _, moved in batch)
                started = time.perf_counter()
                out = await lane.run(self.frontend.process, data, reference, moved)
                self.metrics.frontend_seconds.inc(time.perf_counter() - started)
                self._to_agent(out)
        finally:
            await lane.aclose()

    async def _serve(self) -> None:
        """Serve the call with a duplex worker when one is free in time, else the cascade."""
        inputs = CallInputs(self._agent_inputs, _END)
        if self.outbound and self.start.parameters.get("amd") == "1":
            answered_by = await self._await_answer()
            if answered_by in MACHINE:
                await self._leave_voicemail(inputs)
                return
        lease = await self._lease_worker()
        if lease is None:
            await self.agent.run(inputs)
            return
        self.agent_used = "duplex"
        duplex = DuplexAgent(
            lease,
            self.playback,
            self.conversation,
            fallback=self._take_over,
            metrics=self.pool.metrics if self.pool else None,
            unit_ms=self.settings.unit_ms,
            greeting=self.settings.greeting,
            greeting_pcm=self.models.canned.get(self.settings.greeting),
            greeting_rate=self.models.tts.sample_rate,
            on_event=self._log_event,
            worker_token=self.settings.worker_token,
            turn_taking=turn_taking(self.settings),
        )
        try:
            await duplex.run(inputs)
        finally:
            lease.release()  # no-op when the agent already released it as unhealthy

    async def _await_answer(self) -> str:
        """Wait for the answering-machine verdict (the bot stays silent meanwhile: a
        machine's greeting must not be answered); what was heard meanwhile is dropped."""
        try:
            async with asyncio.timeout(AMD_WAIT_S):
                answered_by, _ = await self.answered_by
        except TimeoutError:
            log.warning("call %s: no answering-machine verdict; taken for a person", self.call_sid)
            answered_by = "unknown"
        while not self._agent_inputs.empty():
            self._agent_inputs.get_nowait()
        return answered_by

    async def _leave_voicemail(self, inputs: CallInputs) -> None:
        """A machine answered, and its greeting is over: the message, or a hang-up."""
        message = self.settings.voicemail_message
        if not message:
            await self.controls.end_call("voicemail")
            return
        await self.agent.run(inputs, greet=False, voicemail=message)

    def _take_over(self) -> CascadeAgent:
        self.fallbacks.append("cascade")
        return self.agent

    async def _lease_worker(self) -> Lease | None:
        if self.pool is None:
            return None
        # The call may end while we wait, and a pool's I/O can lose that cancellation
        # (asyncio.wait_for on Python 3.11, gh-86296): an agent started after it would
        # serve nobody, and `run` would wait for it forever. `cancelling()` still says so.
        task = asyncio.current_task()
        cancels = task.cancelling() if task is not None else 0

        def ended() -> bool:
            return task is not None and task.cancelling() > cancels

        try:
            lease = await self.pool.acquire(timeout_s=self.settings.duplex_wait_ms / 1000)
        except (NoWorker, QueueFull) as exc:
            if ended():
                raise asyncio.CancelledError from None
            reason = "queue_full" if isinstance(exc, QueueFull) else "no_worker"
            self._log_event(Fallback(source="duplex", target="cascade", reason=reason))
            return None
        if ended():
            lease.release()
            raise asyncio.CancelledError
        return lease
