"""`offhook bench` — latency and CPU measured the way a caller and an operator feel them.

    offhook bench call      scripted calls against the real bot: mouth-to-mouth latency
                            at the caller's ear (p50/p90), and barge-in onset → clear
    offhook bench frontend  CPU per 20 ms frame of the inbound audio chain
    offhook bench recorder  what recording a call costs its event loop per frame
    offhook bench units     duplex cascade backend: unit processing time vs unit length
    offhook bench takeover  worker process killed mid-question / mid-reply: the caller's gap
    offhook bench pool      N local workers, 1..M simultaneous callers (ops/bench_duplex.py)
    offhook bench hearing   calls in every line condition (echo, babble, noise): who the
                            bot hears, WER, own-echo turns, self-clears (ops/bench_hearing.py)
    offhook bench stt       offline: WER and CPU of the front-end and Whisper choices
    offhook bench turns     scripted calls judged at the caller's ear against turn-taking
                            targets: answered, talk-over, pauses, backchannels,
                            interruptions, dead air (ops/bench_turns.py)
    offhook bench lanes     front-end frame latency while the models run, one shared
                            thread pool vs the front-end lanes and the model scheduler
                            (ops/bench_lanes.py)
    offhook bench soak      server RSS over 100+ answered calls, sequential and
                            concurrent: MB per 10 calls after warm-up (ops/bench_soak.py)
    offhook bench abuse     each attack of a stranger beside a live call: its underruns,
                            mouth-to-mouth and the server's RSS (ops/bench_abuse.py)
    offhook bench llm       embedded LLM servers: first clause when 1..N calls ask at
                            once, per layout of servers x threads (ops/bench_llm.py)

`call` starts the bot in-process on 127.0.0.1 (or dials `--url`), plays a Twilio caller
with espeak speech through 8 kHz mu-law, and reads every figure off the simulated
Twilio side: nothing is taken from the server's own opinion of itself.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from ops.measure import BENCH_TOKEN, QUESTIONS, machine, percentile
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


def bench_frontend(args: argparse.Namespace) -> dict[str, object]:
    """CPU per 20 ms frame of the inbound chain, on the hardest line: the bot talking
    (its echo at -10 dB, 150 ms) and babble at 15 dB, so the canceller is busy."""
    from ops.bench_hearing import BOT_LINES, FRONT_ENDS, build_line, run_front_end
    from ops.caller_voice import CallerVoice
    from ops.line import LineConditions

    voice = CallerVoice("piper")
    texts = list(QUESTIONS[:3])
    built = build_line(
        LineConditions(noise="babble", snr_db=15, echo_db=-10, echo_delay_ms=150),
        [voice.speak(t).astype(np.float32) for t in texts],
        texts,
        [voice.speak(t).astype(np.float32) * np.float32(0.7) for t in BOT_LINES],
    )
    result: dict[str, object] = {"machine": machine(), "frames": built.line.size // 160}
    for name, (denoise, echo_cancel) in FRONT_ENDS.items():
        runs = [
            run_front_end(built, denoise=denoise, echo_cancel=echo_cancel)[1]
            for _ in range(args.repeat)
        ]
        result[f"{name}: us per frame (median)"] = round(statistics.median(runs), 1)
        # Share of one core a call's front end takes: per-frame CPU over the 20 ms frame.
        result[f"{name}: core share %"] = round(statistics.median(runs) / 20_000 * 100, 2)
    return result


def bench_recorder(args: argparse.Namespace) -> dict[str, object]:
    """What recording costs the call's event loop per 20 ms frame, and the writer's pace."""
    import tempfile

    from media.codec import mulaw_decode, mulaw_encode
    from recordings.recorder import CallRecorder

    frames = args.seconds * 50
    rng = np.random.default_rng(7)
    payload = mulaw_encode((rng.standard_normal(160) * 3000).astype(np.int16))
    bot = (rng.standard_normal(800) * 3000).astype(np.int16)
    with tempfile.TemporaryDirectory() as root:
        recorder = CallRecorder(Path(root), "CAbench", meta={"agent": "bench"})
        per_frame = []
        began = time.perf_counter()
        for i in range(frames):
            # Frames arrive `speed` times faster than a real call: the writer must keep up.
            lag = began + i * 0.02 / args.speed - time.perf_counter()
            if lag > 0:
                time.sleep(lag)
            started = time.perf_counter()
            # What the call path does per frame: caller audio, and every 5th frame a
            # played 100 ms bot chunk with its mark sent and echoed.
            recorder.caller_audio(mulaw_decode(payload))
            if i % 5 == 0:
                recorder.event(i * 20.0, "mark_sent", name=f"m{i}", samples=800)
                recorder.event(i * 20.0, "mark_echoed", name=f"m{i}", played=True)
                recorder.bot_audio(i * 160, bot)
            per_frame.append((time.perf_counter() - started) * 1e6)
        closing = time.perf_counter()
        recorder.close(ended_with="completed", transcript={"turns": []})
        close_ms = (time.perf_counter() - closing) * 1000
        dropped = recorder.dropped
    return {
        "machine": machine(),
        "call_seconds": args.seconds,
        "speed_x_real_time": args.speed,
        "loop_us_per_frame_p50": round(percentile(per_frame, 50), 1),
        "loop_us_per_frame_p99": round(percentile(per_frame, 99), 1),
        "loop_share_of_frame_pct": round(percentile(per_frame, 50) / 20_000 * 100, 3),
        "close_ms": round(close_ms, 1),
        "dropped_items": dropped,
    }


def bench_units(args: argparse.Namespace) -> dict[str, object]:
    """Duplex `cascade` backend: time to process each unit vs the unit's length."""
    from agents.duplex.cascade_backend import CascadeDuplexBackend
    from agents.duplex.protocol import Prepare
    from app.settings import Settings
    from media.resample import resample
    from ops.caller_voice import speak

    settings = Settings.from_env()
    unit = 16000 * args.unit_ms // 1000
    # A scripted caller: a question, silence for the reply, another question...
    script = []
    for question in QUESTIONS[:4]:
        script.append(resample(speak(question).astype(np.float32) / 32768, 8000, 16000))
        script.append(np.zeros(16000 * 4, np.float32))
    audio = np.concatenate(script)

    async def run() -> dict[str, object]:
        backend = await CascadeDuplexBackend.from_settings(settings)
        try:
            await backend.prepare(Prepare(system_prompt=settings.persona(), unit_ms=args.unit_ms))
            listen: list[float] = []
            speak_ms: list[float] = []
            for start in range(0, len(audio) - unit + 1, unit):
                began = time.perf_counter()
                outcome = await backend.process_unit(audio[start : start + unit])
                elapsed = (time.perf_counter() - began) * 1000
                (speak_ms if outcome.action != "listen" else listen).append(elapsed)
                await backend.finalize_unit()
            every = listen + speak_ms
            return {
                "machine": machine(),
                "unit_ms": args.unit_ms,
                "units": len(every),
                "unit_p50_ms": round(percentile(every, 50), 1),
                "unit_p99_ms": round(percentile(every, 99), 1),
                "listen_unit_p50_ms": round(percentile(listen, 50), 1),
                "speak_unit_p50_ms": round(percentile(speak_ms, 50), 1),
                "speak_unit_max_ms": round(max(speak_ms, default=float("nan")), 1),
                "units_over_their_length": sum(1 for ms in every if ms > args.unit_ms),
            }
        finally:
            await backend.cleanup()
            await backend.aclose()

    return asyncio.run(run())


def _print(title: str, result: dict[str, object]) -> None:
    table = Table(title=title)
    table.add_column("measure")
    table.add_column("value", justify="right")
    for key, value in result.items():
        if isinstance(value, list):
            continue
        shown = f"{value:.0f}" if isinstance(value, float) and abs(value) >= 10 else str(value)
        table.add_row(key, shown)
    Console().print(table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="offhook bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="what", required=True)
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
    frontend = sub.add_parser("frontend", help="CPU per 20 ms frame of the inbound chain")
    frontend.add_argument("--repeat", type=int, default=3)
    units = sub.add_parser("units", help="duplex cascade backend: unit processing time")
    units.add_argument("--unit-ms", type=int, default=1000)
    recorder = sub.add_parser("recorder", help="recording cost on the call's event loop")
    recorder.add_argument("--seconds", type=int, default=300, help="length of the fake call")
    recorder.add_argument(
        "--speed", type=float, default=10.0, help="frames arrive this much faster than real time"
    )
    takeover = sub.add_parser("takeover", help="worker killed mid-call: what the caller hears")
    takeover.add_argument("--calls", type=int, default=3, help="trials of each kind")
    pool = sub.add_parser("pool", help="N local workers under 1..M simultaneous calls")
    pool.add_argument("--workers", type=int, default=2)
    pool.add_argument(
        "--calls",
        type=lambda text: [int(n) for n in text.split(",")],
        default=[1, 2, 3, 4],
        help="comma-separated numbers of simultaneous calls",
    )
    for p in (takeover, pool):
        p.add_argument("--worker-port", type=int, default=22500)
    from ops.bench_hearing import add_parsers, bench_hearing, bench_stt

    hearing_parsers = add_parsers(sub)
    from ops.bench_turns import add_parser as add_turns_parser
    from ops.bench_turns import bench_turns

    turns = add_turns_parser(sub)
    from ops.bench_lanes import add_parser as add_lanes_parser
    from ops.bench_lanes import bench_lanes, print_lanes

    lanes = add_lanes_parser(sub)
    from ops.bench_abuse import add_parser as add_abuse_parser
    from ops.bench_abuse import bench_abuse
    from ops.bench_llm import add_parser as add_llm_parser
    from ops.bench_llm import bench_llm
    from ops.bench_soak import add_parser as add_soak_parser
    from ops.bench_soak import bench_soak

    soak = add_soak_parser(sub)
    abuse = add_abuse_parser(sub)
    llm = add_llm_parser(sub)
    for p in (
        call,
        frontend,
        recorder,
        units,
        takeover,
        pool,
        *hearing_parsers,
        lanes,
        turns,
        soak,
        abuse,
        llm,
    ):
        p.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    from ops.bench_duplex import bench_pool, bench_takeover

    runs = {
        "call": bench_call,
        "frontend": bench_frontend,
        "recorder": bench_recorder,
        "units": bench_units,
        "takeover": bench_takeover,
        "pool": bench_pool,
        "hearing": bench_hearing,
        "stt": bench_stt,
        "lanes": bench_lanes,
        "turns": bench_turns,
        "soak": bench_soak,
        "abuse": bench_abuse,
        "llm": bench_llm,
    }
    result = runs[args.what](args)
    show = print_lanes if args.what == "lanes" else _print
    show(f"offhook bench {args.what} — {result['machine']}", result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0
