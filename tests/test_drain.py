"""SIGTERM drains `offhook serve`: /healthz says so, new calls go elsewhere, live calls
finish, and the server then exits cleanly (not by the signal)."""

from __future__ import annotations

import asyncio
import os
import signal
import tempfile
from types import SimpleNamespace

import httpx
import pytest
import uvicorn

from app.main import create_app
from app.services import Services
from cli.main import draining_server
from ops.local_server import free_port
from tests.conftest import test_settings as bot_settings

pytestmark = pytest.mark.timeout(60)

FIELDS = {"CallSid": "CA" + "2" * 32, "From": "+15550001111", "To": "+15550002222"}


def app_for(**overrides: object) -> tuple[object, Services]:
    settings = bot_settings(recording=False, data_dir=tempfile.mkdtemp(), **overrides)
    app = create_app(settings, models=SimpleNamespace(llm_health=None))  # type: ignore[arg-type]
    return app, app.state.services


async def test_healthz_tells_a_load_balancer_full_and_draining_apart_from_ok() -> None:
    app, services = app_for(max_calls=1)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    task = asyncio.create_task(server.serve())
    try:
        url = f"http://127.0.0.1:{port}/healthz"
        async with httpx.AsyncClient() as client:
            while not server.started:  # noqa: ASYNC110 - uvicorn offers no event
                await asyncio.sleep(0.02)
            ok = await client.get(url)
            services.admission.active = 1  # the one slot is taken
            full = await client.get(url)
            services.drain.begin()
            draining = await client.get(url)
    finally:
        server.should_exit = True
        await task
    assert (ok.status_code, ok.json()["status"]) == (200, "ok")
    assert (full.status_code, full.json()) == (503, {"status": "full", "active_calls": 1})
    assert (draining.status_code, draining.json()["status"]) == (503, "draining")


@pytest.mark.parametrize(("redis", "status"), [(False, 200), (True, 503)])
async def test_a_draining_gateway_takes_no_new_call(
    redis: bool, status: int, redis_url: str
) -> None:
    app, services = app_for(redis_url=redis_url if redis else "")
    services.drain.begin()
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        answer = await client.post("/twilio/voice", data=FIELDS)
    assert answer.status_code == status
    if redis:  # other gateways behind the load balancer: it retries there
        assert answer.headers["retry-after"]
    else:  # a lone gateway: the busy message, as at capacity
        assert "<Say>" in answer.text and "<Connect>" not in answer.text


async def test_sigterm_waits_for_the_live_call_then_exits_without_the_signal() -> None:
    app, services = app_for(drain_timeout_s=30.0)
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    server = draining_server(config, services)
    task = asyncio.create_task(server.serve())
    while not server.started:  # noqa: ASYNC110 - uvicorn offers no event
        await asyncio.sleep(0.02)
    services.admission.active = 1  # a live call
    os.kill(os.getpid(), signal.SIGTERM)
    await asyncio.sleep(3.0)  # past the grace for streams already promised
    async with httpx.AsyncClient() as client:
        health = await client.get(f"http://127.0.0.1:{port}/healthz")
    assert health.json()["status"] == "draining"
    assert not task.done(), "the server left while a call was live"
    services.admission.active = 0  # the call ends
    await asyncio.wait_for(task, 5)
    assert server._captured_signals == []  # nothing re-raised: `serve` exits 0


async def test_a_lone_gateway_still_hangs_up_after_the_stream_as_ever() -> None:
    app, services = app_for()
    services.ready.set()  # no lifespan under ASGITransport: the models are the stand-in
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        answer = await client.post("/twilio/voice", data=FIELDS)
    assert "<Connect>" in answer.text and answer.text.endswith("</Connect><Hangup /></Response>")
    assert "<Redirect" not in answer.text
