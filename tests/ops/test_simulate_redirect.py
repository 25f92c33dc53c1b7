"""The simulated caller follows what Twilio runs after a stream closes: the TwiML after
<Connect>. A <Redirect> there fetches new TwiML (signed, CallStatus in-progress) and the
same call goes on in a new stream; <Hangup/> or nothing ends it."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
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

from media.codec import mulaw_encode
from ops.twilio_caller import SimulationConfig, simulate_call
from ops.twilio_webhook import parse_twiml

TOKEN = "redirect-test-token-0123456789ab"


@dataclass
class Server:
    port: int = 0
    # What the resume webhook answers: a status code, or TwiML with a new stream.
    resume_status: int = 200
    forms: list[dict[str, str]] = field(default_factory=list)
    starts: list[dict[str, object]] = field(default_factory=list)
    # The second stream's media timestamps, as the caller stamped them.
    stamps: list[int] = field(default_factory=list)


def _tone(samples: int) -> np.ndarray:
    t = np.arange(samples) / 8000
    return (6000 * np.sin(2 * np.pi * 440 * t)).astype(np.int16)


def _app(server: Server) -> Starlette:
    base = f"http://127.0.0.1:{server.port}"

    def twiml(stream: str, after: str) -> Response:
        return Response(
            '<?xml version="1.0" encoding="UTF-8"?><Response><Connect>'
            f'<Stream url="ws://127.0.0.1:{server.port}/{stream}"/></Connect>{after}</Response>',
            media_type="text/xml",
        )

    async def signed_form(request: Request, path: str) -> dict[str, str] | None:
        form = dict(parse_qsl((await request.body()).decode()))
        signature = request.headers.get("x-twilio-signature", "")
        if not RequestValidator(TOKEN).validate(f"{base}{path}", form, signature):
            return None
        server.forms.append(form)
        return form

    async def voice(request: Request) -> Response:
        if await signed_form(request, "/voice") is None:
            return Response("bad signature", status_code=403)
        return twiml("first", f"<Redirect>{base}/resume</Redirect>")

    async def resume(request: Request) -> Response:
        if server.resume_status != 200:
            return Response("no", status_code=server.resume_status)
        if await signed_form(request, "/resume") is None:
            return Response("bad signature", status_code=403)
        return twiml("second", "<Hangup/>")

    async def first(ws: WebSocket) -> None:
        # A gateway that dies a moment into the call: it closes without a word.
        await ws.accept()
        for _ in range(2 + 10):  # connected, start, ten media frames
            await ws.receive_text()
        await ws.close()

    async def second(ws: WebSocket) -> None:
        await ws.accept()
        try:
            await ws.receive_text()  # connected
            start = json.loads(await ws.receive_text())
            server.starts.append(start["start"])
            payload = base64.b64encode(mulaw_encode(_tone(4000))).decode()
            await ws.send_json(
                {
                    "event": "media",
                    "streamSid": start["start"]["streamSid"],
                    "media": {"payload": payload},
                }
            )
            while True:
                message = json.loads(await ws.receive_text())
                if message["event"] == "media":
                    server.stamps.append(int(message["media"]["timestamp"]))
        except (WebSocketDisconnect, RuntimeError):
            pass

    return Starlette(
        routes=[
            Route("/voice", voice, methods=["POST"]),
            Route("/resume", resume, methods=["POST"]),
            WebSocketRoute("/first", first),
            WebSocketRoute("/second", second),
        ]
    )


@pytest.fixture
def running() -> Iterator[Server]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    server = Server(port=sock.getsockname()[1])
    config = uvicorn.Config(
        _app(server), ws="websockets-sansio", lifespan="off", log_level="warning"
    )
    uv = uvicorn.Server(config)
    thread = threading.Thread(target=uv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    yield server
    uv.should_exit = True
    thread.join(timeout=10)
    sock.close()


def _config(server: Server) -> SimulationConfig:
    return SimulationConfig(
        base_url=f"http://127.0.0.1:{server.port}",
        voice_url=f"http://127.0.0.1:{server.port}/voice",
        auth_token=TOKEN,
        turns=[],
        hangup_after_ms=1500,
        max_call_s=8,
    )


def test_twiml_after_connect_is_read_in_order() -> None:
    target = parse_twiml(
        "<Response><Connect><Stream url='wss://x/s'/></Connect>"
        "<Say>sorry</Say><Redirect>https://x/r</Redirect></Response>"
    )
    assert target.after == (("Say", "sorry"), ("Redirect", "https://x/r"))
    assert target.redirect == "https://x/r"  # said, then fetched
    hangup_first = parse_twiml(
        "<Response><Connect><Stream url='wss://x/s'/></Connect>"
        "<Hangup/><Redirect>https://x/r</Redirect></Response>"
    )
    assert hangup_first.redirect is None


async def test_a_closed_stream_followed_by_a_redirect_carries_the_call_on(
    running: Server,
) -> None:
    report = await simulate_call(_config(running))
    assert len(report.redirects) == 1
    closed, resumed = report.redirects[0]
    assert resumed is not None and resumed >= closed
    # The same call, a new stream; the redirect is signed and says the call is live.
    assert [form["CallSid"] for form in running.forms] == [report.call_sid] * 2
    assert running.forms[1]["CallStatus"] == "in-progress"
    assert running.starts and running.starts[0]["callSid"] == report.call_sid
    assert report.stream_sid == running.starts[0]["streamSid"]
    # The second stream's audio reached the caller's ear, after the redirect.
    assert report.bot_utterances and report.bot_utterances[0][0] >= closed
    assert not report.server_closed  # the caller hung up at the end, not the server
    # Twilio stamps a stream's media from its own start: the new stream's from 0.
    assert running.stamps and running.stamps[0] <= 40, running.stamps[:3]
    assert running.stamps == sorted(running.stamps)
    assert not report.protocol_violations


async def test_a_redirect_that_fails_ends_the_call_and_says_why(running: Server) -> None:
    running.resume_status = 503
    report = await asyncio.wait_for(simulate_call(_config(running)), 20)
    assert len(report.redirects) == 1 and report.redirects[0][1] is None
    assert report.server_closed
    assert any("redirect failed" in warning for warning in report.warnings)
