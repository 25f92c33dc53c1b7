"""`python -m benchmarks` — latency and CPU measured the way a caller and an operator feel
them. From a source checkout, with the dev dependencies: benchmarks are not installed.

    python -m benchmarks call         scripted calls against the real bot: mouth-to-mouth
                                      latency at the caller's ear (p50/p90), and barge-in
                                      onset → clear (benchmarks/call.py)
    python -m benchmarks frontend     CPU per 20 ms frame of the inbound audio chain
    python -m benchmarks recorder     what recording a call costs its event loop per frame
    python -m benchmarks units        duplex cascade backend: unit processing time vs
                                      unit length (benchmarks/duplex.py)
    python -m benchmarks takeover     worker process killed mid-question / mid-reply: the
                                      caller's gap (benchmarks/duplex.py)
    python -m benchmarks pool         N local workers, 1..M simultaneous callers
                                      (benchmarks/duplex.py)
    python -m benchmarks hearing      calls in every line condition (echo, babble, noise):
                                      who the bot hears, WER, own-echo turns, self-clears
                                      (benchmarks/hearing.py)
    python -m benchmarks stt          offline: WER and CPU of the front-end and Whisper
                                      choices (benchmarks/hearing.py)
    python -m benchmarks turns        scripted calls judged at the caller's ear against
                                      turn-taking targets: answered, talk-over, pauses,
                                      backchannels, interruptions, dead air
                                      (benchmarks/turns/)
    python -m benchmarks lanes        front-end frame latency while the models run, one
                                      shared thread pool vs the front-end lanes and the
                                      model scheduler (benchmarks/lanes.py)
    python -m benchmarks soak         server RSS over 100+ answered calls, sequential and
                                      concurrent: MB per 10 calls after warm-up
                                      (benchmarks/soak.py)
    python -m benchmarks abuse        each attack of a stranger beside a live call: its
                                      underruns, mouth-to-mouth and the server's RSS
                                      (benchmarks/abuse.py)
    python -m benchmarks llm          embedded LLM servers: first clause when 1..N calls
                                      ask at once, per layout of servers x threads
                                      (benchmarks/llm.py)
    python -m benchmarks llama-beside the embedded LLM and the words judge beside the
                                      other models of a call: stalls, by threads
                                      (benchmarks/llama_beside.py)
    python -m benchmarks stt-evidence Whisper's own evidence on phone speech and noise,
                                      for `stt.assess` (benchmarks/stt_evidence.py)
    python -m benchmarks llama-build  tokens per second of llama.cpp builds, portable vs
                                      native (benchmarks/llama_build.py)
    python -m benchmarks cluster      two gateways behind HAProxy, two workers, Redis
                                      and an S3 store on one box: calls spread, a
                                      worker, a gateway and Redis lost mid-call, a
                                      gateway drained (benchmarks/cluster.py)
    python -m benchmarks judge        turn judges on caller lines nobody here wrote
                                      (chatterbot-corpus, fresh each run): pauses cut
                                      off, waits at turn ends, tuning and held-out
                                      halves (benchmarks/judge.py)
    python -m benchmarks judge-people the same judges at recorded people's own pauses
                                      inside a sentence (benchmarks/judge_people.py)
    python -m benchmarks held-words   short words over the bot (backchannels, short
                                      corpus lines) in fresh voices: which stop it,
                                      which it talks over (benchmarks/held_words.py)
    python -m benchmarks hotwords     names callers say, heard with and without
                                      STT_HOTWORDS (benchmarks/hotwords.py)
    python -m benchmarks turns-compare
                                      `turns --corpus` runs of one seed, two sides of
                                      one or more runs each, measure by measure, with a
                                      bootstrap's 95 % interval of each difference
                                      (benchmarks/turns/compare.py)

Each prints a table; `--json PATH` also writes the figures, under a "provenance" block
with the commit, date, machine, options and non-default settings of the run
(benchmarks/provenance.py). `stt-evidence`, `llama-build`, `judge`, `judge-people`,
`held-words`, `hotwords` and `turns-compare` take their own arguments
(`python -m benchmarks judge --help`).
`turns --corpus N` replaces the scripts with N calls made fresh from chatterbot-corpus,
a quarter of them people recorded (moonshine-voice's recordings), in a tuning and a
held-out half.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

# Benchmarks that parse their own arguments: name -> (module, help).
OWN_ARGUMENTS = {
    "stt-evidence": ("benchmarks.stt_evidence", "Whisper's evidence on phone speech and noise"),
    "llama-build": ("benchmarks.llama_build", "llama.cpp builds: tokens per second"),
    "judge": ("benchmarks.judge", "turn judges on fresh corpus speech: cut-offs and waits"),
    "judge-people": ("benchmarks.judge_people", "turn judges at recorded people's own pauses"),
    "held-words": ("benchmarks.held_words", "short words over the bot: go on or stop"),
    "hotwords": ("benchmarks.hotwords", "names callers say, with and without STT_HOTWORDS"),
    "turns-compare": (
        "benchmarks.turns.compare",
        "`turns --corpus` runs of one seed, two sides: differences beyond chance",
    ),
}


def _own(name: str) -> Callable[[list[str]], int]:
    import importlib

    module = importlib.import_module(OWN_ARGUMENTS[name][0])
    main: Callable[[list[str]], int] = module.main
    return main


def parser() -> argparse.ArgumentParser:
    from benchmarks import (
        abuse,
        call,
        cluster,
        duplex,
        frontend,
        hearing,
        lanes,
        llama_beside,
        llm,
        recorder,
        soak,
    )
    from benchmarks.turns import add_parser as add_turns_parser

    top = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = top.add_subparsers(dest="what", required=True)
    benches = [
        call.add_parser(sub),
        frontend.add_parser(sub),
        recorder.add_parser(sub),
        *duplex.add_parsers(sub),
        *hearing.add_parsers(sub),
        add_turns_parser(sub),
        lanes.add_parser(sub),
        soak.add_parser(sub),
        abuse.add_parser(sub),
        llm.add_parser(sub),
        llama_beside.add_parser(sub),
        cluster.add_parser(sub),
    ]
    for bench in benches:
        bench.add_argument("--json", type=Path, help="also write the results here")
    for name, (_, help_text) in OWN_ARGUMENTS.items():
        sub.add_parser(name, help=f"{help_text} (own arguments: {name} --help)", add_help=False)
    return top


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in OWN_ARGUMENTS:
        return _own(argv[0])(argv[1:])
    from benchmarks.measure import print_result
    from benchmarks.provenance import options, provenance

    args = parser().parse_args(argv)
    result: dict[str, object] = args.run(args)
    show = getattr(args, "show", print_result)
    show(f"python -m benchmarks {args.what} — {result['machine']}", result)
    if args.json:
        given = argv[argv.index(args.what) + 1 :]
        made = provenance(args.what, given, options(args))
        args.json.write_text(json.dumps({"provenance": made, **result}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
