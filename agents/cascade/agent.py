"""The cascade agent: decides when the caller is done, answers, and yields on barge-in.

It consumes the front end's output (16 kHz cleaned audio + VAD events, counted in
samples) and keypad digits, and speaks through `Playback`. Everything slow (end-of-turn
model, Whisper, Piper) runs in worker threads; the LLM runs in its own process or
remotely. Speculation hides most of the latency: at the first short pause the
end-of-turn model and Whisper both start; if the caller goes on talking the work is
thrown away.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import numpy as np

from agents.cascade.clauses import ClauseSplitter
from agents.cascade.llm import ChatModel
from agents.cascade.stt import SpeechToText, Transcript
from agents.cascade.tts import TextToSpeech
from agents.conversation import Conversation, Turn
from agents.errors import BackendError, LanguageModelError
from agents.inputs import Digits
from agents.playback import PHONE_RATE, Playback
from agents.tasks import cancel_and_wait
from media.frontend import FrontEndOutput
from media.vad import SpeechStarted, SpeechStopped

if TYPE_CHECKING:
    from app.metrics import Metrics

log = logging.getLogger(__name__)

RATE = 16000  # front-end output rate
T = TypeVar("T")


class EndOfTurn:
    """Anything with `predict(audio_16k) -> P(turn complete)`."""

    def predict(self, audio_16k: np.ndarray) -> float:  # pragma: no cover - protocol
        raise NotImplementedError


@dataclass
class CascadeModels:
    """The shared, loaded models; one set per process, used by every call."""

    stt: SpeechToText
    tts: TextToSpeech
    llm: ChatModel
    end_of_turn: EndOfTurn
    # Pre-synthesised lines, so the greeting is instant and the apology works even when
    # the TTS is the backend that failed.
    canned: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TurnTaking:
    end_of_turn_threshold: float = 0.5
    min_silence_ms: int = 200
    max_silence_ms: int = 1000
    barge_in_min_speech_ms: int = 600
    echo_margin_db: float = 12.0
    # An interruption stands this far above the call's background (babble, a TV): the
    # background's own bursts, which Silero also calls speech, never stop the bot.
    barge_in_over_floor_db: float = 10.0
    preroll_ms: int = 300
    # A turn this long is ended at its next pause; with no pause at all (speech-like
    # background the gate could not separate), the end-of-turn model and the
    # transcript decide at this length, and again every `recheck_s`, without a pause.
    max_utterance_s: float = 20.0
    recheck_s: float = 5.0
    # ...and past this the turn is answered whatever they say: never wait forever.
    hard_max_utterance_s: float = 60.0
    digit_timeout_ms: int = 800


# What a caller is waiting for when the cascade takes a call over mid-conversation.
CarryOn = Literal["answer", "resume"]
RESUME_NOTE = (
    "Your last reply was cut off by a technical fault. Finish it from where it stopped, "
    "briefly, without repeating what you already said."
)


@dataclass(slots=True)
class _Candidate:
    """A speculative evaluation of the utterance so far, started at a pause."""

    task: asyncio.Task[_Evaluation]
    speech_end: int
    capped: bool = False  # started mid-speech because the turn reached its length cap


@dataclass(frozen=True, slots=True)
class _Evaluation:
    probability: float
    transcript: Transcript
    elapsed_ms: float
    error: BackendError | None = None


@dataclass
class TurnTiming:
    """Per-turn latency parts, in milliseconds (call clock where it matters)."""

    speech_end: int = 0  # 16 kHz sample
    end_of_turn_ms: float = 0.0
    stt_ms: float = 0.0
    llm_first_token_ms: float | None = None
    tts_first_audio_ms: float | None = None
    mouth_to_mouth_ms: float | None = None


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
        on_event: Callable[[str, dict[str, object]], None] | None = None,
    ) -> None:
        self.models = models
        self.playback = playback
        self.conversation = conversation
        self.cfg = turn_taking
        self.metrics = metrics
        self.greeting = greeting
        self.apology = apology
        self._emit = on_event or (lambda _name, _data: None)
        self._tasks: asyncio.TaskGroup | None = None

        self._preroll: deque[np.ndarray] = deque()
        self._preroll_samples = 0
        self._utterance: list[np.ndarray] = []
        self._collecting = False
        self._overlap = False  # the current utterance began while the bot was audible
        self._speaking = False
        self._speech_end: int | None = None
        self._utterance_start = 0  # 16 kHz sample of the utterance's first (preroll) audio
        self._position = 0  # 16 kHz samples of front-end output seen
        self._speech_start = 0  # 16 kHz sample where the current speech run began
        self._barge_samples = 0  # samples of it louder than the bot's echo
        self._over_bot_samples = 0  # samples of it spoken while the bot was audible
        self._candidate: _Candidate | None = None
        self._next_cap_check = 0  # 16 kHz sample at which a capped turn is looked at again
        self._response: asyncio.Task[None] | None = None
        self._response_turn: Turn | None = None
        self._response_audible = False
        self._committed_turn: Turn | None = None
        self._digits = ""
        self._digit_task: asyncio.Task[None] | None = None
        self.timings: list[TurnTiming] = []

    # --- the loop --------------------------------------------------------------------

    async def run(
        self,
        inputs: AsyncIterator[FrontEndOutput | Digits],
        *,
        greet: bool = True,
        carry_on: CarryOn | None = None,
    ) -> None:
        """Serve the call until `inputs` ends.

        Taking over a call from another agent: `greet=False`, and `carry_on` says what the
        caller is waiting for: an answer to their last turn, or the rest of a bot reply
        that was cut off.
        """
        async with asyncio.TaskGroup() as tasks:
            self._tasks = tasks
            try:
                if self.greeting and greet:
                    self._start_response(None, canned=self.greeting)
                elif carry_on is not None:
                    self._start_response(None, note=RESUME_NOTE if carry_on == "resume" else "")
                async for item in inputs:
                    if isinstance(item, Digits):
                        self._on_digits(item.digits)
                    else:
                        await self._on_audio(item)
                        await self._maybe_end_turn()
            finally:
                # Hang-up: nothing of ours outlives the call.
                for task in (self._response, self._digit_task):
                    if task is not None:
                        task.cancel()
                if self._candidate is not None:
                    self._candidate.task.cancel()

    # --- caller audio ------------------------------------------------------------------

    async def _on_audio(self, out: FrontEndOutput) -> None:
        audio = out.audio
        self._position = out.start_sample + len(audio)
        self._remember(audio)
        began = False  # a new utterance copied this batch in with its preroll
        for event in out.events:
            if isinstance(event, SpeechStarted):
                began = await self._on_speech_started(event.sample) or began
            elif isinstance(event, SpeechStopped):
                self._on_speech_stopped(event.sample)
        if (self._collecting or self._reply_unheard()) and not began:
            # Audio keeps accruing while a committed turn's reply is still unheard: if
            # the caller goes on, the turn reopens with every frame, each exactly once.
            self._utterance.append(audio)
        if self._speaking and self._overlap:
            await self._check_barge_in(out)
        elif self._speaking and self._collecting:
            self._check_length_cap()

    def _check_length_cap(self) -> None:
        """A turn that never pauses is judged at its cap, not waited on forever."""
        length = self._position - self._utterance_start
        cap = int(self.cfg.max_utterance_s * RATE)
        if length < cap or self._candidate is not None:
            return
        if self._position < self._next_cap_check:
            return
        self._next_cap_check = self._position + int(self.cfg.recheck_s * RATE)
        self._emit("turn_capped", {"speech_ms": length * 1000 // RATE})
        self._start_candidate(self._position)
        assert self._candidate is not None
        self._candidate.capped = True

    def _reply_unheard(self) -> bool:
        return self._committed_turn is not None and not self._response_audible

    def _remember(self, audio: np.ndarray) -> None:
        self._preroll.append(audio)
        self._preroll_samples += len(audio)
        limit = RATE * self.cfg.preroll_ms // 1000
        while self._preroll and self._preroll_samples - len(self._preroll[0]) >= limit:
            self._preroll_samples -= len(self._preroll.popleft())

    async def _on_speech_started(self, sample: int) -> bool:
        """Returns True when a new utterance began (with the preroll)."""
        self._speaking = True
        self._speech_start = sample
        self._barge_samples = 0
        self._over_bot_samples = 0
        self._drop_candidate()
        self._emit("vad_start", {"sample": sample})
        if self.playback.audible() or (self._response is not None and self._response_audible):
            # Over the bot: a backchannel, echo, or the start of a barge-in.
            self._overlap = True
            if not self._collecting:
                self._begin_utterance()
                return True
            return False
        if self._response is not None and not self._response_audible:
            # The caller went on talking before the reply was heard: the speculative
            # reply is void and the caller's turn reopens with all its audio.
            await self._cancel_response(reason="caller_resumed")
            if self._committed_turn is not None:
                self.conversation.drop(self._committed_turn)
                self._committed_turn = None
            self._collecting = True
            return False
        if not self._collecting:
            self._begin_utterance()
            return True
        return False

    def _begin_utterance(self) -> None:
        self._next_cap_check = 0
        self._collecting = True
        self._utterance = list(self._preroll)
        self._utterance_start = self._position - self._preroll_samples
        self._speech_end = None

    def _on_speech_stopped(self, sample: int) -> None:
        self._speaking = False
        self._speech_end = sample
        self._emit("vad_stop", {"sample": sample})
        if not self._collecting:
            return
        if self._overlap:
            # Speech over the bot that never became a barge-in: too short (a
            # backchannel, "mhm") or too quiet (the bot's own echo). The bot goes on,
            # and it is not a turn to answer.
            speech_ms = (sample - self._speech_start) * 1000 // RATE
            short = speech_ms < self.cfg.barge_in_min_speech_ms
            if short:
                self.metrics.backchannels.inc()
            self._emit("backchannel" if short else "echo_ignored", {"speech_ms": speech_ms})
            self._reset_utterance()
            return
        self._start_candidate(sample)

    async def _check_barge_in(self, out: FrontEndOutput) -> None:
        speech_ms = (self._position - self._speech_start) * 1000 // RATE
        loud_ms = self._barge_samples * 1000 // RATE
        # Until the echo canceller has found the echo path (the first 2 s of the bot
        # talking on a call), some of the bot's echo gets through: only a longer
        # interruption is surely the caller.
        min_ms = self.cfg.barge_in_min_speech_ms * (1 if out.echo_settled else 2)
        if not (self.playback.audible() or self._response is not None):
            # The bot finished while the caller was speaking: once long enough, this is
            # simply the caller's turn, if what they said over the bot was loud like a
            # caller. The tail of the bot's own echo runs on past its end, and is not.
            over_bot_ms = self._over_bot_samples * 1000 // RATE
            if speech_ms >= min_ms and loud_ms * 3 >= over_bot_ms:
                self._overlap = False
            return
        self._over_bot_samples += len(out.audio)
        # The caller's own voice is far louder on their line than what is left of the
        # bot's echo, and than the room behind them; audio that isn't clearly above both
        # does not count towards interrupting.
        above_echo = out.level_db >= self.playback.reference_level_db() - self.cfg.echo_margin_db
        above_room = out.level_db >= out.noise_floor_db + self.cfg.barge_in_over_floor_db
        if above_echo and above_room:
            self._barge_samples += len(out.audio)
            loud_ms = self._barge_samples * 1000 // RATE
        # Voiced speech is loud; pauses and unvoiced sounds inside it are not, so a third
        # of the time above the echo level is enough. Echo alone never gets there.
        if speech_ms >= min_ms and loud_ms * 3 >= speech_ms:
            await self._barge_in()

    async def _barge_in(self) -> None:
        started = time.perf_counter()
        await self._cancel_response(reason="barge_in")
        heard = await self.playback.clear()
        self.metrics.barge_ins.inc()
        cleared_ms = self.playback.now() * 1000 / PHONE_RATE
        for record in heard:
            if (turn := self.conversation.bot_turn(record.turn_id)) is not None:
                turn.end_ms = cleared_ms
            self.conversation.heard(record.turn_id, record.text)
            self._emit(
                "barge_in",
                {"turn_id": record.turn_id, "heard": record.text, "truncated": record.truncated},
            )
        self._emit("clear", {"decision_to_clear_ms": (time.perf_counter() - started) * 1000})
        self._overlap = False

    def _reset_utterance(self) -> None:
        self._collecting = False
        self._overlap = False
        self._utterance = []
        self._speech_end = None
        self._drop_candidate()

    # --- end of turn -------------------------------------------------------------------

    def _start_candidate(self, speech_end: int) -> None:
        self._drop_candidate()
        audio = np.concatenate(self._utterance) if self._utterance else np.zeros(0, np.float32)
        task = self._spawn(self._evaluate(audio), "end-of-turn")
        self._candidate = _Candidate(task=task, speech_end=speech_end)

    def _drop_candidate(self) -> None:
        if self._candidate is not None:
            self._candidate.task.cancel()
            self._candidate = None

    async def _evaluate(self, audio: np.ndarray) -> _Evaluation:
        started = time.perf_counter()
        eot = asyncio.to_thread(self.models.end_of_turn.predict, audio)
        stt = asyncio.to_thread(self.models.stt.transcribe, audio)
        try:
            probability, transcript = await asyncio.gather(eot, stt)
        except BackendError as exc:
            # Reported, not raised: an exception here would end the whole call.
            return _Evaluation(0.0, Transcript("", 1.0), 0.0, error=exc)
        except Exception as exc:  # the end-of-turn model: onnxruntime errors
            return _Evaluation(0.0, Transcript("", 1.0), 0.0, error=_eot_error(exc))
        return _Evaluation(probability, transcript, (time.perf_counter() - started) * 1000)

    async def _maybe_end_turn(self) -> None:
        candidate = self._candidate
        if candidate is None or (self._speaking and not candidate.capped):
            return
        silence_ms = (self._position - candidate.speech_end) * 1000 // RATE
        long_turn = sum(len(a) for a in self._utterance) > self.cfg.max_utterance_s * RATE
        if not candidate.task.done():
            return
        self._candidate = None
        result = candidate.task.result()
        if result.error is not None:
            self._failed(result.error)
            self._reset_utterance()
            if self.apology:
                self._start_response(None, canned=self.apology)
            return
        probability, transcript, stt_ms = result.probability, result.transcript, result.elapsed_ms
        complete = (
            probability >= self.cfg.end_of_turn_threshold
            or (long_turn and not candidate.capped)
            # Two weak signals agreeing: the acoustic model leans "maybe" and Whisper
            # heard a finished sentence. Smart Turn scores flat prosody (synthetic or
            # monotone callers) low even on complete questions.
            or (
                probability >= self.cfg.end_of_turn_threshold / 5
                and sounds_finished(transcript.text)
            )
        )
        if candidate.capped:
            length = self._position - self._utterance_start
            if not complete and length < self.cfg.hard_max_utterance_s * RATE:
                return  # still talking by both signals: looked at again in recheck_s
        elif (
            not (complete and silence_ms >= self.cfg.min_silence_ms)
            and silence_ms < self.cfg.max_silence_ms
        ):
            # Not done yet by the model's reckoning: keep the result, look again later.
            self._candidate = candidate
            return
        self._emit(
            "end_of_turn",
            {
                "probability": round(probability, 3),
                "silence_ms": silence_ms,
                "text": transcript.text,
            },
        )
        timing = TurnTiming(speech_end=candidate.speech_end, stt_ms=stt_ms)
        timing.end_of_turn_ms = silence_ms
        self.metrics.end_of_turn_seconds.observe(silence_ms / 1000)
        self.metrics.stt_seconds.observe(stt_ms / 1000)
        self._commit(transcript.text, timing)

    def _commit(self, text: str, timing: TurnTiming) -> None:
        self._collecting = False
        self._speech_end = None
        if not text:
            self._utterance = []
            self._emit("empty_transcript", {})
            return
        turn = self.conversation.add_caller(text)
        if turn.start_ms is None:
            turn.start_ms = self._utterance_start * 1000 / RATE
        turn.end_ms = timing.speech_end * 1000 / RATE
        self._committed_turn = turn
        self._emit("caller_turn", {"text": text})
        self._start_response(timing)

    # --- keypad ------------------------------------------------------------------------

    def _on_digits(self, digits: str) -> None:
        self._digits += digits
        self._emit("dtmf", {"digits": digits})
        if self._digit_task is not None:
            self._digit_task.cancel()
        self._digit_task = self._spawn(self._digits_done(), "dtmf")

    async def _digits_done(self) -> None:
        await asyncio.sleep(self.cfg.digit_timeout_ms / 1000)
        digits, self._digits = self._digits, ""
        self._digit_task = None
        if self._response is not None:
            await self._cancel_response(reason="dtmf")
            if self.playback.audible():
                for record in await self.playback.clear():
                    self.conversation.heard(record.turn_id, record.text)
        self._committed_turn = self.conversation.add_digits(digits)
        self._start_response(TurnTiming(speech_end=self._position))

    # --- the bot's turn ----------------------------------------------------------------

    def _start_response(
        self, timing: TurnTiming | None, *, canned: str = "", note: str = ""
    ) -> None:
        if self._response is not None and not self._response.done():
            # One bot turn at a time: a newer turn supersedes the one still speaking.
            self._response.cancel()
        turn = self.conversation.start_bot()
        self._response_turn = turn
        self._response_audible = False
        self._response = self._spawn(self._respond(turn, timing, canned, note), "respond")

    async def _cancel_response(self, *, reason: str) -> None:
        task, self._response = self._response, None
        if task is None or task.done():
            return
        await cancel_and_wait(task)
        turn = self._response_turn
        if turn is not None and not self._response_audible:
            self.conversation.drop(turn)
        self._emit("response_cancelled", {"reason": reason})

    async def _respond(
        self, turn: Turn, timing: TurnTiming | None, canned: str, note: str = ""
    ) -> None:
        try:
            if canned:
                await self._speak_canned(turn, canned)
            else:
                await self._generate(turn, timing, note)
        except* BackendError as group:
            for exc in group.exceptions:
                self._failed(exc)
            if self.apology and not self._response_audible:
                turn.intended = ""
                try:
                    await self._speak_canned(turn, self.apology)
                except BackendError as exc:  # the TTS itself is down: silence, not a crash
                    self._failed(exc)
        finally:
            if self._response is asyncio.current_task():
                self._response = None
        if timing is not None:
            self.timings.append(timing)
            turn.latency = {
                "end_of_turn_ms": timing.end_of_turn_ms,
                "stt_ms": timing.stt_ms,
                "llm_first_token_ms": timing.llm_first_token_ms,
                "tts_first_audio_ms": timing.tts_first_audio_ms,
                "mouth_to_mouth_ms": timing.mouth_to_mouth_ms,
            }
            self._emit(
                "turn_timing", {"speech_end_ms": timing.speech_end * 1000 / RATE, **turn.latency}
            )

    async def _speak_canned(self, turn: Turn, text: str) -> None:
        pcm = self.models.canned.get(text)
        if pcm is None:
            pcm = await asyncio.to_thread(self.models.tts.synthesize, text)
        await self._play(turn, pcm, text)

    async def _play(self, turn: Turn, pcm: np.ndarray, text: str) -> int:
        rate = self.models.tts.sample_rate
        starts_at = await self.playback.play(pcm, rate, text, turn.turn_id)
        if turn.start_ms is None:
            turn.start_ms = starts_at * 1000 / PHONE_RATE
        turn.end_ms = starts_at * 1000 / PHONE_RATE + len(pcm) * 1000 / rate
        if not self._response_audible:
            self._response_audible = True
            self._utterance = []  # the caller's turn is now answered: keep no stale audio
            self._committed_turn = None
        turn.intended = f"{turn.intended} {text}".strip()
        if not turn.truncated:
            turn.text = turn.intended
        return starts_at

    async def _generate(self, turn: Turn, timing: TurnTiming | None, note: str = "") -> None:
        """Write and speak a reply; `note` is a one-off instruction, not kept in history."""
        started = time.perf_counter()
        clauses: asyncio.Queue[str | None] = asyncio.Queue()
        messages = self.conversation.messages()
        if note:
            messages.append({"role": "system", "content": note})

        finished = asyncio.Event()  # the model's reply ended normally

        async def write() -> None:
            splitter = ClauseSplitter()
            first = True
            try:
                async for delta in self.models.llm.stream(messages):
                    if first:
                        first = False
                        elapsed = time.perf_counter() - started
                        self.metrics.llm_first_token_seconds.observe(elapsed)
                        self._emit("llm_first_token", {"ms": elapsed * 1000})
                        if timing is not None:
                            timing.llm_first_token_ms = elapsed * 1000
                    for clause in splitter.feed(delta):
                        clauses.put_nowait(clause)
                for clause in splitter.flush():
                    clauses.put_nowait(clause)
                finished.set()
            finally:
                clauses.put_nowait(None)

        async def speak() -> None:
            first = True
            while (clause := await clauses.get()) is not None:
                pcm = await asyncio.to_thread(self.models.tts.synthesize, clause)
                if first:
                    first = False
                    elapsed = time.perf_counter() - started
                    self.metrics.tts_first_audio_seconds.observe(elapsed)
                    self._emit("tts_first_audio", {"ms": elapsed * 1000, "text": clause})
                    if timing is not None:
                        timing.tts_first_audio_ms = elapsed * 1000
                starts_at = await self._play(turn, pcm, clause)
                if timing is not None and timing.mouth_to_mouth_ms is None:
                    # Speech end (16 kHz clock) to the reply's expected start at the ear
                    # (8 kHz clock): both count caller audio received.
                    gap = starts_at / PHONE_RATE - timing.speech_end / RATE
                    timing.mouth_to_mouth_ms = gap * 1000
                    self.metrics.mouth_to_mouth_seconds.observe(max(gap, 0.0))
            if first and finished.is_set():
                # Nothing speakable came back (empty, or only markup): the caller must not
                # be left in silence after their turn. Treated as a failed reply.
                raise LanguageModelError("the model's reply had nothing to say")

        async with asyncio.TaskGroup() as group:
            group.create_task(write())
            group.create_task(speak())
        self._emit("bot_turn", {"turn_id": turn.turn_id, "text": turn.intended})

    # --- plumbing ----------------------------------------------------------------------

    def _failed(self, exc: BaseException) -> None:
        stage = getattr(exc, "stage", "agent")
        self.metrics.errors.labels(stage=stage).inc()
        self._emit("backend_error", {"stage": stage, "error": str(exc)})
        log.warning("backend failed (%s): %s", stage, exc)

    def _spawn(self, coro: Coroutine[Any, Any, T], name: str) -> asyncio.Task[T]:
        assert self._tasks is not None, "the agent is not running"
        return self._tasks.create_task(coro, name=name)


def _eot_error(exc: Exception) -> BackendError:
    error = BackendError(f"end-of-turn model failed: {exc}")
    error.stage = "end_of_turn"
    error.__cause__ = exc
    return error


def sounds_finished(text: str) -> bool:
    """Whisper ends a complete sentence with . ? or ! and a trailing-off one with ..."""
    text = text.rstrip()
    return text.endswith(("?", "!", ".")) and not text.endswith("..")
