"""`python -m benchmarks recorder` — what recording a call costs its event loop.

    python -m benchmarks recorder [--seconds 300] [--speed 10]

A fake call's frames handed to a `CallRecorder` as the call path hands them (caller
audio every frame, a played bot chunk and its marks every fifth), `--speed` times
faster than real time: the loop's time per frame, the close, and anything the writer
had to drop.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from benchmarks.measure import machine, percentile


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


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    recorder = sub.add_parser("recorder", help="recording cost on the call's event loop")
    recorder.add_argument("--seconds", type=int, default=300, help="length of the fake call")
    recorder.add_argument(
        "--speed", type=float, default=10.0, help="frames arrive this much faster than real time"
    )
    recorder.set_defaults(run=bench_recorder)
    return recorder
