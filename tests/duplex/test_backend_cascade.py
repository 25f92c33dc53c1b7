"""CascadeDuplexBackend's controller with fake components: listen, speak, continue, yield.

The fake VAD calls a 32 ms window speech when its RMS is above -40 dBFS, so a test
writes speech as a tone and silence as zeros. Every fake is a plain function or class.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import numpy as np

from agents.cascade.llm import Message
from agents.cascade.stt import Transcript
from agents.duplex.cascade_backend import CascadeDuplexBackend, CascadeDuplexConfig
from agents.duplex.protocol import Prepare
from agents.errors import BackendError, TextToSpeechError
from agents.turns.engine import Answer, Decision, Evaluation, Frame, Reopen

RATE = 16000
CLAUSE_S = 0.6  # each synthesised clause lasts this long


class EnergyVad:
    window_samples = 512

    def __init__(self) -> None:
        self._pending = np.zeros(0, dtype=np.float32)

    def process(self, samples: np.ndarray) -> list[float]:
        data = np.concatenate((self._pending, samples))
        n = data.size // self.window_samples
        windows = data[: n * self.window_samples].reshape(n, self.window_samples)
        self._pending = data[n * self.window_samples :]
        return [1.0 if np.sqrt(np.mean(w**2)) > 0.01 else 0.0 for w in windows]

    def reset(self) -> None:
        self._pending = np.zeros(0, dtype=np.float32)


class FakeStt:
    def __init__(self, text: str = "What time is it?") -> None:
        self.text = text
        self.heard: list[int] = []

    def transcribe(self, audio_16k: np.ndarray) -> Transcript:
        self.heard.append(audio_16k.size)
        return Transcript(self.text, no_speech_prob=0.0)


class FakeTts:
    sample_rate = RATE

    def synthesize(self, text: str) -> np.ndarray:
        return np.full(int(CLAUSE_S * RATE), 0.1, dtype=np.float32)


class FakeLlm:
    def __init__(self, reply: Sequence[str] = ("Sure. ", "It is noon. ", "Anything else?")) -> None:
        self.reply = reply
        self.seen: list[list[Message]] = []

    async def stream(self, messages: Sequence[Message]) -> AsyncIterator[str]:
        self.seen.append(list(messages))
        for delta in self.reply:
            yield delta


class FakeTurn:
    def __init__(self, prob: float = 1.0) -> None:
        self.prob = prob
        self.asked = 0

    def predict(self, audio_16k: np.ndarray) -> float:
        self.asked += 1
        return self.prob


def speech(seconds: float) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    return (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)


def silence(seconds: float) -> np.ndarray:
    return np.zeros(int(seconds * RATE), dtype=np.float32)


def make(
    stt: FakeStt | None = None,
    llm: FakeLlm | None = None,
    turn: FakeTurn | None = None,
    config: CascadeDuplexConfig | None = None,
) -> CascadeDuplexBackend:
    return CascadeDuplexBackend(
        stt=stt or FakeStt(),
        tts=FakeTts(),
        llm=llm or FakeLlm(),
        end_of_turn=turn or FakeTurn(),
        vad_factory=EnergyVad,
        config=config,
    )


def record_decisions(backend: CascadeDuplexBackend) -> list[Decision]:
    """Every decision the backend's turn engine makes from here on, in order."""
    decided: list[Decision] = []
    engine = backend.engine
    frame, evaluated = engine.frame, engine.evaluated

    def frame_and_record(f: Frame) -> list[Decision]:
        out = frame(f)
        decided.extend(out)
        return out

    def evaluated_and_record(result: Evaluation) -> list[Decision]:
        out = evaluated(result)
        decided.extend(out)
        return out

    engine.frame = frame_and_record  # type: ignore[method-assign]
    engine.evaluated = evaluated_and_record  # type: ignore[method-assign]
    return decided


async def prepared(backend: CascadeDuplexBackend, **config: object) -> CascadeDuplexBackend:
    await backend.prepare(Prepare(system_prompt="be brief", config=dict(config)))
    return backend


async def test_listens_while_the_caller_speaks() -> None:
    stt = FakeStt()
    backend = await prepared(make(stt=stt))
    for _ in range(3):
        outcome = await backend.process_unit(speech(1.0))
        assert outcome.action == "listen" and not outcome.audio.size
    assert stt.heard == []


async def test_the_gateways_speech_windows_decide_not_the_audio() -> None:
    """Background talk the gateway gated out is loud in the unit, yet not a turn; a
    caller the gateway heard is a turn even where the cleaned unit audio is quiet."""
    stt = FakeStt()
    backend = await prepared(make(stt=stt))
    for _ in range(3):  # loud audio, the gateway says: background
        outcome = await backend.process_unit(speech(1.0), [0.0] * 31)
        assert outcome.action == "listen"
    assert stt.heard == []
    outcome = await backend.process_unit(silence(1.0), [0.9] * 31)  # the caller spoke
    assert outcome.action == "listen"
    outcome = await backend.process_unit(silence(1.0), [0.0] * 31)  # and paused
    assert outcome.action == "speak" and stt.heard


async def test_silence_alone_wakes_nothing() -> None:
    stt, turn = FakeStt(), FakeTurn()
    backend = await prepared(make(stt=stt, turn=turn))
    for _ in range(3):
        assert (await backend.process_unit(silence(1.0))).action == "listen"
    assert stt.heard == [] and turn.asked == 0


async def test_speaks_after_a_pause_and_continues_over_the_next_units() -> None:
    llm = FakeLlm()
    backend = await prepared(make(llm=llm))
    assert (await backend.process_unit(speech(1.0))).action == "listen"
    first = await backend.process_unit(np.concatenate((speech(0.5), silence(0.5))))
    assert first.action == "speak"
    assert first.caller_text == "What time is it?"
    # At least a unit's worth of audio: two 0.6 s clauses.
    assert first.text == "Sure. It is noon."
    assert first.audio.size == 2 * int(CLAUSE_S * RATE) and first.sample_rate == RATE
    assert not first.end_of_turn

    second = await backend.process_unit(silence(1.0))
    assert second.action == "speak" and second.text == "Anything else?"
    assert second.end_of_turn and not second.caller_text

    third = await backend.process_unit(silence(1.0))
    assert third.action == "listen" and not third.audio.size
    assert backend.messages[-2:] == [
        {"role": "user", "content": "What time is it?"},
        {"role": "assistant", "content": "Sure. It is noon. Anything else?"},
    ]
    assert llm.seen[0][0] == {"role": "system", "content": "be brief"}


async def test_a_caller_going_on_in_the_unit_they_were_answered_in_voids_the_reply() -> None:
    """The reply's audio goes out at the end of the unit it was answered in: a caller who
    goes on before then has heard none of it, so none is sent, and their turn, not over
    after all, is answered whole once they stop."""
    stt, llm = FakeStt("What time is it?"), FakeLlm()
    backend = await prepared(make(stt=stt, llm=llm))
    decided = record_decisions(backend)
    await backend.process_unit(speech(1.0))
    paused = await backend.process_unit(np.concatenate((speech(0.3), silence(0.4), speech(0.3))))
    # The pause was judged the turn's end, and the caller went on before the unit's end...
    assert [type(d) for d in decided if isinstance(d, Answer | Reopen)] == [Answer, Reopen]
    assert [d.restore for d in decided if isinstance(d, Reopen)] == [True]
    assert paused.action == "listen" and not paused.audio.size  # ...so nothing went out
    assert paused.caller_text == "" and not paused.yielded
    assert {"role": "user", "content": "What time is it?"} not in backend.messages

    stt.text = "What time is it in Lisbon?"
    answered = await backend.process_unit(np.concatenate((speech(0.2), silence(0.8))))
    assert answered.action == "speak" and answered.caller_text == "What time is it in Lisbon?"
    # Whisper heard the reopened turn from its start: 2.1 s of speech in three units
    # (the pause inside it cut to 300 ms, as for any turn).
    assert stt.heard[-1] >= int(2.1 * RATE)
    assert [m for m in backend.messages if m["role"] == "user"] == [
        {"role": "user", "content": "What time is it in Lisbon?"}
    ]


async def test_a_reprompt_is_not_said_to_a_caller_who_goes_on_in_its_unit() -> None:
    for goes_on in (False, True):
        backend = await prepared(make(stt=FakeStt("")))  # speech, but no words made out
        await backend.process_unit(speech(1.0))
        await backend.process_unit(np.concatenate((speech(0.3), silence(0.7))))
        tail = speech(0.4) if goes_on else silence(0.4)
        outcome = await backend.process_unit(np.concatenate((silence(0.6), tail)))
        reprompted = {"role": "assistant", "content": CascadeDuplexConfig().reprompt}
        if goes_on:
            assert outcome.action == "listen" and not outcome.audio.size
            assert not outcome.end_of_turn and reprompted not in backend.messages
        else:
            assert outcome.action == "speak" and outcome.text == reprompted["content"]
            assert outcome.end_of_turn and backend.messages[-1] == reprompted


async def test_a_caller_going_on_after_the_answered_unit_is_talking_over_the_bot() -> None:
    """Once the unit it was answered in is out, the reply is playing at the caller:
    speech now is over the bot, not a turn reopened."""
    stt = FakeStt("What time is it?")
    backend = await prepared(make(stt=stt))
    await backend.process_unit(speech(1.0))
    first = await backend.process_unit(np.concatenate((speech(0.3), silence(0.7))))
    assert first.action == "speak" and first.caller_text == "What time is it?"
    stt.text = "Mm-hmm."
    over = await backend.process_unit(np.concatenate((speech(0.3), silence(0.7))))
    assert over.action == "speak" and not over.yielded  # a short sound: the bot goes on
    assert {"role": "user", "content": "What time is it?"} in backend.messages


async def test_the_end_of_turn_model_holds_the_reply_until_the_silence_is_long() -> None:
    turn = FakeTurn(prob=0.1)  # "the caller is not done"
    backend = await prepared(make(stt=FakeStt("what time is it"), turn=turn))  # no "?"
    await backend.process_unit(speech(0.5))
    assert (await backend.process_unit(silence(0.5))).action == "listen"
    assert turn.asked == 1
    outcome = await backend.process_unit(silence(0.6))  # over 1 s of silence: done anyway
    assert outcome.action == "speak"


async def test_caller_talking_over_pending_audio_yields() -> None:
    stt = FakeStt()
    # Turn-taking settings reach the backend through Prepare.config.
    backend = await prepared(make(stt=stt), barge_in_min_speech_ms=600)
    await backend.process_unit(speech(1.0))
    first = await backend.process_unit(np.concatenate((speech(0.3), silence(0.7))))
    assert first.action == "speak" and not first.end_of_turn

    barge = await backend.process_unit(speech(1.0))
    assert barge.yielded and barge.action == "listen" and not barge.audio.size
    # The bot's turn is cut to what the caller heard of it: its audio went out at the
    # end of the unit it was answered in, and the caller took the turn 0.6 s into the
    # next; the rest, still queued ahead of them, was not heard.
    assert backend.messages[-1] == {"role": "assistant", "content": "Sure. —"}

    # The barge-in is the start of the caller's next turn.
    stt.text = "no thanks"
    after = await backend.process_unit(silence(1.0))
    assert after.action == "speak" and after.caller_text == "no thanks"
    # Whisper heard the whole interruption, from just before its onset to its end.
    assert RATE <= stt.heard[-1] <= RATE + RATE // 2


async def test_an_interruption_answered_within_its_unit_clears_and_speaks_at_once() -> None:
    """The gateway clears the old reply, then plays the new one from the same unit."""
    stt = FakeStt()
    backend = await prepared(make(stt=stt), barge_in_min_speech_ms=600)
    await backend.process_unit(speech(1.0))
    await backend.process_unit(np.concatenate((speech(0.3), silence(0.7))))
    stt.text = "No, tomorrow?"
    outcome = await backend.process_unit(np.concatenate((speech(0.65), silence(0.35))))
    assert outcome.yielded and outcome.caller_text == "No, tomorrow?"
    assert outcome.action == "speak" and outcome.text == "Sure. It is noon."


async def test_a_short_sound_over_the_bot_does_not_stop_it() -> None:
    stt = FakeStt()
    backend = await prepared(make(stt=stt))
    await backend.process_unit(speech(1.0))
    await backend.process_unit(silence(1.0))
    stt.text = "Mm."
    outcome = await backend.process_unit(np.concatenate((speech(0.2), silence(0.8))))
    assert not outcome.yielded and outcome.action == "speak" and outcome.end_of_turn


async def test_backchannel_during_a_long_monologue_when_enabled() -> None:
    backend = await prepared(make(), backchannel=True)
    actions = [(await backend.process_unit(speech(1.0))).action for _ in range(10)]
    assert actions.count("backchannel") == 1
    assert actions.index("backchannel") == 8  # after more than 8 s of speech

    quiet = await prepared(make())
    actions = [(await quiet.process_unit(speech(1.0))).action for _ in range(10)]
    assert set(actions) == {"listen"}


async def test_prepare_brings_history_and_resets_the_session() -> None:
    llm = FakeLlm(reply=("Hello again.",))
    backend = make(llm=llm)
    history = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
    ]
    await backend.prepare(Prepare(system_prompt="sys", history=history))
    await backend.process_unit(speech(1.0))  # a turn left half-heard ...
    await backend.prepare(Prepare(system_prompt="sys", history=history))  # ... is forgotten
    await backend.process_unit(speech(1.0))
    outcome = await backend.process_unit(silence(1.0))
    assert outcome.end_of_turn and outcome.text == "Hello again."
    assert llm.seen[0] == [
        {"role": "system", "content": "sys"},
        *history,
        {"role": "user", "content": "What time is it?"},
    ]
    assert outcome.context_len == 5
    await backend.cleanup()
    assert backend.messages == []


class GatedLlm:
    """Writes `head` at once, then waits for `go` before writing `tail`."""

    def __init__(self, head: Sequence[str], tail: Sequence[str], fail: bool = False) -> None:
        self.head, self.tail, self.fail = head, tail, fail
        self.go = asyncio.Event()
        self.finished = False
        self.cancelled = False

    async def stream(self, messages: Sequence[Message]) -> AsyncIterator[str]:
        for delta in self.head:
            yield delta
        try:
            await self.go.wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        if self.fail:
            raise BackendError("llm", "connection reset mid-reply")
        for delta in self.tail:
            yield delta
        self.finished = True


async def test_the_first_clauses_go_out_while_the_llm_is_still_writing() -> None:
    llm = GatedLlm(head=("Sure thing. ", "Let me see. "), tail=("It is noon. ", "Bye."))
    backend = await prepared(make(llm=llm))
    await backend.process_unit(speech(1.0))
    first = await backend.process_unit(np.concatenate((speech(0.3), silence(0.7))))
    assert first.action == "speak" and first.text == "Sure thing. Let me see."
    assert not first.end_of_turn and not llm.finished

    llm.go.set()
    second = await backend.process_unit(silence(1.0))
    assert second.text == "It is noon. Bye." and second.end_of_turn
    assert backend.messages[-1] == {
        "role": "assistant",
        "content": "Sure thing. Let me see. It is noon. Bye.",
    }


async def test_the_turn_ends_on_a_later_unit_when_the_llm_stops_after_the_last_clause() -> None:
    llm = GatedLlm(head=("One, two three four. ", "Five six. "), tail=())
    backend = await prepared(make(llm=llm))
    await backend.process_unit(speech(1.0))
    first = await backend.process_unit(silence(1.0))
    assert first.action == "speak" and not first.end_of_turn
    llm.go.set()
    later = await backend.process_unit(silence(1.0))
    assert later.action == "listen" and not later.audio.size and later.end_of_turn
    assert backend.messages[-1]["content"] == "One, two three four. Five six."


async def test_a_barge_in_stops_the_llm_writing() -> None:
    llm = GatedLlm(head=("Sure thing. ", "Let me see. "), tail=("It is noon.",))
    backend = await prepared(make(llm=llm), barge_in_min_speech_ms=600)
    await backend.process_unit(speech(1.0))
    await backend.process_unit(silence(1.0))
    barge = await backend.process_unit(speech(1.0))
    assert barge.yielded
    await asyncio.sleep(0)
    assert llm.cancelled
    # Heard: the reply's first 0.6 s, played from the end of the answered unit.
    assert backend.messages[-1] == {"role": "assistant", "content": "Sure thing. —"}


async def test_an_llm_failure_mid_reply_ends_the_turn_with_what_was_said() -> None:
    llm = GatedLlm(head=("Sure thing. ", "Let me see. "), tail=("It is noon.",), fail=True)
    backend = await prepared(make(llm=llm), apology="Sorry.")
    await backend.process_unit(speech(1.0))
    assert (await backend.process_unit(silence(1.0))).action == "speak"
    llm.go.set()
    ended = await backend.process_unit(silence(1.0))
    # Half a reply is not followed by an apology: the turn just ends there.
    assert ended.end_of_turn and not ended.audio.size
    assert backend.messages[-1] == {"role": "assistant", "content": "Sure thing. Let me see."}


class FailingTts(FakeTts):
    """A voice that fails from its `fails_from`-th clause on (counting from 1)."""

    def __init__(self, fails_from: int) -> None:
        self.fails_from = fails_from
        self.asked = 0

    def synthesize(self, text: str) -> np.ndarray:
        self.asked += 1
        if self.asked >= self.fails_from:
            raise TextToSpeechError("the voice's process died")
        return super().synthesize(text)


async def test_a_voice_failing_mid_reply_ends_the_turn_with_what_was_said() -> None:
    backend = CascadeDuplexBackend(
        stt=FakeStt(),
        tts=FailingTts(fails_from=2),
        llm=FakeLlm(),
        end_of_turn=FakeTurn(),
        vad_factory=EnergyVad,
    )
    await prepared(backend, apology="Sorry.")
    await backend.process_unit(speech(1.0))
    spoken = await backend.process_unit(silence(1.0))
    # The session goes on: the clause said is the bot's turn, and nothing is owed.
    assert spoken.action == "speak" and spoken.text == "Sure." and spoken.end_of_turn
    assert backend.messages[-1] == {"role": "assistant", "content": "Sure."}
    assert (await backend.process_unit(silence(1.0))).action == "listen"


async def test_cleanup_stops_a_reply_being_written() -> None:
    llm = GatedLlm(head=("Sure thing. ", "Let me see. "), tail=("It is noon.",))
    backend = await prepared(make(llm=llm), barge_in_min_speech_ms=600)
    await backend.process_unit(speech(1.0))
    await backend.process_unit(silence(1.0))
    await backend.cleanup()
    await asyncio.sleep(0)
    assert llm.cancelled


async def test_key_presses_become_the_callers_turn_once_they_stop() -> None:
    llm = FakeLlm(reply=("You chose billing.",))
    backend = await prepared(make(llm=llm))
    await backend.process_unit(silence(1.0))
    await backend.keypad("1")
    await backend.keypad("2")
    outcome = await backend.process_unit(silence(1.0))
    assert outcome.action == "speak" and outcome.text == "You chose billing."
    assert outcome.caller_text == "(The caller pressed 1 2 on the keypad.)"
    assert not outcome.yielded
    assert llm.seen[0][-1] == {"role": "user", "content": outcome.caller_text}


async def test_keys_wait_for_the_entry_to_finish() -> None:
    backend = await prepared(make(), keypad_timeout_ms=1500)
    await backend.keypad("4")
    assert (await backend.process_unit(silence(1.0))).action == "listen"
    await backend.keypad("2")  # still typing: the wait starts again
    assert (await backend.process_unit(silence(1.0))).action == "listen"
    outcome = await backend.process_unit(silence(1.0))
    assert outcome.action == "speak"
    assert outcome.caller_text == "(The caller pressed 4 2 on the keypad.)"


async def test_keys_pressed_while_the_bot_talks_stop_it() -> None:
    backend = await prepared(make())
    await backend.process_unit(speech(1.0))
    first = await backend.process_unit(silence(1.0))
    assert first.action == "speak" and not first.end_of_turn
    await backend.keypad("0")
    outcome = await backend.process_unit(silence(1.0))
    assert outcome.yielded and outcome.caller_text.startswith("(The caller pressed 0")
    # The interrupted turn keeps what the caller heard (the reply played through the
    # unit in which they pressed and waited: 1 s of its 1.2 s); the keys follow it.
    assert backend.messages[-2:] == [
        {"role": "assistant", "content": "Sure. It is —"},
        {"role": "user", "content": "(The caller pressed 0 on the keypad.)"},
    ]


def test_every_backend_offers_the_whole_backend_interface() -> None:
    from agents.duplex.backend import DuplexBackend
    from agents.duplex.cascade_worker_backend import SettingsCascadeBackend
    from agents.duplex.minicpmo import MiniCPMOBackend
    from app.settings import Settings

    members = {
        name
        for name in (*DuplexBackend.__dict__, *DuplexBackend.__annotations__)
        if not name.startswith("_")
    }
    assert {"name", "keypad_input", "keypad", "process_unit"} <= members
    for backend in (make(), SettingsCascadeBackend(Settings.from_env({})), MiniCPMOBackend()):
        missing = sorted(name for name in members if not hasattr(backend, name))
        assert missing == [], f"{type(backend).__name__} lacks {missing}"


async def test_a_turn_smart_turn_is_sure_of_ends_at_the_short_pause() -> None:
    # Without a words judge, Smart Turn and the silence judge the turn.
    stt, turn = FakeStt("What time is it?"), FakeTurn(prob=0.9)
    backend = await prepared(make(stt=stt, turn=turn))
    await backend.process_unit(speech(1.0))
    outcome = await backend.process_unit(np.concatenate((speech(0.4), silence(0.6))))
    assert outcome.action == "speak" and outcome.caller_text == "What time is it?"
    assert len(stt.heard) == 1  # the transcript from the pause is the one answered


async def test_a_turn_smart_turn_is_unsure_of_waits_for_the_longer_pause() -> None:
    stt, turn = FakeStt("What time is it?"), FakeTurn(prob=0.2)
    backend = await prepared(make(stt=stt, turn=turn))
    await backend.process_unit(speech(1.0))
    assert (await backend.process_unit(np.concatenate((speech(0.4), silence(0.6))))).action == (
        "listen"
    )
    # END_OF_TURN_MAX_SILENCE_MS (1 s) into the pause, not before.
    assert (await backend.process_unit(silence(0.2))).action == "listen"
    assert (await backend.process_unit(silence(0.4))).action == "speak"


async def test_a_slow_llm_never_holds_a_unit_past_its_budget() -> None:
    llm = GatedLlm(head=(), tail=("It is noon. ", "Bye."))
    backend = make(llm=llm)
    await backend.prepare(Prepare(system_prompt="be brief", unit_ms=200))  # 160 ms budget
    await backend.process_unit(speech(1.0))
    started = asyncio.get_running_loop().time()
    thinking = await backend.process_unit(silence(1.0))
    assert asyncio.get_running_loop().time() - started < 0.5
    # The turn is taken (the gateway records it) while the reply is still being written.
    assert thinking.action == "listen" and thinking.caller_text == "What time is it?"
    llm.go.set()
    await asyncio.sleep(0)
    spoken = await backend.process_unit(silence(0.2))
    assert spoken.action == "speak" and spoken.text.startswith("It is noon.")


async def test_a_reply_with_nothing_to_say_gets_the_apology_not_silence() -> None:
    llm = FakeLlm(reply=("**",))
    backend = await prepared(make(llm=llm), apology="Sorry, could you say that again?")
    await backend.process_unit(speech(1.0))
    outcome = await backend.process_unit(silence(1.0))
    assert outcome.action == "speak" and outcome.text == "Sorry, could you say that again?"
    assert outcome.end_of_turn and outcome.audio.size


async def test_a_failing_llm_gets_the_apology_and_the_session_goes_on() -> None:
    llm = GatedLlm(head=(), tail=(), fail=True)
    llm.go.set()
    backend = await prepared(make(llm=llm), apology="Sorry, could you say that again?")
    await backend.process_unit(speech(1.0))
    outcome = await backend.process_unit(silence(1.0))
    assert outcome.text == "Sorry, could you say that again?" and outcome.end_of_turn
    llm.fail = False
    await backend.process_unit(speech(1.0))
    assert (await backend.process_unit(silence(1.0))).action in ("speak", "listen")
