"""The turn evaluator: the caller's audio, and the evaluations the turn engine asks for.

An evaluation is Whisper (on the utterance's words), then the words judge on them, with
the end-of-turn model (Smart Turn, on its audio) beside Whisper where the turn judge gives
it weight; the engine decides from the result. Both the cascade agent
and the duplex cascade backend drive the engine through this one class: the agent starts
evaluations in the background at every short pause and drops them when the caller goes
on; the duplex backend runs them inline, one unit at a time.

A long turn is heard in pieces: once an evaluation has transcribed at least
`PIECE_SAMPLES` of it, its words are kept, and the next evaluation of the same turn
transcribes only what came after that pause (Whisper sees 30 s at most).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import numpy as np

from agents.cascade.stt import SpeechToText, Transcript, assess
from agents.cascade.words_judge import WordsJudge
from agents.errors import BackendError, SpeechToTextError
from agents.turns.audio import CallerAudio
from agents.turns.engine import Evaluate, Evaluation, Hearing

__all__ = ["PIECE_SAMPLES", "EndOfTurn", "ModelRun", "TurnEvaluator", "heard_as"]

T = TypeVar("T")
log = logging.getLogger(__name__)


class EndOfTurn(Protocol):
    """Anything with `predict(audio_16k) -> P(turn complete)`."""

    def predict(self, audio_16k: np.ndarray) -> float: ...


class ModelRun(Protocol):
    """How a model call leaves the event loop: `run(stage, fn, *args)` -> fn's result.

    The cascade agent passes its call's turn on the model scheduler; the duplex backend
    (one call per worker) a plain thread."""

    def __call__(self, stage: str, fn: Callable[..., T], /, *args: Any) -> Awaitable[T]: ...


Spawn = Callable[[Coroutine[Any, Any, "Evaluation | BackendError"], str], "asyncio.Task[Any]"]

# A turn transcribed this far in one piece is kept, and the next evaluation starts at
# its pause. Short: greedy Whisper (no timestamps) tends to stop at a long pause inside
# its window (tiny.en heard 4 s of a 10 s reading piece with a 4 s pause in it), so a
# reading is best heard sentence by sentence. In samples at 16 kHz.
PIECE_SAMPLES = 4 * 16000


@dataclass(slots=True)
class _Running:
    """An evaluation the engine asked for, running in the background."""

    ticket: Evaluate
    task: asyncio.Task[Evaluation | BackendError]
    started: float
    stt_from: int  # Whisper heard [stt_from, end); what came before is `_Transcribed`

    def covers_a_piece(self, piece: int) -> bool:
        """It transcribed enough of a turn, pause to pause, to keep as a piece."""
        return not self.ticket.capped and self.ticket.end - self.stt_from >= piece


@dataclass(frozen=True, slots=True)
class _Transcribed:
    """A long turn's words up to one of its pauses."""

    start: int  # the utterance's start
    end: int  # the pause
    text: str


class TurnEvaluator:
    def __init__(
        self,
        *,
        end_of_turn: EndOfTurn | None,
        stt: SpeechToText,
        run: ModelRun,
        utterance_start: Callable[[], int] = lambda: 0,
        words: WordsJudge | None = None,
        bot_line: Callable[[], str] = lambda: "",
        rate: int = 16000,
        voice: bool = True,
    ) -> None:
        """`utterance_start`: where the caller's current turn began (the engine's), so a
        superseded evaluation's words are kept only while its turn goes on. `words`:
        the words judge, asked once Whisper has heard words, with `bot_line()` (what the
        caller last heard the bot say) as their context. `voice`: the turn judge weighs
        Smart Turn's score (with no words judge, always); when it does not, Smart Turn is
        not run at all: neither beside the words judge nor on turns it cannot score,
        which then wait on the silence (agents/turns/judge.py). `end_of_turn`: Smart
        Turn, None where the process did not load it because no judge of its weighs it."""
        self.end_of_turn = end_of_turn
        self.words = words
        self.voice = voice or words is None
        if self.voice and end_of_turn is None:
            raise ValueError("this turn judge weighs Smart Turn, and it was not loaded")
        self._bot_line = bot_line
        self._utterance_start = utterance_start
        self.stt = stt
        self._run = run
        self.audio = CallerAudio(rate)
        self._piece = PIECE_SAMPLES * rate // 16000
        self._running: _Running | None = None
        self._transcribed: _Transcribed | None = None
        self._stt_ms: dict[int, float] = {}  # evaluation end -> its duration

    @property
    def running(self) -> bool:
        """An evaluation is in flight (started, not yet collected or dropped)."""
        return self._running is not None

    # --- in the background (the cascade agent) ----------------------------------------

    def start(self, ticket: Evaluate, spawn: Spawn) -> None:
        """Start evaluating `ticket` as a task of the caller's (any earlier one dropped)."""
        self.drop()
        audio = self.audio.slice(ticket.start, ticket.end)
        before = self._transcribed
        if before is None or before.start != ticket.start or before.end >= ticket.end:
            before = None
        stt_from = ticket.start if before is None else before.end
        new_audio = self.audio.for_words(stt_from, ticket.end)
        task = spawn(self.evaluate(ticket, audio, new_audio, before), "end-of-turn")
        self._running = _Running(ticket, task, time.perf_counter(), stt_from)

    def drop(self) -> None:
        """The caller went on (or the turn is over): the evaluation is not wanted.

        One that has transcribed a whole piece still finishes (its thread runs either
        way), and its words are kept for the next evaluation of the same turn, if that
        turn is still going on. Cancelled, a reader whose every pause was shorter than
        Whisper on the growing piece left the whole reading to the last evaluation."""
        running, self._running = self._running, None
        if running is None:
            return
        if running.covers_a_piece(self._piece):
            running.task.add_done_callback(lambda _: self._keep_piece(running))
        else:
            running.task.cancel()

    def collect(self) -> tuple[Evaluate, Evaluation | BackendError] | None:
        """The finished evaluation and its ticket; None while none has finished."""
        running = self._running
        if running is None or not running.task.done():
            return None
        self._running = None
        result = running.task.result()
        if isinstance(result, Evaluation):
            self._stt_ms[result.end] = (time.perf_counter() - running.started) * 1000
            ticket = running.ticket
            if running.covers_a_piece(self._piece) and result.hearing is Hearing.HEARD:
                self._transcribed = _Transcribed(ticket.start, ticket.end, result.text)
        return running.ticket, result

    def cancel(self) -> None:
        """Hang-up: the running evaluation is cancelled outright."""
        if self._running is not None:
            self._running.task.cancel()
            self._running = None

    def stt_ms(self, end: int) -> float:
        """How long the evaluation that ended at `end` took (once: it is forgotten)."""
        return self._stt_ms.pop(end, 0.0)

    def forget_timings(self) -> None:
        self._stt_ms.clear()

    def _keep_piece(self, running: _Running) -> None:
        task, ticket = running.task, running.ticket
        if task.cancelled() or task.exception() is not None:
            return
        result = task.result()
        if isinstance(result, BackendError) or result.hearing is not Hearing.HEARD:
            return
        if ticket.start != self._utterance_start():
            return  # that turn is over
        known = self._transcribed
        if known is not None and known.start == ticket.start and known.end >= ticket.end:
            return
        self._transcribed = _Transcribed(ticket.start, ticket.end, result.text)

    # --- inline (the duplex backend) and the evaluation itself -------------------------

    async def evaluate_now(self, ticket: Evaluate) -> Evaluation | BackendError:
        """Evaluate `ticket` on the whole utterance, here and now."""
        audio = self.audio.slice(ticket.start, ticket.end)
        return await self.evaluate(
            ticket, audio, self.audio.for_words(ticket.start, ticket.end), None
        )

    async def evaluate(
        self,
        ticket: Evaluate,
        audio: np.ndarray,
        new_audio: np.ndarray,
        before: _Transcribed | None,
    ) -> Evaluation | BackendError:
        """Whisper on what `before` has not transcribed (`new_audio`, its long pauses
        shortened), then the words judge, with Smart Turn on the utterance (`audio`, as
        it was said) beside Whisper when its score counts (see `voice`).

        Smart Turn is left out when it would not count because on a small CPU it runs
        beside Whisper, on the same cores, while the caller waits for the answer.

        A failure is returned, not raised: an exception here would end the whole call."""
        stt = self._run("stt", self.stt.transcribe, new_audio)
        probability: float | None = None
        try:
            if self.voice:
                probability, transcript = await asyncio.gather(self._smart_turn(audio), stt)
            else:
                transcript = await stt
        except BackendError as exc:
            return exc
        except Exception as exc:  # not Whisper's own error: still this turn's, not the call's
            error = SpeechToTextError(f"transcription failed: {exc}")
            error.__cause__ = exc
            return error
        text, hearing = transcript.text.strip(), heard_as(transcript, ticket.speech_ms)
        if before is not None:
            # The turn was heard already; what came after its pause adds words, or not.
            more = text if hearing is Hearing.HEARD else ""
            text, hearing = f"{before.text.strip()} {more}".strip(), Hearing.HEARD
        words: float | None = None
        if self.words is not None and hearing is Hearing.HEARD and text:
            try:
                words = await self._run("turn_words", self.words.complete, self._bot_line(), text)
            except Exception as exc:
                # An extra opinion, not the turn: without it the turn waits on the
                # silence, and the caller's words are still answered.
                log.warning("the words judge failed (%s); judging this turn without it", exc)
        return Evaluation(
            end=ticket.end,
            probability=None if probability is None else float(probability),
            text=text,
            hearing=hearing,
            capped=ticket.capped,
            no_speech_prob=transcript.no_speech_prob,
            avg_logprob=transcript.avg_logprob,
            words=words,
        )

    async def _smart_turn(self, audio: np.ndarray) -> float:
        """The end-of-turn model's score; its failures (onnxruntime's own errors) raised
        as a BackendError of the end-of-turn stage."""
        model = self.end_of_turn
        assert model is not None  # `voice` is only set with the model (see __init__)
        try:
            return await self._run("end_of_turn", model.predict, audio)
        except BackendError:
            raise
        except Exception as exc:
            error = BackendError(f"end-of-turn model failed: {exc}")
            error.stage = "end_of_turn"
            raise error from exc


def heard_as(transcript: Transcript, speech_ms: int) -> Hearing:
    """The transcript's evidence, as the engine reads it."""
    return Hearing(assess(transcript, speech_ms=speech_ms).value)
