"""How many threads each llama.cpp model of a process gets.

The words judge and the embedded LLM server run at once in every pause, and llama.cpp's
threads spin waiting for each other: together they must not want more cores than the
process has, or one stalls the other for seconds (docs/benchmarks.md, 2026-11-28).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agents.loading import llama_threads


@pytest.mark.parametrize(
    ("model_threads", "cores", "expected"),
    [
        (2, 1, 1),  # one core: one thread, never none
        (2, 2, 1),  # the judge and the server get a core each
        (2, 3, 1),
        (2, 4, 2),  # room for both at MODEL_THREADS
        (2, 64, 2),  # never more than MODEL_THREADS
        (4, 8, 4),
        (4, 6, 3),
        (1, 16, 1),
    ],
)
def test_the_llama_models_together_fit_the_cores(
    model_threads: int, cores: int, expected: int
) -> None:
    threads = llama_threads(model_threads, cores)

    assert threads == expected
    assert threads >= 1
    assert 2 * threads <= max(cores, 2)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity here")
def test_the_cores_are_the_ones_this_process_may_run_on() -> None:
    """A container or `taskset` that narrows the process to one core leaves it one core,
    however many the machine has."""
    child = (
        "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
        "from agents.loading import usable_cores; print(usable_cores())"
    )
    out = subprocess.run(
        [sys.executable, "-c", child],
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
        check=True,
    )

    assert out.stdout.strip() == "1"
