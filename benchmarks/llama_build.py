"""Tokens per second of llama.cpp builds on this machine: the portable build against
another (a native one), same model, same threads, runs alternated.

    python -m benchmarks llama-build --model PATH \\
        --build portable=.venv/bin/python --build native=/tmp/native/bin/python

Each `--build NAME=PYTHON` names an interpreter whose site-packages hold one build of
llama-cpp-python. For every round, each build loads the model in a fresh process,
evaluates a fixed prompt (prompt tokens/s) and writes a fixed number of tokens greedily
(generation tokens/s), as llama.cpp's own timings count them. Prints JSON with the
date, commit, CPU and each build's system info (which instruction sets it was built
with), medians over the rounds.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

from benchmarks.provenance import commit, cpu_model

# Runs inside each build's interpreter: one load, one prompt, one generation.
_MEASURE = r"""
import json, sys, time
import llama_cpp
model, threads, tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
llm = llama_cpp.Llama(model_path=model, n_ctx=1024, n_threads=threads,
                      n_threads_batch=threads, verbose=False, seed=1)
prompt = ("You are a helpful phone assistant for a small hotel. A caller asks about "
          "parking, breakfast times, late check-in, pets and the nearest train station. ") * 4
ids = llm.tokenize(prompt.encode())
started = time.perf_counter()
llm.eval(ids)
prompt_s = time.perf_counter() - started
written = 0
started = time.perf_counter()
for token in llm.generate(ids, temp=0.0):  # the evaluated prompt is reused, not redone
    written += 1
    if written >= tokens:
        break
gen_s = time.perf_counter() - started
print(json.dumps({
    "prompt_tokens": len(ids), "prompt_tps": len(ids) / prompt_s,
    "gen_tokens": written, "gen_tps": written / gen_s,
    "system_info": llama_cpp.llama_print_system_info().decode().strip(),
    "version": llama_cpp.__version__,
}))
"""


def measure(python: str, model: Path, threads: int, tokens: int) -> dict[str, object]:
    done = subprocess.run(
        [python, "-c", _MEASURE, str(model), str(threads), str(tokens)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        raise SystemExit(f"{python} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks llama-build", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--model", type=Path, required=True, help="a GGUF file")
    parser.add_argument("--build", action="append", required=True, metavar="NAME=PYTHON")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=128, help="tokens to generate")
    args = parser.parse_args(argv)
    builds = dict(item.split("=", 1) for item in args.build)
    runs: dict[str, list[dict[str, object]]] = {name: [] for name in builds}
    for _ in range(args.rounds):
        for name, python in builds.items():
            runs[name].append(measure(python, args.model, args.threads, args.tokens))
    report = {
        "benchmark": "llama_build",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "commit": commit(short=True),
        "machine": {"cpu": cpu_model(), "arch": platform.machine(), "cores": os.cpu_count() or 0},
        "conditions": {
            "model": args.model.name,
            "threads": args.threads,
            "tokens": args.tokens,
            "rounds": args.rounds,
        },
        "builds": {
            name: {
                "system_info": results[0]["system_info"],
                "version": results[0]["version"],
                "prompt_tps_median": statistics.median(float(r["prompt_tps"]) for r in results),  # type: ignore[arg-type]
                "gen_tps_median": statistics.median(float(r["gen_tps"]) for r in results),  # type: ignore[arg-type]
                "gen_tps_all": [round(float(r["gen_tps"]), 1) for r in results],  # type: ignore[arg-type]
            }
            for name, results in runs.items()
        },
    }
    json.dump(report, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
