"""`python -m benchmarks call` — mouth-to-mouth latency and barge-in on scripted calls.

    python -m benchmarks call [--calls 2] [--voice piper|espeak] [--url URL]

Starts the bot in-process on 127.0.0.1 (or dials `--url`), plays a Twilio caller with
Piper (or espeak) speech through 8 kHz mu-law, and reads every figure off the simulated
Twilio side: mouth to mouth at the caller's ear (p50/p90), barge-in onset to `clear`,
the greeting's start, unanswered turns, underruns. Nothing is taken from the server's
own opinion of itself, except the breakdown of where the time went (the medians of the
records' `turn_timing` events), reported apart as `server_*`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from benchmarks.measure import BENCH_TOKEN, QUESTIONS, machine, percentile
from ops.simulate import CallerTurn, CallReport, SimulationConfig, simulate_call

BARGE_IN = "Sorry to interrupt, but I need to speak to someone about my bill."


@dataclass
class CallBench:
    machine: str
    stt_model: str
    latencies_ms: list[float] = field(default_factory=list)
    barge_in_ms: list[float] = field(default_factory=list)
    greeting_ms: list[float] = field(default_factory=list)
    unanswered: int = 0
    underrun_ms: float = 0.0
    violations: int = 0

    def summary(self) -> dict[str, float]:
        return {
            "turns": len(self.latencies_ms),
            "mouth_to_mouth_p50_ms": percentile(self.latencies_ms, 50),
            "mouth_to_mouth_p90_ms": percentile(self.latencies_ms, 90),
            "barge_in_onset_to_clear_p50_ms": percentile(self.barge_in_ms, 50),
            "barge_in_onset_to_clear_max_ms": max(self.barge_in_ms, default=float("nan")),
            "greeting_p50_ms": percentile(self.greeting_ms, 50),
            "unanswered_turns": self.unanswered,
            "underrun_ms": self.underrun_ms,
            "protocol_violations": self.violations,
        }


async def _latency_call(
    url: str, token: str | None, questions: tuple[str, ...], voice: str
) -> CallReport:
    turns = [CallerTurn(text=q, after="bot_done", delay_ms=700) for q in questions]
    return await simulate_call(
        SimulationConfig(
            base_url=url, auth_token=token, turns=turns, hangup_after_ms=3000, voice_engine=voice
        )
    )


async def _barge_in_call(url: str, token: str | None, voice: str) -> CallReport:
    turn = CallerTurn(text=BARGE_IN, after="bot_speaking", delay_ms=500)
    return await simulate_call(
        SimulationConfig(
            base_url=url, auth_token=token, turns=[turn], hangup_after_ms=2000, voice_engine=voice
        )
    )


async def run_call_bench(
    url: str, token: str | None, calls: int, bench: CallBench, voice: str = "piper"
) -> None:
    for index in range(calls):
        questions = QUESTIONS[index % 2 :: 2] if calls > 1 else QUESTIONS
        report = await _latency_call(url, token, questions, voice)
        _collect(report, bench)
        barge = await _barge_in_call(url, token, voice)
        _collect(barge, bench)
        if barge.clears and barge.turns:
            bench.barge_in_ms.append(barge.clears[0] - barge.turns[0].speech_start_ms)


def _collect(report: CallReport, bench: CallBench) -> None:
    if report.greeting_start_ms is not None:
        bench.greeting_ms.append(report.greeting_start_ms)
    bench.underrun_ms += report.underrun_ms
    bench.violations += len(report.protocol_violations)
    for turn in report.turns:
        if turn.text == BARGE_IN:  # measured as onset → clear instead
            continue
        if turn.latency_ms is None:
            bench.unanswered += 1
        else:
            bench.latencies_ms.append(turn.latency_ms)


def bench_call(args: argparse.Namespace) -> dict[str, object]:
    from app.settings import Settings

    settings = Settings.from_env()
    bench = CallBench(machine=machine(), stt_model=settings.stt_model)
    if args.url:
        asyncio.run(run_call_bench(args.url, args.auth_token, args.calls, bench, args.voice))
    else:
        from app.main import create_app
        from ops.local_server import ServerThread, free_port

        servers = ServerThread()
        try:
            port = free_port()
            local = settings.replace(
                public_url=f"http://127.0.0.1:{port}", twilio_auth_token=BENCH_TOKEN
            )
            app = create_app(local)
            url = servers.serve(app, port)
            ready = app.state.services.ready

            async def wait_ready() -> None:
                await asyncio.wait_for(ready.wait(), 600)

            servers.run(wait_ready(), timeout=620)
            began = datetime.now(UTC)
            asyncio.run(run_call_bench(url, BENCH_TOKEN, args.calls, bench, args.voice))
            for _ in range(200):  # the last records close as their calls end
                if not app.state.services.calls:
                    break
                time.sleep(0.05)
            breakdown = _server_breakdown(local.calls_dir, began) if local.recording else {}
        finally:
            servers.close()
        return {
            "machine": bench.machine,
            "stt_model": bench.stt_model,
            "caller_voice": args.voice,
            **bench.summary(),
            **breakdown,
            "latencies_ms": [round(v) for v in bench.latencies_ms],
            "barge_in_ms": [round(v) for v in bench.barge_in_ms],
        }
    return {
        "machine": bench.machine,
        "stt_model": bench.stt_model,
        **bench.summary(),
        "latencies_ms": [round(v) for v in bench.latencies_ms],
        "barge_in_ms": [round(v) for v in bench.barge_in_ms],
    }


def _server_breakdown(calls_dir: Path, since: datetime) -> dict[str, float]:
    """Medians of the server's own per-turn timings: where the time goes.

    Read from the records of the calls since `since` (their `turn_timing` events): the
    server keeps no finished call in memory.
    """
    from callevents import TurnTiming, parse_timeline
    from recordings.store import RecordStore

    store = RecordStore(calls_dir)
    timings = [
        event
        for summary in store.summaries()
        if summary.started_at >= since
        for _, event in parse_timeline(store.open(summary.call_sid).timeline())
        if isinstance(event, TurnTiming) and event.mouth_to_mouth_ms is not None
    ]
    parts = {
        "server_end_of_turn_ms": [t.end_of_turn_ms for t in timings],
        "server_stt_ms": [t.stt_ms for t in timings],
        "server_llm_first_token_ms": [t.llm_first_token_ms or 0.0 for t in timings],
        "server_tts_first_audio_ms": [t.tts_first_audio_ms or 0.0 for t in timings],
        "server_mouth_to_mouth_ms": [t.mouth_to_mouth_ms or 0.0 for t in timings],
    }
    return {f"{k}_p50": percentile(v, 50) for k, v in parts.items()}


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    call = sub.add_parser("call", help="mouth-to-mouth and barge-in latency on scripted calls")
    call.add_argument("--calls", type=int, default=2, help="latency calls (3 questions each)")
    call.add_argument("--url", default="", help="dial a running server instead of starting one")
    call.add_argument("--auth-token", default=os.environ.get("TWILIO_AUTH_TOKEN"))
    call.add_argument(
        "--voice",
        default="piper",
        choices=("piper", "espeak"),
        help="the caller's voice: piper (natural prosody) or espeak (flat, harder)",
    )
    call.set_defaults(run=bench_call)
    return call
