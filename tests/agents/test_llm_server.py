"""The embedded LLM starts only by writing a completion, says in one line why it cannot,
and, supervised, comes back after it is killed.

Real llama.cpp servers on the bundled model; nothing of llama.cpp is mocked.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agents.assets import ModelCache
from agents.cascade.llm import ChatPool, OpenAIChat
from agents.cascade.llm_health import EmbeddedLlmSupervisor, HostedLlmWatch
from agents.cascade.llm_server import (
    EmbeddedLlamaServer,
    LlmStartError,
    describe_exit,
    free_local_port,
)
from app.settings import Settings

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

QUESTION = [
    {"role": "system", "content": "You answer the phone."},
    {"role": "user", "content": "What is the capital of France?"},
]


@pytest.fixture(scope="module")
def gguf() -> Path:
    return ModelCache(Settings.from_env({}).model_cache_dir).path("smollm2-135m-instruct")


async def reply(chat: OpenAIChat | ChatPool) -> str:
    return "".join([delta async for delta in chat.stream(QUESTION)])


async def test_a_started_server_has_written_a_completion(gguf: Path) -> None:
    server = EmbeddedLlamaServer(gguf, threads=1)
    await server.start()
    chat = OpenAIChat(base_url=server.base_url, model=server.model_name, max_tokens=20)
    try:
        assert server.running
        assert (await reply(chat)).strip()
        environ = await asyncio.to_thread(Path(f"/proc/{server.pid}/environ").read_bytes)
        assert any(item.startswith(b"GOMP_SPINCOUNT=") for item in environ.split(b"\0"))
    finally:
        await chat.aclose()
        await server.stop()


@pytest.fixture
def corrupt_gguf(gguf: Path, tmp_path: Path) -> Path:
    corrupt = tmp_path / "model.gguf"
    corrupt.write_bytes(gguf.read_bytes()[: 1 << 20])  # a download cut short
    return corrupt


async def test_the_embedded_server_answers_only_with_its_key(gguf: Path) -> None:
    import httpx

    server = EmbeddedLlamaServer(gguf, threads=1, api_key="k-0123456789")
    await server.start()
    try:
        async with httpx.AsyncClient() as client:
            refused = await client.get(f"{server.base_url}/models")
            keyed = await client.get(
                f"{server.base_url}/models", headers={"Authorization": "Bearer k-0123456789"}
            )
        assert refused.status_code == 401 and keyed.status_code == 200
        chat = OpenAIChat(base_url=server.base_url, model="m", api_key="k-0123456789")
        assert (await reply(chat)).strip()
        await chat.aclose()
    finally:
        await server.stop()


async def test_a_corrupt_model_file_fails_the_start_with_its_reason(corrupt_gguf: Path) -> None:
    corrupt = corrupt_gguf
    server = EmbeddedLlamaServer(corrupt, threads=1)
    with pytest.raises(LlmStartError) as caught:
        await server.start(ready_timeout_s=60)
    message = str(caught.value)
    assert "cannot load the model" in message and "LLM_GGUF" in message, message
    assert "\n" not in message
    assert not server.running


async def test_a_taken_port_fails_the_start_at_once(gguf: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        server = EmbeddedLlamaServer(gguf, port=holder.getsockname()[1], threads=1)
        started = time.monotonic()
        with pytest.raises(LlmStartError, match="is taken; free it, or set LLM_EMBEDDED_PORT"):
            await server.start()
        assert time.monotonic() - started < 1.0


def test_an_illegal_instruction_says_to_rebuild_portably() -> None:
    cause = describe_exit(-signal.SIGILL, [], port=1, model=Path("m.gguf"))
    assert "SIGILL" in cause and "bootstrap.sh" in cause and "portable" in cause
    assert "out of memory" in describe_exit(-signal.SIGKILL, [], port=1, model=Path("m"))
    traceback = ["Traceback (most recent call last):", '  File "x.py", line 1', "OSError: boom"]
    assert describe_exit(1, traceback, port=1, model=Path("m")).endswith("OSError: boom")


async def test_a_killed_server_is_noticed_at_once_restarted_and_answers_again(
    gguf: Path,
) -> None:
    server = EmbeddedLlamaServer(gguf, threads=1)
    await server.start()
    restarts: list[float] = []
    health = EmbeddedLlmSupervisor(
        [server], warm_messages=QUESTION, on_restart=lambda: restarts.append(time.monotonic())
    )
    watch = asyncio.create_task(health.run())
    chat = OpenAIChat(base_url=server.base_url, model=server.model_name, max_tokens=20)
    pool = ChatPool([chat], health=health, wait_s=30)
    try:
        first_pid = server.pid
        assert first_pid is not None and health.ready
        os.kill(first_pid, signal.SIGKILL)
        killed = time.monotonic()
        while health.ready and time.monotonic() - killed < 5:  # noqa: ASYNC110 - polled as a caller would
            await asyncio.sleep(0.01)
        assert time.monotonic() - killed < 1.0, "a dead server must be noticed within a second"
        assert "SIGKILL" in health.reason
        assert health.recovering, "moments after a death, new calls are still welcome"
        # A reply asked for now waits for the restarted server, not the apology.
        assert (await reply(pool)).strip()
        assert health.ready and health.restarts == 1 and len(restarts) == 1
        assert server.pid != first_pid
    finally:
        watch.cancel()
        await chat.aclose()
        await server.stop()


async def test_a_hosted_llm_that_is_down_is_not_ready_until_it_answers(gguf: Path) -> None:
    port = free_local_port()
    chat = OpenAIChat(base_url=f"http://127.0.0.1:{port}/v1", model="m", max_tokens=8)
    health = HostedLlmWatch(
        chat, f"http://127.0.0.1:{port}/v1", probe_messages=QUESTION, every_s=0.5
    )
    watch = asyncio.create_task(health.run())
    server = EmbeddedLlamaServer(gguf, port=port, threads=1)
    try:
        await asyncio.sleep(1.2)
        assert not health.ready
        assert not health.recovering, "never answered: not welcoming calls"
        assert f"127.0.0.1:{port}" in health.reason
        await server.start()
        for _ in range(100):
            if health.ready:
                break
            await asyncio.sleep(0.1)
        assert health.ready
        # A reply that cannot reach it marks it down again; it is asked until it answers.
        health.unreachable(0, "connection refused")
        assert not health.ready
        assert await health.wait_alive(10)
    finally:
        watch.cancel()
        await chat.aclose()
        await server.stop()


class _Unreachable:
    """A pool member whose server is gone: every connection is refused."""

    model = "gone"
    offers_tools = False

    def __init__(self) -> None:
        self.asked = 0

    async def stream(self, messages: object) -> AsyncIterator[str]:
        from agents.errors import LanguageModelUnreachable

        self.asked += 1
        raise LanguageModelUnreachable("APIConnectionError: Connection error.")
        yield ""  # pragma: no cover - makes this an async generator

    async def stream_tools(self, messages: object, tools: object) -> AsyncIterator[str]:
        async for delta in self.stream(messages):
            yield delta

    async def aclose(self) -> None:
        pass


async def test_a_reply_that_finds_its_server_gone_is_asked_once_more_elsewhere(
    gguf: Path,
) -> None:
    server = EmbeddedLlamaServer(gguf, threads=1)
    await server.start()
    live = OpenAIChat(base_url=server.base_url, model=server.model_name, max_tokens=20)
    gone = _Unreachable()
    try:
        # The dead member is first in line (the home, the most threads): asked, refused,
        # and the reply is written by the live one.
        pool = ChatPool([gone, live])  # type: ignore[list-item]
        assert (await reply(pool)).strip()
        assert gone.asked == 1
        # Refused twice: the caller gets the apology, not a wait without end.
        twice = ChatPool([gone, _Unreachable()])  # type: ignore[list-item]
        from agents.errors import LanguageModelUnreachable

        with pytest.raises(LanguageModelUnreachable):
            await reply(twice)
    finally:
        await live.aclose()
        await server.stop()
