"""Keep a record store (the local folder or the S3 store) within its limits: once at
start, then every day."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Protocol

from recordings.catalog import RecordCatalog

__all__ = ["RetentionPolicy", "retention_loop"]

log = logging.getLogger(__name__)


class RetentionPolicy(Protocol):
    """The two limits, as Settings carries them. None or <= 0: no limit."""

    @property
    def retention_days(self) -> float | None: ...

    @property
    def max_storage_gb(self) -> float | None: ...


def _limit(value: float | None) -> float | None:
    # Settings read from the environment say "off" with 0 rather than None.
    return value if value is not None and value > 0 else None


async def retention_loop(
    store: RecordCatalog,
    policy: RetentionPolicy,
    *,
    active: Callable[[], Iterable[str]],
    interval_s: float = 86400.0,
) -> None:
    """Run `store.cleanup` now and then every `interval_s`, until cancelled.

    `active` names the calls being recorded at that moment; they are never removed.
    Failures are logged and retried at the next interval, never raised: a cleanup that
    fails must not take the server down with it.
    """
    days, gb = _limit(policy.retention_days), _limit(policy.max_storage_gb)
    while True:
        if days is not None or gb is not None:
            try:
                busy = frozenset(active())
                removed = await asyncio.to_thread(
                    store.cleanup, retention_days=days, max_storage_gb=gb, active=busy
                )
            except Exception:
                log.exception("record cleanup under %s failed", store.root)
            else:
                for removal in removed:
                    log.info(
                        "removed the record of call %s (%s, %d bytes)",
                        removal.call_sid,
                        removal.reason,
                        removal.bytes,
                    )
        await asyncio.sleep(interval_s)
