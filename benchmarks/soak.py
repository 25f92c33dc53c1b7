"""`python -m benchmarks soak` — does the server keep memory, call after call?

    python -m benchmarks soak [--warmup 30] [--calls 100] [--rounds 5] [--concurrent 4]

Starts `offhook serve` as a process of its own, so that what is measured is the
server's memory and nothing of the bench's, then calls it through the Twilio protocol
the way a caller would: each caller waits for the greeting, asks a question, hears the
answer and hangs up. After `--warmup` calls (the models settle, and the bounded caches,
TTS clauses and llama.cpp prompts, take ~30 calls to fill on the bundled models),
`--calls` sequential calls, then `--rounds` rounds of `--concurrent` calls at
once. After every call (or round), once the server says no call is active and its
record is closed, the server's resident memory (VmRSS from /proc) is read; the
embedded llama.cpp servers, child processes, are reported apart (summed).

Figures: the least-squares trend of RSS over the sequential calls, in MB per 10 calls
(the target: under 1 MB), the spread around it, and RSS after each concurrent round.
A call whose question got no answer is counted: a server that stops answering has an
easy time keeping its memory flat.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

from app.heap import SWEEP_DELAY_S
from benchmarks.measure import BENCH_TOKEN, QUESTIONS, machine
from ops.simulate import CallerTurn, CallReport, SimulationConfig, simulate_call

# Short, so that a call is mostly the caller's question and the bot's answer.
GREETING = "Hello, how can I help?"
MAX_TOKENS = 24


def rss_mb(pid: int) -> float:
    """Resident memory of one process, in MB (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"process {pid} has no VmRSS")


def children(pid: int) -> list[int]:
    """Every descendant of `pid` (the embedded LLM server and anything it runs)."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").iterdir():
            path = task / "children"
            kids = [int(k) for k in path.read_text().split()] if path.exists() else []
            found += kids
            todo += kids
    return found


def children_rss_mb(pid: int) -> float:
    total = 0.0
    for child in children(pid):
        try:
            total += rss_mb(child)
        except (OSError, RuntimeError):  # gone between listing and reading
            pass
    return total


def trend_mb_per_10(rss: list[float]) -> tuple[float, float]:
    """Least-squares slope of RSS per call, as MB per 10 calls, and the largest residual."""
    if len(rss) < 2:
        return float("nan"), float("nan")
    x = np.arange(len(rss), dtype=np.float64)
    slope, intercept = np.polyfit(x, np.asarray(rss), 1)
    residual = np.asarray(rss) - (slope * x + intercept)
    return float(slope * 10), float(np.max(np.abs(residual)))


class Server:
    """`offhook serve` in its own process, on a free port, with its records in a temp dir."""

    def __init__(self, data_dir: Path) -> None:
        from ops.local_server import free_port

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {
            **os.environ,
            "HOST": "127.0.0.1",
            "PORT": str(self.port),
            "PUBLIC_URL": self.url,
            "TWILIO_AUTH_TOKEN": BENCH_TOKEN,
            "DATA_DIR": str(data_dir),
            "GREETING": GREETING,
            "LLM_MAX_TOKENS": str(MAX_TOKENS),
            "LOG_LEVEL": "WARNING",
        }
        # A file, not a pipe: a pipe nobody reads fills at 64 kB and then blocks the
        # server's loop on its next log line.
        self._log = tempfile.TemporaryFile()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "cli", "serve"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=self._log,
            start_new_session=True,
        )

    def wait_ready(self, timeout_s: float = 600) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited: {self._stderr()}")
            if self.health().get("status") == "ok":
                return
            time.sleep(0.5)
        raise TimeoutError("the server did not become ready")

    def health(self) -> dict[str, object]:
        try:
            answer = httpx.get(f"{self.url}/healthz", timeout=5)
            return dict(answer.json())
        except (httpx.HTTPError, ValueError):
            return {}

    async def wait_idle(self, timeout_s: float = 30) -> None:
        """Until no call is active: the calls' tasks are done and their records closed."""
        deadline = time.monotonic() + timeout_s
        async with httpx.AsyncClient(timeout=5) as client:
            while time.monotonic() < deadline:
                answer = (await client.get(f"{self.url}/healthz")).json()
                if answer.get("active_calls") == 0:
                    # Past the post-call GC pass and malloc_trim (app/heap.py), which
                    # hand back what the call left, and the record's last writes.
                    await asyncio.sleep(SWEEP_DELAY_S + 0.3)
                    return
                await asyncio.sleep(0.1)
        raise TimeoutError("calls still active on the server")

    def gc_pauses(self) -> tuple[int, float]:
        """How many post-call GC passes the server ran, and their total seconds."""
        text = httpx.get(f"{self.url}/metrics", timeout=5).text
        values = {}
        for line in text.splitlines():
            if line.startswith(("offhook_gc_pause_seconds_count", "offhook_gc_pause_seconds_sum")):
                name, value = line.rsplit(" ", 1)
                values[name] = float(value)
        return (
            int(values.get("offhook_gc_pause_seconds_count", 0)),
            values.get("offhook_gc_pause_seconds_sum", 0.0),
        )

    def rss(self) -> tuple[float, float]:
        return rss_mb(self.process.pid), children_rss_mb(self.process.pid)

    def close(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self._log.close()

    def _stderr(self) -> str:
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-2000:]


async def one_call(url: str, index: int) -> CallReport:
    question = QUESTIONS[index % len(QUESTIONS)]
    return await simulate_call(
        SimulationConfig(
            base_url=url,
            auth_token=BENCH_TOKEN,
            turns=[CallerTurn(text=question, after="bot_done", delay_ms=300)],
            hangup_after_ms=3000,
            max_call_s=60,
        )
    )


def answered(report: CallReport) -> bool:
    return bool(report.turns) and all(t.latency_ms is not None for t in report.turns)


async def run(args: argparse.Namespace, server: Server) -> dict[str, object]:
    unanswered = 0
    started = time.monotonic()
    for index in range(args.warmup):
        unanswered += not answered(await one_call(server.url, index))
        await server.wait_idle()
    after_warmup = server.rss()
    sequential: list[float] = []
    llm: list[float] = []
    for index in range(args.calls):
        unanswered += not answered(await one_call(server.url, index))
        await server.wait_idle()
        own, child = server.rss()
        sequential.append(own)
        llm.append(child)
        print(f"call {index + 1}/{args.calls}: server {own:.1f} MB, llm {child:.1f} MB", flush=True)
    rounds: list[float] = []
    for round_index in range(args.rounds):
        reports = await asyncio.gather(
            *(
                one_call(server.url, round_index * args.concurrent + k)
                for k in range(args.concurrent)
            )
        )
        unanswered += sum(not answered(r) for r in reports)
        await server.wait_idle()
        rounds.append(server.rss()[0])
        print(f"round {round_index + 1}/{args.rounds}: server {rounds[-1]:.1f} MB", flush=True)
    gc_count, gc_sum = server.gc_pauses()
    slope, spread = trend_mb_per_10(sequential)
    half = len(sequential) // 2
    return {
        "machine": machine(),
        "calls": args.warmup + args.calls + args.rounds * args.concurrent,
        "unanswered_calls": unanswered,
        "minutes": round((time.monotonic() - started) / 60, 1),
        "rss_after_warmup_mb": round(after_warmup[0], 1),
        "rss_first_sequential_mb": round(sequential[0], 1) if sequential else float("nan"),
        "rss_last_sequential_mb": round(sequential[-1], 1) if sequential else float("nan"),
        "rss_trend_mb_per_10_calls": round(slope, 3),
        "rss_trend_second_half_mb_per_10_calls": round(trend_mb_per_10(sequential[half:])[0], 3),
        "rss_largest_deviation_mb": round(spread, 1),
        "rss_rounds_mb": [round(r, 1) for r in rounds],
        "rss_rounds_trend_mb_per_round": round(trend_mb_per_10(rounds)[0] / 10, 2),
        "gc_passes": gc_count,
        "gc_pause_mean_ms": round(1000 * gc_sum / gc_count, 1) if gc_count else float("nan"),
        "llm_rss_first_mb": round(llm[0], 1) if llm else float("nan"),
        "llm_rss_last_mb": round(llm[-1], 1) if llm else float("nan"),
        "llm_rss_trend_second_half_mb_per_10_calls": round(trend_mb_per_10(llm[half:])[0], 3),
        "rss_every_10_calls_mb": [round(r, 1) for r in sequential[9::10]],
        "rss_sequential_mb": [round(r, 1) for r in sequential],
        "llm_rss_sequential_mb": [round(r, 1) for r in llm],
    }


def bench_soak(args: argparse.Namespace) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="offhook-bench-soak-") as data:
        server = Server(Path(data))
        try:
            server.wait_ready()
            return asyncio.run(run(args, server))
        finally:
            server.close()


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    soak = sub.add_parser("soak", help="server RSS over many answered calls")
    soak.add_argument("--warmup", type=int, default=30, help="calls before measuring")
    soak.add_argument("--calls", type=int, default=100, help="sequential calls measured")
    soak.add_argument("--rounds", type=int, default=5, help="rounds of concurrent calls")
    soak.add_argument("--concurrent", type=int, default=4, help="calls per round")
    soak.set_defaults(run=bench_soak)
    return soak
