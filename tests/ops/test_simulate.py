"""simulate_call end to end, against a tiny fake bot server speaking Twilio's protocol.

The fake runs in uvicorn on its own thread and event loop, so its work never delays the
simulator's 20 ms clock. It checks both Twilio signatures, parses what the simulator
sends with the real server-side parser (telephony.protocol.parse_event), and records
what it saw for the test to assert on.
"""

import asyncio
import base64
import json
import socket
import threading
import time
import wave
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl

import numpy as np
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect
from twilio.request_validator import RequestValidator

from media.codec import mulaw_decode, mulaw_encode
from ops.line import LineConditions, active_rms
from ops.simulate import (
    CallerTurn,
    CallReport,
    SimulationConfig,
    SimulationError,
    main,
    simulate_call,
)
from telephony.protocol import Dtmf, Mark, Media, Start, Stop, parse_event

TOKEN = "test-auth-token-0123456789abcdef"
SECRET = "per-call-secret"
GREETING_CHUNKS = 5  # x 200 ms
REPLY_CHUNKS = 10  # x 200 ms
CHUNK_SAMPLES = 1600


def _tone(samples: int, freq: float = 440.0, amplitude: float = 0.3) -> np.ndarray:
    return (amplitude * np.sin(2 * np.pi * freq * np.arange(samples) / 8000)).astype(np.float32)


def _rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(x.astype(np.float64) ** 2)))


@dataclass
class Scenario:
    """How the fake bot behaves, and what it recorded."""

    extra_field: bool = False  # send outbound media with a "track" field, then hang up
    reply: bool = True  # answer the caller's speech, then clear part-way
    stutter_ms: int = 0  # send the greeting in two halves, this late: a hole mid-greeting
    stream_token: str = TOKEN  # the token the handshake signature must match
    port: int = 0
    webhook_form: dict[str, str] = field(default_factory=dict)
    start: Start | None = None
    marks_sent: dict[str, float] = field(default_factory=dict)
    marks_echoed: list[tuple[float, str]] = field(default_factory=list)
    clear_sent_at: float | None = None
    dtmf: list[str] = field(default_factory=list)
    media_frames: int = 0
    timestamps_ok: bool = True
    got_stop: bool = False
    done: threading.Event = field(default_factory=threading.Event)

    @property
    def stream_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/twilio/stream"


class FakeBot:
    """One call's server side: greet on the first media, answer speech, clear."""

    def __init__(self, ws: WebSocket, scenario: Scenario, stream_sid: str) -> None:
        self.ws = ws
        self.scenario = scenario
        self.stream_sid = stream_sid
        self.greeted = False
        self.caller_spoke = False
        self.quiet_frames = 0
        self.replied = False

    async def send(self, message: dict[str, object]) -> None:
        await self.ws.send_text(json.dumps(message))

    async def play(self, audio: np.ndarray, chunk: int, prefix: str) -> None:
        for i in range(0, len(audio), chunk):
            payload = base64.b64encode(mulaw_encode(audio[i : i + chunk])).decode()
            await self.send(
                {"event": "media", "streamSid": self.stream_sid, "media": {"payload": payload}}
            )
            name = f"{prefix}-{i // chunk}"
            self.scenario.marks_sent[name] = time.monotonic()
            await self.send({"event": "mark", "streamSid": self.stream_sid, "mark": {"name": name}})

    async def on_media(self, media: Media) -> None:
        scenario = self.scenario
        scenario.media_frames += 1
        if media.timestamp_ms != (media.chunk - 1) * 20 or len(media.payload) != 160:
            scenario.timestamps_ok = False
        if not self.greeted:
            self.greeted = True
            if scenario.extra_field:
                payload = base64.b64encode(mulaw_encode(_tone(1600))).decode()
                await self.send(
                    {
                        "event": "media",
                        "streamSid": self.stream_sid,
                        "media": {"track": "outbound", "payload": payload},
                    }
                )
                await self.ws.close()
                return
            greeting = _tone(GREETING_CHUNKS * CHUNK_SAMPLES)
            if scenario.stutter_ms:
                half = len(greeting) // 2
                await self.play(greeting[:half], half, "greet-a")
                # A slow TTS: the second half arrives after the first has finished playing.
                await asyncio.sleep((500 + scenario.stutter_ms) / 1000)
                await self.play(greeting[half:], half, "greet-b")
                return
            await self.play(greeting, CHUNK_SAMPLES, "greet")
            return
        if not scenario.reply or self.replied:
            return
        voiced = _rms(mulaw_decode(media.payload)) > 300
        if voiced:
            self.caller_spoke, self.quiet_frames = True, 0
        elif self.caller_spoke:
            self.quiet_frames += 1
            if self.quiet_frames == 10:  # 200 ms of silence ends the caller's turn
                self.replied = True
                await self.play(_tone(REPLY_CHUNKS * CHUNK_SAMPLES, 660), CHUNK_SAMPLES, "reply")

    async def on_mark(self, mark: Mark) -> None:
        self.scenario.marks_echoed.append((time.monotonic(), mark.name))
        if mark.name == "reply-1":  # 400 ms of the reply played: the bot is interrupted
            self.scenario.clear_sent_at = time.monotonic()
            await self.send({"event": "clear", "streamSid": self.stream_sid})


def build_app(scenario: Scenario) -> Starlette:
    async def voice(request: Request) -> Response:
        form = dict(parse_qsl((await request.body()).decode()))
        url = f"http://127.0.0.1:{scenario.port}/twilio/voice"
        signature = request.headers.get("x-twilio-signature", "")
        if not RequestValidator(TOKEN).validate(url, form, signature):
            return Response("bad signature", status_code=403)
        scenario.webhook_form = form
        twiml = (
            '<?xml version="1.0" encoding="UTF-8"?><Response><Connect>'
            f'<Stream url="{scenario.stream_url}"><Parameter name="secret" value="{SECRET}"/>'
            "</Stream></Connect></Response>"
        )
        return Response(twiml, media_type="text/xml")

    async def stream(ws: WebSocket) -> None:
        signature = ws.headers.get("x-twilio-signature", "")
        if not RequestValidator(scenario.stream_token).validate(scenario.stream_url, {}, signature):
            await ws.close(code=1008)  # before accept: the handshake gets HTTP 403
            return
        await ws.accept()
        try:
            parse_event(await ws.receive_text())  # connected
            start = parse_event(await ws.receive_text())
            assert isinstance(start, Start)
            scenario.start = start
            bot = FakeBot(ws, scenario, start.stream_sid)
            while True:
                event = parse_event(await ws.receive_text())
                match event:
                    case Media():
                        await bot.on_media(event)
                    case Mark():
                        await bot.on_mark(event)
                    case Dtmf():
                        scenario.dtmf.append(event.digit)
                    case Stop():
                        scenario.got_stop = True
                        break
        except (WebSocketDisconnect, RuntimeError):
            pass  # closed by either side
        finally:
            scenario.done.set()

    return Starlette(
        routes=[
            Route("/twilio/voice", voice, methods=["POST"]),
            WebSocketRoute("/twilio/stream", stream),
        ]
    )


@pytest.fixture
def fake_twilio_server() -> Iterator[Callable[[Scenario], str]]:
    """Start fake bot servers on free ports; shut every one down after the test."""
    running: list[tuple[uvicorn.Server, threading.Thread, socket.socket]] = []

    def start(scenario: Scenario) -> str:
        # Bound and listening before uvicorn starts: connections queue in the backlog,
        # so the test needs no wait for the server to come up.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        scenario.port = sock.getsockname()[1]
        config = uvicorn.Config(
            build_app(scenario), ws="websockets-sansio", lifespan="off", log_level="warning"
        )
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        running.append((server, thread, sock))
        return f"http://127.0.0.1:{scenario.port}"

    yield start
    for server, thread, sock in running:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


async def _wait_done(scenario: Scenario) -> None:
    assert await asyncio.to_thread(scenario.done.wait, 5)


async def test_a_call_with_greeting_reply_clear_and_dtmf(
    fake_twilio_server: Callable[[Scenario], str],
) -> None:
    scenario = Scenario()
    base_url = fake_twilio_server(scenario)
    speech = (_tone(4000, freq=300, amplitude=0.4) * 32767).astype(np.int16)  # 500 ms
    config = SimulationConfig(
        base_url=base_url,
        auth_token=TOKEN,
        turns=[CallerTurn(audio=speech), CallerTurn(dtmf="12")],
        hangup_after_ms=1000,
        max_call_s=20,
    )

    report = await simulate_call(config)
    await _wait_done(scenario)

    assert report.protocol_violations == []
    assert report.warnings == ["Twilio requires a wss:// stream URL, got ws://"]
    # What the server saw: Twilio's webhook, parameters, frames and a stop.
    assert scenario.webhook_form["CallSid"] == report.call_sid
    assert scenario.webhook_form["Direction"] == "inbound"
    assert scenario.start is not None
    assert scenario.start.custom_parameters == {"secret": SECRET}
    assert scenario.start.stream_sid == report.stream_sid
    assert scenario.timestamps_ok
    assert scenario.media_frames * 160 == len(report.caller_audio)
    assert scenario.got_stop and not report.server_closed

    # The greeting: heard soon after the first media, exactly 1 s long.
    assert report.greeting_start_ms is not None and report.greeting_start_ms < 300
    greet_start, greet_end = report.bot_utterances[0]
    assert greet_end - greet_start == pytest.approx(1000, abs=20)
    # Its marks come back in order, each only once its 200 ms of audio has played.
    echoed = [name for _, name in scenario.marks_echoed]
    assert echoed[:GREETING_CHUNKS] == [f"greet-{i}" for i in range(GREETING_CHUNKS)]
    last_greet = dict((name, at) for at, name in scenario.marks_echoed)["greet-4"]
    assert 0.99 <= last_greet - scenario.marks_sent["greet-4"] <= 1.15

    # The caller spoke politely after the greeting; the bot answered 200 ms later.
    turn = report.turns[0]
    assert turn.speech_end_ms - turn.speech_start_ms == pytest.approx(500, abs=1)
    assert turn.speech_start_ms >= greet_end + 700
    assert turn.latency_ms is not None and 180 <= turn.latency_ms <= 400
    # The reply was cleared after 400 ms: heard that long, every pending mark echoed.
    assert len(report.clears) == 1
    reply_start, reply_end = report.bot_utterances[1]
    assert reply_start == turn.bot_reply_start_ms
    assert 400 <= reply_end - reply_start <= 460
    assert sorted(n for n in echoed if n.startswith("reply")) == sorted(
        f"reply-{i}" for i in range(REPLY_CHUNKS)
    )
    assert scenario.clear_sent_at is not None
    after_clear = [at for at, name in scenario.marks_echoed if name in {"reply-5", "reply-9"}]
    assert all(at - scenario.clear_sent_at < 0.1 for at in after_clear)
    assert report.marks_sent_back == GREETING_CHUNKS + REPLY_CHUNKS

    # Then the keys, once the bot had gone quiet.
    assert scenario.dtmf == ["1", "2"]
    assert report.dtmf_sent == 2
    assert report.turns[1].text == "DTMF 12"
    assert report.turns[1].speech_start_ms >= reply_end + 700
    assert report.underruns == 0


async def test_an_extra_field_in_outbound_media_is_a_protocol_violation(
    fake_twilio_server: Callable[[Scenario], str],
) -> None:
    scenario = Scenario(extra_field=True)
    config = SimulationConfig(
        base_url=fake_twilio_server(scenario), auth_token=TOKEN, max_call_s=10
    )

    report = await simulate_call(config)

    assert len(report.protocol_violations) == 1
    assert "unexpected_field" in report.protocol_violations[0]
    assert "track" in report.protocol_violations[0]
    assert report.server_closed
    assert report.bot_utterances == []


async def test_echo_leaks_the_bot_into_the_microphone_and_the_recording_is_stereo(
    fake_twilio_server: Callable[[Scenario], str], tmp_path: Path
) -> None:
    scenario = Scenario(reply=False)
    record = tmp_path / "call.wav"
    config = SimulationConfig(
        base_url=fake_twilio_server(scenario),
        auth_token=TOKEN,
        line=LineConditions(echo_db=20),
        hangup_after_ms=200,
        record_path=record,
        max_call_s=10,
    )

    report = await simulate_call(config)

    start, end = report.bot_utterances[0]
    bot = report.bot_audio_between(start, end)
    # The echo of the frame heard during [t, t+20) is in the caller's chunk for it.
    leaked = report.caller_audio[round(start * 8) : round(end * 8)]
    assert _rms(leaked) / _rms(bot) == pytest.approx(0.1, rel=0.1)
    with wave.open(str(record), "rb") as f:
        assert (f.getnchannels(), f.getframerate()) == (2, 8000)
        assert f.getnframes() == len(report.caller_audio) == len(report.bot_audio)


async def test_a_delayed_echo_comes_back_late_by_its_round_trip(
    fake_twilio_server: Callable[[Scenario], str],
) -> None:
    config = SimulationConfig(
        base_url=fake_twilio_server(Scenario(reply=False)),
        auth_token=TOKEN,
        line=LineConditions(echo_db=10, echo_delay_ms=150),
        hangup_after_ms=200,
        max_call_s=10,
    )

    report = await simulate_call(config)

    bot = report.bot_audio.astype(np.float64)
    mic = report.caller_audio.astype(np.float64)
    lags = np.arange(0, 400 * 8)
    scores = [float(np.dot(mic[lag:], bot[: bot.size - lag])) for lag in lags]
    assert int(lags[int(np.argmax(scores))]) == 150 * 8


async def test_background_noise_plays_all_call_long_at_its_snr(
    fake_twilio_server: Callable[[Scenario], str],
) -> None:
    config = SimulationConfig(
        base_url=fake_twilio_server(Scenario(reply=False)),
        auth_token=TOKEN,
        turns=[CallerTurn(text="I would like to book a table for two.", after="start")],
        line=LineConditions(noise="pink", snr_db=10),
        hangup_after_ms=1000,
        max_call_s=10,
    )

    report = await simulate_call(config)

    start, end = report.turns[0].speech_start_ms, report.turns[0].speech_end_ms
    mic = report.caller_audio.astype(np.float64)
    noise_only = mic[round(end * 8) + 800 :]
    assert noise_only.size > 4000 and _rms(noise_only) > 50, "the background stopped"
    voice = active_rms(mic[round(start * 8) : round(end * 8)])
    snr = 20 * np.log10(voice / _rms(noise_only))
    assert snr == pytest.approx(10, abs=2.0)  # speech plus noise measured over noise


async def test_barge_in_timing_and_a_hole_in_the_greeting(
    fake_twilio_server: Callable[[Scenario], str],
) -> None:
    scenario = Scenario(reply=False, stutter_ms=100)
    config = SimulationConfig(
        base_url=fake_twilio_server(scenario),
        auth_token=TOKEN,
        turns=[CallerTurn(text="wait a moment", after="bot_speaking", delay_ms=300)],
        hangup_after_ms=200,
        max_call_s=10,
    )

    report = await simulate_call(config)

    assert report.protocol_violations == []
    # The 100 ms hole is choppiness, not a new utterance.
    assert len(report.bot_utterances) == 1
    assert 60 <= report.underrun_ms <= 160
    assert report.underruns >= 3
    turn = report.turns[0]
    assert report.greeting_start_ms is not None
    assert turn.text == "wait a moment"
    assert turn.speech_start_ms == report.greeting_start_ms + 300
    assert turn.speech_start_ms < report.bot_utterances[0][1]  # really talked over the bot
    assert turn.bot_reply_start_ms is None and turn.latency_ms is None


async def test_a_wrong_auth_token_is_refused_at_the_webhook(
    fake_twilio_server: Callable[[Scenario], str],
) -> None:
    config = SimulationConfig(
        base_url=fake_twilio_server(Scenario()), auth_token="not-the-token", max_call_s=5
    )

    with pytest.raises(SimulationError, match="HTTP 403"):
        await simulate_call(config)


async def test_a_refused_stream_handshake_is_a_simulation_error(
    fake_twilio_server: Callable[[Scenario], str],
) -> None:
    scenario = Scenario(stream_token="another-token")
    config = SimulationConfig(base_url=fake_twilio_server(scenario), auth_token=TOKEN, max_call_s=5)

    with pytest.raises(SimulationError, match="media stream"):
        await simulate_call(config)


def test_cli_reports_a_call_and_exits_0(
    fake_twilio_server: Callable[[Scenario], str], capsys: pytest.CaptureFixture[str]
) -> None:
    base_url = fake_twilio_server(Scenario(reply=False))

    code = main(["--url", base_url, "--auth-token", TOKEN, "--hangup-after-ms", "200"])

    assert code == 0
    assert "marks echoed: 5" in capsys.readouterr().out


def test_cli_line_conditions_reach_the_call(
    fake_twilio_server: Callable[[Scenario], str], capsys: pytest.CaptureFixture[str]
) -> None:
    base_url = fake_twilio_server(Scenario(reply=False))
    line = ["--noise", "babble", "--snr-db", "10", "--echo-db", "10", "--echo-delay-ms", "150"]

    code = main(["--url", base_url, "--auth-token", TOKEN, "--hangup-after-ms", "200", *line])

    assert code == 0


def test_cli_rejects_an_unknown_noise() -> None:
    with pytest.raises(SystemExit):
        main(["--noise", "traffic"])


def test_cli_exits_1_on_a_protocol_violation(
    fake_twilio_server: Callable[[Scenario], str], capsys: pytest.CaptureFixture[str]
) -> None:
    base_url = fake_twilio_server(Scenario(extra_field=True))

    assert main(["--url", base_url, "--auth-token", TOKEN]) == 1
    assert "protocol violation" in capsys.readouterr().out


def test_cli_exits_2_on_a_missing_wav(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--wav", "/nonexistent/caller.wav"]) == 2
    assert "could not read /nonexistent/caller.wav" in capsys.readouterr().err


def test_cli_exits_2_without_a_traceback_when_nothing_listens(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with socket.socket() as sock:  # a port that was free a moment ago
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]

    assert main(["--url", f"http://127.0.0.1:{port}", "--say", "hello"]) == 2
    err = capsys.readouterr().err
    assert "could not reach the webhook" in err
    assert "Traceback" not in err


def test_bot_spans_join_a_replys_sentence_pauses_but_not_two_replies() -> None:
    report = CallReport(
        call_sid="CA1",
        stream_sid="MZ1",
        twiml="",
        bot_utterances=[(80, 2580), (3040, 6660), (9640, 11040)],
    )

    assert report.bot_spans(1000) == [(80, 6660), (9640, 11040)]
    assert report.bot_spans(300) == report.bot_utterances
    assert CallReport(call_sid="CA1", stream_sid="MZ1", twiml="").bot_spans(1000) == []


def test_the_longest_silence_counts_only_what_the_caller_heard_nothing_in() -> None:
    # 1 s of the bot at full level, 200 ms of it 30 dB down (quiet, not silent), 300 ms of
    # nothing, then the bot again; 20 ms frames on the report's 8 kHz clock.
    t = np.arange(8000) / 8000
    loud = (8000 * np.sin(2 * np.pi * 440 * t)).astype(np.int16)
    quiet = (loud[:1600] / 32).astype(np.int16)
    audio = np.concatenate([loud, quiet, np.zeros(2400, np.int16), loud])
    report = CallReport(call_sid="CA1", stream_sid="MZ1", twiml="", bot_audio=audio)

    assert report.longest_silence_ms(0, 3500) == 300
    assert report.longest_silence_ms(0, 1300) == 100  # only the part in the window
    assert report.longest_silence_ms(0, 1000) == 0


@pytest.mark.parametrize(
    "stream",
    [
        "wss://evil.example.com/twilio/media",
        "wss://bot.example.com.evil.example.com/twilio/media",
        "wss://bot.example.com/elsewhere/media",
        "wss://bot.example.com:8443/calls/twilio/media",
    ],
)
def test_the_simulator_signs_no_stream_url_outside_the_servers_own(stream: str) -> None:
    from ops.simulate import SimulationError, check_stream_host

    with pytest.raises(SimulationError, match="not signing"):
        check_stream_host(stream, "https://bot.example.com/calls")
    check_stream_host("wss://bot.example.com/calls/twilio/media", "https://bot.example.com/calls")
    check_stream_host(
        "wss://bot.example.com/calls/twilio/media", "https://bot.example.com:443/calls"
    )
    check_stream_host("ws://127.0.0.1:8080/twilio/media", "http://127.0.0.1:8080")
