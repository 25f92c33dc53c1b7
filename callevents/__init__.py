"""What happens in a call, as typed events: one class per kind of thing that happens.

The turn-taking engine, the agents, playback and the call session emit these; the
recorder writes them to the call's timeline (`{"t_ms", "event": <name>, **fields}`), and
everything that reads a timeline back (`calls show`, replay, plot, timeline repair,
benchmarks) turns each line into an event with `parse_event` and matches on its type. An
event's name is written in exactly one place: its class.

Old records stay readable: `parse_event` accepts the names earlier versions wrote
(`backend_error`, `tts_first_audio`, `empty_transcript`) as their current events.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypeVar

__all__ = [
    "AnsweredBy",
    "Backchannel",
    "BargeIn",
    "BotTurn",
    "CallEnded",
    "CallEnding",
    "CallEvent",
    "CallStatus",
    "CallerTurn",
    "Clear",
    "Dtmf",
    "EchoIgnored",
    "EndOfTurn",
    "Error",
    "EventSink",
    "Fallback",
    "FirstAudio",
    "Hold",
    "LlmFirstToken",
    "MarkEchoed",
    "MarkSent",
    "NotHeld",
    "NotSpeech",
    "PatienceRaised",
    "ProtocolErrorEvent",
    "ReplyCancelled",
    "ReplyStart",
    "Reprompt",
    "Resume",
    "SpeechStart",
    "SpeechStop",
    "StreamStart",
    "StreamStop",
    "ToolCalled",
    "Transfer",
    "TransferRequested",
    "TurnCapped",
    "TurnTiming",
    "UnknownEvent",
    "event_types",
    "parse_event",
    "parse_timeline",
]

E = TypeVar("E", bound="CallEvent")

_TYPES: dict[str, type[CallEvent]] = {}  # filled once at import by @_event, never after
_OLD_NAMES: dict[str, str] = {
    "backend_error": "error",
    "tts_first_audio": "first_audio",
    "empty_transcript": "reprompt",
    "response_cancelled": "reply_cancelled",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class CallEvent:
    """Base of every event. `name` is what the timeline calls it."""

    name: ClassVar[str] = ""
    # Python names of fields that are written under another name (a keyword, say).
    _wire: ClassVar[Mapping[str, str]] = {}

    def data(self) -> dict[str, Any]:
        """The event's fields as the timeline stores them."""
        return {
            self._wire.get(f.name, f.name): getattr(self, f.name) for f in dataclasses.fields(self)
        }


EventSink = Callable[[CallEvent], None]


def _event(cls: type[E]) -> type[E]:
    if not cls.name or cls.name in _TYPES:
        raise TypeError(f"{cls.__name__}: event name {cls.name!r} missing or taken")
    _TYPES[cls.name] = cls
    return cls


def event_types() -> dict[str, type[CallEvent]]:
    return dict(_TYPES)


@dataclass(frozen=True, slots=True, kw_only=True)
class UnknownEvent(CallEvent):
    """A timeline line of a kind this version does not know (kept, not dropped)."""

    event: str = ""
    fields: dict[str, Any] = field(default_factory=dict)

    def data(self) -> dict[str, Any]:
        return dict(self.fields)


def parse_event(line: Mapping[str, Any]) -> CallEvent:
    """The typed event for one timeline line (`t_ms` and `event` are not fields).

    Tolerant, because records outlive versions and crashed calls leave odd lines: missing
    fields take their defaults, unknown fields are ignored, values of the wrong type are
    kept as they are (readers check what they use).
    """
    name = str(line.get("event", ""))
    cls = _TYPES.get(_OLD_NAMES.get(name, name))
    raw = {k: v for k, v in line.items() if k not in ("t_ms", "event")}
    if cls is None:
        return UnknownEvent(event=name, fields=raw)
    python_names = {wire: py for py, wire in cls._wire.items()}
    known = {f.name for f in dataclasses.fields(cls)}
    kwargs = {python_names.get(k, k): v for k, v in raw.items()}
    return cls(**{k: v for k, v in kwargs.items() if k in known})


def parse_timeline(lines: Iterable[Mapping[str, Any]]) -> list[tuple[float | None, CallEvent]]:
    """`(t_ms, event)` for each timeline line, in order, with `parse_event`'s tolerance:
    t_ms is None where a damaged line holds no number there."""
    timed: list[tuple[float | None, CallEvent]] = []
    for line in lines:
        t_ms = line.get("t_ms")
        if isinstance(t_ms, bool) or not isinstance(t_ms, int | float):
            t_ms = None
        timed.append((None if t_ms is None else float(t_ms), parse_event(line)))
    return timed


# --- the stream ------------------------------------------------------------------------


@_event
@dataclass(frozen=True, slots=True, kw_only=True)
class StreamStart(CallEvent):
    name: ClassVar[str] = "stream_start"
    stream_sid: str = ""
    tracks: list[str] = field(default_factory=list)


@_event
@dataclass(frozen=True, slots=True, kw_only=True)
class StreamStop(CallEvent):
    name: ClassVar[str] = "stream_stop"
    outcome: str = ""


@_event
@dataclass(frozen=True, slots=True, kw_only=True)
class ProtocolErrorEvent(CallEvent):
    name: ClassVar[str] = "protocol_error"
    kind: str = ""
    error: str = ""


@_event
@dataclass(frozen=True, slots=True, kw_only=True)
class Dtmf(CallEvent):
    name: ClassVar[str] = "dtmf"
    digits: str = ""


@_event
@dataclass(frozen=True, slots=True, kw_only=True)
class MarkSent(CallEvent):
    name: ClassVar[str] = "mark_sent"
    mark: str = ""
    samples: int = 0
    _wire: ClassVar[Mapping[str, str]] = {"mark": "name"}


@_event
@dataclass(frozen=True, slots=True, kw_only=True)
class MarkEchoed(CallEvent):
    name: ClassVar[str] = "mark_echoed"
    mark: str = ""
    played: bool = False
    _wire: ClassVar[Mapping[str, str]] = {"mark": "name"}


# --- the caller ------------------------------------------------------------------------


@_event
@dataclass(frozen=True, slots=True, kw_only=True)
class SpeechStart(CallEvent):
    """The front end heard the caller start speaking (16 kHz front-end sample)."""

    name: ClassVar[str] = "vad_start"
    sample: int = 0


@_event
@dataclass(frozen=True, slots=True, kw_only=True)
class SpeechStop(CallEvent):
    name: ClassVar[str] = "vad_stop"
    sample: int = 0


@_event
@dataclass(frozen=True, slots=True, kw_only=True)
class EndOfTurn(CallEvent):
    """The caller's turn was judged over: the signals that decided it."""

    name: ClassVar[str] = "end_of_turn"
    probability: float | None = 0.0  # Smart Turn's; None: not run (the words judged)
    # The words judge's probability that the words end the turn; None: not scored.
    words: float | None = None
    silence_ms: int = 0
    text: str = ""
    hearing: str = ""  # heard / unclear / nothing: what the transcript's evidence said
    # Whisper's evidence for it: its no-speech probability and mean token log-probability.
    no_speech_prob: float = 0.0
    avg_logprob: float = 0.0


@_event
@dataclass(frozen=True, slots=True, kw_only=True)
class TurnCapped(CallEvent):
    """A turn with no pause reached its length cap and is judged without one."""

    name: ClassVar[str] = "turn_capped"
    speech_ms: int = 0


@_event
@dataclass(frozen=True, slots=True, kw_only=True)
class CallerTurn(CallEvent):
    name: ClassVar[str] = "caller_turn"
    text: str = ""
    start_ms: float | None = None
    end_ms: float | None = None


@_event
@dataclass(frozen=True, slots=True, kw_only=True)
class NotSpeech(CallEvent):
    """Speech detection fired but the transcript's evidence says nobody spoke."""

    name: ClassVar[str] = "not_speech"
    speech_ms: int = 0
    text: str = ""


@_event
@dataclass(frozen=True, slots=True, kw_only=True)
class Reprompt(CallEvent):
    """The caller spoke but could not be made out: the bot asks them to repeat."""

    name: ClassVar[str] = "reprompt"
    reason: str = ""
    speech_ms: int = 0


# --- the bot ---------------------------------------------------------------------------

ReplyKind = Literal[
    "answer",
    "greeting",
    "reprompt",
    "apology",
    "resume",
    "digits",
    "farewell",
    "transfer",
    "voicemail",
    "",
]


@_event
@dataclass(frozen=True, slots=True, kw_only=True)
class ReplyStart(CallEvent):
    name: ClassVar[str] = "reply_start"
    turn_id: int = 0
    kind: str = ""


@_event
@dataclass(frozen=True, slots=True, kw_only=True)
class LlmFirstToken(CallEvent):
    name: ClassVar[str] = "llm_first_token"
    ms: float = 0.0
    drafted: bool = False  # written while the engine waited out the caller's pause


@_event
@dataclass(frozen=True, slots=True, kw_only=True)
class FirstAudio(CallEvent):
    """The reply's first synthesised audio is ready (ms after the reply started)."""

    name: ClassVar[str] = "first_audio"
    ms: float = 0.0
    text: str = ""


@_event
@dataclass(frozen=True, slots=True, kw_only=True)
class BotTurn(CallEvent):
    name: ClassVar[str] = "bot_turn"
    turn_id: int = 0
    text: str = ""
    intended: str = ""
    truncated: bool = False
    start_ms: float | None = None
    end_ms: float | None = None


@_event
@dataclass(frozen=True, slots=True, kw_only=True)
class ReplyCancelled(CallEvent):
    """A reply was dropped before the caller heard it (they went on talking...)."""

    name: ClassVar[str] = "reply_cancelled"
    reason: str = ""


@_event
@dataclass(frozen=True, slots=True, kw_only=True)
class TurnTiming(CallEvent):
    name: ClassVar[str] = "turn_timing"
    speech_end_ms: float = 0.0
    end_of_turn_ms: float = 0.0
    stt_ms: float = 0.0
    llm_first_token_ms: float | None = None
    tts_first_audio_ms: float | None = None
    mouth_to_mouth_ms: float | None = None


# --- the caller over the bot -------------------------------------------------------------


@_event
@dataclass(frozen=True, slots=True, kw_only=True)
class Hold(CallEvent):
    """The caller started speaking over the bot: its audio is stopped, the rest kept."""

    name: ClassVar[str] = "hold"
    turn_id: int = 0
    heard: str = ""  # of the turn, up to the hold


@_event
@dataclass(frozen=True, slots=True, kw_only=True)
class Resume(CallEvent):
    """It was a backchannel or noise: the bot goes on from where the caller last heard."""

    name: ClassVar[str] = "resume"
    held_ms: int = 0
    reason: str = ""


@_event
@dataclass(frozen=True, slots=True, kw_only=True)
class Backchannel(CallEvent):
    name: ClassVar[str] = "backchannel"
    speech_ms: int = 0
    text: str = ""


@_event
@dataclass(frozen=True, slots=True, kw_only=True)
class NotHeld(CallEvent):
    """Speech over the bot that ended without holding it: loud like a caller for only
    `loud_ms` of it, too little for a hold (more is needed while the echo canceller is
    still learning the line, `echo_settled` false)."""

    name: ClassVar[str] = "not_held"
    speech_ms: int = 0
    loud_ms: int = 0
    echo_settled: bool = True


@_event
@dataclass(frozen=True, slots=True, kw_only=True)
class EchoIgnored(CallEvent):
    """Speech over the bot that was not loud like a caller: its own echo."""

    name: ClassVar[str] = "echo_ignored"
    speech_ms: int = 0


@_event
@dataclass(frozen=True, slots=True, kw_only=True)
class PatienceRaised(CallEvent):
    """The caller went on after a pause of `pause_ms` that the bot took for the end of
    their turn: from now on their statements get `wait_ms` of quiet before an answer."""

    name: ClassVar[str] = "patience_raised"
    pause_ms: int = 0
    wait_ms: int = 0


@_event
@dataclass(frozen=True, slots=True, kw_only=True)
class Clear(CallEvent):
    """`clear` was sent to Twilio (reason: hold, silence, resume, barge_in,
    short_interruption, dtmf...)."""

    name: ClassVar[str] = "clear"
    reason: str = ""


@_event
@dataclass(frozen=True, slots=True, kw_only=True)
class BargeIn(CallEvent):
    """A real interruption: the bot's turn ends at what the caller heard."""

    name: ClassVar[str] = "barge_in"
    turn_id: int = 0
    heard: str = ""
    truncated: bool = False
    # Why it ended (the cascade's): barge_in (they talked on), short_interruption (words
    # that take the turn). A held bot is cleared without a `clear` to Twilio: this says it.
    reason: str = ""


# --- failures ----------------------------------------------------------------------------


@_event
@dataclass(frozen=True, slots=True, kw_only=True)
class Error(CallEvent):
    """A stage failed (stt, end_of_turn, llm, tts, worker, recording, call...)."""

    name: ClassVar[str] = "error"
    stage: str = ""
    error: str = ""


@_event
@dataclass(frozen=True, slots=True, kw_only=True)
class Fallback(CallEvent):
    name: ClassVar[str] = "fallback"
    source: str = ""
    target: str = ""
    reason: str = ""
    _wire: ClassVar[Mapping[str, str]] = {"source": "from", "target": "to"}


# --- the call itself: ending, transfer, Twilio's reports ---------------------------------


@_event
@dataclass(frozen=True, slots=True, kw_only=True)
class CallEnding(CallEvent):
    """The bot decided the call is over (farewell, llm, max_duration, silence, voicemail)
    and says goodbye; `call_ended` follows once it has played."""

    name: ClassVar[str] = "call_ending"
    reason: str = ""


@_event
@dataclass(frozen=True, slots=True, kw_only=True)
class CallEnded(CallEvent):
    """The bot ended the call: by closing the stream, or over Twilio's REST API."""

    name: ClassVar[str] = "call_ended"
    reason: str = ""
    via: str = ""  # "stream" or "rest"
    error: str = ""  # a REST hang-up that failed (the stream was closed anyway)


@_event
@dataclass(frozen=True, slots=True, kw_only=True)
class TransferRequested(CallEvent):
    """The caller (words, key) or the LLM asked for a person; `refused` says why not."""

    name: ClassVar[str] = "transfer_requested"
    reason: str = ""
    refused: str = ""


@_event
@dataclass(frozen=True, slots=True, kw_only=True)
class Transfer(CallEvent):
    """The call was redirected to `target` with <Dial> TwiML (or that failed: `error`)."""

    name: ClassVar[str] = "transfer"
    target: str = ""
    reason: str = ""
    ok: bool = False
    error: str = ""


@_event
@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCalled(CallEvent):
    """The LLM called a tool (end_call, transfer_call); never spoken."""

    name: ClassVar[str] = "tool_called"
    tool: str = ""
    arguments: str = ""


@_event
@dataclass(frozen=True, slots=True, kw_only=True)
class AnsweredBy(CallEvent):
    """Twilio's answering-machine detection on an outbound call: human, machine_start,
    machine_end_beep, machine_end_silence, machine_end_other, fax, unknown."""

    name: ClassVar[str] = "answered_by"
    answered_by: str = ""
    detection_ms: int = 0


@_event
@dataclass(frozen=True, slots=True, kw_only=True)
class CallStatus(CallEvent):
    """A status callback from Twilio: initiated, ringing, in-progress (answered),
    completed, busy, no-answer, failed, canceled."""

    name: ClassVar[str] = "call_status"
    status: str = ""
    duration_s: int = 0
    sip_code: str = ""
