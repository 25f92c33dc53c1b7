"""Duplex workers as child processes on this host: `offhook serve --local-workers N`.

Each worker is a real `offhook worker` process on its own port, ending with its parent
(PR_SET_PDEATHSIG), so a crashed gateway leaves no orphans holding models. Without an
LLM endpoint configured, the workers write on the gateway's embedded llama.cpp servers
(one per worker, up to LLM_EMBEDDED_SERVERS, then shared round robin) rather than each
starting its own: on a small box N more copies of the LLM would fight for the cores
the caller's audio path needs.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TypeVar

import httpx

from agents.cascade.llm_server import free_local_ports
from agents.config import EmbeddedLlmSettings
from agents.environment import child_environment

S = TypeVar("S", bound=EmbeddedLlmSettings)

EMBEDDED_LLM_NAME = "local"  # llama.cpp's server answers any model name with its one model


def _end_with_parent() -> None:
    """In the child, before exec: if the parent dies (even by SIGKILL), so does the worker."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def share_embedded_llm(
    settings: S, workers: int, *, worker_port: int | None = None
) -> tuple[S, list[dict[str, str]]]:
    """Pin embedded LLM servers' ports, one per worker (at most LLM_EMBEDDED_SERVERS,
    then shared in turn), so workers can reach them; each worker's environment to do so.

    A server writes one reply at a time: 2 workers on one server each waited out the
    other's whole reply (`python -m benchmarks pool`, 3-4 calls, p90 2.5-3.0 s). With
    LLM_BASE_URL set, workers inherit it and nothing changes. ValueError: the servers'
    ports would not fit, or would be the workers' own (from `worker_port`).
    """
    if settings.llm_base_url:
        return settings, [{} for _ in range(workers)]
    shared = max(1, min(workers, settings.llm_servers))
    port = settings.llm_embedded_port or free_local_ports(shared)
    if port + shared > 65536:
        raise ValueError(f"LLM_EMBEDDED_PORT {port} leaves no room for {shared} servers")
    if worker_port is not None and port < worker_port + workers and worker_port < port + shared:
        raise ValueError(
            f"the LLM servers' ports {port}..{port + shared - 1} overlap the workers' "
            f"{worker_port}..{worker_port + workers - 1}: set LLM_EMBEDDED_PORT elsewhere"
        )
    envs = [
        {
            "LLM_BASE_URL": f"http://127.0.0.1:{port + index % shared}/v1",
            "LLM_MODEL": EMBEDDED_LLM_NAME,
            # The gateway's servers ask every request for its key.
            "LLM_API_KEY": settings.llm_embedded_api_key,
        }
        for index in range(workers)
    ]
    return settings.replace(llm_embedded_port=port, llm_embedded_shared=shared), envs


def spawn_worker(
    index: int,
    port: int,
    *,
    env: Mapping[str, str],
    backend: str = "cascade",
    log_dir: Path | None = None,
    command: list[str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start one `offhook worker` (or `command`) that ends with this process."""
    if command is None:
        command = [sys.executable, "-m", "cli", "worker", "--backend", backend]
        command += ["--port", str(port), "--worker-id", f"local-{index}"]
    log = None
    if log_dir is not None:
        log = open(log_dir / f"worker-{index}.log", "ab")
    try:
        return subprocess.Popen(
            command,
            env=dict(env),
            stdout=log,
            stderr=subprocess.STDOUT if log is not None else None,
            preexec_fn=_end_with_parent,
        )
    finally:
        if log is not None:
            log.close()  # the child has its own descriptor


class LocalWorkers:
    """`count` worker processes on consecutive ports from `first_port` (benches, tests;
    `offhook serve` supervises its workers with `agents.duplex.supervisor`)."""

    def __init__(
        self,
        count: int,
        first_port: int,
        *,
        env: Mapping[str, str] | None = None,
        worker_envs: Sequence[Mapping[str, str]] = (),
        backend: str = "cascade",
        log_dir: Path | None = None,
    ) -> None:
        self.urls: list[str] = []
        self.processes: list[subprocess.Popen[bytes]] = []
        child_env = {**child_environment(), **(env or {})}  # no Twilio secrets
        self.worker_envs = list(worker_envs)
        for index in range(count):
            port = first_port + index
            own = worker_envs[index] if index < len(worker_envs) else {}
            self.processes.append(
                spawn_worker(
                    index, port, env={**child_env, **own}, backend=backend, log_dir=log_dir
                )
            )
            self.urls.append(f"ws://127.0.0.1:{port}")

    def wait_idle(self, timeout_s: float = 180.0) -> None:
        """Block until every worker reports IDLE; raise naming the ones that did not."""
        deadline = time.monotonic() + timeout_s
        waiting = set(range(len(self.urls)))
        while waiting and time.monotonic() < deadline:
            for index in sorted(waiting):
                if self.processes[index].poll() is not None:
                    raise RuntimeError(
                        f"worker {index} exited with {self.processes[index].returncode}"
                    )
                health = self.urls[index].replace("ws://", "http://") + "/health"
                try:
                    state = httpx.get(health, timeout=1.0).json().get("state")
                except (httpx.HTTPError, ValueError):
                    continue
                if state == "idle":
                    waiting.discard(index)
                elif state == "error":
                    raise RuntimeError(f"worker {index} failed to load its backend")
            time.sleep(0.2)
        if waiting:
            raise TimeoutError(f"workers {sorted(waiting)} not idle after {timeout_s:g} s")

    def kill(self, index: int, sig: int = signal.SIGKILL) -> None:
        os.kill(self.processes[index].pid, sig)
        if sig in (signal.SIGKILL, signal.SIGTERM):
            self.processes[index].wait(10)

    def stop(self, timeout_s: float = 15.0) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
