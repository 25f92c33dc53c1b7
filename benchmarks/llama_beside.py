"""`python -m benchmarks llama-beside` — the embedded LLM and the words judge while other
models compute beside them, as they do in a call.

    python -m benchmarks llama-beside [--llm-threads 2] [--judge-threads 2] [--tts-threads 2]
                                      [--rounds 3]

In a call the reply is drafted while the words judge checks the caller's pause, and
Piper speaks one clause while the LLM writes the next. Both llama.cpp models spin their
threads at each barrier, so how many threads each gets decides whether they share the
cores or stall each other. Each round measures, with the persona and greeting of a call:

- a reply streamed alone, beside Piper synthesising without a break, beside the words
  judge checking without a break, and beside both: time to the first piece, the longest
  gap between pieces, and the whole reply (a reply is cut off after 15 s);
- twelve judge checks alone, then twelve while replies are streamed: p50 and max.

Without the options, each model has MODEL_THREADS threads, as `offhook serve` gives the
words judge, Piper and the first embedded server, and OpenMP threads spin as `serve` has
them (agents.openmp); `GOMP_SPINCOUNT=300000` in the environment measures libgomp's own
default.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import threading
import time
from collections.abc import Callable

from agents.assets import ModelCache
from agents.cascade.llm import Message, OpenAIChat
from agents.cascade.llm_server import EmbeddedLlamaServer
from agents.cascade.tts import PiperSpeaker
from agents.cascade.words_judge import LlamaWordsJudge
from agents.openmp import bound_openmp_spin
from app.settings import Settings
from benchmarks.measure import machine, percentile

REPLY_CAP_S = 15.0
CHECKS = 12
BESIDE = ("alone", "tts", "judge", "both")


def _busy(work: Callable[[int], object], stop: threading.Event) -> threading.Thread:
    def loop() -> None:
        i = 0
        while not stop.is_set():
            work(i)
            i += 1

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return thread


async def _stream(chat: OpenAIChat, messages: list[Message]) -> dict[str, float]:
    start = time.monotonic()
    times: list[float] = []
    async for _ in chat.stream(messages):
        times.append(time.monotonic() - start)
        if times[-1] > REPLY_CAP_S:
            break
    gaps = [b - a for a, b in itertools.pairwise(times)] or [0.0]
    return {
        "first_ms": round(1000 * times[0]) if times else -1,
        "max_gap_ms": round(1000 * max(gaps)),
        "whole_ms": round(1000 * times[-1]) if times else -1,
    }


async def _measure(args: argparse.Namespace, settings: Settings) -> dict[str, object]:
    cache = ModelCache(settings.model_cache_dir)
    gguf = cache.path("smollm2-135m-instruct")
    server = EmbeddedLlamaServer(gguf, threads=args.llm_threads)
    await server.start()
    chat = OpenAIChat(base_url=server.base_url, model=server.model_name, max_tokens=80)
    tts = PiperSpeaker(cache.path("piper-joe-medium"), threads=args.tts_threads)
    judge = LlamaWordsJudge(gguf, threads=args.judge_threads)
    bot = settings.greeting
    prefix: list[Message] = [
        {"role": "system", "content": settings.persona()},
        {"role": "assistant", "content": bot},
    ]

    def speak(i: int) -> None:
        tts.synthesize(f"It is usually mild there, with rain on {i} days in a month.")

    def check(i: int) -> None:
        judge.complete(bot, f"what is it usually like there in month {i} and")

    replies: dict[str, list[dict[str, float]]] = {mode: [] for mode in BESIDE}
    checks: dict[str, list[float]] = {"alone": [], "beside the LLM": []}
    try:
        for round_ in range(args.rounds):
            for mode in BESIDE:
                stop = threading.Event()
                busy = [_busy(speak, stop)] if mode in ("tts", "both") else []
                busy += [_busy(check, stop)] if mode in ("judge", "both") else []
                await asyncio.sleep(0.3)
                ask = f"What is the weather usually like in London? ({mode}, round {round_})"
                replies[mode].append(
                    await _stream(chat, [*prefix, {"role": "user", "content": ask}])
                )
                stop.set()
                for thread in busy:
                    await asyncio.to_thread(thread.join)
                print(f"round {round_} beside {mode}: {replies[mode][-1]}", flush=True)
            for where in checks:
                stop = threading.Event()
                writer = (
                    asyncio.create_task(_keep_writing(chat, prefix, stop))
                    if where != "alone"
                    else None
                )
                for i in range(CHECKS):
                    start = time.monotonic()
                    await asyncio.to_thread(check, 1000 * round_ + i)
                    checks[where].append(1000 * (time.monotonic() - start))
                    await asyncio.sleep(0.05)
                stop.set()
                if writer is not None:
                    await writer
    finally:
        await chat.aclose()
        await server.stop()
        judge.close()
    result: dict[str, object] = {}
    for mode, rows in replies.items():
        result[f"reply beside {mode}"] = {
            "first_ms_max": max(r["first_ms"] for r in rows),
            "max_gap_ms": max(r["max_gap_ms"] for r in rows),
            "whole_ms_max": max(r["whole_ms"] for r in rows),
            "rounds": rows,
        }
    for where, times in checks.items():
        result[f"judge check {where}"] = {
            "p50_ms": round(percentile(times, 50)),
            "max_ms": round(max(times)),
        }
    return result


async def _keep_writing(chat: OpenAIChat, prefix: list[Message], stop: threading.Event) -> None:
    n = 0
    while not stop.is_set():
        async for _ in chat.stream([*prefix, {"role": "user", "content": f"Tell me more, {n}."}]):
            if stop.is_set():
                break
        n += 1


def bench_llama_beside(args: argparse.Namespace) -> dict[str, object]:
    # As `serve` does before it loads a model; GOMP_SPINCOUNT=300000 is libgomp's own.
    bound_openmp_spin()
    settings = Settings.from_env({})
    args.llm_threads = args.llm_threads or settings.model_threads
    args.judge_threads = args.judge_threads or settings.model_threads
    args.tts_threads = args.tts_threads or settings.model_threads
    result: dict[str, object] = {
        "machine": machine(),
        "threads": {"llm": args.llm_threads, "judge": args.judge_threads, "tts": args.tts_threads},
        "openmp_wait": {
            name: os.environ[name]
            for name in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")
            if name in os.environ
        },
    }
    result.update(asyncio.run(_measure(args, settings)))
    return result


def show(title: str, result: dict[str, object]) -> None:
    """One line per measure; each round's figures stay in the JSON."""
    print(title)
    for key, value in result.items():
        if isinstance(value, dict):
            value = {k: v for k, v in value.items() if k != "rounds"}
        print(f"  {key}: {value}")


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    bench = sub.add_parser(
        "llama-beside", help="embedded LLM and words judge beside the other models: stalls"
    )
    for model in ("llm", "judge", "tts"):
        bench.add_argument(
            f"--{model}-threads", type=int, default=0, help="threads (0: MODEL_THREADS)"
        )
    bench.add_argument("--rounds", type=int, default=3, help="measured rounds")
    bench.set_defaults(run=bench_llama_beside, show=show)
    return bench
