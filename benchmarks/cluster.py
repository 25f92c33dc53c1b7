"""`python -m benchmarks cluster` — many gateways and workers as one system, on one box.

    python -m benchmarks cluster [--calls 4] [--concurrent 2]

Setup (benchmarks/cluster_setup.py), all on loopback: a real redis-server, SeaweedFS's
S3 gateway, two cascade workers registered through REDIS_URL, two gateways sharing
REDIS_URL, RECORDS_URL, CALL_TOKEN_SECRET and one PUBLIC_URL, and HAProxy in front of
them with deploy/haproxy.cfg. Every call goes through the Twilio protocol (the simulated
caller, which follows <Redirect> after a closed stream as Twilio does).

Runs, each with fresh calls of two questions:
- single: one gateway and the same two workers, no HAProxy: the single box, the
  baseline, at the same load;
- spread: the same calls through HAProxy over both gateways;
- worker-kill: a worker SIGKILLed 1 s into a caller's second question;
- gateway-kill: the gateway holding a call SIGKILLed 1 s into its second question;
- load: `2 x --concurrent` calls at once, no fault: the baseline of the next run;
- redis-restart: Redis restarted under `2 x --concurrent` calls, then one more call;
- drain: the gateway holding a call sent SIGTERM 1 s into its second question.

Reported per run: answered turns, mouth-to-mouth p50/p90 (turns outside the fault),
refused calls, what the fault cost the caller (from the fault to the bot heard again),
and at the end, records listed by `offhook calls list` with only RECORDS_URL against
the calls placed. Targets (issue 31): nothing lost, every turn answered outside the
faults, mouth-to-mouth within 10 % of the single box.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import httpx

from benchmarks.cluster_setup import Cluster, Gateway, Process
from benchmarks.measure import BENCH_TOKEN, QUESTIONS, machine, percentile
from ops.simulate import CallerTurn, CallReport, SimulationConfig, simulate_call
from ops.twilio_webhook import SimulationError

FAULT_AFTER_S = 1.0  # into the caller's second question


@dataclass
class RunResult:
    name: str
    placed: list[str] = field(default_factory=list)  # CallSids
    reports: list[CallReport] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    fault_cost_ms: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, object]:
        turns = [t for r in self.reports for t in r.turns if t.said]
        answered = [t for t in turns if t.latency_ms is not None]
        latencies = [t.latency_ms for t in answered if t.latency_ms is not None]
        return {
            "calls": len(self.placed),
            "refused": len(self.refused),
            "turns": len(turns),
            "answered": len(answered),
            "m2m_p50_ms": round(percentile(latencies, 50)),
            "m2m_p90_ms": round(percentile(latencies, 90)),
            "fault_cost_ms": [round(x) for x in self.fault_cost_ms],
            "redirects": sum(len(r.redirects) for r in self.reports),
            "notes": self.notes,
        }


def _config(
    url: str,
    index: int,
    on_turn_start: Callable[[int, float], None] | None = None,
    call_sid: str | None = None,
) -> SimulationConfig:
    first, second = QUESTIONS[index % len(QUESTIONS)], QUESTIONS[(index + 3) % len(QUESTIONS)]
    return SimulationConfig(
        base_url=url,
        auth_token=BENCH_TOKEN,
        turns=[
            CallerTurn(text=first, after="bot_done", delay_ms=300),
            CallerTurn(text=second, after="bot_done", delay_ms=300),
        ],
        # A caller waits a while for an answer on a loaded box before hanging up.
        hangup_after_ms=8000,
        max_call_s=90,
        on_turn_start=on_turn_start,
        call_sid=call_sid,
    )


async def _call(result: RunResult, config: SimulationConfig) -> CallReport | None:
    try:
        report = await simulate_call(config)
    except SimulationError as exc:
        result.refused.append(str(exc)[:200])
        return None
    result.placed.append(report.call_sid)
    result.reports.append(report)
    return report


async def _calls(cluster: Cluster, result: RunResult, count: int, concurrent: int) -> None:
    for first in range(0, count, concurrent):
        batch = range(first, min(count, first + concurrent))
        await asyncio.gather(*(_call(result, _config(cluster.public_url, i)) for i in batch))


def _holding(cluster: Cluster, call_sid: str) -> Gateway | None:
    """The gateway that says, in Redis, it holds `call_sid` (app/call_owners.py)."""
    import redis

    raw = redis.Redis.from_url(cluster.redis.url).get(f"offhook:{{{call_sid}}}:holder")
    if not raw:
        return None
    holder = json.loads(raw).get("gateway", "")
    return next((g for g in cluster.gateways if g.url == holder), None)


def _busy_worker(cluster: Cluster) -> Process | None:
    for worker in cluster.workers:
        url = worker.env.get("WORKER_URL", "").replace("ws://", "http://")
        try:
            state = httpx.get(f"{url}/health", timeout=2).json().get("state")
        except (httpx.HTTPError, ValueError):
            continue
        if state in ("duplex_active", "duplex_paused"):
            return worker
    return None


def _cost(report: CallReport, fault_ms: float) -> float | None:
    """From the fault to the first bot audio the caller heard after it."""
    after = [start for start, _ in report.bot_utterances if start >= fault_ms]
    return after[0] - fault_ms if after else None


async def _faulted_call(
    cluster: Cluster, result: RunResult, index: int, act: Callable[[str], str]
) -> None:
    """One call; `act(call_sid)` strikes FAULT_AFTER_S into its second question and says
    what it did (a line starting "no " when it found nothing to strike)."""
    loop = asyncio.get_running_loop()
    call_sid = "CA" + secrets.token_hex(16)
    fault_ms: list[float] = []
    struck: list[str] = []

    def on_turn_start(turn: int, start_ms: float) -> None:
        if turn == 1 and not fault_ms:
            fault_ms.append(start_ms + FAULT_AFTER_S * 1000)

            def strike() -> None:
                struck.append(act(call_sid))

            loop.call_later(FAULT_AFTER_S, lambda: loop.run_in_executor(None, strike))

    config = _config(cluster.public_url, index, on_turn_start, call_sid=call_sid)
    report = await _call(result, config)
    result.notes.extend(struck)
    if report is None or not fault_ms or not struck or struck[0].startswith("no "):
        return
    cost = _cost(report, fault_ms[0])
    if cost is None:
        result.notes.append(f"{report.call_sid}: the bot was not heard after the fault")
    else:
        result.fault_cost_ms.append(cost)


def _kill_worker(cluster: Cluster) -> str:
    worker = _busy_worker(cluster)
    if worker is None:
        return "no worker was busy: nothing killed"
    worker.signal(signal.SIGKILL)
    return f"SIGKILL {worker.name}"


def _kill_gateway(cluster: Cluster, call_sid: str) -> str:
    gateway = _holding(cluster, call_sid)
    if gateway is None:
        return "no gateway held a call: nothing killed"
    gateway.process.signal(signal.SIGKILL)
    return f"SIGKILL {gateway.process.name}"


def _drain_gateway(cluster: Cluster, call_sid: str, exits: list[int | None]) -> str:
    gateway = _holding(cluster, call_sid)
    if gateway is None:
        return "no gateway held a call: nothing drained"
    gateway.process.signal(signal.SIGTERM)
    exits.append(None)

    def wait() -> None:
        exits[-1] = gateway.process.wait(120)

    threading.Thread(target=wait, daemon=True).start()
    return f"SIGTERM {gateway.process.name}"


def _stuck_calls(cluster: Cluster, timeout_s: float = 60) -> int:
    """Calls a live gateway still counts once every caller has hung up: each is a slot
    (and a record) lost. Waits for the records' last writes first."""
    deadline = time.monotonic() + timeout_s
    while True:
        live = [g for g in cluster.gateways if g.process.alive]
        stuck = sum(int(str(g.health()[1].get("active_calls", 0))) for g in live)
        if stuck == 0 or time.monotonic() > deadline:
            return stuck
        time.sleep(1)


def _records_listed(cluster: Cluster, placed: list[str]) -> dict[str, object]:
    """`offhook calls list --json` with only RECORDS_URL and the AWS variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REDIS", "DATA_DIR"))}
    env.update(cluster.records_env())
    env["DATA_DIR"] = str(cluster.workdir / "nowhere")
    env["COLUMNS"] = "250"  # call ids whole in the table
    deadline = time.monotonic() + 120
    missing = list(placed)
    while True:
        answer = subprocess.run(
            [
                sys.executable,
                "-m",
                "cli",
                "calls",
                "--records-url",
                env["RECORDS_URL"],
                "list",
                "--limit",
                "10000",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        listed = answer.stdout
        missing = [sid for sid in placed if sid not in listed]
        if not missing or time.monotonic() > deadline:
            break
        time.sleep(3)  # uploads follow each call's end
    return {
        "placed": len(placed),
        "listed": len(placed) - len(missing),
        "missing": missing,
        "rc": answer.returncode,
        "stderr": answer.stderr[-500:],
    }


def _save(args: argparse.Namespace, results: dict[str, object]) -> None:
    """The runs so far, beside the final JSON: a run that fails late keeps its figures."""
    if getattr(args, "json", None):
        partial = args.json.with_suffix(".partial.json")
        partial.write_text(json.dumps(results, indent=2, default=str))


async def _run_all(args: argparse.Namespace) -> dict[str, object]:
    results: dict[str, object] = {}
    placed: list[str] = []

    single = Cluster(1, 2).start()
    try:
        run = RunResult("single")
        await _calls(single, run, args.calls, args.concurrent)
        results["single"] = run.summary() | {"stuck_calls": _stuck_calls(single)}
        placed += run.placed
        results["records_single"] = _records_listed(single, run.placed)
    finally:
        single.close()

    cluster = Cluster(2, 2).start()
    try:
        run = RunResult("spread")
        await _calls(cluster, run, args.calls, args.concurrent)
        results["spread"] = run.summary() | {"stuck_calls": _stuck_calls(cluster)}
        everything = list(run.placed)
        _save(args, results)

        run = RunResult("worker-kill")
        await _faulted_call(cluster, run, 0, lambda sid: _kill_worker(cluster))
        results["worker-kill"] = run.summary() | {"stuck_calls": _stuck_calls(cluster)}
        everything += run.placed
        cluster.restart_dead()
        cluster.wait_ready()
        _save(args, results)

        # The same load as the Redis run, with no fault: what that load alone costs.
        run = RunResult("load")
        await asyncio.gather(
            *(_call(run, _config(cluster.public_url, i)) for i in range(2 * args.concurrent))
        )
        results["load"] = run.summary() | {"stuck_calls": _stuck_calls(cluster)}
        everything += run.placed

        run = RunResult("redis-restart")

        def restart(call_sid: str) -> str:
            cluster.redis.restart()
            return "redis-server restarted (empty)"

        loads: list[Coroutine[Any, Any, object]] = [_faulted_call(cluster, run, 0, restart)]
        loads += [_call(run, _config(cluster.public_url, i)) for i in range(1, 2 * args.concurrent)]
        await asyncio.gather(*loads)
        await _call(run, _config(cluster.public_url, 5))
        results["redis-restart"] = run.summary() | {"stuck_calls": _stuck_calls(cluster)}
        everything += run.placed
        _save(args, results)

        run = RunResult("gateway-kill")
        await _faulted_call(cluster, run, 1, lambda sid: _kill_gateway(cluster, sid))
        results["gateway-kill"] = run.summary() | {"stuck_calls": _stuck_calls(cluster)}
        everything += run.placed
        cluster.restart_dead()
        cluster.wait_ready()
        _save(args, results)

        run = RunResult("drain")
        exits: list[int | None] = []
        await _faulted_call(cluster, run, 2, lambda sid: _drain_gateway(cluster, sid, exits))
        await _call(run, _config(cluster.public_url, 4))  # placed while it drains
        for _ in range(60):
            if not exits or exits[-1] is not None:
                break
            await asyncio.sleep(1)
        run.notes.append(f"drained gateway exit code: {exits[-1] if exits else 'n/a'}")
        results["drain"] = run.summary() | {"stuck_calls": _stuck_calls(cluster)}
        everything += run.placed

        results["records_cluster"] = _records_listed(cluster, everything)
    finally:
        cluster.close()
    return results


def bench_cluster(args: argparse.Namespace) -> dict[str, object]:
    started = time.monotonic()
    results = asyncio.run(_run_all(args))
    single = results["single"]
    spread = results["spread"]
    assert isinstance(single, dict) and isinstance(spread, dict)
    base = float(single["m2m_p50_ms"]) or float("nan")
    results["spread_vs_single_p50"] = round(float(spread["m2m_p50_ms"]) / base, 3)
    results["machine"] = machine()
    results["wall_s"] = round(time.monotonic() - started)
    return results


def show(title: str, result: dict[str, object]) -> None:
    print(title)
    print(json.dumps(result, indent=2, default=str))


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    cluster = sub.add_parser("cluster", help="gateways and workers as one system, with faults")
    cluster.add_argument("--calls", type=int, default=4, help="calls per plain run")
    cluster.add_argument("--concurrent", type=int, default=2, help="calls at once")
    cluster.set_defaults(run=bench_cluster, show=show)
    return cluster
