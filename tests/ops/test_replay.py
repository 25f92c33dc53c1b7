"""Replaying a recorded call against a fake bot, and judging the new bot against it.

The fake bot speaks Twilio's protocol from a uvicorn thread (its own event loop, so it
never delays the simulator's 20 ms clock). It keeps time by counting the 20 ms media
frames it receives, not with sleeps: it greets on the first frame, answers each caller
utterance (voiced audio, then 200 ms of silence) `delay_ms` later with a tone sent as
media + marks, and clears its audio once the caller has talked over it for 300 ms.
"""

import base64
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
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

from callevents import Clear, SpeechStart, SpeechStop
from media.codec import mulaw_decode, mulaw_encode
from ops.calls import main
from ops.replay import ReplayResult, TurnDiff, caller_segments, replay, speed_warning, verdict
from ops.simulate import CallReport, SimulationConfig
from recordings.record import CallRecord
from tests.ops.records import THREE_TURNS, CallSpec, bot_speech, build_call, line

pytestmark = pytest.mark.timeout(60)

TOKEN = "replay-test-auth-token"
CALL_SID = "CAreplayfixture0001"
FRAME_MS = 20
CHUNK_SAMPLES = 1600  # 200 ms of audio per media message, each followed by a mark
VOICED_RMS = 300.0
QUIET_FRAMES = 10  # 200 ms of silence ends a caller utterance
BARGE_IN_FRAMES = 15  # 300 ms of caller speech over the bot stops it
# Long enough for the recorded interruption (1.2 s into the second reply) to land on it.
REPLY_MS = (1000, 3000, 1000)
GREETING_MS = 1200


@dataclass
class FakeBot:
    """How the fake answers; `port` is set when it starts."""

    delay_ms: int
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class FakeCall:
    """One call's server side, on the frame clock."""

    def __init__(self, ws: WebSocket, bot: FakeBot, stream_sid: str) -> None:
        self.ws = ws
        self.bot = bot
        self.stream_sid = stream_sid
        self.frame = 0
        self.in_utterance = False
        self.quiet = 0
        self.over_bot = 0
        self.reply_due: int | None = None
        self.playing_until = 0
        self.replies = 0

    async def play(self, ms: int, name: str) -> None:
        audio = bot_speech(ms)
        for i in range(0, len(audio), CHUNK_SAMPLES):
            payload = base64.b64encode(mulaw_encode(audio[i : i + CHUNK_SAMPLES])).decode()
            media = {"event": "media", "streamSid": self.stream_sid, "media": {"payload": payload}}
            mark = {"event": "mark", "streamSid": self.stream_sid, "mark": {"name": f"{name}-{i}"}}
            await self.ws.send_text(json.dumps(media))
            await self.ws.send_text(json.dumps(mark))
        self.playing_until = self.frame + ms // FRAME_MS

    async def on_media(self, payload: bytes) -> None:
        self.frame += 1
        if self.frame == 1:
            await self.play(GREETING_MS, "greeting")
        pcm = mulaw_decode(payload).astype(np.float64)
        voiced = float(np.sqrt(np.mean(pcm**2))) > VOICED_RMS
        if voiced:
            self.in_utterance, self.quiet = True, 0
            if self.frame < self.playing_until:
                self.over_bot += 1
                if self.over_bot == BARGE_IN_FRAMES:
                    await self.ws.send_text(
                        json.dumps({"event": "clear", "streamSid": self.stream_sid})
                    )
                    self.playing_until = self.frame
        else:
            self.over_bot = 0
            if self.in_utterance:
                self.quiet += 1
                if self.quiet == QUIET_FRAMES:
                    self.in_utterance = False
                    self.reply_due = self.frame + self.bot.delay_ms // FRAME_MS
        if self.reply_due is not None and self.frame >= self.reply_due:
            self.reply_due = None
            await self.play(REPLY_MS[self.replies % len(REPLY_MS)], f"reply{self.replies}")
            self.replies += 1


def build_app(bot: FakeBot) -> Starlette:
    async def voice(request: Request) -> Response:
        form = dict(parse_qsl((await request.body()).decode()))
        signature = request.headers.get("x-twilio-signature", "")
        if not RequestValidator(TOKEN).validate(f"{bot.url}/twilio/voice", form, signature):
            return Response("bad signature", status_code=403)
        twiml = (
            '<?xml version="1.0" encoding="UTF-8"?><Response><Connect>'
            f'<Stream url="ws://127.0.0.1:{bot.port}/twilio/stream"/></Connect></Response>'
        )
        return Response(twiml, media_type="text/xml")

    async def stream(ws: WebSocket) -> None:
        await ws.accept()
        call: FakeCall | None = None
        try:
            while True:
                message = json.loads(await ws.receive_text())
                match message["event"]:
                    case "start":
                        call = FakeCall(ws, bot, message["start"]["streamSid"])
                    case "media" if call is not None:
                        await call.on_media(base64.b64decode(message["media"]["payload"]))
                    case "stop":
                        break
        except WebSocketDisconnect:
            pass

    return Starlette(
        routes=[
            Route("/twilio/voice", voice, methods=["POST"]),
            WebSocketRoute("/twilio/stream", stream),
        ]
    )


@pytest.fixture
def fake_bot() -> Iterator[Callable[[int], FakeBot]]:
    """Start fake bots (answering `delay_ms` after the caller stops); stop them after."""
    running: list[tuple[uvicorn.Server, threading.Thread, socket.socket]] = []

    def start(delay_ms: int) -> FakeBot:
        # Listening before uvicorn starts: early connections wait in the backlog.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        bot = FakeBot(delay_ms=delay_ms, port=sock.getsockname()[1])
        config = uvicorn.Config(
            build_app(bot), ws="websockets-sansio", lifespan="off", log_level="warning"
        )
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        running.append((server, thread, sock))
        return bot

    yield start
    for server, thread, sock in running:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@pytest.fixture
def recorded(tmp_path: Path) -> CallRecord:
    """A 12.5 s call: three caller turns, each answered in 500 ms, the last a barge-in."""
    return build_call(tmp_path / "calls", CallSpec(CALL_SID, THREE_TURNS))


@pytest.mark.slow  # a replayed call in real time
async def test_a_fast_bot_is_not_worse_and_keeps_the_callers_timing(
    fake_bot: Callable[[int], FakeBot], recorded: CallRecord
) -> None:
    bot = fake_bot(100)

    result = await replay(
        recorded,
        base_url=bot.url,
        auth_token=TOKEN,
        transcribe=lambda pcm: f"{len(pcm)} samples",
        hangup_after_ms=2000,
    )

    assert result.warnings == []
    # The caller spoke exactly when they did in the recording.
    assert [(t.start_ms, t.end_ms) for t in result.turns] == [
        (2000, 3460),
        (5800, 7060),
        (8500, 9960),
    ]
    said = [(t.speech_start_ms, t.speech_end_ms) for t in result.report.turns]
    assert said == [(2000, 3460), (5800, 7060), (8500, 9960)]
    # Recorded: measured on bot.wav, as the agent logged it (500 ms), frame-exact.
    assert [t.recorded_latency_ms for t in result.turns] == [500, 500, 500]
    # New: 200 ms of silence to notice, 100 ms delay, less the 60 ms VAD tail; 20 ms ticks.
    for turn in result.turns:
        assert turn.new_latency_ms is not None and 220 <= turn.new_latency_ms <= 400
    assert [t.recorded_text for t in result.turns] == [
        "We open at nine.",
        "On Sunday we open at ten and close",
        "Closed on holidays.",
    ]
    # The new replies were handed to the transcriber: 1 s, 1.1 s until cleared, 1 s.
    assert result.turns[0].new_text == "8000 samples"
    assert all(t.new_text is not None for t in result.turns)
    # The interruption in the third utterance stopped the bot then and now.
    assert [(t.recorded_clears, t.new_clears) for t in result.turns] == [(0, 0), (0, 0), (1, 1)]
    assert verdict(result, 300) == (False, [])


@pytest.mark.slow  # a replayed call in real time
def test_a_bot_800_ms_slower_is_worse_and_the_cli_exits_1(
    fake_bot: Callable[[int], FakeBot],
    recorded: CallRecord,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bot = fake_bot(900)
    data_dir = recorded.path.parent.parent

    code = main(
        [
            "--data-dir",
            str(data_dir),
            "replay",
            CALL_SID,
            "--to",
            bot.url,
            "--auth-token",
            TOKEN,
            "--no-transcribe",
            "--hangup-after-ms",
            "2000",
        ]
    )

    out = capsys.readouterr().out
    assert code == 1
    assert "worse" in out and "not worse" not in out
    assert "over the 300 ms threshold" in out
    assert "recorded 500 ms" in out


@pytest.mark.slow  # a replayed call in real time
async def test_at_double_speed_the_call_clock_holds_and_the_result_warns(
    fake_bot: Callable[[int], FakeBot], recorded: CallRecord
) -> None:
    bot = fake_bot(100)
    began = time.monotonic()

    result = await replay(
        recorded, base_url=bot.url, auth_token=TOKEN, speed=2.0, hangup_after_ms=1000
    )

    # About 11.5 s of call clock in half the wall time.
    assert time.monotonic() - began < 9
    assert result.warnings == [speed_warning(2.0)]
    said = [(t.speech_start_ms, t.speech_end_ms) for t in result.report.turns]
    assert said == [(2000, 3460), (5800, 7060), (8500, 9960)]
    # The fake bot counts frames, so on the call clock it answers as fast as at 1x;
    # wall-time delays (the loopback, the event loops) count double.
    for turn in result.turns:
        assert turn.new_latency_ms is not None and 220 <= turn.new_latency_ms <= 440
    assert [t.new_clears for t in result.turns] == [0, 0, 1]


def test_a_speed_of_zero_is_refused() -> None:
    with pytest.raises(ValueError, match="speed > 0"):
        SimulationConfig(base_url="http://127.0.0.1:9", speed=0)


def test_an_unreachable_server_is_exit_2_without_a_traceback(
    recorded: CallRecord, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as sock:  # a port that was free a moment ago
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    data_dir = recorded.path.parent.parent

    code = main(
        ["--data-dir", str(data_dir), "replay", CALL_SID, "--to", f"http://127.0.0.1:{port}"]
    )

    err = capsys.readouterr().err
    assert code == 2
    assert "could not reach the webhook" in err
    assert "Traceback" not in err


# --- the pieces, without a server -------------------------------------------------------


def test_segments_merge_transcript_turns_and_vad_spans_closer_than_700_ms() -> None:
    transcript = {
        "turns": [
            {"speaker": "bot", "text": "Hi", "start_ms": 0.0, "end_ms": 900.0},
            {"speaker": "caller", "text": "one", "start_ms": 1000.0, "end_ms": 2000.0},
            {"speaker": "caller", "text": "two", "start_ms": 2600.0, "end_ms": 3000.0},
        ]
    }
    timeline = [
        line(1200.0, SpeechStart(sample=19200)),
        line(1500.0, Clear(reason="barge_in")),  # not speech: ignored here
        line(2000.0, SpeechStop(sample=32000)),
        line(5000.0, SpeechStart(sample=80000)),  # a backchannel: no transcript turn
        line(5300.0, SpeechStop(sample=84800)),
        line(9000.5, SpeechStart(sample=144008)),  # still talking when the call ended
    ]

    segments = caller_segments(transcript, timeline, end_ms=9500.0)

    assert [(s.start_ms, s.end_ms, s.text) for s in segments] == [
        (1000, 3000, "one two"),
        (5000, 5300, ""),
        (9000, 9500, ""),
    ]


def _result(*turns: TurnDiff) -> ReplayResult:
    return ReplayResult(
        call_sid="CA1", speed=1.0, turns=list(turns), report=CallReport("CA2", "MZ2", "")
    )


def _turn(
    then: float | None, now: float | None, clears: tuple[int, int] = (0, 0), number: int = 1
) -> TurnDiff:
    return TurnDiff(number, "hello", 0.0, 1000.0, then, now, "Hi.", None, *clears)


def test_verdict_allows_a_rise_up_to_the_threshold() -> None:
    result = _result(_turn(500, 700), _turn(500, 800, number=2))

    assert result.recorded_p50_ms == 500 and result.new_p50_ms == 750
    assert verdict(result, 300) == (False, [])


def test_verdict_is_worse_past_the_threshold() -> None:
    worse, reasons = verdict(_result(_turn(500, 900)), 300)

    assert worse
    assert reasons == [
        "mouth-to-mouth p50 900 ms, recorded 500 ms: +400 ms is over the 300 ms threshold"
    ]


def test_verdict_is_worse_when_an_answered_turn_goes_unanswered() -> None:
    worse, reasons = verdict(_result(_turn(500, 450), _turn(500, None, number=2)), 300)

    assert worse
    assert reasons == ["caller turn 2 ('hello') was answered in the recording and is not now"]


def test_verdict_is_worse_when_a_barge_in_no_longer_stops_the_bot() -> None:
    worse, reasons = verdict(_result(_turn(500, 500, clears=(1, 0))), 300)

    assert worse
    assert reasons == [
        "caller turn 1 ('hello') barged in and stopped the bot in the recording; now it does not"
    ]


def test_a_turn_answered_only_now_is_not_worse() -> None:
    assert verdict(_result(_turn(None, 600, clears=(0, 1))), 300) == (False, [])
