"""Fake models for the cascade agent, each built from a plain function."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from agents.cascade.llm import Message, ToolCall
from agents.cascade.stt import Transcript
from agents.cascade.turn_evaluator import EndOfTurn
from agents.errors import LanguageModelError
from tests.agents.fakes import tone

TTS_RATE = 16000
WORD_SECONDS = 0.1  # every synthesised word lasts exactly one 100 ms playout chunk
BOT_AMPLITUDE = 0.3


@dataclass
class SpeechToTextFake:
    transcribe: Callable[[np.ndarray], Transcript]


@dataclass
class TextToSpeechFake:
    synthesize: Callable[[str], np.ndarray]
    sample_rate: int = TTS_RATE


@dataclass
class ChatModelFake:
    stream: Callable[[Sequence[Message]], AsyncIterator[str]]
    prompts: list[list[Message]] = field(default_factory=list)


class EndOfTurnFake(EndOfTurn):
    def __init__(self, predict: Callable[[np.ndarray], float]) -> None:
        self._predict = predict

    def predict(self, audio_16k: np.ndarray) -> float:
        return self._predict(audio_16k)


def hearing(*texts: str, heard: list[np.ndarray] | None = None) -> SpeechToTextFake:
    """An STT that hears `texts` in turn, then the last one forever; keeps what it was given."""
    given = [] if heard is None else heard

    def transcribe(audio_16k: np.ndarray) -> Transcript:
        given.append(audio_16k)
        return Transcript(texts[min(len(given), len(texts)) - 1], no_speech_prob=0.0)

    return SpeechToTextFake(transcribe)


def failing_stt(error: Exception) -> SpeechToTextFake:
    def transcribe(audio_16k: np.ndarray) -> Transcript:
        raise error

    return SpeechToTextFake(transcribe)


def words_as_tones(text: str) -> np.ndarray:
    """One 100 ms tone per word: audible, and its length says how many words it holds."""
    return tone(WORD_SECONDS * len(text.split()), TTS_RATE, amplitude=BOT_AMPLITUDE)


def speaking() -> TextToSpeechFake:
    return TextToSpeechFake(words_as_tones)


def replying(*replies: list[str]) -> ChatModelFake:
    """A chat model streaming `replies` in turn (each a list of deltas), then the last forever."""
    prompts: list[list[Message]] = []

    async def stream(messages: Sequence[Message]) -> AsyncIterator[str]:
        prompts.append(list(messages))
        for delta in replies[min(len(prompts), len(replies)) - 1]:
            yield delta

    return ChatModelFake(stream, prompts)


def end_of_turn(probability: float) -> EndOfTurnFake:
    return EndOfTurnFake(lambda audio_16k: probability)


async def writing(
    *items: str | ToolCall,
    then: asyncio.Event | None = None,
    fail: bool = False,
    closed: list[bool] | None = None,
) -> AsyncIterator[str | ToolCall]:
    """A model's stream: `items` one by one, then (with `then`) a wait for more, then
    (with `fail`) the connection lost. `closed` gets True when the stream is closed."""
    try:
        for item in items:
            yield item
            await asyncio.sleep(0)
        if then is not None:
            await then.wait()
        if fail:
            raise LanguageModelError("the server went away")
    finally:
        if closed is not None:
            closed.append(True)
