"""Every call leaves a complete record: real calls through the real server.

The record is read back with the same store the ops CLI uses; clocks are checked
against what the simulated Twilio side heard.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from websockets.asyncio.client import connect

from callevents import (
    BargeIn,
    Clear,
    EndOfTurn,
    Hold,
    MarkEchoed,
    MarkSent,
    SpeechStart,
    SpeechStop,
    StreamStart,
    StreamStop,
    parse_timeline,
)
from callevents import CallerTurn as CallerTurn_
from ops.calls import main as calls_main
from ops.local_server import free_port
from ops.simulate import CallerTurn, SimulationConfig, simulate_call
from recordings.store import RecordStore
from telephony.protocol import TwilioEventWriter
from telephony.security import sign
from tests.conftest import AUTH_TOKEN, GREETING, Bot

pytestmark = pytest.mark.timeout(240)


def rms_db(audio: np.ndarray) -> float:
    if audio.size == 0:
        return -120.0
    level = float(np.sqrt(np.mean((audio.astype(np.float64) / 32768) ** 2)))
    return 20 * np.log10(max(level, 1e-6))


async def test_a_barged_in_call_leaves_a_complete_record_on_one_clock(bot: Bot) -> None:
    report = await simulate_call(
        SimulationConfig(
            base_url=bot.url,
            auth_token=AUTH_TOKEN,
            turns=[
                CallerTurn(
                    text="Sorry to interrupt, but I need to speak to someone about my bill.",
                    after="bot_speaking",
                    delay_ms=1500,
                )
            ],
            hangup_after_ms=3000,
        )
    )
    assert report.clears, "the call did not barge in"
    await asyncio.sleep(0.5)  # the server finishes the record after the hang-up

    record = RecordStore(bot.settings.calls_dir).open(report.call_sid)
    names = {p.name for p in record.path.iterdir()}
    assert {"meta.json", "timeline.jsonl", "caller.wav", "bot.wav", "transcript.json"} <= names
    assert record.meta["ended_with"] == "completed"
    assert record.meta["from"] != "+15550100", "the caller's number must be masked"
    caller, heard = record.caller_audio(), record.bot_audio()
    # Both tracks are on the call clock: as long as the call the simulator placed.
    assert abs(len(caller) - len(report.caller_audio)) <= 8000 * 0.3
    assert len(heard) == len(caller)
    # bot.wav holds what the caller heard: the greeting until the hold's clear, then
    # nothing until the bot speaks again (lowered or not).
    timeline = parse_timeline(record.timeline())
    clear_ms = next(t for t, e in timeline if isinstance(e, Clear))
    assert abs(clear_ms - report.clears[0]) < 300
    cut = int(clear_ms * 8)
    assert rms_db(heard[cut - 8000 : cut - 400]) > -40, "the greeting before the clear is missing"
    next_reply = next(
        (t for t, e in timeline if isinstance(e, MarkSent) and t and t > clear_ms + 50),
        len(heard) / 8,
    )
    assert rms_db(heard[cut + 800 : int(next_reply * 8)]) < -60, (
        "audio after the clear was recorded as heard"
    )
    # The caller's speech is in caller.wav where the simulator sent it.
    turn = report.turns[0]
    start, end = int(turn.speech_start_ms * 8), int(turn.speech_end_ms * 8)
    assert rms_db(caller[start:end]) > -35

    kinds = {type(e) for _, e in timeline}
    for kind in (
        StreamStart,
        SpeechStart,
        SpeechStop,
        Hold,
        BargeIn,
        Clear,
        EndOfTurn,
        CallerTurn_,
        MarkSent,
        MarkEchoed,
        StreamStop,
    ):
        assert kind in kinds, kind.name
    turns = record.transcript()["turns"]
    greeting = turns[0]
    assert greeting["speaker"] == "bot" and greeting["truncated"]
    assert greeting["intended"] == GREETING and len(greeting["text"]) < len(GREETING)
    # Its end is where the caller stopped hearing it: at the hold's clear, or later if a
    # lowered bot went on quietly while the caller's words were judged, and never after
    # the barge-in. bot.wav agrees: silence from there to the answer.
    end_ms = greeting["end_ms"]
    barge_in_ms = next(t for t, e in timeline if isinstance(e, BargeIn))
    assert clear_ms - 100 <= end_ms <= barge_in_ms + 100
    answer_ms = next((t["start_ms"] for t in turns[1:] if t["speaker"] == "bot"), len(heard) / 8)
    assert rms_db(heard[int(end_ms * 8) + 800 : int(answer_ms * 8)]) < -60, (
        "the greeting was heard after its recorded end"
    )
    if end_ms > clear_ms + 200:
        # Later than the clear only because the lowered greeting was sent again (when the
        # caller's speech paused) and heard, however quietly, before the barge-in.
        replayed = [
            t for t, e in timeline if isinstance(e, MarkSent) and t and clear_ms + 50 < t < end_ms
        ]
        assert replayed, "the greeting's recorded end is later than its last audio sent"
        again = heard[int(replayed[0] * 8) : int(end_ms * 8) + 800]
        assert np.any(again), "the greeting's recorded end is later than anything heard"
    caller_turn = next(t for t in turns if t["speaker"] == "caller")
    assert caller_turn["start_ms"] < caller_turn["end_ms"]


async def test_an_abrupt_hang_up_still_closes_a_complete_record(bot: Bot) -> None:
    call_sid = "CA" + "a" * 32
    twilio = TwilioEventWriter("MZ" + "b" * 32, call_sid, "AC" + "c" * 32)
    url = bot.url.replace("http://", "ws://") + "/twilio/media"
    headers = {"x-twilio-signature": sign(AUTH_TOKEN, url, {})}
    async with connect(url, additional_headers=headers, max_queue=None) as ws:
        await ws.send(twilio.connected())
        await ws.send(
            twilio.start({"token": bot.services.tokens.issue(call_sid), "from": "+15550100"})
        )
        for frame in range(50):  # one second of caller audio
            await ws.send(twilio.media(b"\xff" * 160, frame * 20))
        await asyncio.wait_for(ws.recv(), 10)  # the greeting has started
        ws.transport.abort()  # the line drops: no stop, no close frame

    for _ in range(50):
        await asyncio.sleep(0.1)
        if call_sid not in bot.services.open_records:
            break
    record = RecordStore(bot.settings.calls_dir).open(call_sid)
    assert record.meta["ended_at"] is not None
    assert record.meta["ended_with"] == "disconnected"
    assert len(record.caller_audio()) == 50 * 160
    assert len(record.bot_audio()) == len(record.caller_audio())
    assert record.transcript()["turns"][0]["speaker"] == "bot"


@pytest.mark.slow  # a real serve process with its models
def test_a_server_killed_mid_call_leaves_a_readable_record(tmp_path: Path) -> None:
    port = free_port()
    env = {
        **os.environ,
        "PORT": str(port),
        "HOST": "127.0.0.1",
        "PUBLIC_URL": f"http://127.0.0.1:{port}",
        "DATA_DIR": str(tmp_path),
        "TWILIO_AUTH_TOKEN": AUTH_TOKEN,
        "LOG_LEVEL": "WARNING",
    }
    server = subprocess.Popen(
        [sys.executable, "-m", "cli", "serve"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        else:
            pytest.fail("the server did not become ready")

        async def call_and_kill() -> None:
            config = SimulationConfig(
                base_url=f"http://127.0.0.1:{port}",
                auth_token=AUTH_TOKEN,
                turns=[
                    CallerTurn(text="What time does the pharmacy close today?", after="bot_done")
                ],
                max_call_s=30,
            )
            call = asyncio.create_task(simulate_call(config))
            await asyncio.sleep(6)  # greeting heard, caller speaking
            os.killpg(server.pid, signal.SIGKILL)
            try:
                await asyncio.wait_for(call, 20)
            except Exception:
                pass

        asyncio.run(call_and_kill())
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
        server.wait(10)

    store = RecordStore(tmp_path / "calls")
    [call_sid] = store.ids()
    assert store.open(call_sid).meta["ended_at"] is None  # died before it could finish
    assert call_sid in store.repair()
    record = store.open(call_sid)
    assert record.meta["ended_with"] == "crashed"
    assert len(record.caller_audio()) > 8000 * 4
    assert rms_db(record.bot_audio()) > -50, "the greeting the caller heard is lost"
    assert any(isinstance(e, StreamStart) for _, e in parse_timeline(record.timeline()))
    # And the operator's CLI reads it like any other call.
    assert calls_main(["--data-dir", str(tmp_path), "show", call_sid]) == 0


async def test_a_recorded_call_replays_against_the_live_bot_with_a_diff(
    bot: Bot, capsys: pytest.CaptureFixture[str]
) -> None:
    report = await simulate_call(
        SimulationConfig(
            base_url=bot.url,
            auth_token=AUTH_TOKEN,
            turns=[
                CallerTurn(text="What is the weather usually like in London?", after="bot_done")
            ],
            hangup_after_ms=4000,
        )
    )
    await asyncio.sleep(0.5)
    data_dir = str(Path(bot.settings.data_dir))
    common = ["--data-dir", data_dir, "replay", report.call_sid, "--to", bot.url]
    common += ["--auth-token", AUTH_TOKEN, "--no-transcribe", "--hangup-after-ms", "3000"]

    # The same bot against its own recording: not worse by a generous margin.
    status = await asyncio.to_thread(calls_main, [*common, "--threshold-ms", "2000"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "What is the weather" in out or "weather" in out.lower()
    # A bot slower than its recording failing the gate: tests/ops/test_replay.py.
