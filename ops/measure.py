"""What every benchmark shares: the scripted questions, the bench's auth token, the
machine it ran on, and percentiles that tolerate an empty list."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import numpy as np

__all__ = ["BENCH_TOKEN", "QUESTIONS", "machine", "percentile"]

QUESTIONS = (
    "What time does the pharmacy close today?",
    "Can you recommend a good book to read?",
    "How do I reset my password?",
    "What is the weather usually like in London?",
    "Tell me a fun fact about cats.",
    "Where can I park near the station?",
)
BENCH_TOKEN = "bench-auth-token-0123456789abcdef"


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"
