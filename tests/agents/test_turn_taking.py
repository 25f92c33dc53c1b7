"""The cascade agent's turn taking, driven frame by frame with fake models.

Time is the caller's audio: every frame is 20 ms of 16 kHz front-end output, and the
8 kHz call clock moves with it. The fake Twilio line plays the bot's audio in real time
on that clock and echoes each mark when its chunk has played. Every synthesised word
lasts one 100 ms playout chunk, so what the caller heard is easy to count.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
from collections.abc import AsyncIterator, Callable, Sequence

import numpy as np

from agents.cascade.agent import (
    DEFAULT_FAREWELL,
    DEFAULT_REPROMPT,
    RESUME_NOTE,
    CarryOn,
    CascadeAgent,
    CascadeModels,
    Digits,
    TurnTaking,
)
from agents.cascade.llm import Message
from agents.cascade.stt import Transcript
from agents.conversation import Conversation, Speaker, Turn
from agents.errors import LanguageModelError, SpeechToTextError
from agents.playback import PHONE_RATE, Playback
from agents.turns.audio import LONG_PAUSE_KEPT_MS
from app.metrics import Metrics
from media.frontend import FrontEndOutput
from media.resample import resample
from media.vad import SpeechStarted, SpeechStopped
from tests.agents.fakes import TwilioLine
from tests.agents.models import (
    BOT_AMPLITUDE,
    TTS_RATE,
    ChatModelFake,
    EndOfTurnFake,
    SpeechToTextFake,
    TextToSpeechFake,
    end_of_turn,
    failing_stt,
    hearing,
    replying,
    speaking,
    words_as_tones,
)

RATE = 16000
FRAME = RATE // 50  # 20 ms
PERSONA = "You are the test line's assistant."
GREETING = (
    "Hello and thank you for calling the offhook test line where every single word "
    "you hear lasts exactly one tenth of a second."
)
APOLOGY = "Sorry, I'm having trouble right now."
CALLER_SAYS = "Can I book a table for two?"
REPLY = ["Of course", ". For how ", "many people?"]
REPLY_TEXT = "Of course. For how many people?"
# A turn Smart Turn is unsure of is answered after this pause (these calls have no words
# judge: Smart Turn and the silence judge the turn).
UNSURE_PAUSE_MS = TurnTaking().max_silence_ms
BOT_LEVEL_DB = 20 * math.log10(BOT_AMPLITUDE / math.sqrt(2))  # the fake TTS's tone
CALLER_LEVEL_DB = BOT_LEVEL_DB + 3  # a caller's own voice: louder than the bot's echo
SILENCE_DB = -70.0


class Call:
    """One call to the agent: the test speaks in frames and watches what the bot sends."""

    def __init__(
        self,
        *,
        stt: SpeechToTextFake,
        llm: ChatModelFake,
        eot: EndOfTurnFake,
        tts: TextToSpeechFake,
        canned: dict[str, np.ndarray],
        turn_taking: TurnTaking,
        greeting: str,
    ) -> None:
        self.line = TwilioLine()
        self.playback = Playback(self.line, self.line.clock)
        self.conversation = Conversation(PERSONA)
        self.metrics = Metrics()
        self.events: list[tuple[str, dict[str, object]]] = []
        self.llm = llm
        models = CascadeModels(stt=stt, tts=tts, llm=llm, end_of_turn=eot, canned=canned)
        self.agent = CascadeAgent(
            models,
            self.playback,
            self.conversation,
            turn_taking=turn_taking,
            metrics=self.metrics,
            greeting=greeting,
            apology=APOLOGY,
            on_event=lambda event: self.events.append((event.name, event.data())),
        )
        self.position = 0  # 16 kHz samples of caller audio fed so far
        self.speaking = False
        self.echo_settled = True  # what the front end says of its echo canceller
        self._inputs: asyncio.Queue[FrontEndOutput | Digits | None] = asyncio.Queue()
        self._run: asyncio.Task[None] | None = None

    # --- the caller's side -------------------------------------------------------------

    async def talk(self, ms: int, *, level_db: float = CALLER_LEVEL_DB) -> None:
        """Caller speech, starting at once (the VAD's SpeechStarted in the first frame)."""
        assert not self.speaking, "already talking"
        self.speaking = True
        await self._frames(ms, level_db, SpeechStarted(self.position))

    async def go_on(self, ms: int, *, level_db: float = CALLER_LEVEL_DB) -> None:
        """More of the caller's speech, with no pause since `talk`."""
        assert self.speaking, "not talking"
        await self._frames(ms, level_db, None)

    async def pause(self, ms: int) -> None:
        """Silence; if the caller was talking, the VAD's SpeechStopped is in the first frame."""
        if self.speaking:
            self.speaking = False
            await self._frames(20, SILENCE_DB, SpeechStopped(self.position))
            await self.evaluated()
            ms -= 20
        await self._frames(ms, SILENCE_DB, None)

    async def pause_while_evaluating(self, ms: int) -> None:
        """A pause the caller ends before the turn's evaluation has come back."""
        assert self.speaking, "not talking"
        self.speaking = False
        await self._frames(ms, SILENCE_DB, SpeechStopped(self.position))

    async def press(self, digits: str) -> None:
        await self._put(Digits(digits))

    async def _frames(
        self, ms: int, level_db: float, event: SpeechStarted | SpeechStopped | None
    ) -> None:
        for n in range(ms // 20):
            # Every sample of a frame holds the frame's position: the STT's input says
            # exactly which frames reached it.
            out = FrontEndOutput(
                audio=np.full(FRAME, self.position, dtype=np.float32),
                start_sample=self.position,
                events=[event] if event is not None and n == 0 else [],
                level_db=level_db,
                echo_settled=self.echo_settled,
            )
            self.position += FRAME
            self.line.clock.samples = self.position * PHONE_RATE // RATE
            for name in self.line.due_marks():
                self.playback.echoed(name)
            await self._put(out)

    async def _put(self, item: FrontEndOutput | Digits | None) -> None:
        """Hand the agent one input and wait until it has dealt with it."""
        assert self._run is not None
        self._inputs.put_nowait(item)
        joined = asyncio.ensure_future(self._inputs.join())
        await asyncio.wait({joined, self._run}, timeout=5, return_when=asyncio.FIRST_COMPLETED)
        if not joined.done():
            joined.cancel()
            if self._run.done():
                self._run.result()  # the agent's own failure, if that is what stopped it
            raise AssertionError("the agent stopped taking input")

    async def _stream(self) -> AsyncIterator[FrontEndOutput | Digits]:
        while (item := await self._inputs.get()) is not None:
            yield item
            self._inputs.task_done()
        self._inputs.task_done()

    # --- waiting, always bounded -------------------------------------------------------

    async def until(self, condition: Callable[[], bool], what: str) -> None:
        """Wait (2 s at most) for work the agent does in worker threads."""
        for _ in range(2000):
            if condition():
                return
            if self._run is not None and self._run.done():
                self._run.result()  # the agent's own failure, if that is what stopped it
                raise AssertionError(f"the agent stopped while waiting for {what}")
            await asyncio.sleep(0.001)
        raise AssertionError(f"timed out waiting for {what}")

    async def evaluated(self) -> None:
        """Wait until no end-of-turn evaluation (end-of-turn model + STT) is in flight."""

        def idle() -> bool:
            return not any(
                task.get_name() == "end-of-turn" and not task.done() for task in asyncio.all_tasks()
            )

        await self.until(idle, "the end-of-turn evaluation")

    async def bot_said(self, text: str) -> None:
        """Wait until the bot has sent all of `text` as one turn."""
        await self.until(
            lambda: any(t.speaker is Speaker.BOT and t.text == text for t in self.bot_turns()),
            f"the bot to say {text!r}",
        )

    # --- what happened -----------------------------------------------------------------

    def bot_turns(self) -> list[Turn]:
        return [t for t in self.conversation.turns if t.speaker is Speaker.BOT]

    def caller_turns(self) -> list[str]:
        return [t.text for t in self.conversation.turns if t.speaker is Speaker.CALLER]

    def event_names(self) -> list[str]:
        return [name for name, _ in self.events]

    def count(self, metric: str, **labels: str) -> float:
        return self.metrics.registry.get_sample_value(metric, labels) or 0.0

    def audio_sent(self) -> int:
        """8 kHz samples of bot audio sent (one mu-law byte each)."""
        return sum(len(payload) for payload in self.line.media())

    # --- lifetime ----------------------------------------------------------------------

    def start(self, *, greet: bool = True, carry_on: CarryOn | None = None) -> None:
        self._run = asyncio.create_task(
            self.agent.run(self._stream(), greet=greet, carry_on=carry_on), name="agent"
        )

    async def hang_up(self) -> None:
        assert self._run is not None
        if not self._run.done():
            self._inputs.put_nowait(None)
        async with asyncio.timeout(5):
            await self._run


@contextlib.asynccontextmanager
async def call(
    *,
    stt: SpeechToTextFake | None = None,
    llm: ChatModelFake | None = None,
    eot: EndOfTurnFake | None = None,
    tts: TextToSpeechFake | None = None,
    canned: dict[str, np.ndarray] | None = None,
    turn_taking: TurnTaking | None = None,
    greeting: str = "",
    takeover: bool = False,
    carry_on: CarryOn | None = None,
    history: Sequence[tuple[Speaker, str]] = (),
) -> AsyncIterator[Call]:
    """A call; with `takeover`, one the agent takes over after `history`."""
    session = Call(
        stt=stt or hearing(CALLER_SAYS),
        llm=llm or replying(REPLY),
        eot=eot or end_of_turn(0.9),
        tts=tts or speaking(),
        canned=canned or {},
        turn_taking=turn_taking or TurnTaking(),
        greeting=greeting,
    )
    for speaker, text in history:
        if speaker is Speaker.CALLER:
            session.conversation.add_caller(text)
        else:
            session.conversation.start_bot().text = text
    session.start(greet=not takeover, carry_on=carry_on)
    try:
        yield session
    finally:
        await session.hang_up()
        await session.agent.models.scheduler.aclose()  # its model threads end with the call


def at_8_khz(pcm: np.ndarray) -> int:
    return len(resample(pcm, TTS_RATE, PHONE_RATE))


async def greeted(session: Call) -> None:
    """Let the greeting be sent in full before the caller's audio starts."""
    await session.bot_said(GREETING)


# --- the greeting --------------------------------------------------------------------------


async def test_the_greeting_is_sent_at_the_start() -> None:
    async with call(greeting=GREETING) as session:
        await greeted(session)
        assert session.audio_sent() == at_8_khz(words_as_tones(GREETING))
        assert len(session.line.marks()) == len(GREETING.split())
        assert [t.text for t in session.conversation.turns] == [GREETING]


async def test_a_pre_synthesised_greeting_needs_no_tts() -> None:
    def no_tts(text: str) -> np.ndarray:
        raise AssertionError(f"the TTS was asked for {text!r}")

    canned = {GREETING: words_as_tones(GREETING)}
    async with call(greeting=GREETING, canned=canned, tts=TextToSpeechFake(no_tts)) as session:
        await greeted(session)
        assert session.audio_sent() == at_8_khz(canned[GREETING])


async def test_without_a_greeting_the_bot_waits_for_the_caller() -> None:
    async with call() as session:
        await session.pause(500)
        assert session.line.sent == []
        assert session.conversation.turns == []


# --- ending the caller's turn --------------------------------------------------------------


async def test_a_likely_end_of_turn_after_a_short_pause_is_answered() -> None:
    async with call(eot=end_of_turn(0.9)) as session:
        await session.talk(600)
        await session.pause(300)
        await session.bot_said(REPLY_TEXT)
        assert [(t.speaker, t.text) for t in session.conversation.turns] == [
            (Speaker.CALLER, CALLER_SAYS),
            (Speaker.BOT, REPLY_TEXT),
        ]
        assert session.audio_sent() == at_8_khz(words_as_tones(REPLY_TEXT))
        assert session.llm.prompts == [
            [{"role": "system", "content": PERSONA}, {"role": "user", "content": CALLER_SAYS}]
        ]


async def test_a_likely_end_of_turn_is_taken_after_min_silence() -> None:
    async with call(eot=end_of_turn(0.9)) as session:
        await session.talk(600)
        await session.pause(180)
        assert session.caller_turns() == []
        await session.pause(20)
        assert session.caller_turns() == [CALLER_SAYS]
        [decision] = [data for name, data in session.events if name == "end_of_turn"]
        assert decision["silence_ms"] == 200


async def test_an_unlikely_end_of_turn_waits_for_max_silence() -> None:
    unpunctuated = "I would like the window seat"
    async with call(stt=hearing(unpunctuated), eot=end_of_turn(0.01)) as session:
        max_silence = TurnTaking().max_silence_ms
        await session.talk(600)
        await session.pause(max_silence - 20)
        assert session.caller_turns() == []
        assert session.audio_sent() == 0, "only a draft may be written in the pause"
        await session.pause(20)
        assert session.caller_turns() == [unpunctuated]
        [decision] = [data for name, data in session.events if name == "end_of_turn"]
        assert decision["silence_ms"] == max_silence
        await session.bot_said(REPLY_TEXT)


async def test_a_reply_is_written_while_the_pause_is_waited_out() -> None:
    # The pause the judge waits is quiet time: the LLM starts on the words at once, and
    # the reply starts from what it has written when the pause ends the turn.
    statement = "I'd like to book a table."
    async with call(stt=hearing(statement), eot=end_of_turn(0.3)) as session:
        await session.talk(1500)
        await session.pause(300)
        await session.until(lambda: len(session.llm.prompts) == 1, "the draft")
        assert session.caller_turns() == [], "drafted, not answered"
        assert session.audio_sent() == 0
        await session.pause(UNSURE_PAUSE_MS - 300)
        await session.bot_said(REPLY_TEXT)
        assert session.llm.prompts == [
            [{"role": "system", "content": PERSONA}, {"role": "user", "content": statement}]
        ], "the draft is the reply: the model was asked once"
        [first] = [data for name, data in session.events if name == "llm_first_token"]
        assert first["drafted"] is True


async def test_a_draft_is_thrown_away_when_the_caller_goes_on() -> None:
    first, whole = "I'd like to book a table.", "I'd like to book a table. For four people."
    async with call(stt=hearing(first, whole), eot=end_of_turn(0.3)) as session:
        await session.talk(1500)
        await session.pause(300)
        await session.until(lambda: len(session.llm.prompts) == 1, "the draft")
        await session.talk(1000)
        await session.pause(UNSURE_PAUSE_MS)
        await session.bot_said(REPLY_TEXT)
        assert session.caller_turns() == [whole]
        # The first draft was dropped; the reply is the one drafted for all the words.
        assert [prompt[-1]["content"] for prompt in session.llm.prompts] == [first, whole]


async def test_a_backchannel_over_a_drafted_reply_does_not_cut_what_is_still_being_written() -> (
    None
):
    # The reply follows a draft the LLM is still writing; the hum's own evaluation must
    # not stop that writing, or the rest of the reply is lost when the bot resumes.
    more = asyncio.Event()
    statement = "I'd like to book a table."
    prompts: list[list[Message]] = []

    async def stream(messages: Sequence[Message]) -> AsyncIterator[str]:
        prompts.append(list(messages))
        yield "Of course, " + "we can book that for you " * 3 + ". "
        await more.wait()
        yield "Anything else?"

    def transcribe(audio_16k: np.ndarray) -> Transcript:
        # The 400 ms hum is "Mhm." whenever it is transcribed (its audio is the shortest).
        text = "Mhm." if audio_16k.size < RATE else statement
        return Transcript(text, no_speech_prob=0.0)

    async with call(
        stt=SpeechToTextFake(transcribe), llm=ChatModelFake(stream, prompts)
    ) as session:
        await session.talk(1500)
        await session.pause(UNSURE_PAUSE_MS)
        await session.until(lambda: session.audio_sent() > 0, "the reply")
        await session.pause(300)
        await session.talk(400)  # "Mhm." over the reply
        await session.pause(1000)
        await session.evaluated()
        more.set()
        await session.until(
            lambda: any("Anything else?" in t.intended for t in session.bot_turns()),
            "the rest of the reply",
        )
        assert len(prompts) == 1, "the draft was the reply"


async def test_no_draft_is_written_while_another_call_shares_the_llm_server() -> None:
    # One LLM server writes one reply at a time: a draft must not make theirs wait.
    statement = "I'd like to book a table."
    async with call(stt=hearing(statement), eot=end_of_turn(0.3)) as session:
        assert session.agent.models.drafts.servers == 1
        session.agent.models.drafts.call_started()  # another call
        await session.talk(1500)
        await session.pause(300)
        await session.evaluated()
        assert session.llm.prompts == []
        await session.pause(UNSURE_PAUSE_MS - 300)
        await session.bot_said(REPLY_TEXT)
        [first] = [data for name, data in session.events if name == "llm_first_token"]
        assert first["drafted"] is False
        session.agent.models.drafts.call_ended()


async def test_no_draft_is_written_for_words_that_stop_mid_sentence() -> None:
    async with call(stt=hearing("I'd like to book a table for"), eot=end_of_turn(0.3)) as session:
        await session.talk(1500)
        await session.pause(600)
        await session.evaluated()
        assert session.llm.prompts == [], "half a sentence is not worth the model's time"


async def test_words_that_stop_mid_sentence_are_drafted_late_in_their_long_wait() -> None:
    # Mostly the caller goes on; but a finished turn misheard as hanging ("Thanks,
    # that's all. Bye!" as "...now I'll buy") is answered when the wait runs out, and
    # without a draft the model's first clause came 0.65 s after it: 2.4 s of dead air.
    hanging = "Thanks, now I'll buy..."
    cfg = TurnTaking()
    async with call(stt=hearing(hanging), eot=end_of_turn(0.3)) as session:
        await session.talk(1500)
        await session.pause(cfg.unfinished_draft_after_ms - 40)
        assert session.llm.prompts == [], "early in the wait the caller is thinking"
        await session.pause(60)
        await session.until(lambda: len(session.llm.prompts) == 1, "the draft")
        assert session.caller_turns() == [], "drafted, not answered"
        await session.pause(cfg.max_silence_ms - cfg.unfinished_draft_after_ms)
        await session.bot_said(REPLY_TEXT)
        assert session.caller_turns() == [hanging]
        assert len(session.llm.prompts) == 1, "the draft is the reply"
        [first] = [data for name, data in session.events if name == "llm_first_token"]
        assert first["drafted"] is True


async def test_a_short_pause_mid_sentence_keeps_one_turn() -> None:
    heard: list[np.ndarray] = []
    stt = hearing("I'd like", "I'd like to book a table.", heard=heard)
    async with call(stt=stt, eot=end_of_turn(0.9)) as session:
        await session.talk(400)
        await session.pause(100)
        await session.talk(400)
        await session.pause(UNSURE_PAUSE_MS)
        await session.bot_said(REPLY_TEXT)
        assert session.caller_turns() == ["I'd like to book a table."]
        assert len(heard) == 2


async def test_whisper_hears_a_long_pause_inside_the_turn_cut_short() -> None:
    # Greedy Whisper stops at a long pause inside its window: the words after it must
    # not be lost to it. The evidence (speech_ms) and Smart Turn still get the turn whole.
    heard: list[np.ndarray] = []
    stt = hearing("I'd like", "I'd like to book a table.", heard=heard)
    async with call(stt=stt, eot=end_of_turn(0.3)) as session:
        await session.talk(600)
        await session.pause(900)
        await session.talk(600)
        await session.pause(UNSURE_PAUSE_MS)
        await session.bot_said(REPLY_TEXT)
        assert session.caller_turns() == ["I'd like to book a table."]
        whole = heard[1]
        kept = LONG_PAUSE_KEPT_MS * RATE // 1000
        # Each sample holds its frame's position: the pause lost its middle, nothing else.
        jumps = np.diff(whole)[np.diff(whole) > FRAME]
        removed = 900 * RATE // 1000 - kept
        assert len(jumps) == 1 and removed <= jumps[0] <= removed + FRAME


async def test_a_long_turn_is_transcribed_in_pieces_at_its_pauses() -> None:
    # Whisper sees 30 s at most, and re-reading a whole minute at every pause would
    # leave the caller waiting: once a turn has 4 s transcribed, later evaluations hear
    # only what came after that pause, and the words are joined.
    heard: list[np.ndarray] = []
    stt = hearing("The first part of my story", "and the end of it.", heard=heard)
    async with call(stt=stt, eot=end_of_turn(0.01)) as session:
        await session.talk(9000)
        await session.pause(300)
        await session.talk(1000)
        await session.pause(UNSURE_PAUSE_MS)
        await session.bot_said(REPLY_TEXT)
        assert session.caller_turns() == ["The first part of my story and the end of it."]
        assert len(heard) == 2
        # The second piece: the pause and the last second of speech, not the 9 s again.
        assert 1.0 * RATE <= len(heard[1]) <= 1.5 * RATE, len(heard[1]) / RATE


async def test_a_piece_still_being_transcribed_when_the_caller_goes_on_is_kept() -> None:
    # A reader resumes before Whisper is through the pause's piece: the evaluation is
    # dropped, but its words are the turn's so far, and the next one goes on from them.
    heard: list[np.ndarray] = []
    release = threading.Event()

    def transcribe(audio_16k: np.ndarray) -> Transcript:
        heard.append(audio_16k)
        if len(heard) == 1:
            release.wait(2)  # still at it when the caller speaks again
        return Transcript(PIECES[min(len(heard), 2) - 1], no_speech_prob=0.0)

    async with call(stt=SpeechToTextFake(transcribe), eot=end_of_turn(0.01)) as session:
        await session.talk(9000)
        await session.pause_while_evaluating(300)
        await session.talk(1000)
        release.set()
        await session.evaluated()  # the dropped evaluation's Whisper run comes back
        await session.pause(UNSURE_PAUSE_MS)
        await session.bot_said(REPLY_TEXT)
        assert session.caller_turns() == [" ".join(PIECES)]
        assert len(heard) == 2
        assert 1.0 * RATE <= len(heard[1]) <= 1.5 * RATE, len(heard[1]) / RATE


PIECES = ("The first part of my story", "and the end of it.")
CAPPED = TurnTaking(max_utterance_s=2.0, recheck_s=1.0, hard_max_utterance_s=5.0)


async def talk_without_a_pause(session: Call, seconds: float) -> None:
    """Speech that never pauses (babble the gate could not separate), a second at a time."""
    await session.talk(1000)
    for _ in range(int(seconds) - 1):
        await session.evaluated()
        await session.go_on(1000)


async def test_a_turn_that_never_pauses_is_judged_at_its_cap() -> None:
    async with call(eot=end_of_turn(0.9), turn_taking=CAPPED) as session:
        await talk_without_a_pause(session, 2)
        assert session.caller_turns() == []
        await session.evaluated()
        await session.go_on(20)  # the next frame sees the finished evaluation
        assert "turn_capped" in session.event_names()
        assert session.caller_turns() == [CALLER_SAYS]
        await session.bot_said(REPLY_TEXT)


async def test_a_capped_turn_that_sounds_unfinished_is_heard_on_until_the_hard_cap() -> None:
    trailing_off = "and then I went to the shop and"
    async with call(
        stt=hearing(trailing_off), eot=end_of_turn(0.01), turn_taking=CAPPED
    ) as session:
        await talk_without_a_pause(session, 4)
        await session.evaluated()
        await session.go_on(20)
        assert session.caller_turns() == []  # looked at at 2 s, 3 s, 4 s: not done
        assert session.event_names().count("turn_capped") == 3
        await session.go_on(980)
        await session.evaluated()
        await session.go_on(20)
        assert session.caller_turns() == [trailing_off]  # 5 s: answered regardless


async def test_a_goodbye_gets_a_goodbye() -> None:
    async with call(stt=hearing("Thank you so much, bye!")) as session:
        await session.talk(900)
        await session.pause(700)
        await session.bot_said(DEFAULT_FAREWELL)
        assert session.caller_turns() == ["Thank you so much, bye!"]
        assert session.llm.prompts == [], "a goodbye needs no model"


async def test_speech_with_an_empty_transcript_is_asked_to_repeat() -> None:
    async with call(stt=hearing("")) as session:
        await session.talk(600)
        await session.pause(1500)
        assert "reprompt" in session.event_names()
        await session.bot_said(DEFAULT_REPROMPT)
        assert session.caller_turns() == []
        assert session.llm.prompts == [], "a reprompt is a fixed line, not a model's guess"


# --- the caller goes on talking ------------------------------------------------------------


def _stalls_first(reply: list[str]) -> ChatModelFake:
    """A chat model whose first reply never starts; later ones stream `reply`."""
    prompts: list[list[Message]] = []

    async def stream(messages: Sequence[Message]) -> AsyncIterator[str]:
        prompts.append(list(messages))
        if len(prompts) == 1:
            await asyncio.Event().wait()
        for delta in reply:
            yield delta

    return ChatModelFake(stream, prompts)


async def test_resuming_before_the_reply_is_heard_throws_the_reply_away() -> None:
    stt = hearing("A table", "A table for two, please.")
    async with call(stt=stt, llm=_stalls_first(REPLY)) as session:
        await session.talk(600)
        await session.pause(300)
        await session.until(lambda: len(session.llm.prompts) == 1, "the first reply to start")
        assert session.caller_turns() == ["A table"]

        await session.talk(600)
        assert ("reply_cancelled", {"reason": "caller_resumed"}) in session.events
        assert session.line.sent == []
        assert session.conversation.turns == []

        await session.pause(UNSURE_PAUSE_MS)
        await session.bot_said(REPLY_TEXT)
        assert [(t.speaker, t.text) for t in session.conversation.turns] == [
            (Speaker.CALLER, "A table for two, please."),
            (Speaker.BOT, REPLY_TEXT),
        ]
        assert session.llm.prompts[1][1:] == [
            {"role": "user", "content": "A table for two, please."}
        ]
        assert session.audio_sent() == at_8_khz(words_as_tones(REPLY_TEXT))


async def test_a_reopened_turn_hands_every_frame_to_the_stt_once() -> None:
    heard: list[np.ndarray] = []
    stt = hearing("A table", "A table for two, please.", heard=heard)
    async with call(stt=stt, llm=_stalls_first(REPLY)) as session:
        await session.talk(600)
        await session.pause(240)  # the turn ends at 200 ms; the preroll reaches back 300 ms
        await session.until(lambda: len(session.llm.prompts) == 1, "the first reply to start")
        assert session.caller_turns() == ["A table"]
        await session.talk(600)
        await session.pause(UNSURE_PAUSE_MS)
        await session.bot_said(REPLY_TEXT)
        frames = heard[-1][::FRAME].astype(int).tolist()
        assert frames == sorted(set(frames))


# --- the caller talks over the bot ---------------------------------------------------------


async def test_short_speech_over_the_bot_is_a_backchannel() -> None:
    async with call(greeting=GREETING, stt=hearing("Mhm.")) as session:
        await greeted(session)
        greeting_audio = session.audio_sent()
        await session.pause(400)
        await session.talk(300)
        # The bot's audio stops at the caller's ear while they hum (a hold)...
        assert session.line.clears() == 1
        # ...and once they have been quiet a moment (not a comma's pause), the rest of the
        # greeting follows, from just before where it stopped.
        await session.pause(TurnTaking().resume_min_silence_ms + 100)
        assert "resume" in session.event_names()
        assert session.audio_sent() > greeting_audio
        assert session.count("offhook_backchannels_total") == 1
        assert session.count("offhook_barge_ins_total") == 0
        await session.pause(GREETING_MS)
        assert [(t.text, t.truncated) for t in session.conversation.turns] == [(GREETING, False)]
        assert session.caller_turns() == []


async def test_short_words_over_the_bot_that_are_not_a_backchannel_interrupt_it() -> None:
    async with call(greeting=GREETING, stt=hearing("Stop.")) as session:
        await greeted(session)
        await session.pause(400)
        await session.talk(300)
        await session.pause(700)
        assert session.count("offhook_barge_ins_total") == 1
        assert session.caller_turns() == ["Stop."]
        # The record says why: a held bot is cleared with no second `clear` to say it.
        [stopped] = [fields for name, fields in session.events if name == "barge_in"]
        assert stopped["reason"] == "short_interruption"


async def test_longer_speech_over_the_bot_interrupts_it_once() -> None:
    async with call(greeting=GREETING) as session:
        await greeted(session)
        await session.pause(400)
        await session.talk(1000)
        assert session.line.clears() == 1
        assert session.count("offhook_barge_ins_total") == 1
        assert [f["reason"] for n, f in session.events if n == "barge_in"] == ["barge_in"]
        await session.pause(300)
        await session.bot_said(REPLY_TEXT)
        assert session.line.clears() == 1
        assert session.count("offhook_backchannels_total") == 0


async def test_an_interrupted_bot_turn_keeps_only_the_words_heard() -> None:
    async with call(greeting=GREETING) as session:
        await greeted(session)
        await session.pause(400)
        # The bot holds 60 ms into this speech, 460 ms into the greeting: four 100 ms
        # words played in full.
        await session.talk(1000)
        [greeting] = session.bot_turns()
        assert greeting.text == " ".join(GREETING.split()[:4])
        assert greeting.truncated
        assert greeting.intended == GREETING


async def test_the_caller_who_interrupted_is_answered_with_the_truncated_history() -> None:
    async with call(greeting=GREETING) as session:
        await greeted(session)
        await session.pause(400)
        await session.talk(1000)
        await session.pause(300)
        await session.bot_said(REPLY_TEXT)
        heard = " ".join(GREETING.split()[:4])
        assert session.llm.prompts == [
            [
                {"role": "system", "content": PERSONA},
                {"role": "assistant", "content": f"{heard} —"},
                {"role": "user", "content": CALLER_SAYS},
            ]
        ]


async def test_before_the_echo_canceller_has_settled_an_interruption_must_be_longer() -> None:
    async with call(greeting=GREETING) as session:
        session.echo_settled = False  # the first seconds of the bot talking on a call
        await greeted(session)
        unsettled = TurnTaking().hold_unsettled_ms
        await session.talk(unsettled - 40)
        # A speakerphone's own echo comes back in word-long runs until then.
        assert session.line.clears() == 0, "held on what could still be the bot's echo"
        await session.go_on(80)
        assert session.line.clears() == 1, "held after the longer loud speech"
        twice = 2 * TurnTaking().barge_in_min_speech_ms
        await session.go_on(twice - unsettled - 240)
        assert session.count("offhook_barge_ins_total") == 0
        await session.go_on(200)
        assert session.count("offhook_barge_ins_total") == 1


async def test_loud_speech_over_the_bot_too_short_to_hold_it_is_on_the_record() -> None:
    async with call(greeting=GREETING) as session:
        session.echo_settled = False
        await greeted(session)
        await session.talk(300)  # loud, but a hold needs 600 ms while the canceller learns
        await session.pause(200)
        assert session.line.clears() == 0
        [data] = [data for name, data in session.events if name == "not_held"]
        assert data["echo_settled"] is False
        assert 280 <= int(str(data["loud_ms"])) <= int(str(data["speech_ms"])) <= 340, data


async def test_a_caller_the_canceller_holds_down_is_heard_by_how_long_they_go_on() -> None:
    async with call(greeting=GREETING) as session:
        await greeted(session)
        held_down = BOT_LEVEL_DB - 20  # under the echo margin, as an echo would be
        await session.talk(300, level_db=held_down)
        await session.go_on(60)  # a word gets through at their own level
        await session.go_on(520, level_db=held_down)
        assert session.line.clears() == 0, "held on a word"
        # Speech over the bot as long as an interruption is the caller's.
        await session.go_on(TurnTaking().barge_in_min_speech_ms - 880 + 40, level_db=held_down)
        assert session.line.clears() == 1, "a caller the canceller held down was never heard"
        await session.go_on(40, level_db=held_down)
        assert session.count("offhook_barge_ins_total") == 1


async def test_echo_of_the_bot_never_interrupts_it() -> None:
    async with call(greeting=GREETING) as session:
        await greeted(session)
        await session.pause(400)
        await session.talk(1200, level_db=BOT_LEVEL_DB - 20)
        await session.pause(300)
        assert session.line.clears() == 0
        assert session.count("offhook_barge_ins_total") == 0
        assert (session.bot_turns()[0].text, session.bot_turns()[0].truncated) == (GREETING, False)


GREETING_MS = len(GREETING.split()) * 100  # one word per 100 ms chunk


async def test_the_tail_of_the_bots_echo_past_its_end_is_not_the_callers_turn() -> None:
    async with call(greeting=GREETING) as session:
        await greeted(session)
        await session.pause(GREETING_MS - 600)
        await session.talk(1400, level_db=BOT_LEVEL_DB - 20)  # from under the bot to past it
        await session.pause(1500)
        assert session.caller_turns() == []
        assert session.line.clears() == 0
        assert "echo_ignored" in session.event_names()


async def test_a_caller_who_starts_as_the_bot_ends_gets_their_turn() -> None:
    async with call(greeting=GREETING) as session:
        await greeted(session)
        await session.pause(GREETING_MS - 300)
        await session.talk(1200)  # loud like a caller, over the last 300 ms of the bot
        await session.pause(400)
        await session.bot_said(REPLY_TEXT)
        assert session.caller_turns() == [CALLER_SAYS]


async def test_a_short_answer_over_the_bots_last_words_is_answered_once_they_have_played() -> None:
    # "...For how many people?" - "Six." over its last 200 ms: the bot holds, resumes
    # (short, not an interruption's words) and plays out; the answer is the caller's turn.
    async with call(greeting=GREETING, stt=hearing("Six.")) as session:
        await greeted(session)
        await session.pause(GREETING_MS - 200)
        await session.talk(400)
        assert session.line.clears() == 1  # held
        await session.pause(TurnTaking().resume_after_words_ms + 400)
        await session.bot_said(REPLY_TEXT)
        assert "resume" in session.event_names()
        assert session.caller_turns() == ["Six."]
        greeting = session.conversation.turns[0]
        assert (greeting.text, greeting.truncated) == (GREETING, False)


async def test_an_interrupted_reply_is_not_sent_any_further() -> None:
    first_sentence = "Sure, let me check the opening hours for you."
    more = asyncio.Event()
    prompts: list[list[Message]] = []

    async def stream(messages: Sequence[Message]) -> AsyncIterator[str]:
        prompts.append(list(messages))
        if len(prompts) == 1:
            yield f"{first_sentence} "
            await more.wait()
            yield "We are open from nine until late every day."
        else:
            for delta in REPLY:
                yield delta

    async with call(llm=ChatModelFake(stream, prompts)) as session:
        await session.talk(600)
        await session.pause(300)
        await session.bot_said(first_sentence)
        await session.pause(500)  # some of it is heard
        await session.talk(800)
        assert session.line.clears() == 1  # held: nothing more is sent while they talk
        sent_before = session.audio_sent()
        more.set()  # the reply goes on being written while held...
        await session.pause(300)
        await session.bot_said(REPLY_TEXT)
        [interrupted, _] = session.bot_turns()
        # ...but an interruption drops it: the history has only what was heard.
        assert interrupted.truncated
        assert "nine" not in interrupted.text
        assert session.audio_sent() == sent_before + at_8_khz(words_as_tones(REPLY_TEXT))


async def test_echo_of_the_bot_is_not_a_caller_turn() -> None:
    async with call(greeting=GREETING) as session:
        await greeted(session)
        await session.pause(400)
        await session.talk(1200, level_db=BOT_LEVEL_DB - 20)
        await session.pause(1500)
        assert session.caller_turns() == []
        assert session.llm.prompts == []


# --- failures ------------------------------------------------------------------------------


async def test_a_failing_llm_gets_the_apology_spoken() -> None:
    async def stream(messages: Sequence[Message]) -> AsyncIterator[str]:
        raise LanguageModelError("the model server went away")
        yield ""

    async with call(llm=ChatModelFake(stream)) as session:
        await session.talk(600)
        await session.pause(300)
        await session.bot_said(APOLOGY)
        assert session.audio_sent() == at_8_khz(words_as_tones(APOLOGY))
        assert session.count("offhook_errors_total", stage="llm") == 1
        assert session.caller_turns() == [CALLER_SAYS]


async def test_an_llm_failing_mid_reply_still_has_what_it_wrote_said_without_an_apology() -> None:
    written = "Our opening hours are nine to five on weekdays."

    async def stream(messages: Sequence[Message]) -> AsyncIterator[str]:
        yield written + " "
        yield "And on"
        raise LanguageModelError("the model server went away")

    async with call(llm=ChatModelFake(stream)) as session:
        await session.talk(600)
        await session.pause(300)
        await session.bot_said(written)
        await session.until(
            lambda: session.count("offhook_errors_total", stage="llm") == 1, "the failure"
        )
        assert [t.text for t in session.bot_turns()][-1] == written, "no apology after it"
        assert session.audio_sent() == at_8_khz(words_as_tones(written))


async def test_a_model_failure_while_drafting_is_the_replys_and_gets_the_apology() -> None:
    async def stream(messages: Sequence[Message]) -> AsyncIterator[str]:
        raise LanguageModelError("the model server went away")
        yield ""

    statement = "I'd like to book a table."
    async with call(
        stt=hearing(statement), llm=ChatModelFake(stream), eot=end_of_turn(0.3)
    ) as session:
        await session.talk(1500)
        await session.pause(300)
        assert session.caller_turns() == [], "the draft failed quietly, before the turn ended"
        assert session.count("offhook_errors_total", stage="llm") == 0
        await session.pause(UNSURE_PAUSE_MS)
        await session.bot_said(APOLOGY)
        assert session.count("offhook_errors_total", stage="llm") == 1
        assert session.caller_turns() == [statement]


async def test_a_reply_with_nothing_to_say_gets_the_apology_not_silence() -> None:
    async def stream(messages: Sequence[Message]) -> AsyncIterator[str]:
        yield "**"  # markup only: nothing a phone line can carry

    async with call(llm=ChatModelFake(stream)) as session:
        await session.talk(600)
        await session.pause(300)
        await session.bot_said(APOLOGY)
        assert session.count("offhook_errors_total", stage="llm") == 1


async def test_a_failing_stt_gets_the_apology_spoken() -> None:
    stt = failing_stt(SpeechToTextError("whisper failed: out of memory"))
    async with call(stt=stt) as session:
        await session.talk(600)
        await session.pause(300)
        await session.bot_said(APOLOGY)
        assert session.count("offhook_errors_total", stage="stt") == 1
        assert session.caller_turns() == []
        assert session.llm.prompts == []


# --- the keypad ----------------------------------------------------------------------------


async def test_a_keypad_digit_is_a_caller_turn_that_gets_a_reply() -> None:
    async with call(turn_taking=TurnTaking(digit_timeout_ms=10)) as session:
        await session.press("5")
        await session.bot_said(REPLY_TEXT)
        assert session.caller_turns() == ["(The caller pressed 5 on the keypad.)"]
        assert session.llm.prompts[0][-1] == {
            "role": "user",
            "content": "(The caller pressed 5 on the keypad.)",
        }


async def test_digits_pressed_in_quick_succession_are_one_turn() -> None:
    async with call(turn_taking=TurnTaking(digit_timeout_ms=200)) as session:
        await session.press("1")
        await session.press("2")
        await session.press("#")
        await session.bot_said(REPLY_TEXT)
        assert session.caller_turns() == ["(The caller pressed 1 2 # on the keypad.)"]
        assert len(session.llm.prompts) == 1


# --- taking over a call --------------------------------------------------------------------


async def test_taking_over_answers_the_turn_the_caller_is_waiting_on() -> None:
    history = [(Speaker.BOT, GREETING), (Speaker.CALLER, CALLER_SAYS)]
    async with call(
        takeover=True, carry_on="answer", history=history, greeting=GREETING
    ) as session:
        await session.bot_said(REPLY_TEXT)
        assert session.llm.prompts[0][-1] == {"role": "user", "content": CALLER_SAYS}
        assert [t.text for t in session.bot_turns()] == [GREETING, REPLY_TEXT]


async def test_taking_over_mid_reply_finishes_it_with_a_note_kept_out_of_history() -> None:
    history = [(Speaker.CALLER, CALLER_SAYS), (Speaker.BOT, "Of course.")]
    async with call(takeover=True, carry_on="resume", history=history) as session:
        await session.bot_said(REPLY_TEXT)
        prompt = session.llm.prompts[0]
        assert prompt[-2] == {"role": "assistant", "content": "Of course."}
        assert prompt[-1] == {"role": "system", "content": RESUME_NOTE}
        assert all(RESUME_NOTE not in m["content"] for m in session.conversation.messages())


async def test_taking_over_with_nothing_owed_waits_for_the_caller() -> None:
    history = [(Speaker.CALLER, CALLER_SAYS), (Speaker.BOT, REPLY_TEXT)]
    async with call(takeover=True, history=history, greeting=GREETING) as session:
        await session.pause(300)
        assert session.line.sent == []
