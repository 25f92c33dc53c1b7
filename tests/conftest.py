"""Shared fixtures: real uvicorn servers on 127.0.0.1, hosting the real app and models.

The servers run in one background thread with its own event loop (ops.local_server),
so the tests' own loop plays Twilio against them over real sockets. Models load once
per session.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette

from agents.cascade.agent import CascadeModels
from agents.conversation import Speaker, Turn
from agents.loading import load_models
from app.main import create_app
from app.services import Services
from app.settings import Settings
from ops.local_server import ServerThread, free_port
from ops.simulate import CallerTurn, CallReport, SimulationConfig, simulate_call
from recordings.record import CallRecord
from recordings.store import RecordStore
from tests.services import RedisServer, S3Server, shared_redis_url, shared_s3_endpoint

AUTH_TOKEN = "test-auth-token-0123456789abcdef"
# Long enough to be talked over (1.5 s in) with seconds of it to come, and short: every
# real-time call of the suite plays it.
GREETING = "Hello! Thanks for calling the offhook demo line. How can I help you today?"

# Bot audio with less silence than this inside is one reply at the caller's ear: Piper's
# pauses between sentences reach ~460 ms (CallReport.bot_spans); a reply to anything
# the caller said comes at least this late.
ONE_REPLY_GAP_MS = 1000


@dataclass
class Bot:
    url: str
    app: Starlette
    settings: Settings

    @property
    def services(self) -> Services:
        services: Services = self.app.state.services
        return services


def test_settings(**overrides: Any) -> Settings:
    defaults: dict[str, Any] = {"greeting": GREETING, "log_level": "INFO", "max_calls": 4}
    defaults.update(overrides)
    return Settings.from_env({}, **defaults)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that needs the real models (the `models` fixture, or `bot` on top of
    it) is `slow`: `pytest -m "not slow"` is the fast tier. Tests that load models or run
    servers of their own are marked in their modules."""
    for item in items:
        if "models" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session", autouse=True)
def scratch_under_pytest_temp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every scratch folder the session makes (the bots' data and call records, the
    redis-servers' and SeaweedFS's work and logs, in this process or a child) goes under
    pytest's own temporary folder, which pytest prunes to the last three sessions. Made
    in /tmp, they outlived the run: one CI run left ~190 folders of call records behind,
    up to 13 MB each."""
    scratch = tmp_path_factory.mktemp("scratch", numbered=False)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tempfile, "tempdir", str(scratch))
        patch.setenv("TMPDIR", str(scratch))
        yield scratch


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A real redis-server: the one `.ci/run` started, or one of this session's own.
    Tests share it, so each uses keys under a prefix of its own."""
    shared = shared_redis_url()
    if shared:
        yield shared
        return
    server = RedisServer().start()
    yield server.url
    server.stop()


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """A real S3-compatible server (SeaweedFS), credentials in tests.services."""
    shared = shared_s3_endpoint()
    if shared:
        yield shared
        return
    server = S3Server().start()
    yield server.endpoint
    server.stop()


@pytest.fixture(scope="session")
def servers() -> Iterator[ServerThread]:
    thread = ServerThread()
    yield thread
    thread.close()


@pytest.fixture(scope="session")
def models(servers: ServerThread) -> CascadeModels:
    settings = test_settings()
    return servers.run(load_models(settings, servers.stack), timeout=600)


def start_bot(servers: ServerThread, models: CascadeModels | None, **overrides: Any) -> Bot:
    port = free_port()
    overrides.setdefault("data_dir", tempfile.mkdtemp(prefix="offhook-test-data-"))
    overrides.setdefault("public_url", f"http://127.0.0.1:{port}")
    settings = test_settings(**overrides)
    app = create_app(settings, models=models)
    url = servers.serve(app, port)
    return Bot(url=url, app=app, settings=settings)


@pytest.fixture(scope="session")
def bot(servers: ServerThread, models: CascadeModels) -> Bot:
    """The bot as deployed: signatures enforced, real models."""
    return start_bot(servers, models, twilio_auth_token=AUTH_TOKEN)


# A caller who talks over the bot's greeting, 1.5 s into it.
INTERRUPTION = CallerTurn(
    text="Sorry to interrupt, but I need to speak to someone about my bill.",
    after="bot_speaking",
    delay_ms=1500,
)


async def place_call(bot: Bot, *turns: CallerTurn, **options: Any) -> CallReport:
    """One simulated Twilio call to `bot`; the server must keep to the protocol."""
    config = SimulationConfig(base_url=bot.url, auth_token=AUTH_TOKEN, turns=list(turns), **options)
    report = await simulate_call(config)
    assert report.protocol_violations == [], "the server broke the Media Streams protocol"
    return report


async def finished_record(bot: Bot, call_sid: str) -> CallRecord:
    """A finished call's record: what the server keeps of a call once it is over."""
    store = RecordStore(bot.settings.calls_dir)
    for _ in range(300):
        if call_sid not in bot.services.calls and (bot.settings.calls_dir / call_sid).exists():
            record = store.open(call_sid)
            if record.meta.get("ended_at"):
                return record
        await asyncio.sleep(0.05)
    raise AssertionError(f"call {call_sid} left no finished record")


async def recorded_turns(bot: Bot, call_sid: str) -> list[Turn]:
    """The call's conversation as its transcript.json has it (turns with words)."""
    record = await finished_record(bot, call_sid)
    return [
        Turn(
            Speaker(turn["speaker"]),
            str(turn["text"]),
            turn_id=number,
            truncated=bool(turn["truncated"]),
            intended=str(turn.get("intended") or ""),
            start_ms=turn.get("start_ms"),
            end_ms=turn.get("end_ms"),
            latency=turn.get("latency"),
        )
        for number, turn in enumerate(record.transcript()["turns"], start=1)
    ]


def greeting_ms(bot: Bot) -> float:
    """How long the bot's greeting plays (one synthesis per test session)."""
    models = bot.services.models
    assert models is not None
    return len(models.canned[bot.settings.greeting]) * 1000 / models.tts.sample_rate
