"""The Starlette app: Twilio webhook, Media Streams endpoint, health and metrics."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

from starlette.applications import Starlette
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from agents.cascade.agent import CascadeModels
from agents.loading import load_models
from app.call import CallSession
from app.call_status import call_status_callback
from app.metrics import CONTENT_TYPE
from app.outbound import amd_callback, calls_endpoint, deliver_early, stream_parameters
from app.paths import (
    AMD_PATH,
    CALL_STATUS_PATH,
    CALLS_PATH,
    MEDIA_PATH,
    STATUS_PATH,
    VOICE_PATH,
)
from app.services import Services, open_pool
from app.settings import Settings
from recordings.errors import RecordError
from recordings.privacy import mask_number
from recordings.recorder import CallRecorder
from recordings.retention import retention_loop
from recordings.store import RecordStore
from telephony.errors import ProtocolError
from telephony.protocol import Connected, Start
from telephony.security import public_url, stream_url
from telephony.stream import TwilioStream
from telephony.twiml import connect_stream_twiml, say_and_hangup_twiml

log = logging.getLogger(__name__)

OFFHOOK_VERSION = "0.1.0"

START_TIMEOUT_S = 10.0
BUSY_MESSAGE = "Sorry, all our lines are busy right now. Please call again in a few minutes."
NOT_READY_MESSAGE = "Sorry, the assistant is starting up. Please call again in a minute."

# WebSocket close codes: 1008 policy violation (bad signature or token), 1013 try again later.
POLICY_VIOLATION = 1008
TRY_AGAIN_LATER = 1013


def _services(conn: HTTPConnection) -> Services:
    services: Services = conn.app.state.services
    return services


def _base_url(conn: HTTPConnection, settings: Settings) -> str:
    """The public base URL: configured, never request.url (wrong behind a proxy)."""
    if settings.public_url:
        return settings.public_url.rstrip("/")
    scheme = "https" if conn.url.scheme in ("https", "wss") else "http"
    return f"{scheme}://{conn.headers.get('host', 'localhost')}"


async def voice_webhook(request: Request) -> Response:
    services = _services(request)
    settings = services.settings
    form = await request.form()
    base = _base_url(request, settings)
    if services.validator is not None:
        signature = request.headers.get("x-twilio-signature")
        url = public_url(base, VOICE_PATH)
        if request.url.query:  # an outbound call's URL carries its options; Twilio signs them
            url = f"{url}?{request.url.query}"
        if not services.validator.validate(url, form, signature):
            services.metrics.rejected_calls.labels(reason="bad_signature").inc()
            log.warning("voice webhook: invalid X-Twilio-Signature from %s", request.client)
            return PlainTextResponse("invalid signature", status_code=403)
    call_sid = str(form.get("CallSid") or "")
    if not call_sid:
        return PlainTextResponse("CallSid is required", status_code=400)
    if not services.ready.is_set():
        services.metrics.rejected_calls.labels(reason="not_ready").inc()
        return _twiml(say_and_hangup_twiml(NOT_READY_MESSAGE))
    if services.active_calls >= settings.max_calls:
        services.metrics.rejected_calls.labels(reason="busy").inc()
        return _twiml(say_and_hangup_twiml(BUSY_MESSAGE))
    parameters = {
        "token": services.tokens.issue(call_sid),
        "from": str(form.get("From") or ""),
        "to": str(form.get("To") or ""),
        **stream_parameters(request, form),
    }
    twiml = connect_stream_twiml(
        stream_url(base, MEDIA_PATH),
        parameters,
        status_callback_url=public_url(base, STATUS_PATH),
    )
    log.info(
        "call %s from %s: streaming to %s", call_sid, form.get("From"), stream_url(base, MEDIA_PATH)
    )
    return _twiml(twiml)


def _twiml(body: str) -> Response:
    return Response(body, media_type="text/xml")


async def stream_status(request: Request) -> Response:
    services = _services(request)
    form = await request.form()
    if services.validator is not None:
        url = public_url(_base_url(request, services.settings), STATUS_PATH)
        if not services.validator.validate(url, form, request.headers.get("x-twilio-signature")):
            return PlainTextResponse("invalid signature", status_code=403)
    event = str(form.get("StreamEvent") or "")
    log.info(
        "stream status: call %s stream %s %s %s",
        form.get("CallSid"),
        form.get("StreamSid"),
        event,
        form.get("StreamError") or "",
    )
    if event == "stream-error":
        services.metrics.errors.labels(stage="stream").inc()
    return Response(status_code=204)


async def media_stream(websocket: WebSocket) -> None:
    services = _services(websocket)
    settings = services.settings
    if services.validator is not None:
        url = stream_url(_base_url(websocket, settings), MEDIA_PATH)
        signature = websocket.headers.get("x-twilio-signature")
        if not services.validator.validate_stream(url, signature):
            services.metrics.rejected_calls.labels(reason="bad_signature").inc()
            log.warning("media stream: invalid handshake signature from %s", websocket.client)
            await websocket.close(code=POLICY_VIOLATION)  # before accept: an HTTP 403
            return
    await websocket.accept()

    def report(exc: ProtocolError) -> None:
        services.metrics.protocol_errors.labels(kind=exc.kind).inc()
        log.warning("media stream: %s (%s)", exc, exc.kind)

    session: CallSession | None = None

    def report_in_call(exc: ProtocolError) -> None:
        report(exc)
        if session is not None:
            session.protocol_error(exc)

    stream = TwilioStream(websocket, report_in_call)
    start = await _await_start(stream)
    if start is None:
        await stream.close(POLICY_VIOLATION, "no start event")
        return
    token = start.parameters.get("token", "")
    if not services.tokens.verify(start.call_sid, token):
        services.metrics.rejected_calls.labels(reason="bad_call_token").inc()
        log.warning("media stream: call %s presented an invalid call token", start.call_sid)
        await stream.close(POLICY_VIOLATION, "invalid call token")
        return
    models = services.models
    if models is None or not services.admit():
        services.metrics.rejected_calls.labels(reason="busy" if models else "not_ready").inc()
        await stream.close(TRY_AGAIN_LATER, "busy")
        return
    recorder = await _start_record(services, start)
    session = CallSession(
        start,
        stream,
        settings=settings,
        models=models,
        metrics=services.metrics,
        recorder=recorder,
        pool=services.pool,
    )
    services.remember(session)
    deliver_early(services, session)
    try:
        await session.run()
    finally:
        services.open_records.discard(start.call_sid)
        services.release()
        services.metrics.calls.labels(outcome=session.outcome).inc()
        await stream.close()
        log.info("call %s ended: %s", start.call_sid, session.outcome)


async def _start_record(services: Services, start: Start) -> CallRecorder | None:
    """Open the call's record; a record that cannot be opened must not cost the call."""
    settings = services.settings
    if not settings.recording:
        return None
    caller = start.parameters.get("from", "")
    meta = {
        "call_sid": start.call_sid,
        "stream_sid": start.stream_sid,
        "account_sid": start.account_sid,
        "from": mask_number(caller) if settings.mask_caller_number and caller else caller,
        "to": start.parameters.get("to", ""),
        "agent": "cascade",
        "fallbacks": [],
        "versions": {
            "offhook": OFFHOOK_VERSION,
            "settings": settings.fingerprint(),
            "models": {
                "stt": settings.stt_model,
                "llm": settings.llm_model or (settings.llm_gguf or "smollm2-135m-instruct"),
                "tts": settings.tts_voice or "piper-joe-medium",
                "end_of_turn": "smart-turn-v3.2",
            },
        },
    }
    services.open_records.add(start.call_sid)  # before the folder exists: repair must skip it
    try:
        return await asyncio.to_thread(CallRecorder, settings.calls_dir, start.call_sid, meta=meta)
    except (RecordError, OSError) as exc:
        services.open_records.discard(start.call_sid)
        services.metrics.errors.labels(stage="recording").inc()
        log.error("call %s: cannot start its record: %s", start.call_sid, exc)
        return None


async def _await_start(stream: TwilioStream) -> Start | None:
    try:
        async with asyncio.timeout(START_TIMEOUT_S):
            while (event := await stream.receive()) is not None:
                if isinstance(event, Start):
                    return event
                if not isinstance(event, Connected):
                    log.warning("media stream: %s before start ignored", type(event).__name__)
    except TimeoutError:
        log.warning("media stream: no start event within %.0f s", START_TIMEOUT_S)
    return None


async def healthz(request: Request) -> Response:
    services = _services(request)
    if services.load_error:
        return JSONResponse({"status": "error", "error": services.load_error}, status_code=503)
    if not services.ready.is_set():
        return JSONResponse({"status": "loading"}, status_code=503)
    return JSONResponse({"status": "ok", "active_calls": services.active_calls})


async def metrics(request: Request) -> Response:
    return Response(_services(request).metrics.render(), media_type=CONTENT_TYPE)


def create_app(settings: Settings, *, models: CascadeModels | None = None) -> Starlette:
    """The app. Pass `models` to share already-loaded models (tests, benchmarks)."""
    services = Services(settings, models=models)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if services.validator is None:
            log.warning(
                "TWILIO_AUTH_TOKEN is not set: webhook and stream signatures are NOT checked. "
                "Anyone who finds this server can place calls through it."
            )
        async with AsyncExitStack() as stack:
            stack.push_async_callback(services.scheduler.aclose)  # after all the rest
            services.pool = await open_pool(services, stack)
            background: list[asyncio.Task[None]] = []
            if services.models is None:
                background.append(asyncio.create_task(_load(services, stack), name="load-models"))
            else:
                services.ready.set()
            if settings.recording:
                background.append(
                    asyncio.create_task(_look_after_records(services), name="records")
                )
            try:
                yield
            finally:
                for task in background:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task

    app = Starlette(
        routes=[
            Route(VOICE_PATH, voice_webhook, methods=["POST"]),
            Route(STATUS_PATH, stream_status, methods=["POST"]),
            WebSocketRoute(MEDIA_PATH, media_stream),
            Route(AMD_PATH, amd_callback, methods=["POST"]),
            Route(CALL_STATUS_PATH, call_status_callback, methods=["POST"]),
            Route(CALLS_PATH, calls_endpoint, methods=["POST"]),
            Route("/healthz", healthz),
            Route("/metrics", metrics),
        ],
        lifespan=lifespan,
    )
    app.state.services = services
    return app


async def _look_after_records(services: Services) -> None:
    """Repair what a crash left open, then apply retention daily."""
    store = RecordStore(services.settings.calls_dir)
    active = services.recording_now
    try:
        repaired = await asyncio.to_thread(store.repair, active())
        if repaired:
            log.warning("repaired %d call record(s) left open by a crash", len(repaired))
    except Exception:
        log.exception("repairing call records under %s failed", store.root)
    await retention_loop(store, services.settings, active=active)


async def _load(services: Services, stack: AsyncExitStack) -> None:
    try:
        models = await load_models(services.settings, stack)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        services.load_error = f"{type(exc).__name__}: {exc}"
        log.exception("loading models failed")
        return
    # Calls run their model jobs through the app's scheduler, which feeds /metrics.
    models.scheduler = services.scheduler
    services.models = models
    services.ready.set()
    log.info("models loaded; ready for calls")
