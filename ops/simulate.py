"""`offhook simulate`: play Twilio's part of a phone call against a running server.

The simulator does what Twilio and a caller do together, in real time:

1. POST the voice webhook with Twilio's form parameters (signed when a token is given);
2. read the TwiML's `<Connect><Stream>` and open that WebSocket (handshake signed);
3. send `connected`, `start`, then one 20 ms mu-law `media` frame every 20 ms;
4. play the bot's audio through a model of Twilio's playout buffer (TwilioPlayout),
   echoing marks when their audio has played and at once on `clear`;
5. speak a script of caller turns, timed against what the caller has *heard*;
6. hang up with `stop`, and report latencies, marks, clears and protocol violations.

Clock: every time in the report is milliseconds since the `start` event, which is
sample 0 of both recorded tracks. Caller chunk n (from 1) covers [(n-1)*20, n*20) ms
and is sent when that interval has passed; the bot audio heard during [t, t+20) is
whatever Twilio's buffer held at t. Latency is therefore measured at the caller's ear,
mouth to mouth: the end of the caller's last speech sample to the first bot frame heard.

Errors: SimulationError (setup failed: webhook refused, TwiML without a stream, socket
refused). Anything the server does wrong *during* the call is reported, not raised.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from functools import partial
from pathlib import Path
from typing import Final
from urllib.parse import SplitResult, urlsplit, urlunsplit

import httpx
import numpy as np
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from media.codec import float_to_pcm16, mulaw_decode, mulaw_encode
from media.wav import write_wav
from ops.caller_voice import CallerVoice, CallerVoiceError, load_wav_8k
from ops.line import NOISE_KINDS, EchoPath, LineConditions, NoiseSource, active_rms
from ops.twilio_playout import TwilioPlayout
from telephony.errors import ProtocolError
from telephony.protocol import (
    OutboundClear,
    OutboundMark,
    OutboundMedia,
    TwilioEventWriter,
    parse_outbound,
)
from telephony.security import public_url, sign
from telephony.wire import DTMF_DIGITS

__all__ = [
    "After",
    "CallReport",
    "CallerTurn",
    "SimulationConfig",
    "SimulationError",
    "TurnResult",
    "answering_machine",
    "main",
    "simulate_call",
]

RATE: Final = 8000
FRAME_SAMPLES: Final = 160  # 20 ms at 8 kHz: Twilio's observed frame
FRAME_S: Final = FRAME_SAMPLES / RATE
MULAW_SILENCE_FRAME: Final = b"\xff" * FRAME_SAMPLES

# A 20 ms bot frame louder than this is "bot audio heard" (RMS, dBFS): above line
# noise and comfort-noise padding, below any speech.
VOICED_DBFS: Final = -45.0
_VOICED_RMS: Final = 32768.0 * 10.0 ** (VOICED_DBFS / 20.0)
# Heard bot audio separated by less than this is one utterance (pauses inside speech).
UTTERANCE_GAP_MS: Final = 300
# A polite caller takes the bot to be done after this much silence at the ear.
BOT_DONE_SILENCE_MS: Final = 700
# A reply this long silent with nothing left in Twilio's buffer is over: longer than the
# bot's pauses inside a reply (a backchannel's hold, up to ~1 s).
BOT_GONE_MS: Final = 2000
DTMF_SPACING_MS: Final = 200  # a multiple of the 20 ms tick
WEBHOOK_PATH: Final = "/twilio/voice"
# Twilio fetches webhooks with this User-Agent; some servers log or route on it.
TWILIO_USER_AGENT: Final = "TwilioProxy/1.1"
_HTTP_TIMEOUT_S: Final = 15.0
_WS_OPEN_TIMEOUT_S: Final = 10.0


class SimulationError(Exception):
    """The call could not be set up: webhook refused, TwiML unusable, socket refused."""


class After(StrEnum):
    """What a caller turn waits for before it speaks."""

    BOT_DONE = "bot_done"  # the bot stopped: silent >= 700 ms at the ear
    BOT_SPEAKING = "bot_speaking"  # the bot's next utterance began (barge-in)
    START = "start"  # the previous caller turn ended, whatever the bot does


@dataclass(frozen=True)
class CallerTurn:
    """One thing the caller says (text, a WAV file or int16 8 kHz audio) or keys (DTMF).

    The turn starts `delay_ms` after its `after` condition (see After); with
    "bot_done" the start is at least the 700 ms it takes to notice the bot stopped.

    `queued_min_ms` / `queued_max_ms` hold the turn back further, until Twilio's playout
    buffer holds at least / at most that much unplayed bot audio (what Twilio knows is
    still to come): a backchannel over a reply that surely goes on, or an interruption
    near a reply's end with a known amount left. Out of patience, the caller speaks anyway.
    With `over_bot_only`, a gated turn that only makes sense over the reply (a "mhm", an
    interruption) is not said at all once the reply is over (the bot `BOT_GONE_MS`
    silent with nothing queued): a caller does not hum into silence, nor wait out their
    patience for a reply that has ended.
    """

    text: str | None = None
    wav: Path | None = None
    audio: np.ndarray | None = field(default=None, repr=False, compare=False)
    after: str = After.BOT_DONE
    delay_ms: int = 600
    dtmf: str | None = None
    queued_min_ms: int | None = None
    queued_max_ms: int | None = None
    over_bot_only: bool = False

    def __post_init__(self) -> None:
        sources = ("text", "wav", "audio", "dtmf")
        given = [name for name in sources if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError(
                f"expected exactly one of text, wav, audio, dtmf in a CallerTurn, got {given}"
            )
        After(self.after)  # ValueError names the bad value
        if self.delay_ms < 0:
            raise ValueError(f"expected delay_ms >= 0, got {self.delay_ms}")
        if self.dtmf is not None and (not self.dtmf or set(self.dtmf) - DTMF_DIGITS):
            raise ValueError(f"expected DTMF digits from 0-9 * # A-D, got {self.dtmf!r}")
        low, high = self.queued_min_ms, self.queued_max_ms
        if (low is not None and low < 0) or (high is not None and high < 0):
            raise ValueError(f"expected queued_min_ms/queued_max_ms >= 0, got {low}/{high}")
        if low is not None and high is not None and low > high:
            raise ValueError(f"expected queued_min_ms <= queued_max_ms, got {low} > {high}")

    @property
    def label(self) -> str:
        if self.text is not None:
            return self.text
        if self.wav is not None:
            return Path(self.wav).name
        if self.dtmf is not None:
            return f"DTMF {self.dtmf}"
        return "<audio>"


@dataclass
class SimulationConfig:
    """One call: where to dial, how to sign, what the caller says, when to hang up."""

    base_url: str
    auth_token: str | None = None
    turns: list[CallerTurn] = field(default_factory=list)
    from_number: str = "+15550100"
    to_number: str = "+15550199"
    # Override where the WebSocket connects (host[:port] or ws(s)://host[:port]) when
    # the TwiML names a public tunnel URL; the path and the signature stay Twilio's.
    connect_to: str | None = None
    # After the last turn, hang up once the bot has been silent this long.
    hangup_after_ms: int = 4000
    max_call_s: float = 120.0
    # The caller's line: background noise at an SNR, the bot's echo at a level and delay.
    line: LineConditions = field(default_factory=LineConditions)
    voice_engine: str = "espeak"
    # Stereo WAV, 8 kHz: left = what the caller sent, right = the bot as heard.
    record_path: Path | None = None
    call_sid: str | None = None
    # The AccountSid Twilio would send; a server with TWILIO_ACCOUNT_SID refuses others.
    account_sid: str | None = None
    # A caller waiting for the bot speaks anyway after this long without bot audio.
    patience_s: float = 10.0
    # Wall-clock pace: one 20 ms frame every 20/speed ms. Timestamps and every time in
    # the report stay on the 20 ms call clock, but the server still works in wall time,
    # so at speed != 1 its latencies in call-clock ms are scaled by speed and are not
    # comparable with a real call's.
    speed: float = 1.0
    # Called once as each caller turn begins, with its index and start (call-clock ms):
    # lets a test or benchmark act at a known point of the conversation.
    on_turn_start: Callable[[int, float], None] | None = None
    # The voice URL Twilio fetches, query string included (an outbound call's `Url`);
    # None: base_url + /twilio/voice. `direction`: "inbound", or "outbound-api" for a
    # call placed through the REST API (the simulator then plays the callee).
    voice_url: str | None = None
    direction: str = "inbound"

    def __post_init__(self) -> None:
        if not self.speed > 0:
            raise ValueError(f"expected speed > 0, got {self.speed}")


@dataclass(frozen=True)
class TurnResult:
    """One caller turn and the bot's answer, in ms since `start` (see CallReport)."""

    text: str
    speech_start_ms: float
    speech_end_ms: float
    # Start of the first bot utterance heard after the caller began this turn (and
    # before the next turn); None if the bot never answered.
    bot_reply_start_ms: float | None
    # Mouth to mouth at the caller's ear: bot_reply_start_ms - speech_end_ms. Negative
    # means the bot began talking before the caller had finished.
    latency_ms: float | None
    # Unplayed bot audio in Twilio's buffer as the turn's first sample was sent: bot
    # audio the caller would still hear if nobody cleared it (None: not recorded).
    bot_queued_ms: float | None = None
    # False: left unsaid, the reply it was meant to go over having ended (its span is
    # empty, at the moment it was dropped).
    said: bool = True


@dataclass
class CallReport:
    """What happened on the call, as the caller experienced it.

    Every time is ms since the `start` event. `caller_audio` (what was sent, echo
    included) and `bot_audio` (what the caller heard, silence where Twilio's buffer was
    empty) are int16 8 kHz on that same clock and of equal length.
    """

    call_sid: str
    stream_sid: str
    twiml: str
    turns: list[TurnResult] = field(default_factory=list)
    greeting_start_ms: float | None = None
    bot_utterances: list[tuple[float, float]] = field(default_factory=list)
    clears: list[float] = field(default_factory=list)
    marks_sent_back: int = 0
    dtmf_sent: int = 0
    protocol_violations: list[str] = field(default_factory=list)
    # TwiML that works here but not on Twilio (ws:// URL, query string).
    warnings: list[str] = field(default_factory=list)
    underruns: int = 0
    underrun_ms: float = 0.0
    caller_audio: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int16), repr=False)
    bot_audio: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int16), repr=False)
    server_closed: bool = False
    close_code: int | None = None
    # When the server closed the stream (it ended the call), on the call clock.
    closed_ms: float | None = None
    # Webhook request to open socket, before the stream clock starts.
    setup_ms: float = 0.0

    def bot_spans(self, joined_within_ms: float) -> list[tuple[float, float]]:
        """Bot utterances, joined across silences shorter than `joined_within_ms`.

        Piper pauses 180-460 ms between sentences, at random (150 syntheses of one
        greeting), so one reply can reach the ear as two utterances: a test asking
        "did the bot speak again?" joins across its sentence pauses.
        """
        spans: list[tuple[float, float]] = []
        for start, end in self.bot_utterances:
            if spans and start - spans[-1][1] < joined_within_ms:
                spans[-1] = (spans[-1][0], end)
            else:
                spans.append((start, end))
        return spans

    def bot_audio_between(self, start_ms: float, end_ms: float) -> np.ndarray:
        """The bot as heard between two report times."""
        start = max(0, round(start_ms * RATE / 1000))
        end = max(start, round(end_ms * RATE / 1000))
        return self.bot_audio[start:end]


def _ms(samples: int) -> float:
    return samples * 1000 / RATE


def _samples(ms: float) -> int:
    return round(ms * RATE / 1000)


def _random_sid(prefix: str) -> str:
    return prefix + secrets.token_hex(16)


# --- the webhook and its TwiML -------------------------------------------------------


@dataclass(frozen=True)
class StreamTarget:
    """The `<Connect><Stream>` of a TwiML answer."""

    url: str
    parameters: dict[str, str]


def parse_twiml(twiml: str) -> StreamTarget:
    """Find the bidirectional stream in a TwiML answer, or raise SimulationError."""
    try:
        root = ET.fromstring(twiml)
    except ET.ParseError as exc:
        raise SimulationError(
            f"the webhook answered with invalid XML ({exc}): {twiml[:300]}"
        ) from exc
    if root.tag != "Response":
        raise SimulationError(f"expected TwiML <Response>, got <{root.tag}>")
    stream = root.find("./Connect/Stream")
    if stream is None:
        hint = (
            " (<Start><Stream> is receive-only: the bot could not talk back)"
            if root.find("./Start/Stream") is not None
            else ""
        )
        raise SimulationError(f"expected <Connect><Stream> in the TwiML{hint}: {twiml[:300]}")
    url = stream.get("url")
    if not url:
        raise SimulationError("expected a url attribute on <Stream>")
    parameters: dict[str, str] = {}
    for parameter in stream.findall("./Parameter"):
        name = parameter.get("name")
        if name is None:
            raise SimulationError("expected a name attribute on every <Parameter>")
        parameters[name] = parameter.get("value", "")
    return StreamTarget(url=url, parameters=parameters)


def twiml_warnings(target: StreamTarget) -> list[str]:
    """What Twilio would do differently with this stream URL."""
    parts = urlsplit(target.url)
    found = []
    if parts.scheme != "wss":
        found.append(f"Twilio requires a wss:// stream URL, got {parts.scheme}://")
    if parts.query:
        found.append("the stream URL has a query string, which Twilio may strip")
    return found


def voice_webhook_params(
    call_sid: str,
    account_sid: str,
    from_number: str,
    to_number: str,
    *,
    direction: str = "inbound",
) -> dict[str, str]:
    """The form Twilio POSTs to a number's voice webhook (the parameters that matter here)."""
    return {
        "CallSid": call_sid,
        "AccountSid": account_sid,
        "From": from_number,
        "To": to_number,
        "Caller": from_number,
        "Called": to_number,
        # An outbound call's URL is fetched once the callee has answered.
        "CallStatus": "ringing" if direction == "inbound" else "in-progress",
        "ApiVersion": "2010-04-01",
        "Direction": direction,
    }


async def _post_webhook(
    client: httpx.AsyncClient, config: SimulationConfig, call_sid: str, account_sid: str
) -> str:
    try:
        url = config.voice_url or public_url(config.base_url, WEBHOOK_PATH)
    except ValueError as exc:
        raise SimulationError(str(exc)) from exc
    params = voice_webhook_params(
        call_sid, account_sid, config.from_number, config.to_number, direction=config.direction
    )
    headers = {"User-Agent": TWILIO_USER_AGENT}
    if config.auth_token:
        headers["X-Twilio-Signature"] = sign(config.auth_token, url, params)
    try:
        response = await client.post(url, data=params, headers=headers)
    except httpx.HTTPError as exc:
        raise SimulationError(f"could not reach the webhook {url}: {exc!r}") from exc
    if response.status_code != 200:
        raise SimulationError(
            f"the webhook {url} answered HTTP {response.status_code}: {response.text[:500]}"
        )
    return response.text


def check_stream_host(stream_url: str, public: str) -> None:
    """SimulationError unless `stream_url` is on `public`'s host and under its path."""
    stream, base = urlsplit(stream_url), urlsplit(public)
    prefix = base.path.rstrip("/") + "/"
    secure = {"https": True, "wss": True}

    def origin(url: SplitResult) -> tuple[str | None, int]:
        # ws(s) and http(s) on the same host and port are one server; default ports spelt
        # out or not.
        default = 443 if secure.get(url.scheme, False) else 80
        return (url.hostname, url.port or default)

    if origin(stream) != origin(base) or not stream.path.startswith(prefix):
        raise SimulationError(
            f"the server's TwiML names a stream at {stream.netloc}{stream.path[:80]}, "
            f"not under {public}: not signing a request for it"
        )


def connect_uri(stream_url: str, base_url: str, connect_to: str | None) -> str:
    """Where to open the socket: the TwiML's URL, or its path on `connect_to`."""
    stream = urlsplit(stream_url)
    if stream.scheme not in ("ws", "wss"):
        raise SimulationError(f"expected a ws:// or wss:// stream URL, got {stream_url!r}")
    if connect_to:
        target = urlsplit(connect_to if "://" in connect_to else f"ws://{connect_to}")
        scheme = {"http": "ws", "https": "wss"}.get(target.scheme, target.scheme)
        return urlunsplit((scheme, target.netloc, stream.path, stream.query, ""))
    base = urlsplit(base_url)
    if stream.scheme == "wss" and base.scheme == "http" and stream.netloc == base.netloc:
        # A server reached over plain http cannot terminate TLS on the same port: it
        # names wss:// because Twilio requires it, so speak plain ws to it locally.
        return urlunsplit(("ws", stream.netloc, stream.path, stream.query, ""))
    return stream_url


# --- what the caller hears -------------------------------------------------------------


def _voiced(frame: np.ndarray) -> bool:
    if frame.size == 0:
        return False
    rms = float(np.sqrt(np.mean(frame.astype(np.float64) ** 2)))
    return rms >= _VOICED_RMS


class BotEar:
    """Bot audio as the caller hears it, cut into utterances (sample clock)."""

    def __init__(self) -> None:
        self._gap = _samples(UTTERANCE_GAP_MS)
        self.utterances: list[list[int]] = []  # [start, end) samples

    @property
    def last_voiced_end(self) -> int | None:
        return self.utterances[-1][1] if self.utterances else None

    def hear(self, frame: np.ndarray, start: int) -> None:
        if not _voiced(frame):
            return
        end = start + len(frame)
        if self.utterances and start - self.utterances[-1][1] < self._gap:
            self.utterances[-1][1] = end
        else:
            self.utterances.append([start, end])

    def onset_since(self, sample: int) -> int | None:
        """Start of the first utterance that began at or after `sample`."""
        return next((start for start, _ in self.utterances if start >= sample), None)


# --- what the caller says --------------------------------------------------------------


@dataclass(frozen=True)
class PreparedTurn:
    turn: CallerTurn
    audio: np.ndarray  # int16 8 kHz; empty for a DTMF turn


class _Phase(Enum):
    WAITING = "waiting"  # for the turn's `after` condition
    ACTIVE = "active"  # scheduled: speaking (or keying digits) now or soon
    DONE = "done"  # every turn has been said


class CallerScript:
    """Decides, tick by tick, what the caller says and when (sample clock).

    `advance(now)` only looks at bot audio heard before `now` and only schedules speech
    at or after `now`: the caller cannot react to what it has not heard yet.
    """

    def __init__(self, turns: Sequence[PreparedTurn], patience_ms: float) -> None:
        self._turns = list(turns)
        self._patience = _samples(patience_ms)
        self._index = 0
        self._armed_at = 0
        self._phase = _Phase.DONE if not self._turns else _Phase.WAITING
        self._start = 0
        self._end = 0
        self._digits: list[tuple[int, str]] = []
        # [start, end) samples and label of each turn, in order; a turn left unsaid
        # (see CallerTurn.over_bot_only) has an empty span where it was dropped...
        self.spans: list[tuple[int, int, str]] = []
        self.unsaid: set[int] = set()  # ...and its index here

    @property
    def finished(self) -> bool:
        return self._phase is _Phase.DONE

    @property
    def turns(self) -> list[PreparedTurn]:
        return list(self._turns)

    def speaking(self, now: int) -> int | None:
        """The index of the turn whose audio is playing into the microphone at `now`."""
        if self._phase is _Phase.ACTIVE and self._start <= now:
            return self._index
        return None

    @property
    def last_end(self) -> int:
        """Where the last finished turn ended (0 before any)."""
        return self._armed_at

    def mic(self, start: int, count: int) -> np.ndarray:
        """The caller's speech for samples [start, start + count)."""
        out = np.zeros(count, dtype=np.int16)
        if self._phase is not _Phase.ACTIVE:
            return out
        audio = self._turns[self._index].audio
        lo = max(start, self._start)
        hi = min(start + count, self._start + len(audio))
        if hi > lo:
            out[lo - start : hi - start] = audio[lo - self._start : hi - self._start]
        return out

    def due_digits(self, now: int) -> list[str]:
        due = [digit for at, digit in self._digits if at <= now]
        self._digits = [(at, digit) for at, digit in self._digits if at > now]
        return due

    def advance(self, now: int, ear: BotEar, queued: int = 0) -> None:
        """Move the script on to `now`; `queued`: unplayed samples in Twilio's buffer."""
        while self._phase is not _Phase.DONE:
            if self._phase is _Phase.ACTIVE:
                if self._end > now or self._digits:
                    return
                label = self._turns[self._index].turn.label
                self.spans.append((self._start, self._end, label))
                self._armed_at = self._end
                self._index += 1
                self._phase = _Phase.WAITING if self._index < len(self._turns) else _Phase.DONE
                continue
            turn = self._turns[self._index].turn
            at = self._trigger(turn, now, ear)
            if at is not None and _gated(turn) and not self._queue_allows(turn, at, now, queued):
                if turn.over_bot_only and _reply_over(now, ear, queued):
                    self._leave_unsaid(now)
                    continue
                at = now if now - self._armed_at >= self._patience else None
            if at is None:
                return
            self._schedule(max(at, now))

    def _leave_unsaid(self, now: int) -> None:
        self.unsaid.add(len(self.spans))
        self.spans.append((now, now, self._turns[self._index].turn.label))
        self._index += 1
        self._phase = _Phase.WAITING if self._index < len(self._turns) else _Phase.DONE

    def _schedule(self, start: int) -> None:
        prepared = self._turns[self._index]
        self._start = start
        if prepared.turn.dtmf is not None:
            spacing = _samples(DTMF_SPACING_MS)
            self._digits = [(start + i * spacing, d) for i, d in enumerate(prepared.turn.dtmf)]
            self._end = self._digits[-1][0]
        else:
            self._end = start + len(prepared.audio)
        self._phase = _Phase.ACTIVE

    @staticmethod
    def _queue_allows(turn: CallerTurn, at: int, now: int, queued: int) -> bool:
        """A gated turn starts only on a tick at or after `at` where the queue fits."""
        if at > now:
            return False
        low, high = turn.queued_min_ms, turn.queued_max_ms
        return (low is None or queued >= _samples(low)) and (
            high is None or queued <= _samples(high)
        )

    def _trigger(self, turn: CallerTurn, now: int, ear: BotEar) -> int | None:
        delay = _samples(turn.delay_ms)
        armed = self._armed_at
        match After(turn.after):
            case After.START:
                return armed + delay
            case After.BOT_DONE:
                last = ear.last_voiced_end
                noticed = last is not None and now - last >= _samples(BOT_DONE_SILENCE_MS)
                if last is not None and last > armed and noticed:
                    return last + delay
                if now - max(armed, last or 0) >= self._patience:
                    return now
            case After.BOT_SPEAKING:
                onset = ear.onset_since(armed)
                if onset is not None:
                    return onset + delay
                if now - armed >= self._patience:
                    return now
        return None


BEEP_HZ: Final = 1000.0
BEEP_MS: Final = 600


def answering_machine(greeting: str, *, beep_ms: int = BEEP_MS) -> list[CallerTurn]:
    """An answering machine taking a call: its greeting, then a beep (a 1 kHz tone), then
    silence while it records. Turn 1 is the beep: it ends `beep_ms` after it starts."""
    t = np.arange(RATE * beep_ms // 1000) / RATE
    beep = (0.3 * 32767 * np.sin(2 * np.pi * BEEP_HZ * t)).astype(np.int16)
    return [
        CallerTurn(text=greeting, after=After.START, delay_ms=400),
        CallerTurn(audio=beep, after=After.START, delay_ms=300),
    ]


def _gated(turn: CallerTurn) -> bool:
    return turn.queued_min_ms is not None or turn.queued_max_ms is not None


def _reply_over(now: int, ear: BotEar, queued: int) -> bool:
    last = ear.last_voiced_end
    return queued == 0 and last is not None and now - last >= _samples(BOT_GONE_MS)


def _prepare(turns: Sequence[CallerTurn], engine: str) -> list[PreparedTurn]:
    """Synthesise every turn before dialling, so speech is ready the moment it is due."""
    voice: CallerVoice | None = None
    prepared = []
    for turn in turns:
        if turn.text is not None:
            voice = voice or CallerVoice(engine)
            audio = voice.speak(turn.text)
        elif turn.wav is not None:
            audio = load_wav_8k(turn.wav)
        elif turn.audio is not None:
            raw = np.asarray(turn.audio)
            pcm = raw if raw.dtype == np.int16 else float_to_pcm16(raw)
            # Through mu-law like everything else on the line.
            audio = mulaw_decode(mulaw_encode(pcm.reshape(-1)))
        else:
            audio = np.zeros(0, dtype=np.int16)
        prepared.append(PreparedTurn(turn=turn, audio=audio))
    return prepared


# --- the call --------------------------------------------------------------------------


class _Call:
    """One simulated call on an open socket: a tick loop and a receive loop."""

    def __init__(
        self,
        ws: ClientConnection,
        writer: TwilioEventWriter,
        script: CallerScript,
        config: SimulationConfig,
        report: CallReport,
    ) -> None:
        self._ws = ws
        self._writer = writer
        self._script = script
        self._config = config
        self._report = report
        self._playout = TwilioPlayout()
        self._ear = BotEar()
        self._send_lock = asyncio.Lock()
        self._closed = asyncio.Event()  # the socket is gone, or we hung up
        self._hung_up = False
        self._t0 = 0.0
        self._announced = 0  # caller turns announced to on_turn_start
        self._queued_at_start: dict[int, int] = {}  # turn index -> unplayed samples
        self._caller_frames: list[np.ndarray] = []
        self._bot_frames: list[np.ndarray] = []
        line = config.line
        self._echo = None if line.echo_db is None else EchoPath(line.echo_db, line.echo_delay_ms)
        self._noise: NoiseSource | None = None
        if line.noise is not None:
            # SNR against the caller's own speech level, over the whole script.
            voiced = [t.audio for t in script.turns if t.audio.size]
            speech = active_rms(np.concatenate(voiced)) if voiced else 3000.0
            self._noise = NoiseSource(line.noise, speech / 10 ** (line.snr_db / 20), line.seed)

    async def run(self, parameters: Mapping[str, str]) -> None:
        await self._send(self._writer.connected)
        await self._send(lambda: self._writer.start(parameters))
        self._t0 = asyncio.get_running_loop().time()
        async with asyncio.TaskGroup() as group:
            group.create_task(self._receive_loop())
            group.create_task(self._tick_loop())
        self._finish()

    def _now_ms(self) -> float:
        """Call-clock ms since `start` (wall time scaled by the config's speed)."""
        return (asyncio.get_running_loop().time() - self._t0) * 1000 * self._config.speed

    async def _send(self, build: Callable[[], str]) -> bool:
        """Write and send one frame, unless the call is over; True if it went out.

        The frame is built under the lock: once `stop` is written the writer refuses
        anything else, and a mark echo racing the hang-up must simply not be sent.
        """
        async with self._send_lock:
            if self._closed.is_set():
                return False
            try:
                await self._ws.send(build())
            except ConnectionClosed:
                return False
            return True

    async def _tick_loop(self) -> None:
        loop = asyncio.get_running_loop()
        hangup = _samples(self._config.hangup_after_ms)
        limit = _samples(self._config.max_call_s * 1000)
        tick = 0
        while not self._closed.is_set():
            # Deadlines from one reference, so a late wake-up never shifts later frames.
            delay = self._t0 + tick * FRAME_S / self._config.speed - loop.time()
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._closed.wait(), delay)
                if self._closed.is_set():
                    return
            now = tick * FRAME_SAMPLES
            if tick >= 1:
                await self._send_caller_frame(now - FRAME_SAMPLES)
            self._script.advance(now, self._ear, self._playout.buffered_samples)
            self._announce_turn(now)
            for digit in self._script.due_digits(now):
                if await self._send(partial(self._writer.dtmf, digit)):
                    self._report.dtmf_sent += 1
            quiet_since = max(self._script.last_end, self._ear.last_voiced_end or 0)
            if (self._script.finished and now - quiet_since >= hangup) or now >= limit:
                await self._hang_up()
                return
            frame, due = self._playout.tick(FRAME_SAMPLES)
            self._bot_frames.append(frame)
            if self._echo is not None:
                self._echo.feed(frame)
            self._ear.hear(frame, now)
            await self._echo_marks(due)
            tick += 1

    def _announce_turn(self, now: int) -> None:
        index = self._script.speaking(now)
        if index is None or index < self._announced:
            return
        self._announced = index + 1
        self._queued_at_start[index] = self._playout.buffered_samples
        if self._config.on_turn_start is not None:
            self._config.on_turn_start(index, _ms(now))

    async def _send_caller_frame(self, start: int) -> None:
        speech = self._script.mic(start, FRAME_SAMPLES)
        if self._echo is not None or self._noise is not None:
            mixed = speech.astype(np.float32)
            if self._echo is not None:
                # The bot audio heard echo_delay_ms ago leaks into the microphone.
                mixed += self._echo.take(FRAME_SAMPLES)
            if self._noise is not None:
                mixed += self._noise.take(FRAME_SAMPLES)
            speech = np.rint(np.clip(mixed, -32768, 32767)).astype(np.int16)
        payload = mulaw_encode(speech) if speech.any() else MULAW_SILENCE_FRAME
        self._caller_frames.append(mulaw_decode(payload))
        await self._send(partial(self._writer.media, payload, timestamp_ms=round(_ms(start))))

    async def _echo_marks(self, names: Sequence[str]) -> None:
        for name in names:
            if await self._send(partial(self._writer.mark, name)):
                self._report.marks_sent_back += 1

    async def _hang_up(self) -> None:
        async with self._send_lock:
            if not self._closed.is_set():
                self._hung_up = True
                self._closed.set()
                with contextlib.suppress(ConnectionClosed):
                    await self._ws.send(self._writer.stop())
        await self._ws.close()

    async def _receive_loop(self) -> None:
        report = self._report
        try:
            async for message in self._ws:
                if self._hung_up:
                    continue  # Twilio ignores whatever arrives after its `stop`
                if isinstance(message, bytes):
                    report.protocol_violations.append(
                        f"binary_frame: a binary frame of {len(message)} bytes (Twilio 31950)"
                    )
                    continue
                try:
                    event = parse_outbound(message, expected_stream_sid=report.stream_sid)
                except ProtocolError as exc:
                    report.protocol_violations.append(f"{exc.kind}: {exc} (Twilio 31951)")
                    continue
                match event:
                    case OutboundMedia(payload=payload):
                        self._playout.feed_media(payload)
                    case OutboundMark(name=name):
                        self._playout.feed_mark(name)
                    case OutboundClear():
                        report.clears.append(self._now_ms())
                        # Twilio echoes every pending mark at once on a clear.
                        await self._echo_marks(self._playout.clear())
        except ConnectionClosed:
            pass  # an abrupt close: recorded below like a clean one
        if not self._hung_up:
            report.server_closed = True
            report.closed_ms = self._now_ms()
        report.close_code = self._ws.close_code
        self._closed.set()

    def _finish(self) -> None:
        report = self._report
        count = max(len(self._caller_frames), len(self._bot_frames)) * FRAME_SAMPLES
        report.caller_audio = _pad(self._caller_frames, count)
        report.bot_audio = _pad(self._bot_frames, count)
        report.underruns = self._playout.underruns
        report.underrun_ms = self._playout.underrun_ms
        report.bot_utterances = [(_ms(a), _ms(b)) for a, b in self._ear.utterances]
        report.greeting_start_ms = report.bot_utterances[0][0] if report.bot_utterances else None
        report.turns = _turn_results(self._script, report.bot_utterances, self._queued_at_start)


def _pad(frames: Sequence[np.ndarray], count: int) -> np.ndarray:
    out = np.zeros(count, dtype=np.int16)
    if frames:
        joined = np.concatenate(frames)
        out[: len(joined)] = joined
    return out


def _turn_results(
    script: CallerScript,
    utterances: Sequence[tuple[float, float]],
    queued_at_start: Mapping[int, int] | None = None,
) -> list[TurnResult]:
    queued_at_start = queued_at_start or {}
    results = []
    spans = script.spans
    for i, (start, end, label) in enumerate(spans):
        start_ms, end_ms = _ms(start), _ms(end)
        if i in script.unsaid:
            results.append(TurnResult(label, start_ms, end_ms, None, None, said=False))
            continue
        later = [s for k, (s, _, _) in enumerate(spans) if k > i and k not in script.unsaid]
        next_start = _ms(later[0]) if later else float("inf")
        reply = next(
            (u_start for u_start, _ in utterances if start_ms < u_start < next_start), None
        )
        results.append(
            TurnResult(
                text=label,
                speech_start_ms=start_ms,
                speech_end_ms=end_ms,
                bot_reply_start_ms=reply,
                latency_ms=None if reply is None else reply - end_ms,
                bot_queued_ms=_ms(queued_at_start[i]) if i in queued_at_start else None,
            )
        )
    return results


async def simulate_call(config: SimulationConfig) -> CallReport:
    """Place one simulated call and report what the caller heard and when."""
    prepared = await asyncio.to_thread(_prepare, config.turns, config.voice_engine)
    call_sid = config.call_sid or _random_sid("CA")
    account_sid = config.account_sid or _random_sid("AC")
    stream_sid = _random_sid("MZ")
    loop = asyncio.get_running_loop()
    began = loop.time()
    async with httpx.AsyncClient(timeout=_HTTP_TIMEOUT_S) as client:
        twiml = await _post_webhook(client, config, call_sid, account_sid)
    target = parse_twiml(twiml)
    report = CallReport(call_sid=call_sid, stream_sid=stream_sid, twiml=twiml)
    report.warnings.extend(twiml_warnings(target))
    uri = connect_uri(target.url, config.base_url, config.connect_to)
    headers: dict[str, str] = {}
    if config.auth_token:
        # Signed over the URL Twilio was given, even when connecting elsewhere; but only
        # one under the server's own URL: a hostile server must not get our signature
        # on a request for another host.
        check_stream_host(target.url, config.base_url)
        headers["x-twilio-signature"] = sign(config.auth_token, target.url, {})
    try:
        ws = await connect(
            uri,
            additional_headers=headers,
            open_timeout=_WS_OPEN_TIMEOUT_S,
            # Twilio offers no permessage-deflate; the server must not rely on it.
            compression=None,
        )
    except (OSError, TimeoutError, InvalidHandshake, InvalidURI) as exc:
        raise SimulationError(f"could not open the media stream {uri}: {exc}") from exc
    report.setup_ms = (loop.time() - began) * 1000
    script = CallerScript(prepared, config.patience_s * 1000)
    writer = TwilioEventWriter(stream_sid, call_sid, account_sid)
    async with ws:
        await _Call(ws, writer, script, config, report).run(target.parameters)
    if config.record_path is not None:
        stereo = np.stack([report.caller_audio, report.bot_audio], axis=1)
        await asyncio.to_thread(write_wav, config.record_path, stereo, RATE, 2)
    return report


# --- command line ------------------------------------------------------------------------


class _AppendTurn(argparse.Action):
    """Collects --say/--wav/--dtmf/--barge-in into one list, in command-line order."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[object] | None,
        option_string: str | None = None,
    ) -> None:
        turns = [*(getattr(namespace, self.dest, None) or []), (self.const, str(values))]
        setattr(namespace, self.dest, turns)


def _turn_from_arg(kind: str, value: str) -> CallerTurn:
    match kind:
        case "say":
            return CallerTurn(text=value)
        case "wav":
            return CallerTurn(wav=Path(value))
        case "dtmf":
            return CallerTurn(dtmf=value)
        case "barge-in":
            return CallerTurn(text=value, after=After.BOT_SPEAKING, delay_ms=800)
    raise ValueError(f"unknown turn kind {kind!r}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="offhook simulate",
        description="Call an offhook server the way Twilio does and measure what the caller hears.",
    )
    parser.add_argument("--url", default="http://127.0.0.1:8080", help="server base URL")
    parser.add_argument(
        "--auth-token",
        default=os.environ.get("TWILIO_AUTH_TOKEN"),
        help="sign requests like Twilio (default: $TWILIO_AUTH_TOKEN)",
    )
    parser.add_argument(
        "--account-sid",
        default=os.environ.get("TWILIO_ACCOUNT_SID"),
        help="the AccountSid to call as (default: $TWILIO_ACCOUNT_SID, else a random one)",
    )
    turn_help = "in command-line order, one caller turn each"
    parser.set_defaults(turns=[])
    parser.add_argument(
        "--say",
        dest="turns",
        action=_AppendTurn,
        const="say",
        metavar="TEXT",
        help=f"say TEXT once the bot is done ({turn_help})",
    )
    parser.add_argument(
        "--wav",
        dest="turns",
        action=_AppendTurn,
        const="wav",
        metavar="PATH",
        help=f"play a WAV file once the bot is done ({turn_help})",
    )
    parser.add_argument(
        "--dtmf",
        dest="turns",
        action=_AppendTurn,
        const="dtmf",
        metavar="DIGITS",
        help=f"key DIGITS once the bot is done ({turn_help})",
    )
    parser.add_argument(
        "--barge-in",
        dest="turns",
        action=_AppendTurn,
        const="barge-in",
        metavar="TEXT",
        help=f"say TEXT 800 ms into the bot's next utterance ({turn_help})",
    )
    parser.add_argument(
        "--echo-db",
        type=float,
        default=None,
        help="leak the bot's audio into the caller's microphone this many dB down",
    )
    parser.add_argument(
        "--echo-delay-ms",
        type=int,
        default=0,
        help="the echo's round trip (speakerphones: 60-400 ms)",
    )
    parser.add_argument(
        "--noise",
        choices=NOISE_KINDS,
        default=None,
        help="continuous background: white, pink, or babble (several voices)",
    )
    parser.add_argument(
        "--snr-db", type=float, default=15.0, help="caller speech over the background"
    )
    parser.add_argument(
        "--record",
        type=Path,
        default=None,
        metavar="OUT.wav",
        help="stereo WAV: caller left, bot as heard right",
    )
    parser.add_argument("--voice", choices=("espeak", "piper"), default="espeak")
    parser.add_argument(
        "--connect-to",
        default=None,
        metavar="HOST[:PORT]",
        help="open the media stream here instead of the TwiML's host",
    )
    parser.add_argument(
        "--answering-machine",
        default=None,
        metavar="GREETING",
        help="play an answering machine: GREETING, then a beep, then silence (before any turns)",
    )
    parser.add_argument("--hangup-after-ms", type=int, default=4000)
    parser.add_argument("--max-call-s", type=float, default=120.0)
    return parser


def _fmt_ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def print_report(report: CallReport) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False)
    table = Table(title=f"call {report.call_sid}")
    table.add_column("#", justify="right")
    table.add_column("caller")
    table.add_column("spoke (ms)", justify="right")
    table.add_column("bot replied (ms)", justify="right")
    table.add_column("latency (ms)", justify="right")
    for number, turn in enumerate(report.turns, start=1):
        table.add_row(
            str(number),
            turn.text,
            f"{turn.speech_start_ms:.0f}-{turn.speech_end_ms:.0f}",
            _fmt_ms(turn.bot_reply_start_ms),
            _fmt_ms(turn.latency_ms),
        )
    console.print(table)
    console.print(
        f"setup (webhook + socket): {report.setup_ms:.0f} ms; greeting heard at "
        f"{_fmt_ms(report.greeting_start_ms)} ms after start; "
        f"{len(report.bot_utterances)} bot utterances"
    )
    console.print(
        f"clears: {len(report.clears)}  marks echoed: {report.marks_sent_back}  "
        f"underruns: {report.underruns} ({report.underrun_ms:.0f} ms)  "
        f"server closed: {report.server_closed}"
    )
    for warning in report.warnings:
        console.print(f"[yellow]warning:[/] {warning}", markup=True)
    for violation in report.protocol_violations:
        console.print(f"[red]protocol violation:[/] {violation}", markup=True)


def main(argv: list[str] | None = None) -> int:
    """`offhook simulate`: 0 success, 1 protocol violations or no bot audio, 2 setup failed."""
    args = build_parser().parse_args(argv)
    try:
        config = SimulationConfig(
            base_url=args.url.rstrip("/"),
            auth_token=args.auth_token or None,
            account_sid=args.account_sid or None,
            turns=[
                *(answering_machine(args.answering_machine) if args.answering_machine else []),
                *(_turn_from_arg(kind, value) for kind, value in args.turns),
            ],
            connect_to=args.connect_to,
            hangup_after_ms=args.hangup_after_ms,
            max_call_s=args.max_call_s,
            line=LineConditions(
                noise=args.noise,
                snr_db=args.snr_db,
                echo_db=args.echo_db,
                echo_delay_ms=args.echo_delay_ms,
            ),
            voice_engine=args.voice,
            record_path=args.record,
        )
        report = asyncio.run(simulate_call(config))
    except (SimulationError, CallerVoiceError, ValueError, OSError) as exc:
        print(f"offhook simulate: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    print_report(report)
    if report.protocol_violations:
        return 1
    if not report.bot_utterances:
        print("offhook simulate: the caller heard no bot audio", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
