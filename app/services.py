"""The process-wide resources: the loaded models, the duplex worker pool, call admission."""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agents.cascade.agent import CascadeModels
from agents.duplex.pool import PoolMetrics, WorkerPool
from agents.events import CallStatus

# Model loading lives in agents/, where `offhook worker` can use it without the app; the
# name stays importable from here for code not yet moved to `agents.loading`.
from agents.loading import load_models
from agents.scheduler import ModelScheduler
from app.metrics import Metrics
from app.settings import Settings
from telephony.security import CallTokens, WebhookValidator

if TYPE_CHECKING:
    from app.call import CallSession

log = logging.getLogger(__name__)

__all__ = ["Services", "load_models", "open_pool"]

RECENT_CALLS = 50


@dataclass
class Services:
    settings: Settings
    metrics: Metrics = field(default_factory=Metrics)
    models: CascadeModels | None = None
    load_error: str | None = None
    active_calls: int = 0

    def __post_init__(self) -> None:
        self.tokens = CallTokens(self.settings.token_secret)
        token = self.settings.twilio_auth_token
        self.validator = WebhookValidator(token) if token else None
        self.ready = asyncio.Event()
        # Active and recently finished calls, for introspection (tests, debugging).
        self.calls: OrderedDict[str, CallSession] = OrderedDict()
        self.open_records: set[str] = set()
        # Twilio's reports on calls whose stream has not started yet (outbound calls):
        # answering-machine verdicts, and status callbacks with when they came.
        self.early_amd: dict[str, tuple[str, int | None]] = {}
        self.early_status: dict[str, list[tuple[float, CallStatus]]] = {}
        self.pool: WorkerPool | None = None
        # Every call's model jobs (STT, end of turn, TTS) go through this one scheduler,
        # on threads of its own, taking the calls in turn; its queue waits go to /metrics.
        # The app hands it to the models it loads (app.main) and closes it at shutdown.
        self.scheduler = ModelScheduler(
            on_wait=self.metrics.model_waited, on_run=self.metrics.model_ran
        )

    def recording_now(self) -> set[str]:
        """Calls whose records are still being written: never repaired or cleaned up."""
        return {
            sid
            for sid, session in self.calls.items()
            if session.recorder is not None and not session.recorder.closed
        }

    def remember(self, session: CallSession) -> None:
        self.calls[session.call_sid] = session
        while len(self.calls) > RECENT_CALLS:
            self.calls.popitem(last=False)

    def admit(self) -> bool:
        """Take a call slot if one is free."""
        if self.active_calls >= self.settings.max_calls:
            return False
        self.active_calls += 1
        self.metrics.active_calls.set(self.active_calls)
        return True

    def release(self) -> None:
        self.active_calls -= 1
        self.metrics.active_calls.set(self.active_calls)


async def open_pool(services: Services, stack: AsyncExitStack) -> WorkerPool | None:
    """The duplex worker pool, when workers are configured; health checks start now."""
    urls = services.settings.worker_urls
    if not urls:
        return None
    pool = WorkerPool(
        urls,
        max_queue=services.settings.duplex_queue,
        metrics=PoolMetrics(services.metrics.registry),
    )
    await pool.start()
    stack.push_async_callback(pool.aclose)
    log.info("duplex worker pool: %s", ", ".join(urls))
    return pool
