"""The gateway ↔ worker session protocol: JSON text frames, audio as base64 PCM16 LE.

    gateway → worker            worker → gateway
    prepare                     prepared
    unit (seq, 16 kHz audio, speech?)    result (seq, listen | speak | backchannel, text, audio)
    keypad (digits)
    pause / resume              paused / resumed
    stop                        stopped
                                error (message, fatal)

One message class per message; `encode` and `decode` are the only places that see
JSON. Every message checks its own fields when it is made, types, ranges and sizes, so
a frame from either side that decodes is also in range, and neither side can send one
that is not. A message that does not parse or check out raises `ProtocolViolation`,
naming what was expected and what arrived.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

import numpy as np

CALLER_RATE = 16000  # unit audio from the gateway
MIN_UNIT_MS, MAX_UNIT_MS = 20, 2000  # the settings allow 200..2000; tests go shorter
MAX_UNIT_BYTES = CALLER_RATE * 2 * MAX_UNIT_MS // 1000  # PCM16
# The largest frame a worker takes: a unit's audio (base64: 4/3 of MAX_UNIT_BYTES) and a
# Prepare (MAX_PREPARE_CHARS) fit with room; uvicorn's default is 16 MiB.
MAX_WORKER_FRAME_BYTES = 1 << 20
MAX_RESULT_AUDIO_S = 30  # a unit's reply audio; the client's frame limit bounds it too
RESULT_RATES = frozenset({8000, 16000, 22050, 24000, 44100, 48000})
MAX_TEXT = 4000  # characters of one field of words
MAX_PROMPT = 32_000
MAX_HISTORY = 200
# Persona and history together: with every character \u-escaped (6 bytes) a Prepare
# still fits MAX_WORKER_FRAME_BYTES.
MAX_PREPARE_CHARS = 128_000
MAX_NAME = 200  # ids, reasons, backend names
MAX_SEQ = 2**31  # a month of 1 s units, with room
MAX_CONTEXT = 10**7
KEYPAD_DIGITS = frozenset("0123456789*#ABCD")
ROLES = frozenset({"system", "user", "assistant"})
ACTIONS = frozenset({"listen", "speak", "backchannel"})


class ProtocolViolation(ValueError):
    """A frame that is not a valid session-protocol message."""


def _fail(message: object, what: str) -> ProtocolViolation:
    return ProtocolViolation(f"{getattr(message, 'type', '?')}.{what}")


def _int(message: object, name: str, low: int, high: int) -> None:
    value = getattr(message, name)
    # bool is an int in Python, and not what any of these fields means.
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise _fail(message, f"{name}: expected an integer in [{low}, {high}], got {value!r}")


def _str(message: object, name: str, limit: int) -> None:
    value = getattr(message, name)
    if not isinstance(value, str) or len(value) > limit:
        shown = value if not isinstance(value, str) else f"{len(value)} characters"
        raise _fail(message, f"{name}: expected text of at most {limit} characters, got {shown!r}")


def _bool(message: object, name: str) -> None:
    if not isinstance(getattr(message, name), bool):
        raise _fail(message, f"{name}: expected true or false, got {getattr(message, name)!r}")


def _bytes(message: object, name: str, limit: int) -> None:
    value = getattr(message, name)
    if not isinstance(value, bytes) or len(value) > limit or len(value) % 2:
        size = len(value) if isinstance(value, bytes) else type(value).__name__
        raise _fail(message, f"{name}: expected PCM16 audio of at most {limit} bytes, got {size}")


def pcm16_bytes(audio: np.ndarray) -> bytes:
    """float32 [-1, 1] or int16 samples → little-endian PCM16 bytes."""
    if audio.dtype != np.int16:
        audio = np.clip(np.rint(np.asarray(audio, np.float32) * 32767.0), -32768, 32767).astype(
            np.int16
        )
    return audio.astype("<i2", copy=False).tobytes()


def pcm16_array(data: bytes) -> np.ndarray:
    """PCM16 LE bytes → float32 [-1, 1]."""
    if len(data) % 2:
        raise ProtocolViolation(f"PCM16 audio must have an even byte count, got {len(data)}")
    return np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0


@dataclass(frozen=True, slots=True)
class Prepare:
    system_prompt: str
    history: list[dict[str, str]] = field(default_factory=list)
    unit_ms: int = 1000
    voice: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    type: Literal["prepare"] = "prepare"

    def __post_init__(self) -> None:
        _str(self, "system_prompt", MAX_PROMPT)
        if not isinstance(self.history, list) or len(self.history) > MAX_HISTORY:
            raise _fail(self, f"history: expected a list of at most {MAX_HISTORY} messages")
        for message in self.history:
            if (
                not isinstance(message, dict)
                or set(message) != {"role", "content"}
                or message["role"] not in ROLES
                or not isinstance(message["content"], str)
                or len(message["content"]) > MAX_PROMPT
            ):
                raise _fail(
                    self, f"history: expected {{role, content}} messages, got {message!r}"[:200]
                )
        total = len(self.system_prompt) + sum(len(m["content"]) for m in self.history)
        if total > MAX_PREPARE_CHARS:
            raise _fail(self, f"persona and history: {total} characters, over {MAX_PREPARE_CHARS}")
        _int(self, "unit_ms", MIN_UNIT_MS, MAX_UNIT_MS)
        _str(self, "voice", MAX_NAME)
        if not isinstance(self.config, dict) or len(self.config) > 32:
            raise _fail(self, "config: expected an object of at most 32 settings")
        for key, value in self.config.items():
            if not isinstance(value, bool | int | float | str) or len(str(value)) > MAX_NAME:
                raise _fail(self, f"config.{key}: expected a short scalar, got {value!r}"[:200])


@dataclass(frozen=True, slots=True)
class Unit:
    seq: int
    audio: bytes  # PCM16 LE mono at CALLER_RATE
    # The gateway front end's speech probability for each 32 ms window (512 samples)
    # that ended in this unit: echo-cancelled and gated by the call's background, so a
    # worker that detects speech hears it exactly as the gateway does. None: not given.
    speech: tuple[float, ...] | None = None
    type: Literal["unit"] = "unit"

    def __post_init__(self) -> None:
        _int(self, "seq", 0, MAX_SEQ)
        _bytes(self, "audio", MAX_UNIT_BYTES)
        if self.speech is None:
            return
        windows = MAX_UNIT_BYTES // 2 // 512 + 1
        if (
            not isinstance(self.speech, list | tuple)
            or len(self.speech) > windows
            or not all(
                isinstance(p, int | float) and not isinstance(p, bool) and 0.0 <= p <= 1.0
                for p in self.speech
            )
        ):
            raise ProtocolViolation(
                f"unit.speech: expected at most {windows} probabilities in [0, 1]"
            )
        object.__setattr__(self, "speech", tuple(float(p) for p in self.speech))


@dataclass(frozen=True, slots=True)
class Keypad:
    """The caller pressed keys (DTMF) since the last unit."""

    digits: str
    type: Literal["keypad"] = "keypad"

    def __post_init__(self) -> None:
        if (
            not isinstance(self.digits, str)
            or not 1 <= len(self.digits) <= 32
            or not set(self.digits) <= KEYPAD_DIGITS
        ):
            raise _fail(self, f"digits: expected 1-32 of 0-9 * # A-D, got {self.digits!r}"[:120])


@dataclass(frozen=True, slots=True)
class Pause:
    type: Literal["pause"] = "pause"


@dataclass(frozen=True, slots=True)
class Resume:
    type: Literal["resume"] = "resume"


@dataclass(frozen=True, slots=True)
class Stop:
    type: Literal["stop"] = "stop"


@dataclass(frozen=True, slots=True)
class Prepared:
    worker_id: str
    backend: str
    unit_ms: int
    keypad: bool = False  # the backend answers Keypad messages; else the gateway must
    type: Literal["prepared"] = "prepared"

    def __post_init__(self) -> None:
        _str(self, "worker_id", MAX_NAME)
        _str(self, "backend", MAX_NAME)
        _int(self, "unit_ms", MIN_UNIT_MS, MAX_UNIT_MS)
        _bool(self, "keypad")


@dataclass(frozen=True, slots=True)
class Result:
    """What the model did with one unit."""

    seq: int
    action: Literal["listen", "speak", "backchannel"]
    text: str = ""  # words spoken in this unit's audio
    audio: bytes = b""  # PCM16 LE mono at sample_rate
    sample_rate: int = 16000
    # The model stopped talking because the caller did: the gateway clears playback.
    yielded: bool = False
    caller_text: str = ""  # what the model heard the caller say, when it knows (history)
    end_of_turn: bool = False  # the bot finished its turn with this unit
    timings: dict[str, float] = field(default_factory=dict)  # ms: prefill, generate, ...
    context_len: int = 0
    type: Literal["result"] = "result"

    def __post_init__(self) -> None:
        _int(self, "seq", 0, MAX_SEQ)
        if self.action not in ACTIONS:
            raise _fail(self, f"action: expected one of {sorted(ACTIONS)}, got {self.action!r}")
        _str(self, "text", MAX_TEXT)
        _int(self, "sample_rate", 8000, 48000)
        if self.sample_rate not in RESULT_RATES:
            raise _fail(self, f"sample_rate: expected one of {sorted(RESULT_RATES)}")
        _bytes(self, "audio", self.sample_rate * 2 * MAX_RESULT_AUDIO_S)
        if self.audio and self.action == "listen":
            raise _fail(self, "audio: a listen carries no audio")
        _bool(self, "yielded")
        _str(self, "caller_text", MAX_TEXT)
        _bool(self, "end_of_turn")
        if not isinstance(self.timings, dict) or len(self.timings) > 32:
            raise _fail(self, "timings: expected an object of at most 32 stages")
        for name, ms in self.timings.items():
            if (
                not isinstance(ms, int | float)
                or isinstance(ms, bool)
                or not math.isfinite(ms)
                or not 0 <= ms <= 3_600_000
                or len(name) > 64
            ):
                raise _fail(self, f"timings.{name[:64]}: expected milliseconds, got {ms!r}")
        _int(self, "context_len", 0, MAX_CONTEXT)


@dataclass(frozen=True, slots=True)
class Paused:
    type: Literal["paused"] = "paused"


@dataclass(frozen=True, slots=True)
class Resumed:
    type: Literal["resumed"] = "resumed"


@dataclass(frozen=True, slots=True)
class Stopped:
    reason: str = "stop"
    type: Literal["stopped"] = "stopped"

    def __post_init__(self) -> None:
        _str(self, "reason", MAX_NAME)


@dataclass(frozen=True, slots=True)
class Error:
    message: str
    fatal: bool = False
    type: Literal["error"] = "error"

    def __post_init__(self) -> None:
        _str(self, "message", MAX_TEXT)
        _bool(self, "fatal")


ToWorker = Prepare | Unit | Keypad | Pause | Resume | Stop
ToGateway = Prepared | Result | Paused | Resumed | Stopped | Error
Message = ToWorker | ToGateway

_BY_TYPE: dict[str, type[Any]] = {
    "prepare": Prepare,
    "unit": Unit,
    "keypad": Keypad,
    "pause": Pause,
    "resume": Resume,
    "stop": Stop,
    "prepared": Prepared,
    "result": Result,
    "paused": Paused,
    "resumed": Resumed,
    "stopped": Stopped,
    "error": Error,
}
_AUDIO_FIELDS = {"audio"}


def encode(message: Message) -> str:
    body = asdict(message)
    for name in _AUDIO_FIELDS & body.keys():
        body[name] = base64.b64encode(body[name]).decode("ascii")
    return json.dumps(body, separators=(",", ":"))


def decode(frame: str | bytes) -> Message:
    if isinstance(frame, bytes):
        raise ProtocolViolation("expected a JSON text frame, got a binary frame")
    try:
        body = json.loads(frame)
    except json.JSONDecodeError as exc:
        raise ProtocolViolation(f"expected JSON, got {frame[:60]!r}: {exc}") from None
    except RecursionError:  # [[[[...]]]] a few thousand deep: no message of ours nests
        raise ProtocolViolation("expected a message, got JSON nested too deeply") from None
    if not isinstance(body, dict) or not isinstance(body.get("type"), str):
        raise ProtocolViolation("expected an object with a string 'type'")
    cls = _BY_TYPE.get(body["type"])
    if cls is None:
        raise ProtocolViolation(
            f"unknown message type {body['type']!r}; expected one of {sorted(_BY_TYPE)}"
        )
    known = {f.name for f in fields(cls)}
    unexpected = set(body) - known
    if unexpected:
        raise ProtocolViolation(f"{body['type']}: unexpected field(s) {sorted(unexpected)}")
    for name in _AUDIO_FIELDS & body.keys():
        if not isinstance(body[name], str):
            raise ProtocolViolation(f"{body['type']}.{name}: expected base64 text")
        try:
            body[name] = base64.b64decode(body[name], validate=True)
        except (binascii.Error, TypeError) as exc:
            raise ProtocolViolation(f"{body['type']}.{name}: invalid base64 ({exc})") from None
    try:
        return cls(**body)
    except TypeError as exc:
        raise ProtocolViolation(f"{body['type']}: {exc}") from None
