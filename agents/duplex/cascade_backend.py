"""The CPU duplex backend: the cascade (VAD → Smart Turn → Whisper → LLM → Piper) on units.

A light controller runs on every unit: Silero VAD over the unit, kept across units. The
heavy models wake only when there is content: the end-of-turn model once the caller has
paused, Whisper + LLM + Piper once the turn is complete. The LLM writes in the background
while the reply is handed out clause by clause: each unit carries just enough new audio to
keep a unit's worth queued ahead of the caller, so the first words go out as soon as the
first clause is synthesised, not when the whole reply is written. Caller speech over the
bot long enough to be a barge-in drops what is left and says so (`yielded`), and the bot's
history turn is cut to what was already sent.

Time is counted in samples of caller audio, never wall clock.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import deque
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from agents.cascade.agent import CascadeModels, sounds_finished
from agents.cascade.clauses import ClauseSplitter
from agents.cascade.llm import ChatModel, Message
from agents.cascade.stt import SpeechToText
from agents.cascade.tts import TextToSpeech
from agents.conversation import keypad_text
from agents.duplex.backend import UnitOutcome
from agents.duplex.protocol import CALLER_RATE, Prepare
from agents.errors import BackendError

if TYPE_CHECKING:
    from app.settings import Settings

log = logging.getLogger(__name__)


class EndOfTurnPredictor(Protocol):
    def predict(self, audio_16k: np.ndarray) -> float: ...


class StreamingVad(Protocol):
    """Speech probability per fixed window; keeps partial windows between calls."""

    @property
    def window_samples(self) -> int: ...

    def process(self, samples: np.ndarray) -> list[float]: ...

    def reset(self) -> None: ...


@dataclass(frozen=True, slots=True)
class CascadeDuplexConfig:
    vad_threshold: float = 0.5
    end_of_turn_threshold: float = 0.5
    min_silence_ms: int = 300  # pause before the end-of-turn model is asked
    max_silence_ms: int = 1000  # pause that ends the turn whatever the model says
    barge_in_ms: int = 400  # caller speech in one unit that stops the bot
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

    def with_overrides(self, overrides: dict[str, Any]) -> CascadeDuplexConfig:
        """Apply Prepare.config keys that name fields; other keys are for other backends."""
        known = {k: v for k, v in overrides.items() if k in self.__dataclass_fields__}
        return replace(self, **known)


def _ms(samples: int) -> float:
    return samples * 1000.0 / CALLER_RATE


def _process_rss_mb() -> float:
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return 0.0
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


class ReplyStream:
    """An LLM reply being written in the background, taken out one clause at a time."""

    def __init__(self, llm: ChatModel, messages: Sequence[Message]) -> None:
        self._ready: deque[str] = deque()
        self._written = False
        self._error: BaseException | None = None
        self._changed = asyncio.Event()
        self._task = asyncio.create_task(self._write(llm, list(messages)), name="duplex-llm")

    async def _write(self, llm: ChatModel, messages: list[Message]) -> None:
        splitter = ClauseSplitter()
        try:
            async for delta in llm.stream(messages):
                self._add(splitter.feed(delta))
            self._add(splitter.flush())
        except Exception as exc:
            self._error = exc  # raised to whoever takes the next clause
        finally:
            self._written = True
            self._changed.set()

    def _add(self, clauses: list[str]) -> None:
        if clauses:
            self._ready.extend(clauses)
            self._changed.set()

    @property
    def over(self) -> bool:
        """Every clause has been taken and the LLM is done."""
        return self._written and not self._ready

    async def next_clause(self, within_s: float | None = None) -> str | None:
        """The next clause, waiting for the LLM up to `within_s`; None once the reply is over.

        Raises TimeoutError when the LLM has not written the next clause in time.
        """
        if not self._ready and not self._written:
            if within_s is not None and within_s <= 0:
                raise TimeoutError
            async with asyncio.timeout(within_s):
                while not self._ready and not self._written:
                    self._changed.clear()
                    await self._changed.wait()
        if self._ready:
            return self._ready.popleft()
        if self._error is not None:
            raise self._error
        return None

    def cancel(self) -> None:
        self._task.cancel()


class CascadeDuplexBackend:
    """The cascade behind the duplex unit loop. Takes loaded components (fakes in tests)."""

    name = "cascade"
    keypad_input = True

    def __init__(
        self,
        *,
        stt: SpeechToText,
        tts: TextToSpeech,
        llm: ChatModel,
        end_of_turn: EndOfTurnPredictor,
        vad_factory: Callable[[], StreamingVad],
        config: CascadeDuplexConfig | None = None,
    ) -> None:
        self.stt = stt
        self.tts = tts
        self.llm = llm
        self.end_of_turn = end_of_turn
        self._vad_factory = vad_factory
        self._base_config = config or CascadeDuplexConfig()
        self._stack: AsyncExitStack | None = None  # what from_settings started
        self._reset(Prepare(system_prompt=""))

    @classmethod
    async def from_settings(cls, settings: Settings) -> CascadeDuplexBackend:
        """Load the real models from the model cache, as `offhook serve` does.

        Starts the embedded llama.cpp server when no LLM_BASE_URL is set; `aclose` stops it.
        """
        from app.services import load_models
        from media.vad import SileroVad

        stack = AsyncExitStack()
        try:
            models = await load_models(settings, stack)
        except BaseException:
            await stack.aclose()
            raise
        config = CascadeDuplexConfig(
            vad_threshold=settings.vad_threshold,
            end_of_turn_threshold=settings.end_of_turn_threshold,
            max_silence_ms=settings.end_of_turn_max_silence_ms,
            history_turns=settings.history_turns,
            apology=settings.apology,
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
        speech_in_unit = self._track_speech(probs)
        was_playing = self._reply is not None or self._playing_samples > 0
        # The bot's audio plays while this unit was captured.
        self._playing_samples = max(0, self._playing_samples - audio.size)

        if self._keys:
            self._keys_quiet += audio.size
            if self._keys_quiet >= self._samples(self.config.keypad_timeout_ms):
                return self._outcome(await self._answer_keys(timings, interrupting=was_playing))

        if was_playing and speech_in_unit >= self._samples(self.config.barge_in_ms):
            self._yield_turn()
            self._utterance = [audio]
            return self._outcome(UnitOutcome(yielded=True, timings=timings))

        if self._reply is not None:
            # Speech too short to be a barge-in ("mhm", echo) lets the bot go on.
            return self._outcome(await self._next_piece(timings))

        if self._utterance or speech_in_unit:
            self._utterance.append(audio)
        if not self._utterance:
            return self._outcome(UnitOutcome(timings=timings))

        if self._trailing_silence < self._samples(self.config.min_silence_ms):
            return self._outcome(await self._maybe_backchannel(timings))
        heard = await self._turn_complete(timings)
        if heard is None:
            return self._outcome(UnitOutcome(timings=timings))
        return self._outcome(await self._respond(heard, timings))

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
        return _process_rss_mb()

    # --- the controller ---------------------------------------------------------------

    @property
    def messages(self) -> list[Message]:
        """What the LLM sees: system prompt, Prepare's history, then this call's turns."""
        system = [{"role": "system", "content": self._system}] if self._system else []
        return [*system, *self._history, *self._turns]

    def _reset(self, request: Prepare) -> None:
        if getattr(self, "_reply", None) is not None:
            self._reply.cancel()
        self.config = self._base_config.with_overrides(request.config)
        self._system = request.system_prompt
        self._history: list[Message] = [dict(m) for m in request.history]
        self._turns: list[Message] = []
        self._vad = self._vad_factory()
        self._utterance: list[np.ndarray] = []
        self._trailing_silence = 0  # samples of non-speech since the last speech window
        self._run_speech = 0  # caller speech since the last pause or backchannel
        self._unit_samples = max(1, request.unit_ms) * CALLER_RATE // 1000
        self._unit_due = 0.0  # perf_counter time by which this unit's result should be out
        self._reply: ReplyStream | None = None  # the reply being written and handed out
        self._sent_text: list[str] = []  # reply text already handed out
        self._playing_samples = 0  # bot audio handed out and not yet played (caller clock)
        self._keys = ""  # keypad digits not yet answered
        self._keys_quiet = 0  # caller samples since the last key press

    def _samples(self, ms: int) -> int:
        return ms * CALLER_RATE // 1000

    def _track_speech(self, probs: Sequence[float]) -> int:
        """Update the pause tracking; return the samples of speech in this unit."""
        window = self._vad.window_samples
        speech = 0
        for p in probs:
            if p >= self.config.vad_threshold:
                speech += window
                self._trailing_silence = 0
                self._run_speech += window
            else:
                self._trailing_silence += window
                if self._trailing_silence >= self._samples(self.config.min_silence_ms):
                    self._run_speech = 0
        return speech

    async def _maybe_backchannel(self, timings: dict[str, float]) -> UnitOutcome:
        if not self.config.backchannel:
            return UnitOutcome(timings=timings)
        if self._run_speech <= self._samples(self.config.backchannel_after_ms):
            return UnitOutcome(timings=timings)
        self._run_speech = 0
        audio = await asyncio.to_thread(self.tts.synthesize, self.config.backchannel_text)
        return UnitOutcome(
            action="backchannel",
            text=self.config.backchannel_text,
            audio=audio,
            sample_rate=self.tts.sample_rate,
            timings=timings,
        )

    async def _turn_complete(self, timings: dict[str, float]) -> str | None:
        """What the caller said, once their turn is over; None while it is not.

        As in the in-process cascade, the end-of-turn model and Whisper run side by side
        at a pause: the turn is over when the model is sure, or when it leans "maybe"
        and Whisper heard a finished sentence (flat prosody scores low on the model even
        for complete questions), or after the longest pause whatever they say.
        """
        utterance = np.concatenate(self._utterance)
        started = time.perf_counter()
        prob, transcript = await asyncio.gather(
            asyncio.to_thread(self.end_of_turn.predict, utterance),
            asyncio.to_thread(self.stt.transcribe, utterance),
        )
        timings["eot_stt"] = (time.perf_counter() - started) * 1000
        text = transcript.text.strip()
        threshold = self.config.end_of_turn_threshold
        if not (
            self._trailing_silence >= self._samples(self.config.max_silence_ms)
            or prob >= threshold
            or (prob >= threshold / 5 and sounds_finished(text))
        ):
            return None
        self._utterance = []
        return text

    async def _respond(self, caller_text: str, timings: dict[str, float]) -> UnitOutcome:
        if not caller_text:
            return UnitOutcome(timings=timings)
        return await self._reply_to(caller_text, timings)

    async def _reply_to(self, caller_text: str, timings: dict[str, float]) -> UnitOutcome:
        """Start the reply to the caller's turn; its first piece goes out with this unit."""
        self._turns.append({"role": "user", "content": caller_text})
        self._reply = ReplyStream(self.llm, self.messages)
        self._sent_text = []
        outcome = await self._next_piece(timings)
        outcome.caller_text = caller_text
        return outcome

    async def _answer_keys(self, timings: dict[str, float], *, interrupting: bool) -> UnitOutcome:
        """Key presses are the caller's turn: the bot stops talking and answers them."""
        text = keypad_text(self._keys)
        self._keys, self._keys_quiet = "", 0
        if interrupting:
            self._yield_turn()
        self._utterance = []
        outcome = await self._reply_to(text, timings)
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
                text = await self._reply.next_clause(within_s=self._unit_due - started)
            except TimeoutError:
                break  # the rest goes out with the next units
            except BackendError as exc:
                # A failed LLM costs this reply, not the session (and not the worker).
                log.warning("the LLM failed mid-reply: %s", exc)
                text = None
            finally:
                waited += time.perf_counter() - started
            if text is None:
                finished = True
                break
            started = time.perf_counter()
            audio = await asyncio.to_thread(self.tts.synthesize, text)
            synthesised += time.perf_counter() - started
            texts.append(text)
            pieces.append(audio)
            queued += audio.size * CALLER_RATE // self.tts.sample_rate
        finished = finished or self._reply.over
        if finished and not texts and not self._sent_text and self.config.apology:
            started = time.perf_counter()
            pieces.append(await asyncio.to_thread(self.tts.synthesize, self.config.apology))
            synthesised += time.perf_counter() - started
            texts.append(self.config.apology)
            queued += pieces[-1].size * CALLER_RATE // self.tts.sample_rate
        timings["llm"] = waited * 1000
        timings["tts"] = synthesised * 1000
        self._sent_text.extend(texts)
        self._playing_samples = queued
        spoke = bool(self._sent_text)
        if finished:
            self._reply = None
            if spoke:
                self._turns.append({"role": "assistant", "content": " ".join(self._sent_text)})
            self._sent_text = []
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

    def _yield_turn(self) -> None:
        """The caller barged in: drop the rest; history keeps only what was sent."""
        if self._reply is not None:
            self._reply.cancel()
            self._reply = None
        if self._sent_text:
            self._turns.append({"role": "assistant", "content": " ".join(self._sent_text)})
        self._sent_text = []
        self._playing_samples = 0
        self._run_speech = 0

    def _outcome(self, outcome: UnitOutcome) -> UnitOutcome:
        outcome.context_len = len(self.messages)
        return outcome


class SettingsCascadeBackend:
    """A cascade backend that loads its models in `load()`, for the worker's lifespan.

    The worker process is started before any model is loaded, so /health can say
    LOADING meanwhile; this wrapper defers `CascadeDuplexBackend.from_settings` to then.
    """

    name = "cascade"
    keypad_input = True

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._inner: CascadeDuplexBackend | None = None

    @property
    def inner(self) -> CascadeDuplexBackend:
        if self._inner is None:
            raise RuntimeError("the cascade backend is used before load() finished")
        return self._inner

    async def load(self) -> None:
        self._inner = await CascadeDuplexBackend.from_settings(self.settings)

    async def aclose(self) -> None:
        if self._inner is not None:
            await self._inner.aclose()

    async def prepare(self, request: Prepare) -> None:
        await self.inner.prepare(request)

    async def process_unit(
        self, audio_16k: np.ndarray, speech: Sequence[float] | None = None
    ) -> UnitOutcome:
        return await self.inner.process_unit(audio_16k, speech)

    async def keypad(self, digits: str) -> None:
        await self.inner.keypad(digits)

    async def finalize_unit(self) -> None:
        await self.inner.finalize_unit()

    async def cleanup(self) -> None:
        if self._inner is not None:
            await self._inner.cleanup()

    def memory_mb(self) -> float:
        return _process_rss_mb()
