"""What the turn engine and its driver say to each other: the engine's states, the inputs
the driver feeds it (front-end frames, end-of-turn evaluations) and the typed decisions
it returns for the driver to carry out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from media.vad import VadEvent

__all__ = [
    "Answer",
    "Clear",
    "Decision",
    "DropEvaluation",
    "Evaluate",
    "Evaluation",
    "Frame",
    "Hearing",
    "Hold",
    "IllegalTransition",
    "Lower",
    "Reopen",
    "Reprompt",
    "Resume",
    "Silence",
    "TurnState",
]


class TurnState(Enum):
    LISTENING = "listening"  # nobody talking, nothing owed
    CALLER = "caller"  # the caller has the floor (speaking or pausing)
    # The caller's turn is answered and the answer not heard yet: if they go on, the
    # answer is void and their turn reopens with all its audio.
    ANSWERING = "answering"
    # A reply that answers no turn of theirs still open (a greeting, asking again, words
    # said over the bot's end) is made and not heard yet: speech now is a new turn.
    REPLYING = "replying"
    BOT = "bot"  # the bot is talking (or about to, from the caller's side)
    OVERLAP = "overlap"  # the caller started speaking over the bot
    HELD = "held"  # ...loud enough that the bot's audio is stopped while we decide
    # ...and its words let the bot go on: it resumes once the caller is quiet a moment.
    RESUMING = "resuming"


class Hearing(Enum):
    """What the transcript's evidence says about an utterance."""

    HEARD = "heard"  # words to answer
    UNCLEAR = "unclear"  # there was speech but no reliable words: ask again
    NOTHING = "nothing"  # no speech after all (noise, a cough, a click)


class IllegalTransition(RuntimeError):
    pass


# --- inputs ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Frame:
    """One batch of front-end output, with what the bot was doing meanwhile."""

    end: int  # 16 kHz sample just after this batch
    samples: int
    events: Sequence[VadEvent] = ()
    level_db: float = 0.0  # the caller's side, echo removed
    noise_floor_db: float = -120.0
    echo_settled: bool = True
    bot_audible: bool = False  # bot audio is at the caller's ear now
    bot_level_db: float = -120.0  # its level there


@dataclass(frozen=True, slots=True)
class Evaluation:
    """The end-of-turn model and the transcript on the utterance up to `end`."""

    end: int
    # Smart Turn's P(complete) for the audio; None when it was not run: a judge that
    # gives it no weight had the words judge's score instead.
    probability: float | None
    text: str
    hearing: Hearing
    capped: bool = False
    # Whisper's own evidence behind `hearing`, for the record (agents/cascade/stt.py).
    no_speech_prob: float = 0.0
    avg_logprob: float = 0.0
    # The words judge's P(complete) for the text, in the context of the bot's last line
    # (agents/cascade/words_judge.py); None when no words judge runs.
    words: float | None = None


# --- decisions ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Evaluate:
    """Judge the utterance [start, end): end-of-turn model and transcript, in the background."""

    start: int
    end: int
    capped: bool = False
    speech_ms: int = 0  # of it, speech (pauses excluded): evidence for the transcript


@dataclass(frozen=True, slots=True)
class DropEvaluation:
    """The caller went on: whatever evaluation is running is void."""


@dataclass(frozen=True, slots=True)
class Answer:
    """Commit the caller's turn [start, end) with `text`, and reply to it."""

    text: str
    start: int
    end: int
    silence_ms: int
    farewell: bool = False  # the caller is saying goodbye: a goodbye is the answer


@dataclass(frozen=True, slots=True)
class Reprompt:
    """The caller spoke and was not made out: ask them, briefly, to say it again."""

    reason: str
    speech_ms: int
    end: int
    silence_ms: int = 0


@dataclass(frozen=True, slots=True)
class Reopen:
    """The caller went on before the reply was heard: drop the reply. With `restore`,
    the turn it answered is withdrawn and the utterance continues from `start`."""

    start: int
    restore: bool


@dataclass(frozen=True, slots=True)
class Hold:
    """Stop the bot's audio at the caller's ear now, keeping the rest."""


@dataclass(frozen=True, slots=True)
class Silence:
    """Stop a lowered bot at the caller's ear, keeping the rest: they have talked over
    it for longer than a listener's noise usually lasts."""


@dataclass(frozen=True, slots=True)
class Lower:
    """Play a silenced bot on, lowered, while the caller's words are judged."""


@dataclass(frozen=True, slots=True)
class Resume:
    """Play the rest of the held audio (and the reply still being made)."""

    held_ms: int
    reason: str


@dataclass(frozen=True, slots=True)
class Clear:
    """An interruption: drop the rest of the reply; the bot's turn is what was heard."""

    reason: str


Decision = (
    Evaluate | DropEvaluation | Answer | Reprompt | Reopen | Hold | Silence | Lower | Resume | Clear
)
