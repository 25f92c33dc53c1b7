"""`python -m benchmarks abuse` — what a stranger's traffic costs a live call.

    python -m benchmarks abuse [--attacks huge-body,multipart,...] [--warmup 20]

Starts `offhook serve` as its own process (signed mode, as on the internet), warms it
with `--warmup` calls (the first calls fill bounded caches), and, for each attack,
places a real call through the Twilio protocol (greeting, two questions) while the
attack runs beside it. `--attacks none,none,...` runs the same calls with no attack:
the control for RSS. First one call with no attack: the baseline. For each
run: the live call's playout underruns and mouth-to-mouth at the caller's ear, whether
its questions were answered, how the server refused the attack, and the server's RSS
before and after (read once the calls have ended). Target: no underrun, mouth-to-mouth
within noise of the baseline, RSS back to the baseline.

The attacks are the findings of issue 12, each as a stranger (or a replayed capture)
would send it; `tests/test_open_internet.py` proves each refusal, this measures its cost.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import cast

import httpx
import websockets
from websockets.asyncio.client import connect

from benchmarks.measure import BENCH_TOKEN, QUESTIONS, machine
from benchmarks.soak import Server, one_call
from ops.simulate import (
    CallerTurn,
    CallReport,
    SimulationConfig,
    parse_twiml,
    simulate_call,
    voice_webhook_params,
)
from telephony.peer import TwilioEventWriter
from telephony.security import sign

ACCOUNT_SID = "AC" + "0" * 32


def _sid(prefix: str = "CA") -> str:
    return prefix + secrets.token_hex(16)


class Attacker:
    """Sends what a stranger, or someone replaying a captured request, would send."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.ws_url = url.replace("http://", "ws://") + "/twilio/media"
        self.host, port = url.removeprefix("http://").split(":")
        self.port = int(port)
        self.refusals: dict[str, int] = {}

    def _count(self, what: str) -> None:
        self.refusals[what] = self.refusals.get(what, 0) + 1

    async def _raw(self, request: bytes, *, then: bytes = b"") -> None:
        reader, writer = await asyncio.open_connection(self.host, self.port)
        try:
            writer.write(request)
            await writer.drain()
            if then:
                writer.write(then)
                await writer.drain()
            line = await asyncio.wait_for(reader.readline(), 15)
            self._count(line.decode(errors="replace").split(" ", 2)[1] if line else "closed")
        except (ConnectionError, TimeoutError):
            self._count("reset")
        finally:
            writer.close()

    async def nothing(self) -> None:
        """No attack: the control, for what a live call alone moves RSS by."""

    async def huge_body(self) -> None:
        """Webhooks declaring a 1 GB body, signature and all, 20 at once."""
        head = (
            f"POST /twilio/voice HTTP/1.1\r\nHost: {self.host}\r\n"
            "Content-Type: application/x-www-form-urlencoded\r\n"
            "X-Twilio-Signature: forged\r\nContent-Length: 1000000000\r\n\r\n"
        ).encode()
        await asyncio.gather(*(self._raw(head, then=b"a=" + b"x" * 65536) for _ in range(20)))

    async def multipart(self) -> None:
        """Five 5 MB multipart uploads to the webhook."""
        files = {"file": ("x.bin", b"\0" * (5 << 20))}
        async with httpx.AsyncClient(timeout=15) as client:
            for _ in range(5):
                try:
                    answer = await client.post(
                        f"{self.url}/twilio/voice",
                        files=files,
                        headers={"X-Twilio-Signature": "forged"},
                    )
                    self._count(str(answer.status_code))
                except httpx.HTTPError:
                    self._count("reset")

    async def unsigned(self) -> None:
        """300 webhooks with forged signatures, 10 at a time."""
        async with httpx.AsyncClient(timeout=15) as client:

            async def post() -> None:
                params = {"CallSid": _sid(), "AccountSid": ACCOUNT_SID, "From": "+15550100"}
                answer = await client.post(
                    f"{self.url}/twilio/voice",
                    data=params,
                    headers={"X-Twilio-Signature": "Zm9yZ2Vk"},
                )
                self._count(str(answer.status_code))

            for _ in range(30):
                await asyncio.gather(*(post() for _ in range(10)))

    async def idle_sockets(self) -> None:
        """40 signed stream sockets that never send `start`, held for 7 s."""
        headers = {"x-twilio-signature": sign(BENCH_TOKEN, self.ws_url, {})}

        async def hold() -> None:
            try:
                async with connect(self.ws_url, additional_headers=headers) as ws:
                    await asyncio.wait_for(ws.recv(), 7)
            except (websockets.ConnectionClosed, websockets.InvalidStatus, OSError) as exc:
                self._count(type(exc).__name__)
            except TimeoutError:
                self._count("still open after 7 s")

        await asyncio.gather(*(hold() for _ in range(40)))

    async def _token(self, call_sid: str) -> str:
        """A real call token: what a captured webhook answer holds."""
        url = f"{self.url}/twilio/voice"
        params = voice_webhook_params(call_sid, ACCOUNT_SID, "+15550100", "+15550199")
        async with httpx.AsyncClient(timeout=15) as client:
            answer = await client.post(
                url, data=params, headers={"X-Twilio-Signature": sign(BENCH_TOKEN, url, params)}
            )
        return parse_twiml(answer.text).parameters["token"]

    async def _stream(
        self, call_sid: str, token: str
    ) -> tuple[websockets.ClientConnection, TwilioEventWriter]:
        headers = {"x-twilio-signature": sign(BENCH_TOKEN, self.ws_url, {})}
        ws = await connect(self.ws_url, additional_headers=headers)
        twilio = TwilioEventWriter(_sid("MZ"), call_sid, ACCOUNT_SID)
        await ws.send(twilio.connected())
        await ws.send(twilio.start({"token": token, "from": "+15550100"}))
        return ws, twilio

    async def _until_closed(self, ws: websockets.ClientConnection, within: float) -> None:
        try:
            async with asyncio.timeout(within):
                while True:
                    await ws.recv()
        except websockets.ConnectionClosed as closed:
            code = closed.rcvd.code if closed.rcvd is not None else None
            self._count(f"closed {code}")
        except TimeoutError:
            self._count(f"still open after {within:.0f} s")
        finally:
            await ws.close()

    async def replayed_token(self) -> None:
        """A captured token used for a second stream, then replayed after its call."""
        call_sid = _sid()
        token = await self._token(call_sid)
        first, twilio = await self._stream(call_sid, token)
        second, _ = await self._stream(call_sid, token)
        await self._until_closed(second, 5)
        for frame in range(50):
            await first.send(twilio.media(b"\xff" * 160, frame * 20))
            await asyncio.sleep(0.02)
        await first.send(twilio.stop())
        await self._until_closed(first, 5)
        third, _ = await self._stream(call_sid, token)
        await self._until_closed(third, 5)

    async def media_flood(self) -> None:
        """An admitted stream sending media as fast as the socket takes it, for 4 s."""
        call_sid = _sid()
        ws, twilio = await self._stream(call_sid, await self._token(call_sid))
        began, frame = time.monotonic(), 0
        try:
            while time.monotonic() - began < 4:
                await ws.send(twilio.media(b"\xff" * 160, frame * 20))
                frame += 1
                if frame % 50 == 0:
                    await asyncio.sleep(0)
        except websockets.ConnectionClosed as closed:
            code = closed.rcvd.code if closed.rcvd is not None else None
            self._count(f"closed {code} after {frame} frames")
            return
        await self._until_closed(ws, 5)

    async def timestamp_jump(self) -> None:
        """1-byte frames whose timestamps leap 10 s each: gap fill asked for hours."""
        call_sid = _sid()
        ws, twilio = await self._stream(call_sid, await self._token(call_sid))
        try:
            for frame in range(400):
                await ws.send(twilio.media(b"\xff", frame * 10_000))
                await asyncio.sleep(0.005)
        except websockets.ConnectionClosed as closed:
            code = closed.rcvd.code if closed.rcvd is not None else None
            self._count(f"closed {code} after {frame} frames")
            return
        await self._until_closed(ws, 5)

    async def dtmf_flood(self) -> None:
        """1,000 key presses as fast as they go, with media flowing."""
        call_sid = _sid()
        ws, twilio = await self._stream(call_sid, await self._token(call_sid))
        try:
            for press in range(1000):
                await ws.send(twilio.dtmf("0123456789*#"[press % 12]))
                if press % 10 == 0:
                    await ws.send(twilio.media(b"\xff" * 160, press * 2))
                    await asyncio.sleep(0.02)
            await ws.send(twilio.stop())
        except websockets.ConnectionClosed as closed:
            code = closed.rcvd.code if closed.rcvd is not None else None
            self._count(f"closed {code} after {press} presses")
            return
        await self._until_closed(ws, 5)


ATTACKS: dict[str, Callable[[Attacker], Awaitable[None]]] = {
    "huge-body": Attacker.huge_body,
    "multipart": Attacker.multipart,
    "forged-signatures": Attacker.unsigned,
    "idle-sockets": Attacker.idle_sockets,
    "replayed-token": Attacker.replayed_token,
    "media-flood": Attacker.media_flood,
    "timestamp-jump": Attacker.timestamp_jump,
    "dtmf-flood": Attacker.dtmf_flood,
    "none": Attacker.nothing,  # not run unless named: `--attacks none,none,...` (control)
}


async def live_call(url: str) -> CallReport:
    return await simulate_call(
        SimulationConfig(
            base_url=url,
            auth_token=BENCH_TOKEN,
            turns=[CallerTurn(text=q, after="bot_done", delay_ms=400) for q in QUESTIONS[:2]],
            hangup_after_ms=2500,
            max_call_s=90,
        )
    )


def _row(name: str, report: CallReport, before: float, after: float) -> dict[str, object]:
    latencies = [t.latency_ms for t in report.turns if t.latency_ms is not None]
    return {
        "attack": name,
        "answered": f"{len(latencies)}/{len(report.turns)}",
        "underrun_ms": round(report.underrun_ms),
        "mouth_to_mouth_p50_ms": round(statistics.median(latencies)) if latencies else None,
        "protocol_violations": len(report.protocol_violations),
        "rss_before_mb": round(before, 1),
        "rss_after_mb": round(after, 1),
    }


async def run(server: Server, names: list[str], warmup: int) -> dict[str, object]:
    await server.wait_idle()
    # The first ~20-30 calls fill bounded caches (TTS clauses, llama.cpp prompts, glibc
    # arenas; see `python -m benchmarks soak`): RSS from then on is what attacks could
    # move.
    for index in range(warmup):
        await one_call(server.url, index)
        await server.wait_idle()
    baseline = await live_call(server.url)
    await server.wait_idle()
    rows = [_row("none (baseline)", baseline, server.rss()[0], server.rss()[0])]
    refusals: dict[str, dict[str, int]] = {}
    for name in names:
        before = server.rss()[0]
        attacker = Attacker(server.url)
        call = asyncio.create_task(live_call(server.url))
        await asyncio.sleep(2.0)  # the greeting is playing
        await ATTACKS[name](attacker)
        report = await call
        await server.wait_idle()
        rows.append(_row(name, report, before, server.rss()[0]))
        refusals[name] = attacker.refusals
        print(rows[-1], attacker.refusals, flush=True)
    return {"machine": machine(), "warmup_calls": warmup, "runs": rows, "refusals": refusals}


def bench_abuse(args: argparse.Namespace) -> dict[str, object]:
    names = args.attacks.split(",") if args.attacks else [n for n in ATTACKS if n != "none"]
    unknown = [n for n in names if n not in ATTACKS]
    if unknown:
        raise SystemExit(f"unknown attacks {unknown}; known: {', '.join(ATTACKS)}")
    with tempfile.TemporaryDirectory(prefix="offhook-bench-abuse-") as data:
        server = Server(Path(data))
        try:
            server.wait_ready()
            result = asyncio.run(run(server, names, args.warmup))
        finally:
            server.close()
    runs = cast(list[dict[str, object]], result["runs"])
    for index, row in enumerate(runs):
        result[f"{index}. {row['attack']}"] = (
            f"answered {row['answered']}, underruns {row['underrun_ms']} ms, "
            f"m2m p50 {row['mouth_to_mouth_p50_ms']} ms, "
            f"RSS {row['rss_before_mb']} -> {row['rss_after_mb']} MB"
        )
    return result


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    abuse = sub.add_parser("abuse", help="attacks beside a live call: its underruns, latency, RSS")
    abuse.add_argument("--attacks", default="", help=f"comma-separated, of: {', '.join(ATTACKS)}")
    abuse.add_argument(
        "--warmup", type=int, default=20, help="calls before the baseline (caches fill)"
    )
    abuse.set_defaults(run=bench_abuse)
    return abuse
