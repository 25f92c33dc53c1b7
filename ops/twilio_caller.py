"""The simulated Twilio caller: a WebSocket client that plays Twilio's part of a call,
in real time, against a running server (as Starlette's TestClient plays a browser's).

`simulate_call(SimulationConfig(...))` POSTs the voice webhook (signed when given a
token), opens the TwiML's `<Connect><Stream>`, sends `connected`, `start` and one 20 ms
mu-law `media` frame every 20 ms (the caller's script, with the line's noise and echo
mixed in), plays the bot's audio through a model of Twilio's playout buffer (echoing
marks as their audio plays, and at once on `clear`), hangs up with `stop`, and returns
a CallReport.

Clock: every time in the report is milliseconds since the `start` event, which is
sample 0 of both recorded tracks. Caller chunk n (from 1) covers [(n-1)*20, n*20) ms
and is sent when that interval has passed; the bot audio heard during [t, t+20) is
whatever Twilio's buffer held at t. Latency is therefore measured at the caller's ear,
mouth to mouth: the end of the caller's last speech sample to the first bot frame heard.

Errors: SimulationError (setup failed: webhook refused, TwiML without a stream, socket
refused). Anything the server does wrong *during* the call is reported, not raised.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Final

import httpx
import numpy as np
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from media.codec import mulaw_decode, mulaw_encode
from media.wav import write_wav
from ops.caller_script import (
    RATE,
    BotEar,
    CallerScript,
    CallerTurn,
    ms_to_samples,
    prepare_turns,
    samples_to_ms,
)
from ops.line import EchoPath, LineConditions, NoiseSource, active_rms
from ops.simulate_report import CallReport, turn_results
from ops.twilio_playout import TwilioPlayout
from ops.twilio_webhook import (
    TWILIO_USER_AGENT,
    WEBHOOK_PATH,
    SimulationError,
    StreamTarget,
    check_stream_host,
    connect_uri,
    parse_twiml,
    twiml_warnings,
    voice_webhook_params,
)
from telephony.errors import ProtocolError
from telephony.protocol import (
    OutboundClear,
    OutboundMark,
    OutboundMedia,
    TwilioEventWriter,
    parse_outbound,
)
from telephony.security import public_url, sign

__all__ = [
    "FRAME_S",
    "FRAME_SAMPLES",
    "MULAW_SILENCE_FRAME",
    "SimulationConfig",
    "simulate_call",
]

FRAME_SAMPLES: Final = 160  # 20 ms at 8 kHz: Twilio's observed frame
FRAME_S: Final = FRAME_SAMPLES / RATE
MULAW_SILENCE_FRAME: Final = b"\xff" * FRAME_SAMPLES
_HTTP_TIMEOUT_S: Final = 15.0
_WS_OPEN_TIMEOUT_S: Final = 10.0
# Redirects followed in one call, as a bound against a server that loops.
_MAX_REDIRECTS: Final = 5


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


def _random_sid(prefix: str) -> str:
    return prefix + secrets.token_hex(16)


async def _post_webhook(
    client: httpx.AsyncClient,
    config: SimulationConfig,
    call_sid: str,
    account_sid: str,
    *,
    url: str | None = None,
    status: str | None = None,
) -> str:
    """POST the call's form to the voice webhook, or to the `url` a <Redirect> names."""
    try:
        url = url or config.voice_url or public_url(config.base_url, WEBHOOK_PATH)
    except ValueError as exc:
        raise SimulationError(str(exc)) from exc
    params = voice_webhook_params(
        call_sid, account_sid, config.from_number, config.to_number, direction=config.direction
    )
    if status is not None:
        params["CallStatus"] = status
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


class _Call:
    """One simulated call on an open socket: a tick loop and a receive loop."""

    def __init__(
        self,
        ws: ClientConnection,
        writer: TwilioEventWriter,
        script: CallerScript,
        config: SimulationConfig,
        report: CallReport,
        redirect: Callable[[], Awaitable[_Leg | None]] | None = None,
    ) -> None:
        self._ws = ws
        self._writer = writer
        # Twilio's next leg once the server closes the stream: None when the TwiML
        # after <Connect> ends the call.
        self._redirect = redirect
        self._switching = False
        self._stream_began_ms = 0.0  # call-clock ms where the current stream started
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
            if self._closed.is_set() or self._switching:
                return False  # between streams the caller's audio goes nowhere
            try:
                await self._ws.send(build())
            except ConnectionClosed:
                return False
            return True

    async def _tick_loop(self) -> None:
        loop = asyncio.get_running_loop()
        hangup = ms_to_samples(self._config.hangup_after_ms)
        limit = ms_to_samples(self._config.max_call_s * 1000)
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
            self._config.on_turn_start(index, samples_to_ms(now))

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
        await self._send(
            # Twilio stamps media from the start of its stream: a redirected call's new
            # stream counts from 0 again.
            partial(
                self._writer.media,
                payload,
                timestamp_ms=max(0, round(samples_to_ms(start) - self._stream_began_ms)),
            )
        )

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
        while True:
            await self._receive_stream()
            if self._hung_up or self._redirect is None:
                break
            if not await self._next_stream():
                break
        report = self._report
        if not self._hung_up:
            report.server_closed = True
            report.closed_ms = self._now_ms()
        report.close_code = self._ws.close_code
        self._closed.set()

    async def _next_stream(self) -> bool:
        """Twilio runs the TwiML after <Connect>: follow its <Redirect> to a new stream."""
        assert self._redirect is not None
        closed = self._now_ms()
        self._switching = True
        # The closed stream's buffered audio is gone with it; its marks are never echoed.
        self._playout.clear()
        try:
            leg = await self._redirect()
        except SimulationError as exc:
            self._report.redirects.append((closed, None))
            self._report.warnings.append(f"redirect failed: {exc}")
            leg = None
        if leg is None:
            self._switching = False
            return False
        ws, writer, parameters = leg
        async with self._send_lock:
            self._ws, self._writer = ws, writer
            self._report.stream_sid = writer.stream_sid
            # Frames are 20 ms apart on the call clock: the next one is this stream's 0.
            self._stream_began_ms = -(-self._now_ms() // 20) * 20
            self._switching = False
        await self._send(self._writer.connected)
        await self._send(lambda: self._writer.start(parameters))
        self._report.redirects.append((closed, self._now_ms()))
        return True

    async def _receive_stream(self) -> None:
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
            pass  # an abrupt close: recorded like a clean one

    async def close(self) -> None:
        await self._ws.close()

    def _finish(self) -> None:
        report = self._report
        count = max(len(self._caller_frames), len(self._bot_frames)) * FRAME_SAMPLES
        report.caller_audio = _pad(self._caller_frames, count)
        report.bot_audio = _pad(self._bot_frames, count)
        report.underruns = self._playout.underruns
        report.underrun_ms = self._playout.underrun_ms
        report.bot_utterances = [
            (samples_to_ms(a), samples_to_ms(b)) for a, b in self._ear.utterances
        ]
        report.greeting_start_ms = report.bot_utterances[0][0] if report.bot_utterances else None
        report.turns = turn_results(self._script, report.bot_utterances, self._queued_at_start)


def _pad(frames: Sequence[np.ndarray], count: int) -> np.ndarray:
    out = np.zeros(count, dtype=np.int16)
    if frames:
        joined = np.concatenate(frames)
        out[: len(joined)] = joined
    return out


_Leg = tuple[ClientConnection, TwilioEventWriter, dict[str, str]]


async def _open_stream(target: StreamTarget, config: SimulationConfig) -> ClientConnection:
    uri = connect_uri(target.url, config.base_url, config.connect_to)
    headers: dict[str, str] = {}
    if config.auth_token:
        # Signed over the URL Twilio was given, even when connecting elsewhere; but only
        # one under the server's own URL: a hostile server must not get our signature
        # on a request for another host.
        check_stream_host(target.url, config.base_url)
        headers["x-twilio-signature"] = sign(config.auth_token, target.url, {})
    try:
        return await connect(
            uri,
            additional_headers=headers,
            open_timeout=_WS_OPEN_TIMEOUT_S,
            # Twilio offers no permessage-deflate; the server must not rely on it.
            compression=None,
        )
    except (OSError, TimeoutError, InvalidHandshake, InvalidURI) as exc:
        raise SimulationError(f"could not open the media stream {uri}: {exc}") from exc


async def simulate_call(config: SimulationConfig) -> CallReport:
    """Place one simulated call and report what the caller heard and when.

    As Twilio does, a stream the server closes is followed by the TwiML after its
    <Connect>: a <Redirect> fetches the next TwiML (signed, CallStatus in-progress) and
    its stream carries the same call on; anything else ends the call."""
    prepared = await asyncio.to_thread(prepare_turns, config.turns, config.voice_engine)
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
    ws = await _open_stream(target, config)
    report.setup_ms = (loop.time() - began) * 1000
    current = [target]

    async def redirect() -> _Leg | None:
        url = current[0].redirect
        if url is None or len(report.redirects) >= _MAX_REDIRECTS:
            return None
        async with httpx.AsyncClient(timeout=_HTTP_TIMEOUT_S) as client:
            answer = await _post_webhook(
                client, config, call_sid, account_sid, url=url, status="in-progress"
            )
        current[0] = parse_twiml(answer)
        leg_ws = await _open_stream(current[0], config)
        leg_writer = TwilioEventWriter(_random_sid("MZ"), call_sid, account_sid)
        return leg_ws, leg_writer, current[0].parameters

    script = CallerScript(prepared, config.patience_s * 1000)
    writer = TwilioEventWriter(stream_sid, call_sid, account_sid)
    call = _Call(ws, writer, script, config, report, redirect)
    try:
        await call.run(target.parameters)
    finally:
        await call.close()
    if config.record_path is not None:
        stereo = np.stack([report.caller_audio, report.bot_audio], axis=1)
        await asyncio.to_thread(write_wav, config.record_path, stereo, RATE, 2)
    return report
