"""What the cascade gets back when it takes a call over: the caller's unanswered turn."""

from __future__ import annotations

import asyncio

import numpy as np

from agents.duplex.gateway import CallInputs
from agents.duplex.handover import UnansweredInput
from agents.inputs import Digits
from media.frontend import FrontEndOutput
from media.vad import SpeechStarted, SpeechStopped

FRAME = 320  # 20 ms at 16 kHz


class Frames:
    """Numbered 20 ms front-end outputs, as the call's front end hands them out."""

    def __init__(self) -> None:
        self.position = 0

    def next(self, *events: str) -> FrontEndOutput:
        kinds = {"start": SpeechStarted, "stop": SpeechStopped}
        out = FrontEndOutput(
            audio=np.zeros(FRAME, dtype=np.float32),
            start_sample=self.position,
            events=[kinds[e](self.position) for e in events],
        )
        self.position += FRAME
        return out


def starts(items: list[FrontEndOutput | Digits]) -> list[int]:
    return [i.start_sample for i in items if isinstance(i, FrontEndOutput)]


def test_a_turn_in_flight_is_kept_from_just_before_its_speech_began() -> None:
    frames, unanswered = Frames(), UnansweredInput(preroll_ms=100)
    for _ in range(50):
        unanswered.note(frames.next(), bot_audible=False)
    first_speech = frames.next("start")
    unanswered.note(first_speech, bot_audible=False)
    for _ in range(20):
        unanswered.note(frames.next(), bot_audible=False)
    kept = unanswered.take()
    # 100 ms of preroll (5 frames), the speech start, and everything after it.
    assert starts(kept)[0] == first_speech.start_sample - 5 * FRAME
    assert len(kept) == 5 + 1 + 20
    assert starts(kept) == sorted(set(starts(kept)))
    assert unanswered.take() == []


def test_nothing_is_owed_once_the_worker_took_the_turn() -> None:
    frames, unanswered = Frames(), UnansweredInput()
    unanswered.note(frames.next("start"), bot_audible=False)
    unanswered.note(frames.next("stop"), bot_audible=False)
    unanswered.answered()
    unanswered.note(frames.next(), bot_audible=False)
    assert unanswered.take() == []


def test_speech_over_the_bot_is_kept_only_once_the_worker_yields_to_it() -> None:
    frames, unanswered = Frames(), UnansweredInput()
    unanswered.note(frames.next("start"), bot_audible=True)  # echo, or a barge-in
    unanswered.note(frames.next(), bot_audible=True)
    assert unanswered.take() == []

    unanswered.note(frames.next("start"), bot_audible=True)
    unanswered.note(frames.next(), bot_audible=True)
    unanswered.barged_in()
    unanswered.note(frames.next(), bot_audible=False)
    assert len(unanswered.take()) >= 3


def test_a_pause_inside_the_turn_keeps_one_turn() -> None:
    frames, unanswered = Frames(), UnansweredInput(preroll_ms=0)
    first = frames.next("start")
    unanswered.note(first, bot_audible=False)
    unanswered.note(frames.next("stop"), bot_audible=False)
    unanswered.note(frames.next("start"), bot_audible=False)
    assert starts(unanswered.take())[0] == first.start_sample


def test_key_presses_not_yet_answered_are_owed() -> None:
    frames, unanswered = Frames(), UnansweredInput()
    unanswered.note(frames.next(), bot_audible=True)
    unanswered.note(Digits("7"), bot_audible=True)
    assert Digits("7") in unanswered.take()


def test_a_very_long_turn_keeps_its_last_seconds() -> None:
    frames, unanswered = Frames(), UnansweredInput(max_s=1.0)
    unanswered.note(frames.next("start"), bot_audible=False)
    for _ in range(200):  # 4 s
        unanswered.note(frames.next(), bot_audible=False)
    kept = unanswered.take()
    assert sum(len(i.audio) for i in kept if isinstance(i, FrontEndOutput)) <= 16000
    assert starts(kept)[-1] == frames.position - FRAME
    # The cascade still hears the kept part as speech that starts.
    assert isinstance(kept[0], FrontEndOutput)
    assert kept[0].events == [SpeechStarted(kept[0].start_sample)]


async def test_call_inputs_hand_out_the_replayed_turn_before_new_input() -> None:
    end = object()
    queue: asyncio.Queue[FrontEndOutput | Digits | object] = asyncio.Queue()
    inputs = CallInputs(queue, end)
    frames = Frames()
    old = [frames.next("start"), frames.next()]
    new = frames.next()
    queue.put_nowait(new)
    queue.put_nowait(end)
    inputs.replay_first([*old, Digits("1")])
    seen = [item async for item in inputs]
    assert seen == [*old, Digits("1"), new]
