"""What every benchmark shares: the scripted questions, the bench's auth token, the
machine it ran on, and percentiles that tolerate an empty list."""

from __future__ import annotations

import os
import platform

import numpy as np
from rich.console import Console
from rich.table import Table

from benchmarks.provenance import cpu_model

__all__ = ["BENCH_TOKEN", "QUESTIONS", "machine", "percentile", "print_result"]

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
    """One line for a result's title: CPU, cores, Python (provenance has the details)."""
    return f"{cpu_model()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def print_result(title: str, result: dict[str, object]) -> None:
    """The result's figures as a table of two columns; lists are left to the JSON."""
    table = Table(title=title)
    table.add_column("measure")
    table.add_column("value", justify="right")
    for key, value in result.items():
        if isinstance(value, list):
            continue
        shown = f"{value:.0f}" if isinstance(value, float) and abs(value) >= 10 else str(value)
        table.add_row(key, shown)
    Console().print(table)
