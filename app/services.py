"""The process-wide resources: the loaded models, the duplex worker pool, call admission."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agents.cascade.agent import CascadeModels
from agents.cascade.llm_health import EmbeddedLlmSupervisor
from agents.config import shown_url
from agents.duplex.pool import DuplexPool, PoolMetrics, WorkerPool
from agents.duplex.registry import open_redis
from agents.duplex.shared_pool import SharedWorkerPool

# Model loading lives in agents/, where `offhook worker` can use it without the app; the
# name stays importable from here for code not yet moved to `agents.loading`.
from agents.loading import load_models
from agents.scheduler import ModelScheduler
from app.admission import Admission
from app.call_ledger import LocalCallLedger
from app.call_owners import call_owners
from app.drain import Drain
from app.heap import CallSweeper
from app.metrics import Metrics
from app.record_keeping import open_uploader
from app.redis_ledger import RedisCallLedger, redis_client
from app.refusal_log import RefusalLog
from app.settings import Settings
from callevents import CallStatus
from recordings.privacy import mask_number
from telephony.security import CallTokens, WebhookValidator

if TYPE_CHECKING:
    from app.call import CallSession

log = logging.getLogger(__name__)

__all__ = ["Services", "load_models", "open_pool"]

RESERVE_S = 15.0  # a webhook's slot, held for its stream


@dataclass
class Services:
    settings: Settings
    metrics: Metrics = field(default_factory=Metrics)
    models: CascadeModels | None = None
    load_error: str | None = None

    def __post_init__(self) -> None:
        self.tokens = CallTokens(self.settings.token_secret)
        self.admission = Admission(
            self.settings.max_calls,
            reserve_s=RESERVE_S,
            max_pending=max(8, 2 * self.settings.max_calls),
            on_change=self.metrics.active_calls.set,
            ledger=shared_call_ledger(self.settings, self.metrics),
        )
        # Read once: a persona file that goes missing later cannot fail a call.
        self.persona = self.settings.persona()
        token = self.settings.twilio_auth_token
        self.validator = WebhookValidator(token) if token else None
        self.ready = asyncio.Event()
        self.sweeper = CallSweeper(on_sweep=self.metrics.gc_seconds.observe)
        # Refused requests are counted in the metrics; the log gets a few a minute.
        self.refusals = RefusalLog(logging.getLogger("app.refusals"))
        # Live calls only: a finished call's session holds its audio buffers, so it is
        # forgotten at once; what is kept of it is its record and the metrics.
        self.calls: dict[str, CallSession] = {}
        self.open_records: set[str] = set()
        # With RECORDS_URL: finished records go to the S3 store (app/record_keeping.py).
        self.uploader = open_uploader(self)
        # Twilio's reports on calls whose stream has not started yet (outbound calls):
        # answering-machine verdicts, and status callbacks with when they came.
        self.early_amd: dict[str, tuple[str, int | None]] = {}
        self.early_status: dict[str, list[tuple[float, CallStatus]]] = {}
        # Which gateway holds each call, for callbacks and resumes that land on another
        # (app/call_owners.py; on Redis with REDIS_URL); and SIGTERM's drain (app/drain.py).
        self.call_owners = call_owners(self.settings, self.metrics)
        self.drain = Drain()
        self.pool: DuplexPool | None = None
        # Every call's model jobs (STT, end of turn, TTS) go through this one scheduler,
        # on threads of its own, taking the calls in turn; its queue waits go to /metrics.
        # The app hands it to the models it loads (app.main) and closes it at shutdown.
        self.scheduler = ModelScheduler(
            on_wait=self.metrics.model_waited, on_run=self.metrics.model_ran
        )

    def adopt(self, models: CascadeModels) -> None:
        """Serve calls with `models`; their LLM's health feeds readiness and /metrics."""
        self.models = models
        health = models.llm_health
        if health is not None:
            if isinstance(health, EmbeddedLlmSupervisor):
                health.on_restart = self.metrics.llm_restarts.inc
            self.metrics.llm_ready.set_function(lambda: 1.0 if health.ready else 0.0)
        else:
            self.metrics.llm_ready.set(1)

    @property
    def llm_ready(self) -> bool:
        """Some LLM can answer (models not loaded yet: not ready either)."""
        if self.models is None:
            return False
        health = self.models.llm_health
        return health is None or health.ready

    @property
    def takes_calls(self) -> bool:
        """New calls are welcome: models loaded and some LLM answering, or all went
        down moments ago and are being restarted (their replies wait for it)."""
        if self.models is None or not self.ready.is_set():
            return False
        health = self.models.llm_health
        return health is None or health.ready or health.recovering

    def recording_now(self) -> set[str]:
        """Calls whose records are still being written: never repaired or cleaned up."""
        return {
            sid
            for sid, session in self.calls.items()
            if session.recorder is not None and not session.recorder.closed
        }

    def record_closed(self, call_sid: str) -> None:
        """A call's record was finished or changed after its end: upload it (RECORDS_URL)."""
        if self.uploader is not None:
            self.uploader.notify(call_sid)

    def remember(self, session: CallSession) -> None:
        self.calls[session.call_sid] = session

    def forget(self, call_sid: str) -> None:
        self.calls.pop(call_sid, None)

    @property
    def active_calls(self) -> int:
        return self.admission.active

    def shown_number(self, number: str) -> str:
        """A caller's number as logs and records show it (MASK_CALLER_NUMBER)."""
        if self.settings.mask_caller_number and number:
            return mask_number(number)
        return number


def shared_call_ledger(settings: Settings, metrics: Metrics) -> RedisCallLedger | None:
    """With REDIS_URL, the CallSid ledger every gateway shares; else None (this process's
    own). The Redis client connects on first use: a Redis that is down delays nothing."""
    if not settings.redis_url:
        return None
    return RedisCallLedger(
        redis_client(settings.redis_url),
        local=LocalCallLedger(RESERVE_S),
        holder=settings.gateway_url or f"http://{settings.host}:{settings.port}",
        metrics=metrics,
    )


async def open_pool(
    services: Services,
    stack: AsyncExitStack,
    on_unhealthy: Callable[[str, str], None] | None = None,
) -> DuplexPool | None:
    """The duplex worker pool, when workers are configured; health checks start now.

    DUPLEX_WORKERS (or local workers): a static list. Else, with REDIS_URL: the workers
    registered there, leased in one queue shared with every gateway.
    `on_unhealthy(url, reason)` hears of every lease given back broken (a supervisor of
    local workers restarts those).
    """
    urls = services.settings.worker_urls
    if not urls and services.settings.redis_url:
        shared = SharedWorkerPool(
            open_redis(services.settings.redis_url),
            gateway_id=services.settings.gateway_url,
            max_queue=services.settings.duplex_queue,
            metrics=PoolMetrics(services.metrics.registry),
            on_unhealthy=on_unhealthy,
        )
        await shared.start()
        stack.push_async_callback(shared.aclose)
        log.info("duplex workers: the registry at %s", shown_url(services.settings.redis_url))
        return shared
    if not urls:
        return None
    pool = WorkerPool(
        urls,
        max_queue=services.settings.duplex_queue,
        metrics=PoolMetrics(services.metrics.registry),
        on_unhealthy=on_unhealthy,
    )
    await pool.start()
    stack.push_async_callback(pool.aclose)
    log.info("duplex worker pool: %s", ", ".join(urls))
    return pool
