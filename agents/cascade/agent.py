"""The cascade agent: the turn-taking engine's driver, with Whisper, an LLM and Piper.

It feeds the engine (agents/turns) the front end's output (16 kHz cleaned audio and
speech events, counted in samples) and what the bot is playing, and does what the engine
decides: evaluate the turn so far, answer it, ask again, hold, resume or clear the bot.
Keypad digits are answered here. Everything slow (end-of-turn model, Whisper, Piper)
runs through the model scheduler, off the event loop; the LLM runs in its own process or
remotely. Speculation hides most of the latency: at the first short pause the end-of-turn
model and Whisper both start; if the caller goes on talking the work is thrown away.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from agents.cascade.call_end import EndCall, Then, Transfer, once_heard
from agents.cascade.keypad import KeypadEntry
from agents.cascade.llm import ChatModel, ChatPool, Message, ToolCall, ToolChat
from agents.cascade.models import CascadeModels
from agents.cascade.reply_writer import ReplyWriter, TurnTiming
from agents.cascade.silence_watch import SilenceWatch
from agents.cascade.turn_evaluator import TurnEvaluator
from agents.control import CALL_TOOLS, CallControls, CallPolicy, EndReason, TransferReason
from agents.conversation import Conversation, Turn
from agents.errors import BackendError
from agents.inputs import Digits
from agents.playback import PHONE_RATE, Playback
from agents.tasks import cancel_and_wait, create_task
from agents.turns.engine import (
    Answer,
    Clear,
    Decision,
    DropEvaluation,
    Evaluate,
    Frame,
    Hold,
    Lower,
    Reopen,
    Reprompt,
    Resume,
    Silence,
    TurnEngine,
    TurnState,
    TurnTaking,
)
from agents.turns.judge import judge_for
from agents.turns.text import is_farewell, wants_a_person
from callevents import (
    BargeIn,
    BotTurn,
    CallEnding,
    CallerTurn,
    Dtmf,
    Error,
    EventSink,
    ReplyCancelled,
    ReplyStart,
    ToolCalled,
    TransferRequested,
)
from callevents import Hold as HoldEvent
from callevents import Reprompt as RepromptEvent
from callevents import Resume as ResumeEvent
from media.frontend import FrontEndOutput

if TYPE_CHECKING:
    from agents.metrics import AgentMetrics as Metrics

__all__ = [
    "RESUME_NOTE",
    "CarryOn",
    "CascadeAgent",
    "CascadeModels",
    "TurnTaking",
    "TurnTiming",
]

log = logging.getLogger(__name__)

RATE = 16000  # front-end output rate
T = TypeVar("T")


# What a caller is waiting for when the cascade takes a call over mid-conversation.
CarryOn = Literal["answer", "resume"]
RESUME_NOTE = (
    "Your last reply was cut off by a technical fault. Finish it from where it stopped, "
    "briefly, without repeating what you already said."
)
DEFAULT_REPROMPT = "Sorry, I didn't catch that. Could you say it again?"
DEFAULT_FAREWELL = "Thanks for calling. Goodbye!"


class CascadeAgent:
    def __init__(
        self,
        models: CascadeModels,
        playback: Playback,
        conversation: Conversation,
        *,
        turn_taking: TurnTaking,
        metrics: Metrics,
        greeting: str = "",
        apology: str = "",
        reprompt: str = DEFAULT_REPROMPT,
        farewell: str = DEFAULT_FAREWELL,
        on_event: EventSink | None = None,
        controls: CallControls | None = None,
        policy: CallPolicy | None = None,
        draft_replies: bool = True,
    ) -> None:
        self.models = models
        self._llm: ChatModel = models.llm  # a pool's session for this call while it runs
        self.controls = controls
        self.policy = policy or CallPolicy()
        self._ending = False  # the goodbye is said (or being said): the call is over
        self._serving = False
        self.playback = playback
        self.conversation = conversation
        self.cfg = turn_taking
        self.metrics = metrics
        self.greeting = greeting
        self.apology = apology
        self.reprompt = reprompt
        self.farewell = farewell
        self._emit: EventSink = on_event or (lambda _event: None)
        self._tasks: asyncio.TaskGroup | None = None
        self.engine = TurnEngine(
            turn_taking,
            emit=self._emit,
            judge=judge_for(turn_taking, words=models.words_judge is not None),
        )
        self.evaluator = TurnEvaluator(
            end_of_turn=models.end_of_turn,
            stt=models.stt,
            run=self._model_run,
            utterance_start=lambda: self.engine.utterance_start,
            words=models.words_judge,
            bot_line=conversation.last_bot_line,
            rate=RATE,
            voice=turn_taking.fused.hears_the_voice,
        )
        self._response: asyncio.Task[None] | None = None
        self._response_turn: Turn | None = None
        self._response_audible = False
        self._committed_turn: Turn | None = None
        self.draft_replies = draft_replies
        self.writer = ReplyWriter(
            owner=self,
            tts=models.tts,
            scheduler=models.scheduler,
            drafts=models.drafts,
            canned=models.canned,
            playback=playback,
            metrics=metrics,
            emit=self._emit,
            items=self._llm_items,
            spawn=self._spawn,
            on_audible=self._reply_audible,
        )
        self.keypad = KeypadEntry(turn_taking.digit_timeout_ms, self._on_keypad_entry, self._spawn)
        self.timings: list[TurnTiming] = []
        self._silence = SilenceWatch(RATE)

    # --- the loop --------------------------------------------------------------------

    async def run(
        self,
        inputs: AsyncIterator[FrontEndOutput | Digits],
        *,
        greet: bool = True,
        carry_on: CarryOn | None = None,
        voicemail: str | None = None,
    ) -> None:
        """Serve the call until `inputs` ends.

        Taking over a call from another agent: `greet=False`, and `carry_on` says what the
        caller is waiting for: an answer to their last turn, or the rest of a bot reply
        that was cut off. `voicemail`: a machine took the call; leave this and hang up.
        """
        async with asyncio.TaskGroup() as tasks:
            self._tasks = tasks
            self._serving = True
            self.models.drafts.call_started()
            session = self.models.llm.session() if isinstance(self.models.llm, ChatPool) else None
            self._llm = session or self.models.llm
            try:
                if voicemail is not None:
                    self._emit(CallEnding(reason="voicemail"))
                    self._start_response(
                        None, canned=voicemail, kind="voicemail", then=EndCall("voicemail")
                    )
                elif self.greeting and greet:
                    self._start_response(None, canned=self.greeting, kind="greeting")
                elif carry_on is not None:
                    note = RESUME_NOTE if carry_on == "resume" else ""
                    self._start_response(None, note=note, kind="resume")
                async for item in inputs:
                    if isinstance(item, Digits):
                        self._emit(Dtmf(digits=item.digits))
                        self.keypad.press(item.digits)
                    else:
                        await self._on_audio(item)
                    await self._collect_evaluation()
            finally:
                # Hang-up: nothing of ours outlives the call.
                if self._response is not None:
                    self._response.cancel()
                self.keypad.cancel()
                self.evaluator.cancel()
                self.models.scheduler.forget(self)
                self.models.drafts.call_ended()
                if session is not None:
                    session.close()
                self.writer.drop_draft()
                self.writer.stop_following()
                self._serving = False
        # A cancelled task keeps its CancelledError, whose traceback holds this frame
        # (and so this agent), and the group holds the task: a cycle that kept a whole
        # call (its audio, front end, record buffers) until Python's rare full GC.
        self._tasks = None

    @property
    def running(self) -> bool:
        """Serving a call now (so it can be asked to say goodbye)."""
        return self._serving

    # --- caller audio ------------------------------------------------------------------

    async def _on_audio(self, out: FrontEndOutput) -> None:
        self.evaluator.audio.add(out.start_sample, out.audio)
        self.evaluator.audio.speech(out.events)
        engine = self.engine
        frame = Frame(
            end=out.start_sample + len(out.audio),
            samples=len(out.audio),
            events=out.events,
            level_db=out.level_db,
            noise_floor_db=out.noise_floor_db,
            echo_settled=out.echo_settled,
            bot_audible=self.playback.audible(),
            bot_level_db=self.playback.reference_level_db() if engine.over_bot else -120.0,
        )
        await self._apply(engine.frame(frame))
        if engine.state is TurnState.CALLER:
            if engine.speaking:
                # The caller went on: the words will be more than the draft's (the
                # next pause's evaluation would drop it; it need not write till then).
                self.writer.drop_draft()
            elif not self.writer.drafting:
                self._maybe_draft()  # a hanging turn's words become worth one mid-wait
        self.evaluator.audio.keep_from(self._keep_from())
        self._check_silence()

    def _check_silence(self) -> None:
        """A caller who says nothing for `silence_timeout_s` after the bot's turn is asked
        again; after as long again, the bot says goodbye and ends the call."""
        engine = self.engine
        busy = (
            engine.speaking
            or engine.state is not TurnState.LISTENING
            or self._response is not None
            or self.keypad.pending
            or self.evaluator.running
            or self.playback.audible()
            or self._ending
        )
        match self._silence.check(
            engine.position,
            timeout_s=self.policy.silence_timeout_s,
            busy=busy,
            speaking=engine.speaking,
            can_ask=bool(self.reprompt),
        ):
            case "ask_again":
                self._start_response(None, canned=self.reprompt, kind="reprompt")
            case "goodbye":
                self.say_goodbye("silence")

    def _keep_from(self) -> int:
        """The oldest caller audio still needed: the turn's, or a preroll's worth."""
        engine = self.engine
        preroll = RATE * self.cfg.preroll_ms // 1000
        latest = engine.position - preroll - RATE // 2
        if engine.state in (TurnState.LISTENING, TurnState.BOT):
            return latest
        return min(engine.utterance_start, latest)

    async def _collect_evaluation(self) -> None:
        """Hand a finished evaluation to the engine (checked after every input)."""
        collected = self.evaluator.collect()
        if collected is None:
            return
        ticket, result = collected
        if isinstance(result, BackendError):
            self._failed(result)
            await self._apply(self.engine.failed(ticket.end))
            if self.apology and self.engine.state is TurnState.LISTENING:
                self._start_response(None, canned=self.apology, kind="apology")
            return
        await self._apply(self.engine.evaluated(result))
        self._maybe_draft()

    async def _apply(self, decisions: list[Decision]) -> None:
        for decision in decisions:
            match decision:
                case Evaluate():
                    self._start_evaluation(decision)
                case DropEvaluation():
                    self._drop_evaluation()
                case Answer():
                    self._answer(decision)
                case Reprompt():
                    self._emit(RepromptEvent(reason=decision.reason, speech_ms=decision.speech_ms))
                    timing = self._timing(decision.end, decision.silence_ms)
                    self._start_response(timing, canned=self.reprompt, kind="reprompt")
                case Reopen():
                    await self._cancel_response(reason="caller_resumed")
                    if decision.restore and self._committed_turn is not None:
                        self.conversation.drop(self._committed_turn)
                    self._committed_turn = None
                case Hold():
                    await self.playback.hold()
                    turn = self._response_turn
                    self._emit(
                        HoldEvent(
                            turn_id=turn.turn_id if turn else 0,
                            heard=self.playback.clock.turn_heard(turn.turn_id) if turn else "",
                        )
                    )
                case Silence():
                    await self.playback.silence()
                case Lower():
                    await self.playback.lower()
                case Resume():
                    await self.playback.resume()
                    if decision.reason == "backchannel":
                        self.metrics.backchannels.inc()
                    self._emit(ResumeEvent(held_ms=decision.held_ms, reason=decision.reason))
                case Clear():
                    await self._barge_in(decision.reason)

    # --- end of turn -------------------------------------------------------------------

    def _start_evaluation(self, ticket: Evaluate) -> None:
        self.writer.drop_draft()  # the caller went on: the words will be more than the draft's
        self.evaluator.start(ticket, self._spawn)

    def _drop_evaluation(self) -> None:
        self.writer.drop_draft()
        self.evaluator.drop()

    def _timing(self, speech_end: int, silence_ms: int) -> TurnTiming:
        """A caller turn's timing so far: the pause waited, and Whisper's time."""
        stt_ms = self.evaluator.stt_ms(speech_end)
        return TurnTiming(speech_end=speech_end, end_of_turn_ms=silence_ms, stt_ms=stt_ms)

    def _model_run(self, stage: str, fn: Callable[..., T], /, *args: Any) -> Awaitable[T]:
        """A model call in this call's turn on the shared scheduler."""
        return self.models.scheduler.run(self, stage, fn, *args)

    def _answer(self, answer: Answer) -> None:
        timing = self._timing(answer.end, answer.silence_ms)
        self.evaluator.forget_timings()
        self.metrics.end_of_turn_seconds.observe(answer.silence_ms / 1000)
        self.metrics.stt_seconds.observe(timing.stt_ms / 1000)
        turn = self.conversation.add_caller(answer.text)
        if turn.start_ms is None:
            turn.start_ms = answer.start * 1000 / RATE
        turn.end_ms = answer.end * 1000 / RATE
        self._committed_turn = turn
        self._emit(CallerTurn(text=answer.text, start_ms=turn.start_ms, end_ms=turn.end_ms))
        if answer.farewell and self.farewell:
            # A fixed line, at once: a goodbye needs no model, and it must not ramble.
            self._start_response(
                timing, canned=self.farewell, kind="farewell", then=EndCall("farewell")
            )
        elif self.policy.words and self.policy.transfer_to and wants_a_person(answer.text):
            self._start_transfer("words", timing)
        else:
            self._start_response(timing, kind="answer")

    # --- ending and handing over the call ---------------------------------------------

    def say_goodbye(self, reason: EndReason) -> None:
        """Say the farewell line, wait until Twilio has played it, end the call."""
        self._emit(CallEnding(reason=reason))
        self._start_response(
            None, canned=self.farewell or DEFAULT_FAREWELL, kind="farewell", then=EndCall(reason)
        )

    def _start_transfer(self, reason: TransferReason, timing: TurnTiming | None) -> None:
        """Announce the transfer and make it once heard; or say it cannot be made."""
        refusal = "no call controls" if self.controls is None else self.controls.transfer_refusal()
        self._emit(TransferRequested(reason=reason, refused=refusal or ""))
        if refusal is not None:
            self._start_response(timing, canned=self.policy.transfer_refusal, kind="transfer")
            return
        self._start_response(
            timing,
            canned=self.policy.transfer_announcement,
            kind="transfer",
            then=Transfer(reason),
        )

    async def _after_heard(self, turn: Turn, then: EndCall | Transfer) -> None:
        """The reply before an end or a transfer has gone out: act once it is played."""
        if isinstance(then, EndCall):
            self._ending = True
        assert self.controls is not None
        match await once_heard(turn, then, self.playback, self.controls):
            case "talked_over":  # they have more to say
                self._ending = False
            case "refused":
                self._start_response(None, canned=self.policy.transfer_refusal, kind="transfer")

    # --- interruptions -----------------------------------------------------------------

    async def _barge_in(self, reason: str) -> None:
        turn = self._response_turn
        await self._cancel_response(reason="barge_in")
        cleared_ms = self.playback.stopped_at() * 1000 / PHONE_RATE
        heard = await self.playback.clear(reason)
        self.metrics.barge_ins.inc()
        reported = set()
        for record in heard:
            self.conversation.cut(record.turn_id, record.text, cleared_ms)
            reported.add(record.turn_id)
            self._emit(
                BargeIn(
                    turn_id=record.turn_id,
                    heard=record.text,
                    truncated=record.truncated,
                    reason=reason,
                )
            )
        if turn is not None and turn.turn_id not in reported and self._response_audible:
            # Held between clauses: nothing was queued, and what was heard is final.
            text = self.playback.clock.turn_heard(turn.turn_id)
            self.conversation.cut(turn.turn_id, text, cleared_ms)
            truncated = text != turn.intended
            self._emit(
                BargeIn(turn_id=turn.turn_id, heard=text, truncated=truncated, reason=reason)
            )
        if turn is not None and self._response_audible:
            self._bot_turn_over(turn)

    # --- keypad ------------------------------------------------------------------------

    async def _on_keypad_entry(self, digits: str) -> None:
        self._drop_evaluation()
        if self._response is not None or self.playback.holding:
            await self._cancel_response(reason="dtmf")
            for record in await self.playback.clear("dtmf"):
                self.conversation.heard(record.turn_id, record.text)
            if self._response_turn is not None and self._response_audible:
                self._bot_turn_over(self._response_turn)
        self.engine.caller_reset()
        self._committed_turn = self.conversation.add_digits(digits)
        timing = TurnTiming(speech_end=self.engine.position)
        if self.policy.transfer_key and digits == self.policy.transfer_key:
            self._start_transfer("key", timing)
            return
        self._start_response(timing, kind="digits")

    # --- the bot's turn ----------------------------------------------------------------

    def _start_response(
        self,
        timing: TurnTiming | None,
        *,
        canned: str = "",
        note: str = "",
        kind: str = "answer",
        then: Then = None,
    ) -> None:
        """`then`: what to do once the reply has been heard (end or transfer the call)."""
        if self._response is not None and not self._response.done():
            # One bot turn at a time: a newer turn supersedes the one still speaking.
            self._response.cancel()
        if canned:
            self.writer.drop_draft()  # a fixed line: the model's draft is not wanted
        turn = self.conversation.start_bot()
        self._response_turn = turn
        self._response_audible = False
        self.engine.reply_started(last=then is not None)
        self._emit(ReplyStart(turn_id=turn.turn_id, kind=kind))
        self._response = self._spawn(self._respond(turn, timing, canned, note, then), "respond")

    async def _cancel_response(self, *, reason: str) -> None:
        task, self._response = self._response, None
        if task is None or task.done():
            return
        await cancel_and_wait(task)
        turn = self._response_turn
        if turn is not None and not self._response_audible:
            self.conversation.drop(turn)
        self._emit(ReplyCancelled(reason=reason))

    async def _respond(
        self,
        turn: Turn,
        timing: TurnTiming | None,
        canned: str,
        note: str = "",
        then: Then = None,
    ) -> None:
        tool: ToolCall | None = None
        try:
            if canned:
                await self.writer.speak_canned(turn, canned, timing)
            else:
                messages = self.conversation.messages()
                if note:  # a one-off instruction, not kept in history
                    messages.append({"role": "system", "content": note})
                tool = await self.writer.write(turn, messages, timing)
        except* BackendError as group:
            for exc in group.exceptions:
                self._failed(exc)
            if self.apology and not self._response_audible:
                turn.intended = ""
                try:
                    await self.writer.speak_canned(turn, self.apology)
                except BackendError as exc:  # the TTS itself is down: silence, not a crash
                    self._failed(exc)
        finally:
            if self._response is asyncio.current_task():
                self._response = None
                self.engine.reply_done()
        self._bot_turn_over(turn)
        if timing is not None and tool is None:  # after a tool call, the next reply has it
            self.timings.append(timing)
            turn.latency = timing.latency()
            self._emit(timing.event(RATE))
        if tool is not None:
            self._on_tool(tool, turn, timing)
        elif then is not None and self._response_audible and self.controls is not None:
            await self._after_heard(turn, then)

    def _on_tool(self, tool: ToolCall, turn: Turn, timing: TurnTiming | None) -> None:
        """The LLM called `end_call` or `transfer_call`: the same as the caller's words."""
        self._emit(ToolCalled(tool=tool.name, arguments=tool.arguments[:200]))
        if not turn.text and not turn.intended:
            self.conversation.drop(turn)  # it said nothing: no empty bot turn in the history
        if tool.name == "end_call":
            self._emit(CallEnding(reason="llm"))
            self._start_response(
                timing,
                canned=self.farewell or DEFAULT_FAREWELL,
                kind="farewell",
                then=EndCall("llm"),
            )
        elif tool.name == "transfer_call":
            self._start_transfer("llm", timing)

    def _bot_turn_over(self, turn: Turn) -> None:
        """The bot's turn is final (played out, failed, or cut to what was heard)."""
        if turn.intended or turn.text:
            self._emit(
                BotTurn(
                    turn_id=turn.turn_id,
                    text=turn.text,
                    intended=turn.intended,
                    truncated=turn.truncated,
                    start_ms=turn.start_ms,
                    end_ms=turn.end_ms,
                )
            )

    def _reply_audible(self) -> None:
        """A clause of the reply is queued for the caller."""
        if not self._response_audible:
            self._response_audible = True
            self._committed_turn = None  # the caller's turn is now answered
            self.engine.reply_audible()

    def _llm_items(self, messages: list[Message]) -> AsyncIterator[str | ToolCall]:
        llm = self._llm
        if isinstance(llm, ToolChat) and llm.offers_tools and self.controls is not None:
            return llm.stream_tools(messages, CALL_TOOLS)
        return llm.stream(messages)

    # --- drafts: replies written while the engine waits out a pause ---------------------

    def _maybe_draft(self) -> None:
        """While the engine waits out a pause, the LLM may start on the words so far."""
        text = self.engine.pending_answer
        if text is None or not self.draft_replies or self._response is not None:
            return
        if is_farewell(text) or (
            self.policy.words and self.policy.transfer_to and wants_a_person(text)
        ):
            return  # answered without the LLM
        self.writer.draft(self.conversation.messages_with_caller(text))

    # --- plumbing ----------------------------------------------------------------------

    def _failed(self, exc: BaseException) -> None:
        stage = getattr(exc, "stage", "agent")
        self.metrics.errors.labels(stage=stage).inc()
        self._emit(Error(stage=stage, error=str(exc)))
        log.warning("backend failed (%s): %s", stage, exc)

    def _spawn(self, coro: Coroutine[Any, Any, T], name: str) -> asyncio.Task[T]:
        assert self._tasks is not None, "the agent is not running"
        return create_task(self._tasks, coro, name=name)
