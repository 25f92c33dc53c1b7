"""The gateway ↔ worker session protocol: JSON text frames, audio as base64 PCM16 LE.

    gateway → worker            worker → gateway
    prepare                     prepared
    unit (seq, 16 kHz audio, speech?)    result (seq, listen | speak | backchannel, text, audio)
    keypad (digits)
    pause / resume              paused / resumed
    stop                        stopped
                                error (message, fatal)

One message class per message; `encode` and `decode` are the only places that see
JSON. A message that does not parse raises `ProtocolViolation`, naming what was
expected and what arrived.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

import numpy as np

CALLER_RATE = 16000  # unit audio from the gateway


class ProtocolViolation(ValueError):
    """A frame that is not a valid session-protocol message."""


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
        if self.speech is None:
            return
        if not isinstance(self.speech, list | tuple) or not all(
            isinstance(p, int | float) and 0.0 <= p <= 1.0 for p in self.speech
        ):
            raise ProtocolViolation("unit.speech: expected a list of probabilities in [0, 1]")
        object.__setattr__(self, "speech", tuple(float(p) for p in self.speech))


@dataclass(frozen=True, slots=True)
class Keypad:
    """The caller pressed keys (DTMF) since the last unit."""

    digits: str
    type: Literal["keypad"] = "keypad"


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


@dataclass(frozen=True, slots=True)
class Error:
    message: str
    fatal: bool = False
    type: Literal["error"] = "error"


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
        try:
            body[name] = base64.b64decode(body[name], validate=True)
        except (binascii.Error, TypeError) as exc:
            raise ProtocolViolation(f"{body['type']}.{name}: invalid base64 ({exc})") from None
    try:
        return cls(**body)
    except TypeError as exc:
        raise ProtocolViolation(f"{body['type']}: {exc}") from None
