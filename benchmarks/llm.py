"""`python -m benchmarks llm` — how long callers wait for the embedded LLM when calls
coincide.

    python -m benchmarks llm [--layouts 1x2,4x1,2+1+1+1] [--concurrent 1,2,4] [--rounds 5]

Starts the bundled model's llama.cpp servers the way `offhook serve` does (a layout
`NxT` is N servers of T threads each, `2+1+1` three servers of 2, 1 and 1 threads,
behind the same `ChatPool` a call uses), then,
for each number of simultaneous callers, sends that many different questions at once,
`--rounds` times, with the persona and greeting a call's first turn has. Each reply is
cut into clauses by the call's own `ClauseSplitter`, so "first clause" is the moment a
call could start synthesising speech. Figures: first clause p50 / p90 / max and whole
reply p50, over every reply of every round; the first round of each is a warm-up.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass

from agents.assets import ModelCache
from agents.cascade.clauses import ClauseSplitter
from agents.cascade.llm import ChatModel, ChatPool, Message, OpenAIChat
from agents.cascade.llm_server import EmbeddedLlamaServer
from app.settings import Settings
from benchmarks.measure import QUESTIONS, machine, percentile


@dataclass(frozen=True, slots=True)
class Layout:
    """Threads of each server: `4x1` is four servers of one thread, `2+1+1` three
    servers, the first (the one a lone call gets) of two threads."""

    threads: tuple[int, ...]

    @classmethod
    def parse(cls, text: str) -> Layout:
        try:
            if "x" in text:
                servers, _, each = text.partition("x")
                threads = (int(each),) * int(servers)
            else:
                threads = tuple(int(part) for part in text.split("+"))
        except ValueError:
            raise argparse.ArgumentTypeError(f"a layout is NxT or T+T+..., got {text!r}") from None
        if not threads or min(threads) < 1:
            raise argparse.ArgumentTypeError(f"a layout needs servers of >= 1 thread: {text!r}")
        return cls(threads)

    def __str__(self) -> str:
        if len(set(self.threads)) == 1:
            return f"{len(self.threads)}x{self.threads[0]}"
        return "+".join(str(t) for t in self.threads)


@dataclass(frozen=True, slots=True)
class Reply:
    first_clause_ms: float
    whole_ms: float
    words: int


async def _reply(llm: ChatModel, messages: list[Message], start: float) -> Reply:
    splitter = ClauseSplitter()
    first: float | None = None
    text = ""
    async for delta in llm.stream(messages):
        text += delta
        if first is None and splitter.feed(delta):
            first = time.monotonic()
    end = time.monotonic()
    if first is None and splitter.flush():
        first = end
    first = end if first is None else first
    return Reply((first - start) * 1000, (end - start) * 1000, len(text.split()))


async def _measure(
    layout: Layout, concurrent: list[int], rounds: int, settings: Settings
) -> dict[str, object]:
    gguf = ModelCache(settings.model_cache_dir).path("smollm2-135m-instruct")
    async with AsyncExitStack() as stack:
        servers = [EmbeddedLlamaServer(gguf, threads=threads) for threads in layout.threads]
        for server in servers:
            stack.push_async_callback(server.stop)
        await asyncio.gather(*(server.start() for server in servers))
        chats = [
            OpenAIChat(base_url=server.base_url, model=server.model_name, max_tokens=80)
            for server in servers
        ]
        for chat in chats:
            stack.push_async_callback(chat.aclose)
        llm: ChatModel = chats[0] if len(chats) == 1 else ChatPool(chats)
        prefix: list[Message] = [
            {"role": "system", "content": settings.persona()},
            {"role": "assistant", "content": settings.greeting},
        ]
        results: dict[str, object] = {}
        for callers in concurrent:
            replies: list[Reply] = []
            for round_ in range(rounds + 1):
                start = time.monotonic()
                asked = [
                    [*prefix, {"role": "user", "content": QUESTIONS[(round_ + i) % len(QUESTIONS)]}]
                    for i in range(callers)
                ]
                got = await asyncio.gather(*(_reply(llm, m, start) for m in asked))
                if round_:  # the first round warms every server's prompt cache
                    replies.extend(got)
            firsts = [r.first_clause_ms for r in replies]
            results[str(callers)] = {
                "first_clause_ms": {
                    "p50": round(percentile(firsts, 50)),
                    "p90": round(percentile(firsts, 90)),
                    "max": round(max(firsts)),
                },
                "whole_reply_ms_p50": round(percentile([r.whole_ms for r in replies], 50)),
                "empty_replies": sum(1 for r in replies if r.words == 0),
                "replies": len(replies),
            }
            print(f"{layout} {callers} at once: {results[str(callers)]}", flush=True)
        return results


def bench_llm(args: argparse.Namespace) -> dict[str, object]:
    settings = Settings.from_env({})
    results: dict[str, object] = {"machine": machine()}
    for layout in args.layouts:
        results[str(layout)] = asyncio.run(_measure(layout, args.concurrent, args.rounds, settings))
    return results


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    llm = sub.add_parser("llm", help="embedded LLM: first clause when several calls ask at once")
    llm.add_argument(
        "--layouts",
        type=lambda text: [Layout.parse(part) for part in text.split(",")],
        default=[Layout((2,)), Layout((1, 1, 1, 1))],
        help="comma-separated NxT (N servers of T threads) or T+T+... (default 1x2,4x1)",
    )
    llm.add_argument(
        "--concurrent",
        type=lambda text: [int(n) for n in text.split(",")],
        default=[1, 2, 4],
        help="comma-separated numbers of callers asking at once",
    )
    llm.add_argument("--rounds", type=int, default=5, help="measured rounds per number")
    llm.set_defaults(run=bench_llm)
    return llm
