"""`python -m benchmarks lanes`: does per-frame audio work wait behind model inference?

N simulated calls feed real front ends (media.frontend.FrontEnd) 20 ms frames of a
hard line (the bot talking with its echo at -10 dB / 150 ms, babble at 15 dB, Piper-
voiced questions) at real-time pace, batching what piled up exactly as
`CallSession._frontend_loop` does. Meanwhile K simulated callers keep the real models
busy, each in a loop: Smart Turn and Whisper together on a spoken question (as the
cascade agent does at a pause), then Piper on two clauses of the reply, then a pause.

It runs that twice (or more, `--modes`):

- `pool`: everything through `asyncio.to_thread`, one shared default pool (before);
- `lanes`: each call's front end on its own `FrontEndLane`, the models through a
  `ModelScheduler` (owner = caller); the models loaded through `asyncio.to_thread`,
  as `agents.loading` does (`--load-on scheduler`: on the scheduler's threads, so
  their compute threads inherit its niceness).

A mode may override the options: `--modes pool,lanes/threads=2,lanes/niceness=0`.
Everything here competes for the same cores as whatever else runs on the box, so
each mode reports the CPU that other processes took meanwhile: compare runs only
where that is near zero. `--rounds` alternates the modes to share out such noise.

Reported per mode: a frame's latency from its due time (when Twilio would have
delivered it) to its processed output, p50 / p99 / max and how many were over 100 ms;
each stage's queue wait (submit to start) and run time; turns answered (Smart Turn +
Whisper done) and the time that took.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from rich.console import Console
from rich.table import Table

from benchmarks.measure import machine, percentile

__all__ = ["add_parser", "bench_lanes", "print_lanes"]

T = TypeVar("T")
FRAME_S = 0.02
LATE_MS = 100.0
STAGES = ("end_of_turn", "stt", "tts")
REPLIES = (
    "Sure, I can help with that",
    "the pharmacy closes at {n} tonight",
    "Of course, let me check the details",
    "it is {n} minutes from the station",
    "Thanks for waiting, I have the answer",
    "and the short answer is yes, {n} times",
)

# A model call: (owner, stage, fn, *args) -> result, however the mode runs it.
Runner = Callable[..., Awaitable[Any]]


@dataclass
class Workload:
    """The audio both modes replay: per-call frames and references, caller questions."""

    frames: list[bytes]
    references: list[np.ndarray]
    questions_16k: list[np.ndarray]


@dataclass
class ModeResult:
    frame_ms: list[float] = field(default_factory=list)
    wait_ms: defaultdict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    run_ms: defaultdict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    turn_ms: list[float] = field(default_factory=list)
    clause_ms: list[float] = field(default_factory=list)
    # CPU seconds over the measured runs, all cores summed: the box, this process, wall.
    box_cpu_s: float = 0.0
    own_cpu_s: float = 0.0
    wall_s: float = 0.0

    def merge(self, other: ModeResult) -> None:
        self.frame_ms += other.frame_ms
        for mine, theirs in ((self.wait_ms, other.wait_ms), (self.run_ms, other.run_ms)):
            for stage, values in theirs.items():
                mine[stage] += values
        self.turn_ms += other.turn_ms
        self.clause_ms += other.clause_ms
        self.box_cpu_s += other.box_cpu_s
        self.own_cpu_s += other.own_cpu_s
        self.wall_s += other.wall_s

    def summary(self) -> dict[str, float]:
        out: dict[str, float] = {
            "frames": len(self.frame_ms),
            "frame p50 ms": percentile(self.frame_ms, 50),
            "frame p99 ms": percentile(self.frame_ms, 99),
            "frame max ms": max(self.frame_ms, default=float("nan")),
            f"frames over {LATE_MS:.0f} ms": sum(1 for ms in self.frame_ms if ms > LATE_MS),
        }
        for stage in STAGES:
            out[f"{stage} wait p50 ms"] = percentile(self.wait_ms[stage], 50)
            out[f"{stage} wait p90 ms"] = percentile(self.wait_ms[stage], 90)
            out[f"{stage} run p50 ms"] = percentile(self.run_ms[stage], 50)
        out["turns"] = len(self.turn_ms)
        out["turn (eot+stt) p50 ms"] = percentile(self.turn_ms, 50)
        out["turn (eot+stt) p90 ms"] = percentile(self.turn_ms, 90)
        out["clause p50 ms"] = percentile(self.clause_ms, 50)
        out["clause p90 ms"] = percentile(self.clause_ms, 90)
        # Other engineers' jobs on a shared box show here: compare runs only when low.
        capacity = self.wall_s * (os.cpu_count() or 1) / 100
        out["bench CPU %"] = self.own_cpu_s / capacity if capacity else float("nan")
        out["other processes' CPU %"] = (
            (self.box_cpu_s - self.own_cpu_s) / capacity if capacity else float("nan")
        )
        return {k: round(v, 1) if isinstance(v, float) else v for k, v in out.items()}


def _cpu_seconds() -> tuple[float, float]:
    """CPU time so far, all cores summed: the whole box's (from /proc/stat), this process's."""
    mine = os.times()
    try:
        fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    except (OSError, ValueError):
        return float("nan"), mine.user + mine.system
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    busy = (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")
    return busy, mine.user + mine.system


def build_workload() -> Workload:
    """The `bench frontend` line, as Twilio frames and the playout clock's references."""
    from benchmarks.hearing import BOT_LINES, QUESTIONS, RATE, build_line, line_references
    from media.codec import mulaw_encode
    from media.resample import resample
    from ops.caller_voice import CallerVoice
    from ops.line import LineConditions

    voice = CallerVoice("piper")
    texts = list(QUESTIONS[:3])
    spoken = [voice.speak(t).astype(np.float32) for t in texts]
    built = build_line(
        LineConditions(noise="babble", snr_db=15, echo_db=-10, echo_delay_ms=150),
        spoken,
        texts,
        [voice.speak(t).astype(np.float32) * np.float32(0.7) for t in BOT_LINES],
    )
    references = line_references(built)
    frames = [mulaw_encode(built.line[i * 160 : i * 160 + 160]) for i in range(len(references))]
    questions = [resample(q / np.float32(32768), RATE, 16000) for q in spoken]
    return Workload(frames, references, questions)


async def _caller_front_end(
    workload: Workload,
    offset: int,
    seconds: float,
    run: Callable[..., Awaitable[Any]],
    result: ModeResult,
    start: float,
) -> None:
    """One call's front end fed at 20 ms pace, batched as `CallSession._frontend_loop`."""
    from media.frontend import FrontEnd

    front = FrontEnd(min_silence_ms=64)
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[int, float] | None] = asyncio.Queue()
    count = int(seconds / FRAME_S)
    total = len(workload.frames)

    async def feed() -> None:
        for k in range(count):
            due = start + k * FRAME_S
            if (delay := due - loop.time()) > 0:
                await asyncio.sleep(delay)
            queue.put_nowait((k, due))
        queue.put_nowait(None)

    async def process() -> None:
        while True:
            batch = [await queue.get()]
            while not queue.empty():
                batch.append(queue.get_nowait())
            items = [item for item in batch if item is not None]
            if items:
                indexes = [(offset + k) % total for k, _ in items]
                data = b"".join(workload.frames[i] for i in indexes)
                reference = np.concatenate([workload.references[i] for i in indexes])
                await run(front.process, data, reference)
                done = loop.time()
                result.frame_ms.extend((done - due) * 1000 for _, due in items)
            if len(items) < len(batch):
                return

    try:
        await asyncio.gather(feed(), process())
    finally:
        front.close()


async def _talker(
    owner: int,
    workload: Workload,
    models: tuple[Any, Any, Any],
    run: Runner,
    result: ModeResult,
    until: float,
    gap_s: float,
) -> None:
    """A caller who keeps asking: Smart Turn + Whisper together, then two clauses."""
    stt, tts, eot = models
    loop = asyncio.get_running_loop()
    turn = owner  # callers start on different questions
    while loop.time() < until:
        audio = workload.questions_16k[turn % len(workload.questions_16k)]
        began = loop.time()
        await asyncio.gather(
            run(owner, "end_of_turn", eot.predict, audio),
            run(owner, "stt", stt.transcribe, audio),
        )
        result.turn_ms.append((loop.time() - began) * 1000)
        for k in range(2):
            # Unique text: Piper's clause cache would otherwise answer without working.
            text = REPLIES[(2 * turn + k) % len(REPLIES)].format(n=owner * 1000 + turn)
            began = loop.time()
            await run(owner, "tts", tts.synthesize, f"{text}, {owner}-{turn}.")
            result.clause_ms.append((loop.time() - began) * 1000)
        turn += 1
        await asyncio.sleep(gap_s)


def _load(settings: Any) -> list[Callable[[], Any]]:
    """Constructors of the three models, as `agents.loading.load_models` builds them."""
    from agents.assets import STT_ASSETS, ModelCache
    from agents.cascade.stt import WhisperTranscriber
    from agents.cascade.tts import PiperSpeaker
    from media.turn import EndOfTurnModel

    cache = ModelCache(settings.model_cache_dir)
    stt_dir = cache.path(STT_ASSETS[settings.stt_model])
    threads = settings.model_threads
    return [
        functools.partial(WhisperTranscriber, stt_dir, threads=threads, language="en"),
        functools.partial(PiperSpeaker, cache.path("piper-joe-medium"), threads=threads),
        functools.partial(EndOfTurnModel, cache.path("smart-turn-v3.2"), threads=1),
    ]


def _mode_options(mode: str, args: argparse.Namespace) -> argparse.Namespace:
    """`lanes/threads=1/niceness=0`: the command line's options, overridden for one mode."""
    name, *overrides = mode.split("/")
    options = argparse.Namespace(**vars(args))
    options.mode = name
    for item in overrides:
        key, _, value = item.partition("=")
        key = key.replace("-", "_")
        if key not in ("threads", "niceness", "frontend_threads", "load_on"):
            raise SystemExit(f"unknown mode option {key!r} in {mode!r}")
        setattr(options, key, value if key == "load_on" else int(value))
    return options


async def _run_mode(mode: str, args: argparse.Namespace, workload: Workload) -> ModeResult:
    from agents.scheduler import FrontEndLane, ModelScheduler
    from app.settings import Settings

    args = _mode_options(mode, args)
    settings = Settings.from_env()
    if args.stt:
        settings = settings.replace(stt_model=args.stt)
    result = ModeResult()
    loop = asyncio.get_running_loop()
    scheduler: ModelScheduler | None = None
    shared_lane: FrontEndLane | None = None
    lanes: list[FrontEndLane] = []

    def measure(store: dict[str, list[float]]) -> Callable[[str, float], None]:
        return lambda stage, seconds: store[stage].append(seconds * 1000)

    if args.mode == "pool":

        async def pool_run(owner: Hashable, stage: str, fn: Callable[..., T], *a: Any) -> T:
            queued = time.perf_counter()

            def timed() -> T:
                started = time.perf_counter()
                result.wait_ms[stage].append((started - queued) * 1000)
                try:
                    return fn(*a)
                finally:
                    result.run_ms[stage].append((time.perf_counter() - started) * 1000)

            return await asyncio.to_thread(timed)

        run_model: Runner = pool_run
        constructors = _load(settings)
        stt, tts, eot = await asyncio.gather(*(asyncio.to_thread(c) for c in constructors))
        front_runners: list[Callable[..., Awaitable[Any]]] = [asyncio.to_thread] * args.calls
    else:
        scheduler = ModelScheduler(
            args.threads,
            niceness=args.niceness,
            on_wait=measure(result.wait_ms),
            on_run=measure(result.run_ms),
        )
        run_model = scheduler.run
        constructors = _load(settings)
        if args.load_on == "scheduler":
            # On the scheduler's threads: the compute threads inherit their niceness.
            loading = [scheduler.run("load", "load", c) for c in constructors]
        else:
            loading = [asyncio.to_thread(c) for c in constructors]
        stt, tts, eot = await asyncio.gather(*loading)
        if args.frontend_threads:
            shared_lane = FrontEndLane(args.frontend_threads, name="frontend-shared")
            front_runners = [shared_lane.run] * args.calls
        else:
            lanes = [FrontEndLane(name=f"frontend-{k}") for k in range(args.calls)]
            front_runners = [lane.run for lane in lanes]
    try:
        # Warm up outside the measurement: first calls allocate.
        silence = np.zeros(16000, np.float32)
        await run_model("warm", "warm", stt.transcribe, silence)
        await run_model("warm", "warm", eot.predict, silence)
        await run_model("warm", "warm", tts.synthesize, "Warming up.")
        for store in (result.wait_ms, result.run_ms):
            store.pop("warm", None)
            store.pop("load", None)
        start = loop.time() + 0.5
        callers = [
            _caller_front_end(workload, k * 1013, args.seconds, front_runners[k], result, start)
            for k in range(args.calls)
        ]
        talkers = [
            _talker(k, workload, (stt, tts, eot), run_model, result, start + args.seconds, args.gap)
            for k in range(args.jobs)
        ]
        box, own = _cpu_seconds()
        began = time.perf_counter()
        await asyncio.gather(*callers, *talkers)
        result.wall_s = time.perf_counter() - began
        box_end, own_end = _cpu_seconds()
        result.box_cpu_s, result.own_cpu_s = box_end - box, own_end - own
    finally:
        for lane in lanes:
            await lane.aclose()
        if shared_lane is not None:
            await shared_lane.aclose()
        if scheduler is not None:
            await scheduler.aclose()
    return result


def bench_lanes(args: argparse.Namespace) -> dict[str, object]:
    workload = build_workload()
    result: dict[str, object] = {
        "machine": machine(),
        "calls": args.calls,
        "model job streams": args.jobs,
        "seconds per mode": args.seconds * args.rounds,
        "model threads": args.threads if args.threads else "default",
        "model niceness": args.niceness,
        "models loaded on": args.load_on,
        "front-end lane": (
            f"shared, {args.frontend_threads} threads" if args.frontend_threads else "per call"
        ),
    }
    results = {mode: ModeResult() for mode in args.modes}
    for _ in range(args.rounds):  # rounds alternate the modes: a busy neighbour hits both
        for mode in args.modes:
            results[mode].merge(asyncio.run(_run_mode(mode, args, workload)))
    for mode, measured in results.items():
        result.update({f"{mode}: {key}": value for key, value in measured.summary().items()})
    return result


def print_lanes(title: str, result: dict[str, object]) -> None:
    """Measures down, modes across; the run's settings under the table."""
    modes = list(dict.fromkeys(key.split(": ", 1)[0] for key in result if ": " in key))
    settings = ", ".join(
        f"{key} {value}" for key, value in result.items() if ": " not in key and key != "machine"
    )
    table = Table(title=title, caption=settings)
    table.add_column("measure")
    for mode in modes:
        table.add_column(mode, justify="right")
    measures = list(dict.fromkeys(key.split(": ", 1)[1] for key in result if ": " in key))
    for measure in measures:
        table.add_row(measure, *(str(result.get(f"{mode}: {measure}", "")) for mode in modes))
    Console().print(table)


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    from agents.scheduler import MODEL_NICENESS

    lanes = sub.add_parser(
        "lanes", help="front-end frame latency while the models run: shared pool vs lanes"
    )
    lanes.add_argument("--calls", type=int, default=4, help="front ends fed in real time")
    lanes.add_argument("--jobs", type=int, default=4, help="callers keeping the models busy")
    lanes.add_argument("--seconds", type=float, default=40.0, help="length of each mode's run")
    lanes.add_argument("--rounds", type=int, default=1, help="runs of each mode, alternating")
    lanes.add_argument("--gap", type=float, default=0.5, help="pause between a caller's turns")
    lanes.add_argument(
        "--modes",
        type=lambda text: text.split(","),
        default=["pool", "lanes"],
        help="comma-separated: pool (asyncio.to_thread for all), lanes; a mode may override "
        "options, e.g. lanes/threads=1/niceness=0/frontend-threads=2/load-on=pool",
    )
    lanes.add_argument(
        "--threads", type=int, default=None, help="model threads (default: the scheduler's)"
    )
    lanes.add_argument("--niceness", type=int, default=MODEL_NICENESS, help="of model threads")
    lanes.add_argument(
        "--frontend-threads",
        type=int,
        default=0,
        help="0: a lane per call; n: one lane of n threads shared by every call",
    )
    lanes.add_argument(
        "--load-on",
        choices=("scheduler", "pool"),
        default="pool",
        help="lanes: load the models through asyncio's pool (as the app) or the scheduler",
    )
    lanes.add_argument("--stt", default="", help="Whisper model (default: STT_MODEL's)")
    lanes.set_defaults(run=bench_lanes, show=print_lanes)
    return lanes
