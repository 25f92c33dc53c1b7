"""Warnings about refused requests, rate-limited: a stranger's flood is counted, not logged.

Every forged signature or stream that never starts is worth a warning to an operator,
but 300 of them a minute are not 300 lines: they fill the log's disk, and a server whose
stderr is a pipe nobody drains fast enough blocks its event loop on the write (seen in
`python -m benchmarks abuse`: about 500 forged webhooks stalled every live call). The metrics
(`offhook_rejected_calls_total`, `offhook_protocol_errors_total`) count every one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

WINDOW_S = 60.0
BURST = 5  # lines per kind per window


@dataclass
class _Kind:
    window_began: float
    logged: int = 0
    suppressed: int = 0


@dataclass
class RefusalLog:
    """`warning(kind, ...)`: at most `burst` lines per kind per `window_s`; then one line
    saying how many of that kind went unlogged, when the kind is next seen."""

    logger: logging.Logger
    burst: int = BURST
    window_s: float = WINDOW_S
    clock: Callable[[], float] = time.monotonic
    _kinds: dict[str, _Kind] = field(default_factory=dict)

    def warning(self, kind: str, message: str, *args: object) -> None:
        now = self.clock()
        seen = self._kinds.get(kind)
        if seen is None or now - seen.window_began >= self.window_s:
            if seen is not None and seen.suppressed:
                self.logger.warning(
                    "%d more %s refusal(s) in %.0f s were not logged",
                    seen.suppressed,
                    kind,
                    now - seen.window_began,
                )
            seen = self._kinds[kind] = _Kind(window_began=now)
        if seen.logged < self.burst:
            seen.logged += 1
            self.logger.warning(message, *args)
        else:
            seen.suppressed += 1
