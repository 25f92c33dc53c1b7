"""The embedded LLM: `python -m llama_cpp.server` as a child process on 127.0.0.1.

A server is only taken as started once it has written a real completion: a process that
answers `/v1/models` may still die on its first token (a llama.cpp build with CPU
instructions this machine cannot run answers everything but a completion). When it
cannot start, `LlmStartError` says why, from its exit and its last log lines, and what
to do about it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import socket
import sys
from collections import deque
from collections.abc import Sequence
from pathlib import Path

import httpx

from agents.environment import SERVER_SECRETS, child_environment
from agents.errors import BackendUnavailable
from agents.openmp import bound_openmp_spin

log = logging.getLogger(__name__)

LLM_NICENESS = 10
LLM_PROMPT_CACHE_BYTES = 16 << 20  # KV bytes: two or three prompts
# What a start writes to prove the model works; short, so a start costs little.
PROBE_TOKENS = 8
PROBE_MESSAGES: tuple[dict[str, str], ...] = (
    {"role": "system", "content": "You answer the phone."},
    {"role": "user", "content": "Hello?"},
)
LOG_TAIL_LINES = 40

REBUILD_HINT = (
    "rebuild it for this machine: rm -rf .venv && ./scripts/bootstrap.sh "
    "(a portable build; see docs/operations.md, 'The embedded LLM')"
)


class LlmStartError(BackendUnavailable):
    """An embedded LLM server could not write a completion. The message is one line: the
    cause, and what to do."""


def _die_with_parent() -> None:
    """In the child, before exec: if we are killed (even -9), the server goes too.

    It also runs at a lower CPU priority: on a small box the caller's audio path and
    the first clause's synthesis must not queue behind the rest of the reply being
    written, which nobody will hear for another second or two. Measured (bench turns):
    at +5, level with the model threads, a single call's token-to-first-audio went from
    p50 104 to 369 ms (clean mouth to mouth p90 901 -> 1198 ms), while 4 calls ending
    their turns at once gained only p90 2.0-2.4 -> 1.9 s.
    """
    os.nice(LLM_NICENESS)
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _child_environment() -> dict[str, str]:
    """Our environment minus what llama_cpp.server would read as its own settings.

    Its settings come from pydantic-settings, which reads HOST, PORT, MODEL... from the
    environment and lets them win over the command line: our own PORT would make it
    bind the port offhook is serving on.
    """
    try:
        from llama_cpp.server.settings import ModelSettings, ServerSettings

        theirs = {
            name.upper() for name in (*ModelSettings.model_fields, *ServerSettings.model_fields)
        }
    except ImportError:  # the server extra is missing; start() will say so
        theirs = {"HOST", "PORT", "MODEL"}
    # No Twilio secrets, and no hosted-LLM key: this server is the LLM.
    ours = child_environment(drop={*SERVER_SECRETS, "LLM_API_KEY"})
    env = {key: value for key, value in ours.items() if key.upper() not in theirs}
    env["PYTHONUNBUFFERED"] = "1"
    bound_openmp_spin(env)
    return env


def free_local_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def free_local_ports(count: int, *, tries: int = 50) -> int:
    """The first of `count` consecutive ports free on 127.0.0.1 now (for servers other
    processes are told the address of before they start, like the workers' own ports)."""
    for _ in range(tries):
        first = free_local_port()
        if first + count > 65536:
            continue
        with contextlib.ExitStack() as held:
            try:
                for port in range(first, first + count):
                    sock = held.enter_context(socket.socket())
                    sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return first
    raise RuntimeError(f"no {count} consecutive free ports on 127.0.0.1 in {tries} tries")


def _port_taken(port: int) -> bool:
    """Something listens on the port. SO_REUSEADDR, as the server's own (uvicorn's)
    socket has it: connections of a killed server left in TIME_WAIT do not take it."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def describe_exit(returncode: int, log_tail: Sequence[str], *, port: int, model: Path) -> str:
    """Why a server process ended, in one line, with what to do where we know it."""
    if returncode < 0:
        number = -returncode
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        if number == signal.SIGILL:
            return (
                "killed by SIGILL (illegal instruction): this llama.cpp build uses CPU "
                f"instructions this machine cannot run; {REBUILD_HINT}"
            )
        if number == signal.SIGKILL:
            return "killed by SIGKILL (out of memory, or killed by hand)"
        how = f"killed by {name}"
    else:
        how = f"exited with code {returncode}"
    text = "\n".join(log_tail).lower()
    last = _last_meaningful(log_tail)
    if "address already in use" in text:
        return f"{how}: port 127.0.0.1:{port} is taken; free it, or set LLM_EMBEDDED_PORT"
    if "no module named" in text and "llama_cpp" in text:
        return f"{how}: llama-cpp-python is not installed; run ./scripts/bootstrap.sh"
    if any(sign in text for sign in _MODEL_LOAD_FAILED):
        return (
            f"{how}: cannot load the model {model}: {last}; check LLM_GGUF, or run "
            "`offhook models` to verify the bundled one"
        )
    return f"{how}: {last}" if last else how


# What llama.cpp and llama_cpp.server write when a model file cannot be loaded.
_MODEL_LOAD_FAILED = ("failed to load model", "gguf_init_from_file", "invalid magic")


def _last_meaningful(lines: Sequence[str]) -> str:
    """The last log line worth showing: a traceback's final line, not its frames."""
    for line in reversed(lines):
        text = line.strip()
        if text and not text.startswith(("File ", "^", "~")):
            return text[:300]
    return ""


class EmbeddedLlamaServer:
    """`python -m llama_cpp.server` as a child process on 127.0.0.1.

    A separate process keeps llama.cpp's threads off our event loop and lets the OS
    schedule it against STT/TTS. Its prompt cache keeps the system prompt's KV state, so
    only each turn's new tokens are evaluated. `start` again after it died restarts it
    on the same port, so clients keep their address.
    """

    def __init__(
        self,
        model_path: Path,
        *,
        port: int = 0,
        threads: int = 2,
        context: int = 2048,
        api_key: str = "",
    ) -> None:
        self.model_path = model_path
        # Asked of every request (llama_cpp.server's API_KEY), so that other users and
        # processes on the host cannot use the server; "" leaves it open.
        self.api_key = api_key
        self.port = port or free_local_port()
        self.threads = threads
        self.context = context
        self.model_name = model_path.stem
        self._process: asyncio.subprocess.Process | None = None
        self._log_task: asyncio.Task[None] | None = None
        self._log_tail: deque[str] = deque(maxlen=LOG_TAIL_LINES)
        self._stopping = False
        self._last_exit: int | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def _command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(self.model_path),
            "--model_alias",
            self.model_name,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--n_ctx",
            str(self.context),
            "--n_threads",
            str(self.threads),
            "--n_threads_batch",
            str(self.threads),
            "--cache",
            "true",
            # The prompt cache lets calls that take turns on this one model resume their
            # own prompts. Its cap (llama_cpp's default: 2 GB) counts each state's KV
            # only (SmolLM2-135M: ~7 MB at 300 tokens), not the logits kept beside it
            # (tokens x vocabulary floats: ~60 MB), so the child grew call after call.
            "--cache_size",
            str(LLM_PROMPT_CACHE_BYTES),
            # llama_cpp.server's default ends a streaming reply as soon as another
            # request waits: with two calls at once, one caller's answer stopped after
            # however many words it had (often none).
            "--interrupt_requests",
            "false",
            "--verbose",
            "false",
        ]

    async def start(
        self,
        ready_timeout_s: float = 120.0,
        *,
        warm_messages: Sequence[dict[str, str]] = PROBE_MESSAGES,
    ) -> None:
        """Start the server and have it write a completion of `warm_messages` (which
        also puts their prefix in its prompt cache). Raises LlmStartError, the server
        stopped, when it cannot."""
        if self.running:
            return
        if not self.model_path.is_file():
            raise LlmStartError(f"the model file {self.model_path} does not exist; check LLM_GGUF")
        if _port_taken(self.port):
            raise LlmStartError(
                f"port 127.0.0.1:{self.port} is taken; free it, or set LLM_EMBEDDED_PORT"
            )
        log.info("starting embedded LLM server on 127.0.0.1:%d (%s)", self.port, self.model_name)
        self._stopping = False
        self._log_tail.clear()
        self._process = await asyncio.create_subprocess_exec(
            *self._command(),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            env=self._environment(),
            preexec_fn=_die_with_parent,
            # Out of our process group: a Ctrl-C meant for `serve` must not stop it
            # behind our back (PR_SET_PDEATHSIG still ends it with us).
            start_new_session=True,
        )
        self._log_task = asyncio.create_task(self._forward_logs(), name="llama-server-logs")
        try:
            async with asyncio.timeout(ready_timeout_s):
                await self._until_serving()
                await self._probe(warm_messages)
        except TimeoutError:
            await self.stop()
            raise LlmStartError(
                f"embedded LLM server on port {self.port} wrote no completion within "
                f"{ready_timeout_s:.0f} s; the machine may be overloaded"
            ) from None
        except LlmStartError:
            await self.stop()
            raise

    def _environment(self) -> dict[str, str]:
        env = _child_environment()
        if self.api_key:
            # From the environment, not the command line, which any user can read.
            env["API_KEY"] = self.api_key
        return env

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    async def _until_serving(self) -> None:
        async with httpx.AsyncClient(headers=self._headers()) as client:
            while True:
                await self._raise_if_exited()
                with contextlib.suppress(httpx.HTTPError):
                    reply = await client.get(f"{self.base_url}/models", timeout=1.0)
                    if reply.status_code == 200:
                        return
                await asyncio.sleep(0.1)

    async def _probe(self, messages: Sequence[dict[str, str]]) -> None:
        """A real completion: what a caller's turn needs, not just a listening socket."""
        request = {
            "model": self.model_name,
            "messages": list(messages),
            "max_tokens": PROBE_TOKENS,
            "temperature": 0.0,
        }
        async with httpx.AsyncClient(headers=self._headers()) as client:
            try:
                reply = await client.post(
                    f"{self.base_url}/chat/completions", json=request, timeout=None
                )
            except httpx.HTTPError as exc:
                await self._raise_if_exited(wait_s=2.0)
                raise LlmStartError(
                    f"embedded LLM server on port {self.port} failed its first completion: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
        await self._raise_if_exited()
        try:
            # A completion came back: its words may be few or blank (a custom model).
            message = reply.json()["choices"][0]["message"]
        except (ValueError, KeyError, IndexError, TypeError):
            message = None
        if reply.status_code != 200 or not isinstance(message, dict):
            raise LlmStartError(
                f"embedded LLM server on port {self.port} wrote no completion "
                f"(HTTP {reply.status_code}: {reply.text[:200]!r})"
            )

    async def _raise_if_exited(self, wait_s: float = 0.0) -> None:
        process = self._process
        if process is None:
            raise LlmStartError(f"embedded LLM server on port {self.port} was stopped")
        if wait_s and process.returncode is None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(process.wait(), wait_s)
        if process.returncode is not None:
            raise LlmStartError(
                f"embedded LLM server on port {self.port} {await self._exit_cause(process)}"
            )

    async def _exit_cause(self, process: asyncio.subprocess.Process) -> str:
        # The last lines say why: let the log reader reach the end of the pipe first
        # (without swallowing a cancel of our own caller).
        if self._log_task is not None:
            await asyncio.wait({self._log_task}, timeout=1.0)
        assert process.returncode is not None
        self._last_exit = process.returncode
        return describe_exit(
            process.returncode, list(self._log_tail), port=self.port, model=self.model_path
        )

    async def wait_exit(self) -> str:
        """Wait until the running server exits by itself; why it did, in one line."""
        process = self._process
        if process is None:
            raise RuntimeError("the server is not running")
        await process.wait()
        return await self._exit_cause(process)

    async def _forward_logs(self) -> None:
        process = self._process
        assert process is not None and process.stderr is not None
        async for line in process.stderr:
            text = line.decode(errors="replace").rstrip()
            if text:
                self._log_tail.append(text)
                log.debug("llama-server: %s", text)

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.returncode is None

    @property
    def exit_reason(self) -> str | None:
        """Why the process ended, from the moment it is reaped (None while it runs, or
        once stopped); the log's last lines may not all be read yet."""
        process = self._process
        if process is None or process.returncode is None:
            return None
        return describe_exit(
            process.returncode, list(self._log_tail), port=self.port, model=self.model_path
        )

    @property
    def stopped_cleanly(self) -> bool:
        """Its last exit was a clean stop (code 0, SIGTERM or SIGINT), not a crash."""
        return self._last_exit in (0, -signal.SIGTERM, -signal.SIGINT)

    @property
    def stopping(self) -> bool:
        """`stop` was called: an exit now is ours, not a crash."""
        return self._stopping

    async def stop(self) -> None:
        self._stopping = True
        process, self._process = self._process, None
        if process is not None and process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), 10)
            except TimeoutError:
                process.kill()
                await process.wait()
        if self._log_task is not None:
            self._log_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._log_task
            self._log_task = None
