"""The bot never answers with a dead brain.

- An embedded llama.cpp server SIGKILLed between two turns of a call: the next turn,
  and the next call, are answered by the LLM, not with the apology.
- `offhook serve` whose embedded LLM cannot start (a corrupt GGUF) exits non-zero with
  the reason in one line, and never reports ready; so does one whose hosted words
  judge (TURN_JUDGE_URL) cannot judge, or whose hosted STT (STT_URL) cannot transcribe.
- Readiness is false until an LLM has answered: a hosted LLM that is down at start.

Real uvicorn servers, the Twilio-protocol caller, real llama.cpp processes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import AsyncExitStack
from pathlib import Path

import httpx
import pytest

from agents.assets import ModelCache
from agents.cascade.agent import CascadeModels
from agents.cascade.draft import DraftBoard
from agents.cascade.llm_health import EmbeddedLlmSupervisor
from agents.cascade.llm_server import EmbeddedLlamaServer
from agents.loading import load_language_model
from app.main import create_app
from ops.local_server import ServerThread, free_port
from ops.simulate import CallerTurn
from tests.conftest import (
    AUTH_TOKEN,
    Bot,
    place_call,
    recorded_turns,
    start_bot,
)
from tests.conftest import test_settings as bot_settings

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

FIRST = CallerTurn(text="What is the capital of France?", after="bot_done")
SECOND = CallerTurn(text="And what is the biggest city in Spain?", after="bot_done")


@pytest.fixture
def own_llm(servers: ServerThread, models: CascadeModels) -> Iterator[CascadeModels]:
    """The session's models, but with an embedded LLM server of their own (one) that a
    test may kill without touching other tests' calls."""
    stack = AsyncExitStack()
    settings = bot_settings(llm_embedded_servers=1)
    pool, health = servers.run(load_language_model(settings, stack, 1), timeout=180)
    try:
        yield dataclasses.replace(models, llm=pool, llm_health=health, drafts=DraftBoard(1))
    finally:
        servers.run(stack.aclose(), timeout=60)


async def bot_replies(bot: Bot, call_sid: str) -> list[str]:
    return [turn.text for turn in await recorded_turns(bot, call_sid) if turn.speaker == "bot"]


async def test_the_turn_after_the_llm_server_is_killed_and_the_next_call_are_answered(
    servers: ServerThread, own_llm: CascadeModels
) -> None:
    bot = start_bot(servers, own_llm, twilio_auth_token=AUTH_TOKEN)
    health = own_llm.llm_health
    assert isinstance(health, EmbeddedLlmSupervisor)
    server = health.servers[0]
    killed: list[int] = []

    def kill_the_llm_before_the_second_question(index: int, start_ms: float) -> None:
        if index == 1 and server.pid is not None:
            killed.append(server.pid)
            os.kill(server.pid, signal.SIGKILL)

    report = await place_call(
        bot,
        FIRST,
        SECOND,
        hangup_after_ms=8000,
        on_turn_start=kill_the_llm_before_the_second_question,
    )
    assert killed, "the second question never started"
    assert all(turn.latency_ms is not None for turn in report.turns), report.turns
    apology = bot.settings.apology
    replies = await bot_replies(bot, report.call_sid)
    # Greeting, the first answer, then the answer to the question asked over a dead LLM.
    assert len(replies) >= 3, replies
    assert replies[2].strip() and replies[2] != apology, replies
    assert health.restarts == 1 and server.pid not in (None, killed[0])

    # The next call, on the restarted server, is answered by the LLM too.
    report = await place_call(bot, FIRST, hangup_after_ms=6000)
    replies = await bot_replies(bot, report.call_sid)
    assert len(replies) >= 2 and replies[1].strip() and replies[1] != apology, replies


def serve_until_it_exits(env: dict[str, str], port: int) -> tuple[int, str, list[int]]:
    """`offhook serve` with `env`, polled on /healthz until it exits: its exit code, its
    stderr, and the health answers it gave meanwhile."""
    serve = subprocess.Popen(
        [sys.executable, "-m", "cli", "serve"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    answers: list[int] = []
    try:
        while serve.poll() is None:
            try:
                answers.append(httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code)
            except httpx.HTTPError:
                pass
            try:
                serve.wait(0.2)
            except subprocess.TimeoutExpired:
                pass
            assert len(answers) < 600, "serve did not exit"
        _, stderr = serve.communicate(timeout=30)
    finally:
        if serve.poll() is None:
            serve.kill()
    return serve.returncode, stderr, answers


def test_serve_with_a_corrupt_model_exits_with_the_reason_and_is_never_ready(
    tmp_path: Path,
) -> None:
    gguf = ModelCache(bot_settings().model_cache_dir).path("smollm2-135m-instruct")
    corrupt = tmp_path / "cut.gguf"
    corrupt.write_bytes(gguf.read_bytes()[: 1 << 20])
    port = free_port()
    env = {
        **os.environ,
        "PORT": str(port),
        "DATA_DIR": str(tmp_path / "data"),
        "LLM_GGUF": str(corrupt),
        "LLM_EMBEDDED_SERVERS": "1",
        "LOG_LEVEL": "INFO",
    }
    env.pop("LLM_BASE_URL", None)
    code, stderr, answers = serve_until_it_exits(env, port)
    assert code == 1, stderr[-2000:]
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("offhook serve: cannot start: "), last
    assert "cannot load the model" in last and "LLM_GGUF" in last, last
    assert 200 not in answers


@pytest.mark.parametrize(
    ("variable", "reason"),
    [
        ("TURN_JUDGE_URL", "the words judge at TURN_JUDGE_URL"),
        ("STT_URL", "the STT at STT_URL cannot transcribe"),
    ],
)
def test_serve_with_a_hosted_model_that_cannot_answer_exits_with_the_reason(
    tmp_path: Path, variable: str, reason: str
) -> None:
    port, hosted_port = free_port(), free_port()  # nothing listens on the hosted one's
    env = {
        **os.environ,
        "PORT": str(port),
        "DATA_DIR": str(tmp_path / "data"),
        "LLM_EMBEDDED_SERVERS": "1",
        variable: f"http://127.0.0.1:{hosted_port}/v1",
    }
    env.pop("LLM_BASE_URL", None)
    code, stderr, answers = serve_until_it_exits(env, port)
    assert code == 1, stderr[-2000:]
    last = stderr.strip().splitlines()[-1]
    assert last.startswith(f"offhook serve: cannot start: {reason}"), last
    assert f"127.0.0.1:{hosted_port}" in last, last
    assert 200 not in answers


def test_readiness_waits_for_a_hosted_llm_to_answer(servers: ServerThread) -> None:
    gguf = ModelCache(bot_settings().model_cache_dir).path("smollm2-135m-instruct")
    llm_port = free_port()
    port = free_port()
    settings = bot_settings(
        llm_base_url=f"http://127.0.0.1:{llm_port}/v1",
        llm_model=gguf.stem,
        data_dir=tempfile.mkdtemp(prefix="offhook-test-data-"),
        public_url=f"http://127.0.0.1:{port}",
    )
    app = create_app(settings)  # loads its own models, as `offhook serve` does
    url = servers.serve(app, port)

    def healthz() -> tuple[int, str]:
        reply = httpx.get(f"{url}/healthz", timeout=5)
        return reply.status_code, reply.json()["status"]

    def wait_for(status: str, seconds: float) -> None:
        for _ in range(int(seconds * 10)):
            if healthz()[1] == status:
                return
            servers.run(asyncio.sleep(0.1))
        raise AssertionError(f"/healthz never said {status!r}: {healthz()}")

    wait_for("llm_unavailable", 120)  # models loaded; the LLM not answering
    assert healthz()[0] == 503
    assert httpx.get(f"{url}/livez", timeout=5).status_code == 200
    voice = httpx.post(f"{url}/twilio/voice", data={"CallSid": "CA" + "1" * 32}, timeout=5)
    assert "<Hangup" in voice.text and "<Stream" not in voice.text  # callers told to retry
    llm = EmbeddedLlamaServer(gguf, port=llm_port, threads=1)
    servers.run(llm.start(), timeout=120)
    try:
        wait_for("ok", 15)  # the watch asks every 5 s
        assert healthz()[0] == 200
        metrics = httpx.get(f"{url}/metrics", timeout=5).text
        assert "offhook_llm_ready 1.0" in metrics
    finally:
        servers.run(llm.stop(), timeout=30)
