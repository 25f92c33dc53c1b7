"""The process-wide resources: models loaded once, the LLM backend, call admission."""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from agents.cascade.agent import CascadeModels
from agents.cascade.llm import ChatModel, EmbeddedLlamaServer, OpenAIChat
from agents.cascade.stt import WhisperTranscriber
from agents.cascade.tts import PiperSpeaker
from agents.duplex.pool import PoolMetrics, WorkerPool
from app.assets import STT_ASSETS, ModelCache
from app.metrics import Metrics
from app.settings import Settings
from media.turn import EndOfTurnModel
from telephony.security import CallTokens, WebhookValidator

if TYPE_CHECKING:
    from app.call import CallSession

log = logging.getLogger(__name__)

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
        self.pool: WorkerPool | None = None

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


async def load_models(settings: Settings, stack: AsyncExitStack) -> CascadeModels:
    """Assemble, verify and load every model; start the embedded LLM if none is configured.

    Cleanup of what was started is pushed onto `stack`, so the lifespan closes it.
    """
    cache = ModelCache(settings.model_cache_dir)
    threads = settings.model_threads

    stt_dir = Path(settings.stt_model)
    if settings.stt_model in STT_ASSETS:
        stt_dir = await asyncio.to_thread(cache.path, STT_ASSETS[settings.stt_model])
    voice = Path(settings.tts_voice) if settings.tts_voice else None
    if voice is None:
        voice = await asyncio.to_thread(cache.path, "piper-joe-medium")
    turn_model = await asyncio.to_thread(cache.path, "smart-turn-v3.2")

    llm = await _language_model(settings, cache, stack)
    stt, tts, eot = await asyncio.gather(
        asyncio.to_thread(
            WhisperTranscriber, stt_dir, threads=threads, language=settings.stt_language
        ),
        asyncio.to_thread(PiperSpeaker, voice, threads=threads, speed=settings.tts_speed),
        asyncio.to_thread(EndOfTurnModel, turn_model, threads=1),
    )
    models = CascadeModels(stt=stt, tts=tts, llm=llm, end_of_turn=eot)
    for line in (settings.greeting, settings.apology):
        if line:
            models.canned[line] = await asyncio.to_thread(tts.synthesize, line)
    await _warm_up(models, settings)
    return models


async def _language_model(
    settings: Settings, cache: ModelCache, stack: AsyncExitStack
) -> ChatModel:
    common = {
        "max_tokens": settings.llm_max_tokens,
        "temperature": settings.llm_temperature,
        "first_token_timeout_s": settings.llm_timeout_s,
    }
    if settings.llm_base_url:
        chat = OpenAIChat(
            base_url=settings.llm_base_url,
            model=settings.llm_model,
            api_key=settings.llm_api_key,
            **common,
        )
    else:
        gguf = Path(settings.llm_gguf) if settings.llm_gguf else None
        if gguf is None:
            gguf = await asyncio.to_thread(cache.path, "smollm2-135m-instruct")
        server = EmbeddedLlamaServer(
            gguf, port=settings.llm_embedded_port, threads=settings.model_threads
        )
        await server.start()
        stack.push_async_callback(server.stop)
        chat = OpenAIChat(base_url=server.base_url, model=server.model_name, **common)
    stack.push_async_callback(chat.aclose)
    return chat


async def _warm_up(models: CascadeModels, settings: Settings) -> None:
    """First calls to each model are slow (allocation, caches): pay that before callers do.

    The LLM warm-up also puts the system prompt into the server's prompt cache.
    """
    import numpy as np

    silence = np.zeros(16000, dtype=np.float32)
    await asyncio.to_thread(models.stt.transcribe, silence)
    await asyncio.to_thread(models.end_of_turn.predict, silence)
    try:
        # The same layout as a call's first turn: persona, greeting, caller.
        messages = [{"role": "system", "content": settings.persona()}]
        if settings.greeting:
            messages.append({"role": "assistant", "content": settings.greeting})
        messages.append({"role": "user", "content": "Hello?"})
        async for _ in models.llm.stream(messages):
            pass
    except Exception as exc:  # a remote LLM may be down at start; calls will apologise
        log.warning("LLM warm-up failed: %s", exc)
