"""Benchmarks of the duplex worker pool as callers meet it.

    python -m benchmarks takeover  a real `offhook worker` process SIGKILLed mid-question
                                   and mid-reply: what the caller hears until the cascade
                                   has the call
    python -m benchmarks pool      N local workers on this host, 1..M simultaneous
                                   callers: who served each call, answers, latency, unit
                                   time, underruns
    python -m benchmarks units     the duplex `cascade` backend alone: time to process
                                   each unit vs the unit's length

`takeover` and `pool` start the bot in-process on 127.0.0.1 and its workers as child
processes sharing its embedded LLM, exactly as `offhook serve --local-workers N` does;
every figure is read at the simulated caller's ear or from the call's record. `units`
runs the backend alone, in this process, on a scripted caller's audio.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import signal
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agents.conversation import Speaker
from benchmarks.measure import BENCH_TOKEN, QUESTIONS, machine, percentile
from ops.simulate import CallerTurn, CallReport, SimulationConfig, simulate_call
from recordings.store import RecordStore

STORY = "Please tell me a long story about a brave little dragon who learns to fly."


@dataclass
class LocalDeployment:
    """The bot and its local workers, as `offhook serve --local-workers N` runs them."""

    url: str
    app: Any
    workers: Any  # agents.duplex.local.LocalWorkers
    servers: Any  # ops.local_server.ServerThread
    worker_port: int
    env: dict[str, str]
    log_dir: Path

    @property
    def services(self) -> Any:
        return self.app.state.services

    def pool_idle(self, count: int, timeout_s: float = 60) -> None:
        async def wait() -> None:
            pool = self.services.pool
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                await pool.check_health()
                if pool.snapshot()["idle"] >= count:
                    return
                await asyncio.sleep(0.2)
            raise TimeoutError(f"pool not idle: {pool.snapshot()}")

        self.servers.run(wait(), timeout=timeout_s + 5)

    def respawn(self) -> None:
        """Replace the (killed) workers with fresh processes on the same ports."""
        from agents.duplex.local import LocalWorkers

        self.workers.stop()
        self.workers = LocalWorkers(
            len(self.workers.urls),
            self.worker_port,
            env=self.env,
            worker_envs=self.workers.worker_envs,
            log_dir=self.log_dir,
        )
        self.workers.wait_idle()
        self.pool_idle(len(self.workers.urls))


@contextmanager
def local_deployment(workers: int, worker_port: int, **overrides: Any) -> Iterator[LocalDeployment]:
    from agents.duplex.local import LocalWorkers, share_embedded_llm
    from app.main import create_app
    from app.settings import Settings
    from ops.local_server import ServerThread, free_port

    port = free_port()
    settings = Settings.from_env(
        public_url=f"http://127.0.0.1:{port}", twilio_auth_token=BENCH_TOKEN, **overrides
    )
    settings, worker_envs = share_embedded_llm(settings, workers, worker_port=worker_port)
    env = {"LOG_LEVEL": "WARNING"}
    log_dir = Path(tempfile.mkdtemp(prefix="offhook-bench-workers-"))
    local = LocalWorkers(workers, worker_port, env=env, worker_envs=worker_envs, log_dir=log_dir)
    urls = ",".join(local.urls)
    servers = ServerThread()
    try:
        app = create_app(settings.replace(duplex_workers=urls))
        url = servers.serve(app, port)

        async def ready() -> None:
            await asyncio.wait_for(app.state.services.ready.wait(), 600)

        servers.run(ready(), timeout=620)
        local.wait_idle()
        deployment = LocalDeployment(url, app, local, servers, worker_port, env, log_dir)
        deployment.pool_idle(workers)
        yield deployment
    finally:
        servers.close()
        local.stop()


# --- takeover ----------------------------------------------------------------------------


@dataclass
class TakeoverTrial:
    kind: str  # "question" or "reply"
    killed_ms: float  # call clock
    detect_ms: float | None = None  # death → the gateway's fallback
    answer_latency_ms: float | None = None  # question: its end → the cascade's answer
    death_to_cascade_audio_ms: float | None = None  # reply: death → the cascade's words
    longest_silence_ms: float | None = None  # after the death, at the ear


def _silences_after(report: CallReport, since_ms: float) -> list[float]:
    """Silent stretches at the ear after `since_ms`, until the bot's last utterance."""
    heard = [(a, b) for a, b in report.bot_utterances if b > since_ms]
    edges = [since_ms, *[x for pair in heard for x in pair]]
    # (since, a1), (b1, a2), ...: the gaps between the ends and the next starts.
    return [max(0.0, edges[i + 1] - edges[i]) for i in range(0, len(edges) - 1, 2)]


async def _takeover_call(deployment: LocalDeployment, kind: str) -> TakeoverTrial:
    loop = asyncio.get_running_loop()
    sid = f"CA{int(time.time() * 1000):032d}"[-34:]
    trial = TakeoverTrial(kind=kind, killed_ms=float("nan"))
    tasks: list[asyncio.Task[None]] = []

    def on_turn_start(index: int, start_ms: float) -> None:
        began = loop.time()

        async def kill_mid_question() -> None:
            await asyncio.sleep(1.0)
            await kill()

        async def kill_mid_reply() -> None:
            for _ in range(1000):
                session = deployment.services.calls.get(sid)
                bot = [] if session is None else _bot_turns(session)
                if len(bot) >= 2:  # the greeting, then the worker's reply has begun
                    break
                await asyncio.sleep(0.02)
            await kill()

        async def kill() -> None:
            session = deployment.services.calls.get(sid)
            if session is None or session.fallbacks:
                return  # the worker already failed by itself: no trial
            deployment.workers.kill(0, signal.SIGKILL)
            killed = loop.time()
            trial.killed_ms = start_ms + (killed - began) * 1000
            # Detection in wall time: the call clocks of the two sides differ by the
            # frames in flight, which is about what is being measured.
            for _ in range(5000):  # polled: the session has no event for it
                if session.fallbacks:
                    break
                await asyncio.sleep(0.002)
            trial.detect_ms = (loop.time() - killed) * 1000

        if index == 0:
            tasks.append(
                loop.create_task(kill_mid_question() if kind == "question" else kill_mid_reply())
            )

    text = QUESTIONS[1] if kind == "question" else STORY
    report = await simulate_call(
        SimulationConfig(
            base_url=deployment.url,
            auth_token=BENCH_TOKEN,
            call_sid=sid,
            turns=[CallerTurn(text=text)],
            hangup_after_ms=6000,
            voice_engine="piper",
            on_turn_start=on_turn_start,
        )
    )
    await asyncio.gather(*tasks)
    await asyncio.sleep(0.5)
    if math.isnan(trial.killed_ms):
        trial.kind += " (worker failed first)"
        return trial
    if kind == "question" and report.turns:
        trial.answer_latency_ms = report.turns[0].latency_ms
    bot = await _recorded_bot_turns(deployment, sid)
    if kind == "reply" and len(bot) >= 3 and bot[2]["start_ms"] is not None:
        trial.death_to_cascade_audio_ms = bot[2]["start_ms"] - trial.killed_ms
    silences = _silences_after(report, trial.killed_ms)
    if kind == "reply":
        trial.longest_silence_ms = max(silences, default=None)
    return trial


def _bot_turns(session: Any) -> list[Any]:
    """A live call's bot turns so far (the server keeps only live calls in memory)."""
    return [t for t in session.conversation.turns if t.speaker is Speaker.BOT and t.text]


async def _recorded_bot_turns(deployment: LocalDeployment, sid: str) -> list[dict[str, Any]]:
    """A finished call's bot turns, from its record's transcript."""
    for _ in range(200):  # the record is closed as the call ends
        if sid not in deployment.services.calls:
            break
        await asyncio.sleep(0.05)
    transcript = RecordStore(deployment.services.settings.calls_dir).open(sid).transcript()
    return [t for t in transcript["turns"] if t["speaker"] == "bot" and t["text"]]


def _worker_answer_latencies(deployment: LocalDeployment, calls: int) -> list[float]:
    """The same question answered by a healthy worker: the baseline."""
    latencies = []
    for _ in range(calls):
        report = asyncio.run(
            simulate_call(
                SimulationConfig(
                    base_url=deployment.url,
                    auth_token=BENCH_TOKEN,
                    turns=[CallerTurn(text=QUESTIONS[1])],
                    voice_engine="piper",
                )
            )
        )
        latencies += [t.latency_ms for t in report.turns if t.latency_ms is not None]
    return latencies


def bench_takeover(args: argparse.Namespace) -> dict[str, object]:
    trials: list[TakeoverTrial] = []
    with local_deployment(1, args.worker_port) as deployment:
        baseline = _worker_answer_latencies(deployment, args.calls)
        for _ in range(args.calls):
            for kind in ("question", "reply"):
                trials.append(asyncio.run(_takeover_call(deployment, kind)))
                deployment.respawn()

    def values(kind: str, name: str) -> list[float]:
        return [v for t in trials if t.kind == kind and (v := getattr(t, name)) is not None]

    detect = values("question", "detect_ms") + values("reply", "detect_ms")
    answer = values("question", "answer_latency_ms")
    to_audio = values("reply", "death_to_cascade_audio_ms")
    silence = values("reply", "longest_silence_ms")
    return {
        "machine": machine(),
        "trials": len(trials),
        "worker_answer_p50_ms": round(percentile(baseline, 50)),
        "kill_to_fallback_p50_ms": round(percentile(detect, 50)),
        "kill_to_fallback_max_ms": round(max(detect, default=float("nan"))),
        "mid_question_answer_p50_ms": round(percentile(answer, 50)),
        "mid_question_answer_max_ms": round(max(answer, default=float("nan"))),
        "trials_without_a_kill": sum(1 for t in trials if "failed first" in t.kind),
        "mid_question_unanswered": sum(
            1 for t in trials if t.kind == "question" and t.answer_latency_ms is None
        ),
        "mid_reply_death_to_cascade_audio_p50_ms": round(percentile(to_audio, 50)),
        "mid_reply_longest_silence_p50_ms": round(percentile(silence, 50)),
        "mid_reply_longest_silence_max_ms": round(max(silence, default=float("nan"))),
        "trials_detail": [vars(t) for t in trials],
    }


# --- pool --------------------------------------------------------------------------------


async def _concurrent_calls(deployment: LocalDeployment, count: int) -> list[CallReport]:
    async def one(index: int) -> CallReport:
        await asyncio.sleep(index * 0.25)  # callers do not dial in the same millisecond
        questions = QUESTIONS[index % len(QUESTIONS) :] + QUESTIONS[: index % len(QUESTIONS)]
        return await simulate_call(
            SimulationConfig(
                base_url=deployment.url,
                auth_token=BENCH_TOKEN,
                turns=[CallerTurn(text=q) for q in questions[:2]],
                voice_engine="piper",
            )
        )

    return list(await asyncio.gather(*(one(i) for i in range(count))))


def bench_pool(args: argparse.Namespace) -> dict[str, object]:

    levels: list[dict[str, object]] = []
    overrides = {"max_calls": max(args.calls) + 1}
    with local_deployment(args.workers, args.worker_port, **overrides) as deployment:
        store = RecordStore(deployment.services.settings.calls_dir)
        metrics = deployment.services.pool.metrics
        unit_s = deployment.services.settings.unit_ms / 1000
        for count in args.calls:
            deployment.pool_idle(args.workers)
            units_before = _unit_buckets(metrics)
            reports = asyncio.run(_concurrent_calls(deployment, count))
            time.sleep(0.5)
            metas = [store.open(r.call_sid).meta for r in reports]
            latencies = [t.latency_ms for r in reports for t in r.turns if t.latency_ms is not None]
            turns = sum(len(r.turns) for r in reports)
            units = _unit_summary(units_before, _unit_buckets(metrics), unit_s)
            levels.append(
                {
                    "calls": count,
                    "by_worker": sum(1 for m in metas if m["agent"] == "duplex"),
                    "by_cascade": sum(1 for m in metas if m["agent"] != "duplex"),
                    "answered": f"{len(latencies)}/{turns}",
                    "m2m_p50_ms": round(percentile(latencies, 50)),
                    "m2m_p90_ms": round(percentile(latencies, 90)),
                    **units,
                    "underrun_ms": round(sum(r.underrun_ms for r in reports)),
                }
            )
    result: dict[str, object] = {"machine": machine(), "workers": args.workers}
    for level in levels:
        for key, value in level.items():
            if key != "calls":
                result[f"{level['calls']}_calls_{key}"] = value
    result["levels"] = levels
    return result


def _unit_buckets(metrics: Any) -> dict[float, float]:
    """The gateway's unit round-trip histogram: cumulative count per upper bound (s)."""
    counts: dict[float, float] = {}
    for family in metrics.unit_seconds.collect():
        for sample in family.samples:
            if sample.name.endswith("_bucket"):
                counts[float(sample.labels["le"])] = sample.value
    return counts


def _unit_summary(
    before: dict[float, float], after: dict[float, float], unit_s: float
) -> dict[str, object]:
    """Units in this run, how many took longer than a unit, and the p99's bucket."""
    delta = {le: after.get(le, 0.0) - before.get(le, 0.0) for le in sorted(after)}
    total = delta.get(float("inf"), 0.0)
    if not total:
        return {"units": 0, "units_over_length": 0, "unit_p99_under_ms": None}
    within = max((v for le, v in delta.items() if le <= unit_s), default=0.0)
    p99 = next(le for le, v in delta.items() if v >= 0.99 * total)
    return {
        "units": int(total),
        "units_over_length": int(total - within),
        "unit_p99_under_ms": None if p99 == float("inf") else round(p99 * 1000),
    }


# --- units -------------------------------------------------------------------------------


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


def add_parsers(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
) -> list[argparse.ArgumentParser]:
    takeover = sub.add_parser("takeover", help="worker killed mid-call: what the caller hears")
    takeover.add_argument("--calls", type=int, default=3, help="trials of each kind")
    takeover.set_defaults(run=bench_takeover)
    pool = sub.add_parser("pool", help="N local workers under 1..M simultaneous calls")
    pool.add_argument("--workers", type=int, default=2)
    pool.add_argument(
        "--calls",
        type=lambda text: [int(n) for n in text.split(",")],
        default=[1, 2, 3, 4],
        help="comma-separated numbers of simultaneous calls",
    )
    pool.set_defaults(run=bench_pool)
    for p in (takeover, pool):
        p.add_argument("--worker-port", type=int, default=22500)
    units = sub.add_parser("units", help="duplex cascade backend: unit processing time")
    units.add_argument("--unit-ms", type=int, default=1000)
    units.set_defaults(run=bench_units)
    return [takeover, pool, units]
