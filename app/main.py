"""The Starlette app: Twilio webhook, Media Streams endpoint, health and metrics."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack

from starlette.applications import Starlette
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from agents.cascade.agent import CascadeModels
from agents.cascade.hosted_words_judge import HostedJudgeError
from agents.duplex.supervisor import WorkerSupervisor
from agents.errors import BackendUnavailable
from agents.loading import load_models, smart_turn_needed
from agents.turns.config import fused_weights
from app.admission import Reservation
from app.call import CallSession
from app.call_owners import EarlyReport
from app.call_resume import (
    RESUME,
    admission_key,
    after_stream,
    may_resume,
    record_id,
    resume_number,
    resume_refusal,
    stream_key,
)
from app.call_status import call_status_callback
from app.heap import settle as settle_heap
from app.metrics import CONTENT_TYPE
from app.outbound import (
    amd_callback,
    calls_endpoint,
    deliver_early,
    deliver_kept,
    deliver_reports,
    stream_parameters,
)
from app.paths import (
    AMD_PATH,
    CALL_STATUS_PATH,
    CALLS_PATH,
    MEDIA_PATH,
    STATUS_PATH,
    VOICE_PATH,
)
from app.record_keeping import look_after_records
from app.refusal_log import RefusalLog
from app.services import Services, open_pool
from app.settings import Settings
from app.webhook import CALL_SID, Refused, base_url, party, signed_form
from app.webhook import account_sid as webhook_account_sid
from app.webhook import call_sid as webhook_call_sid
from recordings.errors import RecordError
from recordings.recorder import CallRecorder
from telephony.errors import ProtocolError
from telephony.protocol import Connected, Start
from telephony.security import public_url, stream_url
from telephony.stream import TwilioStream
from telephony.twiml import connect_stream_twiml, say_and_hangup_twiml

log = logging.getLogger(__name__)

OFFHOOK_VERSION = "0.1.0"

START_TIMEOUT_S = 5.0  # Twilio sends `start` at once; a socket may not idle before it
BUSY_MESSAGE = "Sorry, all our lines are busy right now. Please call again in a few minutes."
NOT_READY_MESSAGE = "Sorry, the assistant is starting up. Please call again in a minute."

# WebSocket close codes: 1008 policy violation (bad signature or token), 1013 try again later.
POLICY_VIOLATION = 1008
TRY_AGAIN_LATER = 1013
DRAIN_RETRY_S = 5  # a draining gateway's Retry-After for a webhook
# Local workers load the same models as the gateway (cascade) or a 20 GB model from disk
# (minicpmo); past this the app takes calls anyway, on the cascade until they are ready.
LOCAL_WORKERS_READY_S = 300.0


def _services(conn: HTTPConnection) -> Services:
    services: Services = conn.app.state.services
    return services


def _refused(exc: Refused) -> Response:
    return PlainTextResponse(exc.reason, status_code=exc.status)


async def voice_webhook(request: Request) -> Response:
    services = _services(request)
    settings = services.settings
    try:
        form = await signed_form(request, services, VOICE_PATH)
        call_sid = webhook_call_sid(form)
        webhook_account_sid(form, settings.twilio_account_sid)
        caller, callee = party(form, "From"), party(form, "To")
        base = base_url(request, settings)
    except Refused as exc:
        return _refused(exc)
    if services.drain.draining:
        services.metrics.rejected_calls.labels(reason="draining").inc()
        if settings.redis_url:  # other gateways share the public URL: the LB retries there
            return PlainTextResponse("draining", 503, {"Retry-After": str(DRAIN_RETRY_S)})
        return _twiml(say_and_hangup_twiml(BUSY_MESSAGE))
    resume = resume_number(request.query_params.get(RESUME, ""))
    if resume and (answer := await resume_refusal(services, request, form, call_sid)):
        return answer
    if not services.takes_calls:
        services.metrics.rejected_calls.labels(reason="not_ready").inc()
        return _twiml(say_and_hangup_twiml(NOT_READY_MESSAGE))
    # A resumed call's new stream is admitted under a key of its own (app.call_resume).
    key = admission_key(call_sid, resume)
    reservation = await services.admission.reserve(key)
    if reservation is Reservation.REPEATED:
        # A CallSid that streamed, is live, or whose reservation lapsed: a replay of a
        # captured webhook. It gets no slot and no token (so no second stream).
        services.metrics.rejected_calls.labels(reason="replayed_webhook").inc()
        services.refusals.warning("replay", "webhook for call %r refused: a repeat", call_sid)
        return _twiml(say_and_hangup_twiml(BUSY_MESSAGE))
    if reservation is Reservation.BUSY:
        services.metrics.rejected_calls.labels(reason="busy").inc()
        return _twiml(say_and_hangup_twiml(BUSY_MESSAGE))
    parameters = {
        "token": services.tokens.issue(key),
        "from": caller,
        "to": callee,
        **stream_parameters(request, form),
    }
    twiml = connect_stream_twiml(
        stream_url(base, MEDIA_PATH),
        parameters,
        status_callback_url=public_url(base, STATUS_PATH),
        **after_stream(settings, base, request, resume),
    )
    log.info("call %s from %s: streaming", call_sid, services.shown_number(caller))
    return _twiml(twiml)


def _twiml(body: str) -> Response:
    return Response(body, media_type="text/xml")


async def stream_status(request: Request) -> Response:
    services = _services(request)
    try:
        form = await signed_form(request, services, STATUS_PATH)
    except Refused as exc:
        return _refused(exc)
    event = form.get("StreamEvent")
    # %r: these are the sender's strings; a newline must not forge a log line.
    log.info(
        "stream status: call %r stream %r %r %r",
        form.get("CallSid")[:64],
        form.get("StreamSid")[:64],
        event[:64],
        form.get("StreamError")[:200],
    )
    if event == "stream-error":
        services.metrics.errors.labels(stage="stream").inc()
    return Response(status_code=204)


async def media_stream(websocket: WebSocket) -> None:
    services = _services(websocket)
    settings = services.settings
    if services.validator is not None:
        url = stream_url(base_url(websocket, settings), MEDIA_PATH)
        signature = websocket.headers.get("x-twilio-signature")
        if not services.validator.validate_stream(url, signature):
            services.metrics.rejected_calls.labels(reason="bad_signature").inc()
            services.refusals.warning(
                "stream signature",
                "media stream: invalid handshake signature from %s",
                websocket.client,
            )
            await websocket.close(code=POLICY_VIOLATION)  # before accept: an HTTP 403
            return
    # Sockets waiting for `start` are few and short-lived: beyond the limit, refuse.
    if not services.admission.open_pending():
        services.metrics.rejected_calls.labels(reason="too_many_pending").inc()
        await websocket.close(code=TRY_AGAIN_LATER)
        return
    try:
        await websocket.accept()
        stream, start = await _started_stream(websocket, services)
    finally:
        services.admission.close_pending()
    if start is None:
        return
    key = stream_key(start)  # the CallSid, or a resumed call's key (app.call_resume)
    record = record_id(start)  # ...and its own folder
    if not services.admission.admit(key):
        services.metrics.rejected_calls.labels(reason="busy").inc()
        await stream.close(TRY_AGAIN_LATER, "busy")
        return
    # From here on the slot is ours: whatever fails, the finally gives it back.
    session: CallSession | None = None
    held = False
    try:
        models = services.models
        assert models is not None  # _started_stream refused the call otherwise
        recorder = await _start_record(services, start, record)
        session = CallSession(
            start,
            stream,
            settings=settings,
            models=models,
            metrics=services.metrics,
            persona=services.persona,
            recorder=recorder,
            pool=services.pool,
        )
        counted, in_call = stream.on_protocol_error, session

        def report_in_call(exc: ProtocolError) -> None:
            counted(exc)
            in_call.protocol_error(exc)

        stream.on_protocol_error = report_in_call
        services.remember(session)
        # Callbacks and resumes that land on other gateways find the call here.
        held = True
        await services.call_owners.hold(start.call_sid)
        deliver_early(services, session)
        await deliver_kept(services, session)
        await session.run()
    finally:
        services.open_records.discard(record)
        services.forget(start.call_sid)
        services.record_closed(record)  # after forget: no longer being written
        services.admission.release(key)
        outcome = session.outcome if session is not None else "error"
        services.metrics.calls.labels(outcome=outcome).inc()
        if held:  # before the close: Twilio may ask to resume the moment it sees it
            await services.call_owners.release(start.call_sid, resumable=may_resume(outcome))
        await stream.close(POLICY_VIOLATION if outcome == "flood" else 1000)
        log.info("call %s ended: %s", start.call_sid, outcome)
        services.sweeper.call_ended()


async def _started_stream(
    websocket: WebSocket, services: Services
) -> tuple[TwilioStream, Start | None]:
    """The accepted stream and its `start`, or None once the stream was refused."""

    def report(exc: ProtocolError) -> None:
        services.metrics.protocol_errors.labels(kind=exc.kind).inc()
        services.refusals.warning("protocol", "media stream: %s (%s)", exc, exc.kind)

    stream = TwilioStream(websocket, report)
    start = await _await_start(stream, services.refusals)
    reason = await _refusal(services, start)
    if reason is not None or start is None:
        if reason is not None:
            services.metrics.rejected_calls.labels(reason=reason).inc()
        services.refusals.warning("stream", "media stream refused: %s", reason or "no start event")
        await stream.close(POLICY_VIOLATION, reason or "no start event")
        return stream, None
    if services.models is None:
        services.metrics.rejected_calls.labels(reason="not_ready").inc()
        await stream.close(TRY_AGAIN_LATER, "not ready")
        return stream, None
    return stream, start


async def _refusal(services: Services, start: Start | None) -> str | None:
    """Why this `start` may not begin a call (a rejection reason), or None."""
    if start is None:
        return None
    if not CALL_SID.fullmatch(start.call_sid):
        return "bad_call_sid"
    expected_account = services.settings.twilio_account_sid
    if expected_account and start.account_sid != expected_account:
        return "wrong_account"
    key = stream_key(start)
    if not services.tokens.verify(key, start.parameters.get("token", "")):
        return "bad_call_token"
    # Consumed: a token (and its CallSid) starts one stream, however often it is replayed,
    # on this gateway or (REDIS_URL) any other.
    if not await services.admission.claim_stream(key):
        return "replayed_call_token"
    return None


async def _start_record(services: Services, start: Start, record: str) -> CallRecorder | None:
    """Open the stream's record in folder `record`; one that cannot be opened must not
    cost the call."""
    settings = services.settings
    if not settings.recording:
        return None
    caller = start.parameters.get("from", "")
    meta = {
        "call_sid": start.call_sid,
        "stream_sid": start.stream_sid,
        "account_sid": start.account_sid,
        "from": services.shown_number(caller),
        "to": start.parameters.get("to", ""),
        "agent": "cascade",
        "fallbacks": [],
        # A resumed stream's record names the call it carries on (app.call_resume).
        **({"resumes": start.call_sid} if record != start.call_sid else {}),
        "versions": {
            "offhook": OFFHOOK_VERSION,
            "settings": settings.fingerprint(),
            "models": {
                "stt": settings.stt_url_model if settings.stt_url else settings.stt_model,
                "llm": settings.llm_model or (settings.llm_gguf or "smollm2-135m-instruct"),
                "tts": settings.tts_voice or "piper-joe-medium",
                **(
                    {"end_of_turn": "smart-turn-v3.2"}
                    if smart_turn_needed(
                        settings.turn_judge, fused_weights(settings.turn_judge_weights)
                    )
                    else {}
                ),
            },
        },
    }
    services.open_records.add(record)  # before the folder exists: repair must skip it
    try:
        return await asyncio.to_thread(
            CallRecorder,
            settings.calls_dir,
            record,
            meta=meta,
            max_bytes=int(settings.max_record_mb * 1_000_000),
        )
    except (RecordError, OSError) as exc:
        services.open_records.discard(record)
        services.metrics.errors.labels(stage="recording").inc()
        log.error("call %s: cannot start its record: %s", start.call_sid, exc)
        return None


async def _await_start(stream: TwilioStream, refusals: RefusalLog) -> Start | None:
    try:
        async with asyncio.timeout(START_TIMEOUT_S):
            while (event := await stream.receive()) is not None:
                if isinstance(event, Start):
                    return event
                if not isinstance(event, Connected):
                    refusals.warning(
                        "stream", "media stream: %s before start ignored", type(event).__name__
                    )
    except TimeoutError:
        refusals.warning("stream", "media stream: no start event within %.0f s", START_TIMEOUT_S)
    return None


async def healthz(request: Request) -> Response:
    """Readiness (also at /readyz): 200 only while new calls can be answered here:
    models loaded, some LLM answering, a slot free and not draining. A load balancer
    sends new calls only where it is 200 (deploy/haproxy.cfg); "full" and "draining"
    gateways still serve their live calls. The causes are in the server's log;
    strangers learn only the state."""
    services = _services(request)
    if services.load_error:
        return JSONResponse({"status": "error"}, status_code=503)
    active = services.active_calls
    if services.drain.draining:
        return JSONResponse({"status": "draining", "active_calls": active}, status_code=503)
    if not services.ready.is_set():
        return JSONResponse({"status": "loading"}, status_code=503)
    if not services.llm_ready:
        return JSONResponse({"status": "llm_unavailable"}, status_code=503)
    if active >= services.settings.max_calls:
        return JSONResponse({"status": "full", "active_calls": active}, status_code=503)
    return JSONResponse({"status": "ok", "active_calls": active})


def _deliver_late_reports(services: Services) -> Callable[[str, list[EarlyReport]], None]:
    """Reports kept for a call just after its stream started here, handed to it."""

    def deliver(call_sid: str, reports: list[EarlyReport]) -> None:
        if (session := services.calls.get(call_sid)) is not None:
            deliver_reports(session, reports)

    return deliver


async def livez(request: Request) -> Response:
    """Liveness: the process serves requests. Restarting it would not help a loading
    model or a hosted LLM that is down, so this is 200 whatever readiness says."""
    return JSONResponse({"status": "alive"})


async def metrics(request: Request) -> Response:
    return Response(_services(request).metrics.render(), media_type=CONTENT_TYPE)


def create_app(
    settings: Settings,
    *,
    models: CascadeModels | None = None,
    local_workers: WorkerSupervisor | None = None,
    on_fatal: Callable[[str], None] | None = None,
) -> Starlette:
    """The app. Pass `models` to share already-loaded models (tests, benchmarks).

    `local_workers` (`serve --local-workers`): started with the app, waited for before it
    takes calls, watched while it runs, and stopped with it. Started after the app's
    own models, since they use its embedded LLM.

    `on_fatal(reason)`: the models cannot load (a dead embedded LLM, a corrupt model
    file): `offhook serve` stops with that reason rather than serve calls it could only
    apologise to. Without it, /healthz reports the error.
    """
    settings.check_exposure()
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
            await services.admission.start()  # asks nothing of Redis yet: never fails
            stack.push_async_callback(services.admission.aclose)
            await services.call_owners.start(on_early=_deliver_late_reports(services))
            stack.push_async_callback(services.call_owners.aclose)
            background: list[asyncio.Task[None]] = []
            if services.models is not None:
                services.adopt(services.models)
                settle_heap()
                services.ready.set()
            elif local_workers is not None:
                # The workers write on this process's embedded LLM: it must be up (and
                # answering) before they start, or their own warm-up fails.
                await _load(services, stack, on_fatal)
            else:
                background.append(
                    asyncio.create_task(_load(services, stack, on_fatal), name="load-models")
                )
            if local_workers is not None and not services.load_error:
                await stack.enter_async_context(local_workers)
                # Before the pool's health checks: a worker still loading is no failure.
                await local_workers.wait_ready(LOCAL_WORKERS_READY_S)
            services.pool = await open_pool(
                services, stack, local_workers.report if local_workers is not None else None
            )
            if local_workers is not None and not services.load_error:
                background.append(asyncio.create_task(local_workers.run(), name="workers"))
            if settings.recording:
                background.append(asyncio.create_task(look_after_records(services), name="records"))
            try:
                yield
            finally:
                for task in background:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
                services.sweeper.close()

    app = Starlette(
        routes=[
            Route(VOICE_PATH, voice_webhook, methods=["POST"]),
            Route(STATUS_PATH, stream_status, methods=["POST"]),
            WebSocketRoute(MEDIA_PATH, media_stream),
            Route(AMD_PATH, amd_callback, methods=["POST"]),
            Route(CALL_STATUS_PATH, call_status_callback, methods=["POST"]),
            Route(CALLS_PATH, calls_endpoint, methods=["POST"]),
            Route("/healthz", healthz),
            Route("/readyz", healthz),
            Route("/livez", livez),
            Route("/metrics", metrics),
        ],
        lifespan=lifespan,
    )
    app.state.services = services
    return app


async def _load(
    services: Services, stack: AsyncExitStack, on_fatal: Callable[[str], None] | None
) -> None:
    try:
        models = await load_models(services.settings, stack)
    except asyncio.CancelledError:
        raise
    except (BackendUnavailable, HostedJudgeError) as exc:
        # An LLM that cannot start, a hosted STT or judge that cannot answer: its
        # message is the cause and what to do, no traceback to read through.
        services.load_error = str(exc)
        log.error("cannot start: %s", exc)
    except Exception as exc:
        services.load_error = f"{type(exc).__name__}: {exc}"
        log.exception("loading models failed")
    if services.load_error:
        if on_fatal is not None:
            on_fatal(services.load_error)
        return
    # Calls run their model jobs through the app's scheduler, which feeds /metrics.
    models.scheduler = services.scheduler
    services.adopt(models)
    settle_heap()
    services.ready.set()
    if services.llm_ready:
        log.info("models loaded; ready for calls")
    else:
        log.error("models loaded, but no LLM answers: not ready for calls until one does")
