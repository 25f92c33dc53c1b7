"""The cascade's loaded models: one set per process, shared by every call."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from agents.cascade.draft import DraftBoard
from agents.cascade.llm import ChatModel
from agents.cascade.llm_health import LlmHealth
from agents.cascade.stt import SpeechToText
from agents.cascade.tts import TextToSpeech
from agents.cascade.turn_evaluator import EndOfTurn
from agents.cascade.words_judge import WordsJudge
from agents.scheduler import ModelScheduler

__all__ = ["CascadeModels"]


@dataclass
class CascadeModels:
    """The shared, loaded models; one set per process, used by every call."""

    stt: SpeechToText
    tts: TextToSpeech
    llm: ChatModel
    # Smart Turn; None where no judge of this process weighs it (`smart_turn_needed`).
    end_of_turn: EndOfTurn | None
    # Pre-synthesised lines, so the greeting is instant and the apology works even when
    # the TTS is the backend that failed.
    canned: dict[str, np.ndarray] = field(default_factory=dict)
    # Every call's model work goes through this: bounded, fair between calls, measured.
    scheduler: ModelScheduler = field(default_factory=ModelScheduler)
    # Replies drafted ahead never hold an LLM server another call's reply needs.
    drafts: DraftBoard = field(default_factory=DraftBoard)
    # Whether the LLM can answer now (readiness); None: not watched (tests' own models).
    llm_health: LlmHealth | None = None
    # Reads the caller's words for "finished?" (TURN_JUDGE=words); None: Smart Turn and the silence.
    words_judge: WordsJudge | None = None
