"""The CPU duplex backend: the cascade (VAD → Smart Turn → Whisper → LLM → Piper) on units.

Turn taking is the shared engine (agents/turns), the same as the in-process cascade's,
fed the gateway's speech windows (or Silero over the unit). The heavy models wake only
when there is content: the end-of-turn model and Whisper once the caller has paused, the
LLM and Piper once the turn is complete. The LLM writes in the background while the
reply is handed out clause by clause, through the same SpokenReply as the in-process
cascade's reply writer (agents/cascade/spoken_reply.py): each unit carries just enough
new audio to keep a unit's worth queued ahead of the caller, so the first words go out
as soon as the first clause is synthesised, not when the whole reply is written. An
interruption (by its length, or by words that are not a backchannel) drops what is left
and says so (`yielded`), and the bot's history turn is cut to what the caller heard of it.

Time is counted in samples of caller audio, never wall clock.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import numpy as np

from agents.cascade.agent import CascadeModels
from agents.cascade.llm import ChatModel, Message
from agents.cascade.spoken_reply import SpokenReply
from agents.cascade.stt import SpeechToText
from agents.cascade.tts import TextToSpeech
from agents.cascade.turn_evaluator import EndOfTurn, TurnEvaluator
from agents.cascade.words_judge import WordsJudge
from agents.conversation import keypad_text
from agents.duplex.backend import UnitOutcome
from agents.duplex.process_memory import process_rss_mb
from agents.duplex.protocol import CALLER_RATE, Prepare
from agents.errors import BackendError
from agents.turns.engine import (
    Answer,
    Clear,
    Decision,
    DropEvaluation,
    Evaluate,
    Evaluation,
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
from agents.turns.settings import turn_taking
from media.vad import VadEvent, VoiceActivity

if TYPE_CHECKING:
    from agents.config import AgentSettings

log = logging.getLogger(__name__)
T = TypeVar("T")


class StreamingVad(Protocol):
    """Speech probability per fixed window; keeps partial windows between calls."""

    @property
    def window_samples(self) -> int: ...

    def process(self, samples: np.ndarray) -> list[float]: ...

    def reset(self) -> None: ...


@dataclass(frozen=True, slots=True)
class CascadeDuplexConfig:
    vad_threshold: float = 0.5
    # Whose turn it is: the same engine and settings as the in-process cascade.
    turn_taking: TurnTaking = field(default_factory=TurnTaking)
    backchannel: bool = False  # say "mhm" during long caller monologues
    backchannel_after_ms: int = 8000
    backchannel_text: str = "mhm"
    history_turns: int = 12  # caller+bot pairs kept after the system prompt
    keypad_timeout_ms: int = 800  # quiet after the last key press that ends the entry
    # A unit's result is due within its length: waiting for the LLM stops at this share
    # of it, and the words go out with a later unit instead (the model "thinks" while
    # listening, as a duplex model does), so a slow LLM never stalls the session.
    unit_budget: float = 0.8
    # Said when the LLM fails or writes nothing speakable: never silence after a turn.
    apology: str = ""
    # Said when the caller spoke and could not be made out.
    reprompt: str = "Sorry, I didn't catch that. Could you say it again?"
    # Said when the caller says goodbye (empty: the LLM answers it).
    farewell: str = "Thanks for calling. Goodbye!"

    def with_overrides(self, overrides: dict[str, Any]) -> CascadeDuplexConfig:
        """Apply Prepare.config keys that name fields (of this config or of its turn
        taking); other keys are for other backends."""
        known = {k: v for k, v in overrides.items() if k in self.__dataclass_fields__}
        turns = {k: v for k, v in overrides.items() if k in TurnTaking.__dataclass_fields__}
        if turns:
            known["turn_taking"] = replace(self.turn_taking, **turns)
        return replace(self, **known)


def _ms(samples: int) -> float:
    return samples * 1000.0 / CALLER_RATE


class CascadeDuplexBackend:
    """The cascade behind the duplex unit loop. Takes loaded components (fakes in tests).

    Turn taking is the shared engine (agents/turns), fed one 32 ms speech window at a
    time. The unit protocol cannot hold the gateway's playback, so a hold here only
    starts the engine's decision: a backchannel lets the bot go on, an interruption
    yields the unit (the gateway clears Twilio).
    """

    name = "cascade"
    keypad_input = True
    # Per-session state, set by _reset.
    _reply: SpokenReply | None
    _playing_samples: int
    _line_samples: int | None  # samples of a fixed line going out at this unit's end
    _keys: str
    _keys_quiet: int

    def __init__(
        self,
        *,
        stt: SpeechToText,
        tts: TextToSpeech,
        llm: ChatModel,
        end_of_turn: EndOfTurn | None,
        vad_factory: Callable[[], StreamingVad],
        config: CascadeDuplexConfig | None = None,
        words_judge: WordsJudge | None = None,
    ) -> None:
        self.stt = stt
        self.words_judge = words_judge
        self.tts = tts
        self.llm = llm
        self.end_of_turn = end_of_turn
        self._vad_factory = vad_factory
        self._base_config = config or CascadeDuplexConfig()
        self._stack: AsyncExitStack | None = None  # what from_settings started
        self._reset(Prepare(system_prompt=""))

    @classmethod
    async def from_settings(cls, settings: AgentSettings) -> CascadeDuplexBackend:
        """Load the real models from the model cache, as `offhook serve` does.

        Starts the embedded llama.cpp server when no LLM_BASE_URL is set; `aclose` stops it.
        """
        from agents.loading import load_models
        from media.vad import SileroVad

        stack = AsyncExitStack()
        try:
            # A worker serves one call at a time: one embedded LLM server is enough.
            models = await load_models(settings, stack, llm_servers=1)
        except BaseException:
            await stack.aclose()
            raise
        config = CascadeDuplexConfig(
            vad_threshold=settings.vad_threshold,
            turn_taking=turn_taking(settings),
            history_turns=settings.history_turns,
            apology=settings.apology,
            reprompt=settings.reprompt,
            farewell=settings.farewell,
        )
        # The gateway's front end has cancelled the bot's echo in the audio it sends.
        backend = cls.from_models(models, vad_factory=SileroVad, config=config)
        backend._stack = stack
        return backend

    @classmethod
    def from_models(
        cls,
        models: CascadeModels,
        *,
        vad_factory: Callable[[], StreamingVad],
        config: CascadeDuplexConfig | None = None,
    ) -> CascadeDuplexBackend:
        """Over models already loaded (the gateway's own, in tests)."""
        return cls(
            stt=models.stt,
            tts=models.tts,
            llm=models.llm,
            end_of_turn=models.end_of_turn,
            vad_factory=vad_factory,
            config=config,
            words_judge=models.words_judge,
        )

    async def aclose(self) -> None:
        if self._stack is not None:
            await self._stack.aclose()
            self._stack = None

    # --- the DuplexBackend interface ----------------------------------------------------

    async def load(self) -> None:
        """Nothing to do: the components arrive loaded."""

    async def prepare(self, request: Prepare) -> None:
        self._reset(request)

    async def process_unit(
        self, audio_16k: np.ndarray, speech: Sequence[float] | None = None
    ) -> UnitOutcome:
        audio = np.asarray(audio_16k, dtype=np.float32)
        timings: dict[str, float] = {}
        started = time.perf_counter()
        self._unit_due = started + self.config.unit_budget * self._unit_samples / CALLER_RATE
        # The gateway's own speech detection, when it sent it: it has heard the line
        # before echo cancellation and knows the call's background; the audio here has
        # lost both. Without it (an older gateway, a bench), Silero on the unit.
        probs = (
            list(speech)
            if speech is not None
            else await asyncio.to_thread(self._vad.process, audio)
        )
        timings["vad"] = (time.perf_counter() - started) * 1000
        self._evaluator.audio.add(self._position, audio)
        was_playing = self._reply is not None or self._playing_samples > 0

        if self._keys:
            self._keys_quiet += audio.size
            if self._keys_quiet >= self._samples(self.config.keypad_timeout_ms):
                # The bot's audio played on while the caller pressed and waited.
                self._playing_samples = max(0, self._playing_samples - audio.size)
                self._advance(audio.size)
                return self._outcome(await self._answer_keys(timings, interrupting=was_playing))

        outcome = UnitOutcome(timings=timings)
        window = max(1, audio.size // max(1, len(probs))) if probs else audio.size
        for index, prob in enumerate(probs or [0.0]):
            end = self._position + min(audio.size, (index + 1) * window)
            samples = end - max(self._position + index * window, 0)
            # The bot's audio plays while this unit was captured.
            self._playing_samples = max(0, self._playing_samples - samples)
            events = _events(self._activity.update(prob, end))
            self._evaluator.audio.speech(events)
            frame = Frame(
                end=end,
                samples=samples,
                events=events,
                level_db=0.0,  # the gateway's gate has judged loudness already
                bot_audible=self._playing_samples > 0,
            )
            await self._apply(self.engine.frame(frame), outcome, timings)
            talking = self.engine.position - max(
                self._speech_run_start, self.engine.utterance_start
            )
            if self.engine.state is TurnState.CALLER and talking > self._samples(
                self.config.backchannel_after_ms
            ):
                await self._maybe_backchannel(outcome)
        self._advance(audio.size)
        # A reply's first audio goes out with the unit it was answered in, at the unit's
        # end: until then it is unheard, and a caller going on later in the unit voids
        # it (Reopen) before anything is sent. So does a fixed line.
        if self._line_samples is not None:
            self._playing_samples += self._line_samples
            self._line_samples = None
            self.engine.reply_audible()
            self.engine.reply_done()
        unheard = not self._sent  # nothing of the reply handed out yet
        if (
            self._reply is not None
            and outcome.action == "listen"
            and (unheard or not outcome.yielded)
        ):
            piece = await self._next_piece(timings)
            _merge(outcome, piece)
        return self._outcome(outcome)

    async def keypad(self, digits: str) -> None:
        """Key presses gather until the caller stops pressing; then they are a turn."""
        self._keys += digits
        self._keys_quiet = 0

    async def finalize_unit(self) -> None:
        """History trimming: the reply does not wait for it."""
        keep = 2 * self.config.history_turns
        if len(self._turns) > keep:
            del self._turns[: len(self._turns) - keep]

    async def cleanup(self) -> None:
        self._reset(Prepare(system_prompt=""))

    def memory_mb(self) -> float:
        return process_rss_mb()

    # --- the controller ---------------------------------------------------------------

    def _last_bot_line(self) -> str:
        """What the caller last heard the bot say: the words judge's context."""
        for message in reversed([*self._history, *self._turns]):
            if message.get("role") == "assistant" and message.get("content"):
                # A reply cut by a barge-in is stored with a dash: not the bot's words.
                return str(message["content"]).removesuffix(" —")
        return ""

    @property
    def messages(self) -> list[Message]:
        """What the LLM sees: system prompt, Prepare's history, then this call's turns."""
        system = [{"role": "system", "content": self._system}] if self._system else []
        return [*system, *self._history, *self._turns]

    def _reset(self, request: Prepare) -> None:
        reply = getattr(self, "_reply", None)
        if reply is not None:
            reply.cancel()
        self.config = self._base_config.with_overrides(request.config)
        self.engine = TurnEngine(
            self.config.turn_taking,
            judge=judge_for(self.config.turn_taking, words=self.words_judge is not None),
        )
        self._activity = VoiceActivity(
            512, CALLER_RATE, start_threshold=self.config.vad_threshold, min_silence_ms=64
        )
        self._system = request.system_prompt
        self._history: list[Message] = [dict(m) for m in request.history]
        self._turns: list[Message] = []
        self._vad = self._vad_factory()
        # The same evaluator as the in-process cascade's, run inline: one call per worker.
        self._evaluator = TurnEvaluator(
            end_of_turn=self.end_of_turn,
            stt=self.stt,
            run=_in_thread,
            words=self.words_judge,
            bot_line=self._last_bot_line,
            rate=CALLER_RATE,
            voice=self.config.turn_taking.fused.hears_the_voice,
        )
        self._position = 0  # caller samples received
        self._speech_run_start = 0  # for the "mhm" backchannel the bot may say itself
        self._unit_samples = max(1, request.unit_ms) * CALLER_RATE // 1000
        self._unit_due = 0.0  # perf_counter time by which this unit's result should be out
        self._reply: SpokenReply | None = None  # the reply being written and handed out
        self._sent: list[tuple[str, int]] = []  # reply text handed out, with its samples
        self._playing_samples = 0  # bot audio handed out and not yet played (caller clock)
        self._line_samples = None
        self._keys = ""  # keypad digits not yet answered
        self._keys_quiet = 0  # caller samples since the last key press

    def _advance(self, samples: int) -> None:
        self._position += samples
        engine = self.engine
        keep = engine.position - 2 * CALLER_RATE
        if engine.state not in (TurnState.LISTENING, TurnState.BOT):
            keep = min(keep, engine.utterance_start)
        self._evaluator.audio.keep_from(keep)

    def _samples(self, ms: int) -> int:
        return ms * CALLER_RATE // 1000

    async def _apply(
        self, decisions: list[Decision], outcome: UnitOutcome, timings: dict[str, float]
    ) -> None:
        for decision in decisions:
            match decision:
                case Evaluate():
                    result = await self._evaluate(decision, timings)
                    if result is None:
                        await self._apply(self.engine.failed(decision.end), outcome, timings)
                        if self.config.apology and self.engine.state is TurnState.LISTENING:
                            _merge(outcome, await self._reply_to("", timings, canned=True))
                    else:
                        await self._apply(self.engine.evaluated(result), outcome, timings)
                case Answer():
                    self._speech_run_start = self.engine.position
                    if decision.farewell and self.config.farewell:
                        self._turns.append({"role": "user", "content": decision.text})
                        farewell = await self._say(self.config.farewell, timings, last=True)
                        farewell.caller_text = decision.text
                        _merge(outcome, farewell)
                    else:
                        _merge(outcome, await self._reply_to(decision.text, timings))
                case Reprompt():
                    _merge(outcome, await self._say(self.config.reprompt, timings))
                case Reopen():
                    # The caller went on before the reply was heard: it is void, and
                    # their turn, when restored (not over after all), is not reported
                    # answered.
                    if self._reply is not None:
                        self._reply.cancel()
                        self._reply = None
                    if self._line_samples is not None:  # a fixed line, not sent after all
                        self._line_samples = None
                        self._turns.pop()
                        outcome.action, outcome.text = "listen", ""
                        outcome.audio = np.zeros(0, dtype=np.float32)
                        outcome.end_of_turn = False
                    if decision.restore and self._turns and self._turns[-1]["role"] == "user":
                        self._turns.pop()
                        outcome.caller_text = ""
                    self.engine.reply_done()
                case Clear():
                    self._yield_turn()
                    outcome.yielded = True
                case DropEvaluation() | Hold() | Silence() | Lower() | Resume():
                    pass  # evaluations run inline; the gateway plays on while deciding

    async def _evaluate(self, ticket: Evaluate, timings: dict[str, float]) -> Evaluation | None:
        """End-of-turn model and Whisper side by side on the utterance (None: failed)."""
        started = time.perf_counter()
        result = await self._evaluator.evaluate_now(ticket)
        timings["eot_stt"] = (time.perf_counter() - started) * 1000
        if isinstance(result, BackendError):
            # A failed model costs this turn an apology, not the session.
            log.warning("evaluating the caller's turn failed: %s", result)
            return None
        return result

    async def _maybe_backchannel(self, outcome: UnitOutcome) -> None:
        """The bot's own "mhm" while the caller talks on and on (off by default)."""
        if not self.config.backchannel or outcome.action != "listen":
            return
        self._speech_run_start = self.engine.position
        audio = await asyncio.to_thread(self.tts.synthesize, self.config.backchannel_text)
        outcome.action = "backchannel"
        outcome.text = self.config.backchannel_text
        outcome.audio = audio
        outcome.sample_rate = self.tts.sample_rate

    async def _say(
        self, text: str, timings: dict[str, float], *, last: bool = False
    ) -> UnitOutcome:
        """A fixed line (the reprompt, the farewell): its own bot turn, kept in history.
        Heard from the unit's end, as a reply is (`process_unit`)."""
        self.engine.reply_started(last=last)
        started = time.perf_counter()
        audio = await asyncio.to_thread(self.tts.synthesize, text)
        timings["tts"] = (time.perf_counter() - started) * 1000
        self._turns.append({"role": "assistant", "content": text})
        self._line_samples = audio.size * CALLER_RATE // self.tts.sample_rate
        return UnitOutcome(
            action="speak",
            text=text,
            audio=audio,
            sample_rate=self.tts.sample_rate,
            end_of_turn=True,
            timings=timings,
        )

    async def _reply_to(
        self, caller_text: str, timings: dict[str, float], *, canned: bool = False
    ) -> UnitOutcome:
        """Start the reply to the caller's turn; its first piece goes out with this unit."""
        if canned:
            return await self._say(self.config.apology, timings)
        self._turns.append({"role": "user", "content": caller_text})
        self.engine.reply_started()
        self._reply = SpokenReply(
            self.llm.stream(self.messages), self._synthesize, name="duplex-llm"
        )
        self._sent = []
        # The LLM writes while the rest of the unit is heard; the first clauses go out
        # at its end (`process_unit`).
        return UnitOutcome(caller_text=caller_text, timings=timings)

    async def _answer_keys(self, timings: dict[str, float], *, interrupting: bool) -> UnitOutcome:
        """Key presses are the caller's turn: the bot stops talking and answers them."""
        text = keypad_text(self._keys)
        self._keys, self._keys_quiet = "", 0
        if interrupting:
            self._yield_turn()
        self.engine.caller_reset()
        outcome = await self._reply_to(text, timings)
        _merge(outcome, await self._next_piece(timings))
        outcome.yielded = interrupting
        return outcome

    async def _next_piece(self, timings: dict[str, float]) -> UnitOutcome:
        """Synthesise clauses until a unit's worth of bot audio is queued ahead of the caller.

        Waits for the LLM only when the queue would otherwise run short (that wait is
        the reply's first clause on the turn-ending unit, and rarely anything after it),
        and never past the unit's budget.
        """
        assert self._reply is not None
        texts: list[str] = []
        pieces: list[np.ndarray] = []
        waited = synthesised = 0.0
        finished = False
        queued = self._playing_samples
        while queued < self._unit_samples:
            started = time.perf_counter()
            try:
                clause = await self._reply.next(within_s=self._unit_due - started)
            except TimeoutError:
                waited += time.perf_counter() - started
                break  # the rest goes out with the next units
            except BackendError as exc:
                # A failed LLM (or voice) costs this reply, not the session (and not the
                # worker); a reply with nothing to say gets the apology below.
                log.warning("the reply failed mid-way (%s): %s", exc.stage, exc)
                clause = None
            spent = time.perf_counter() - started
            if clause is None:
                waited += spent
                finished = True
                break
            waited += spent - clause.synthesised_s
            synthesised += clause.synthesised_s
            texts.append(clause.text)
            pieces.append(clause.pcm)
            queued += clause.pcm.size * CALLER_RATE // self.tts.sample_rate
        finished = finished or self._reply.over
        if finished and not self._reply.said_anything and self.config.apology:
            started = time.perf_counter()
            pieces.append(await asyncio.to_thread(self.tts.synthesize, self.config.apology))
            synthesised += time.perf_counter() - started
            texts.append(self.config.apology)
            queued += pieces[-1].size * CALLER_RATE // self.tts.sample_rate
        timings["llm"] = waited * 1000
        timings["tts"] = synthesised * 1000
        for text, audio in zip(texts, pieces, strict=True):
            self._sent.append((text, audio.size * CALLER_RATE // self.tts.sample_rate))
        self._playing_samples = queued
        if texts:
            self.engine.reply_audible()
        spoke = bool(self._sent)
        if finished:
            self._reply = None
            self.engine.reply_done()
            if spoke:
                self._turns.append({"role": "assistant", "content": _joined(self._sent)})
            self._sent = []
        if not texts:
            # The LLM ended its reply after the last clause went out, or said nothing.
            return UnitOutcome(end_of_turn=finished and spoke, timings=timings)
        return UnitOutcome(
            action="speak",
            text=" ".join(texts),
            audio=np.concatenate(pieces),
            sample_rate=self.tts.sample_rate,
            end_of_turn=finished,
            timings=timings,
        )

    async def _synthesize(self, text: str) -> np.ndarray:
        return await asyncio.to_thread(self.tts.synthesize, text)

    def _yield_turn(self) -> None:
        """The caller barged in: drop the rest; history keeps what the caller heard.

        What is still queued ahead of the caller (`_playing_samples`) was not heard: the
        words are cut from the end in proportion to time, as the gateway's clock does.
        """
        if self._reply is not None:
            self._reply.cancel()
            self._reply = None
        heard = _heard(self._sent, self._playing_samples)
        if heard:
            self._turns.append({"role": "assistant", "content": heard + " —"})
        self._sent = []
        self._playing_samples = 0
        self.engine.reply_done()

    def _outcome(self, outcome: UnitOutcome) -> UnitOutcome:
        outcome.context_len = len(self.messages)
        return outcome


def _in_thread(stage: str, fn: Callable[..., T], /, *args: Any) -> Awaitable[T]:
    """A model call on a plain thread: a worker serves one call, with no scheduler."""
    del stage
    return asyncio.to_thread(fn, *args)


def _events(event: VadEvent | None) -> list[VadEvent]:
    return [] if event is None else [event]


def _joined(sent: list[tuple[str, int]]) -> str:
    return " ".join(text for text, _ in sent)


def _heard(sent: list[tuple[str, int]], unplayed: int) -> str:
    """The words of `sent` heard when its last `unplayed` samples were not."""
    total = sum(samples for _, samples in sent)
    played = max(0, total - unplayed)
    words: list[str] = []
    for text, samples in sent:
        if played <= 0:
            break
        share = min(1.0, played / samples) if samples else 1.0
        parts = text.split()
        words += parts[: int(len(parts) * share)]
        played -= samples
    return " ".join(words)


def _merge(outcome: UnitOutcome, other: UnitOutcome) -> None:
    """Fold what a decision produced into the unit's outcome."""
    if other.action != "listen":
        outcome.action = other.action
        outcome.text = other.text
        outcome.audio = other.audio
        outcome.sample_rate = other.sample_rate
    outcome.end_of_turn = outcome.end_of_turn or other.end_of_turn
    outcome.caller_text = outcome.caller_text or other.caller_text
    outcome.yielded = outcome.yielded or other.yielded
