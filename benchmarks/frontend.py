"""`python -m benchmarks frontend` — CPU per 20 ms frame of the inbound audio chain.

    python -m benchmarks frontend [--repeat 3]

Each front-end choice (RNNoise, the echo canceller, on and off) run over the same
sample-exact line, in this process, timed per frame: the median over `--repeat` runs,
and the share of one core a call's front end takes.
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

from benchmarks.measure import QUESTIONS, machine


def bench_frontend(args: argparse.Namespace) -> dict[str, object]:
    """CPU per 20 ms frame of the inbound chain, on the hardest line: the bot talking
    (its echo at -10 dB, 150 ms) and babble at 15 dB, so the canceller is busy."""
    from benchmarks.hearing import BOT_LINES, FRONT_ENDS, build_line, run_front_end
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


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    frontend = sub.add_parser("frontend", help="CPU per 20 ms frame of the inbound chain")
    frontend.add_argument("--repeat", type=int, default=3)
    frontend.set_defaults(run=bench_frontend)
    return frontend
