"""What a duplex worker drives: one model, one session at a time, one unit per call.

A backend is told about a session (`prepare`), then fed one unit of caller audio at a
time (`process_unit`), and says what it did with it: listened, spoke, or backchannelled.
Bookkeeping that the reply does not depend on goes into `finalize_unit`, which the
worker runs after the result is on its way (deferred finalize). `cleanup` releases what
the session held; the worker always calls it, however the session ended. A backend that
can answer keypad presses (`keypad_input`) is told of them between units (`keypad`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

import numpy as np

from agents.duplex.protocol import Prepare

Action = Literal["listen", "speak", "backchannel"]


@dataclass(slots=True)
class UnitOutcome:
    """What the backend did with one unit of caller audio."""

    action: Action = "listen"
    text: str = ""  # words in `audio`
    audio: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float32))
    sample_rate: int = 16000  # of `audio`
    yielded: bool = False  # stopped talking because the caller did
    caller_text: str = ""  # what the caller said, when the backend knows
    end_of_turn: bool = False  # the bot's turn ends with this unit
    context_len: int = 0  # tokens (or messages) in the model's context
    timings: dict[str, float] = field(default_factory=dict)  # ms per stage


class DuplexBackend(Protocol):
    name: str
    keypad_input: bool  # `keypad` is answered; a speech-only model says False

    async def load(self) -> None:
        """Load the model; raises BackendUnavailable when it cannot run here."""
        ...

    async def prepare(self, request: Prepare) -> None:
        """Reset per-session state; take in the system prompt and history."""
        ...

    async def process_unit(
        self, audio_16k: np.ndarray, speech: Sequence[float] | None = None
    ) -> UnitOutcome:
        """Prefill this unit's caller audio (float32, 16 kHz), then decide and generate.

        `speech`: the gateway front end's speech probability per 32 ms window, when it
        sent them; a backend that detects speech itself uses these instead.
        """
        ...

    async def keypad(self, digits: str) -> None:
        """The caller pressed `digits`; answer in the coming units as if they had spoken."""
        ...

    async def finalize_unit(self) -> None:
        """Deferred bookkeeping for the last unit; done before the next unit starts."""
        ...

    async def cleanup(self) -> None:
        """Release everything the session held."""
        ...

    def memory_mb(self) -> float:
        """Memory the backend holds now (process RSS or GPU memory)."""
        ...
