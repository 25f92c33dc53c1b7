"""This process's resident memory, as a worker reports it on /health."""

from __future__ import annotations

import os

__all__ = ["process_rss_mb"]


def process_rss_mb() -> float:
    """Resident set size in MiB (0 where /proc cannot tell)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return 0.0
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
