"""The CPU duplex backend: the cascade (VAD → Smart Turn → Whisper → LLM → Piper) on units.

A light controller runs on every unit: Silero VAD over the unit, kept across units. The
heavy models wake only when there is content: the end-of-turn model once the caller has
paused, Whisper + LLM + Piper once the turn is complete. A reply longer than one unit is
handed out over the following units (at least one unit's worth each, so playback has no
gaps); caller speech over the bot long enough to be a barge-in drops what is left and
says so (`yielded`), and the bot's history turn is cut to what was already sent.

Time is counted in samples of caller audio, never wall clock.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from agents.cascade.clauses import ClauseSplitter
from agents.cascade.llm import ChatModel, Message
from agents.cascade.stt import SpeechToText
from agents.cascade.tts import TextToSpeech
from agents.duplex.backend import UnitOutcome
from agents.duplex.protocol import CALLER_RATE, Prepare

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


class CascadeDuplexBackend:
    """The cascade behind the duplex unit loop. Takes loaded components (fakes in tests)."""

    name = "cascade"

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
        )
        backend = cls(
            stt=models.stt,
            tts=models.tts,
            llm=models.llm,
            end_of_turn=models.end_of_turn,
            vad_factory=SileroVad,
            config=config,
        )
        backend._stack = stack
        return backend

    async def aclose(self) -> None:
        if self._stack is not None:
            await self._stack.aclose()
            self._stack = None

    # --- the DuplexBackend interface ----------------------------------------------------

    async def load(self) -> None:
        """Nothing to do: the components arrive loaded."""

    async def prepare(self, request: Prepare) -> None:
        self._reset(request)

    async def process_unit(self, audio_16k: np.ndarray) -> UnitOutcome:
        audio = np.asarray(audio_16k, dtype=np.float32)
        timings: dict[str, float] = {}
        started = time.perf_counter()
        probs = await asyncio.to_thread(self._vad.process, audio)
        timings["vad"] = (time.perf_counter() - started) * 1000
        speech_in_unit = self._track_speech(probs)
        was_playing = bool(self._pending) or self._playing_samples > 0
        # The bot's audio plays while this unit was captured.
        self._playing_samples = max(0, self._playing_samples - audio.size)

        if was_playing and speech_in_unit >= self._samples(self.config.barge_in_ms):
            self._yield_turn()
            self._utterance = [audio]
            return self._outcome(UnitOutcome(yielded=True, timings=timings))

        if self._pending:
            # Speech too short to be a barge-in ("mhm", echo) lets the bot go on.
            return self._outcome(await self._next_piece(timings))

        if self._utterance or speech_in_unit:
            self._utterance.append(audio)
        if not self._utterance:
            return self._outcome(UnitOutcome(timings=timings))

        if self._trailing_silence < self._samples(self.config.min_silence_ms):
            return self._outcome(await self._maybe_backchannel(timings))
        if not await self._turn_complete(timings):
            return self._outcome(UnitOutcome(timings=timings))
        return self._outcome(await self._respond(timings))

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
        self.config = self._base_config.with_overrides(request.config)
        self._system = request.system_prompt
        self._history: list[Message] = [dict(m) for m in request.history]
        self._turns: list[Message] = []
        self._vad = self._vad_factory()
        self._utterance: list[np.ndarray] = []
        self._trailing_silence = 0  # samples of non-speech since the last speech window
        self._run_speech = 0  # caller speech since the last pause or backchannel
        self._pending: list[str] = []  # reply clauses not yet synthesised
        self._sent_text: list[str] = []  # reply text already handed out
        self._playing_samples = 0  # bot audio handed out and not yet played (caller clock)

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

    async def _turn_complete(self, timings: dict[str, float]) -> bool:
        if self._trailing_silence >= self._samples(self.config.max_silence_ms):
            return True
        started = time.perf_counter()
        utterance = np.concatenate(self._utterance)
        prob = await asyncio.to_thread(self.end_of_turn.predict, utterance)
        timings["eot"] = (time.perf_counter() - started) * 1000
        return prob >= self.config.end_of_turn_threshold

    async def _respond(self, timings: dict[str, float]) -> UnitOutcome:
        utterance = np.concatenate(self._utterance)
        self._utterance = []
        started = time.perf_counter()
        transcript = await asyncio.to_thread(self.stt.transcribe, utterance)
        timings["stt"] = (time.perf_counter() - started) * 1000
        caller_text = transcript.text.strip()
        if not caller_text:
            return UnitOutcome(timings=timings)
        self._turns.append({"role": "user", "content": caller_text})

        started = time.perf_counter()
        splitter = ClauseSplitter()
        clauses: list[str] = []
        async for delta in self.llm.stream(self.messages):
            clauses.extend(splitter.feed(delta))
        clauses.extend(splitter.flush())
        timings["llm"] = (time.perf_counter() - started) * 1000
        if not clauses:
            return UnitOutcome(caller_text=caller_text, timings=timings)
        self._pending = clauses
        self._sent_text = []
        outcome = await self._next_piece(timings)
        outcome.caller_text = caller_text
        return outcome

    async def _next_piece(self, timings: dict[str, float]) -> UnitOutcome:
        """Synthesise pending clauses until there is a unit's worth of audio."""
        started = time.perf_counter()
        texts: list[str] = []
        pieces: list[np.ndarray] = []
        have = 0.0  # seconds of bot audio in this piece
        while self._pending and have < 1.0:
            text = self._pending.pop(0)
            audio = await asyncio.to_thread(self.tts.synthesize, text)
            texts.append(text)
            pieces.append(audio)
            have += audio.size / self.tts.sample_rate
        timings["tts"] = (time.perf_counter() - started) * 1000
        self._sent_text.extend(texts)
        self._playing_samples += int(have * CALLER_RATE)
        done = not self._pending
        if done:
            self._turns.append({"role": "assistant", "content": " ".join(self._sent_text)})
            self._sent_text = []
        return UnitOutcome(
            action="speak",
            text=" ".join(texts),
            audio=np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.float32),
            sample_rate=self.tts.sample_rate,
            end_of_turn=done,
            timings=timings,
        )

    def _yield_turn(self) -> None:
        """The caller barged in: drop the rest; history keeps only what was sent."""
        if self._pending and self._sent_text:
            self._turns.append({"role": "assistant", "content": " ".join(self._sent_text)})
        self._pending = []
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

    async def process_unit(self, audio_16k: np.ndarray) -> UnitOutcome:
        return await self.inner.process_unit(audio_16k)

    async def finalize_unit(self) -> None:
        await self.inner.finalize_unit()

    async def cleanup(self) -> None:
        if self._inner is not None:
            await self._inner.cleanup()

    def memory_mb(self) -> float:
        return _process_rss_mb()
