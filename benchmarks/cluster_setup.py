"""The processes of a cluster on one box, all on loopback: Redis, an S3-compatible store
(SeaweedFS), cascade workers registered through Redis, gateways (`offhook serve`) and one
HAProxy in front of them with deploy/haproxy.cfg, the configuration docs/scale-out.md
gives operators.

Every process writes its log to a file in the run's folder (a pipe nobody reads fills
and blocks it); `Cluster.close` stops them all, children included.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from benchmarks.measure import BENCH_TOKEN
from tests.services import RedisServer, S3Server, free_port, s3_environ

REPO = Path(__file__).resolve().parents[1]
HAPROXY_CFG = REPO / "deploy" / "haproxy.cfg"
EXAMPLE_GATEWAYS = ("10.0.0.5:8080", "10.0.0.6:8080")  # the servers deploy/haproxy.cfg names
GREETING = "Hello, how can I help?"
MAX_TOKENS = 24
BUCKET = "offhook-bench"
TOKEN_SECRET = "bench-call-token-secret-0123456789abcdef"


@dataclass
class Process:
    """One server process in a session of its own, so a kill reaches its children."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log: Path
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Process:
        with self.log.open("ab") as out:
            self.popen = subprocess.Popen(
                self.argv,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=REPO,
            )
        return self

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive:
            assert self.popen is not None
            os.killpg(self.popen.pid, sig)

    def wait(self, timeout_s: float) -> int | None:
        assert self.popen is not None
        try:
            return self.popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def stop(self) -> None:
        if not self.alive:
            return
        self.signal(signal.SIGTERM)
        if self.wait(30) is None:
            self.signal(signal.SIGKILL)
            self.wait(10)

    def tail(self, chars: int = 1500) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""


@dataclass
class Gateway:
    process: Process
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def health(self) -> tuple[int, dict[str, object]]:
        try:
            answer = httpx.get(f"{self.url}/healthz", timeout=5)
            return answer.status_code, dict(answer.json())
        except (httpx.HTTPError, ValueError):
            return 0, {}


@dataclass
class Cluster:
    """`gateways` gateways (behind HAProxy when more than one) and `workers` workers."""

    gateways_wanted: int
    workers_wanted: int
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="cluster-")))
    redis: RedisServer = field(default_factory=RedisServer)
    s3: S3Server = field(default_factory=S3Server)
    gateways: list[Gateway] = field(default_factory=list)
    workers: list[Process] = field(default_factory=list)
    haproxy: Process | None = None
    public_port: int = field(default_factory=free_port)

    @property
    def public_url(self) -> str:
        if self.haproxy is None:
            return self.gateways[0].url
        return f"http://127.0.0.1:{self.public_port}"

    def records_env(self) -> dict[str, str]:
        return {"RECORDS_URL": f"s3://{BUCKET}/calls", **s3_environ(self.s3.endpoint)}

    def _env(self, **extra: str) -> dict[str, str]:
        return {
            **os.environ,
            "REDIS_URL": self.redis.url,
            "CALL_TOKEN_SECRET": TOKEN_SECRET,
            "TWILIO_AUTH_TOKEN": BENCH_TOKEN,
            "GREETING": GREETING,
            "LLM_MAX_TOKENS": str(MAX_TOKENS),
            "LOG_LEVEL": "INFO",  # each process's log file is the run's post-mortem
            **self.records_env(),
            **extra,
        }

    def start(self) -> Cluster:
        self.redis.start()
        self.s3.start()
        self._make_bucket()
        for index in range(self.workers_wanted):
            self.workers.append(self._start_worker(index, free_port()))
        for index in range(self.gateways_wanted):
            self.gateways.append(self._start_gateway(index))
        if self.gateways_wanted > 1:
            self._start_haproxy()
        self.wait_ready()
        return self

    def _start_worker(self, index: int, port: int) -> Process:
        env = self._env(WORKER_URL=f"ws://127.0.0.1:{port}")
        argv = [
            sys.executable,
            "-m",
            "cli",
            "worker",
            "--backend",
            "cascade",
            "--port",
            str(port),
            "--worker-id",
            f"worker-{index}",
        ]
        log = self.workdir / f"worker-{index}.log"
        return Process(f"worker-{index}", argv, env, log).start()

    def restart_dead(self) -> list[str]:
        """What an operator's supervisor does after a crash: the dead come back on
        their own ports (a worker registers again; HAProxy checks a gateway back in)."""
        restarted = []
        for index, worker in enumerate(self.workers):
            if not worker.alive:
                port = int(worker.env["WORKER_URL"].rsplit(":", 1)[1])
                self.workers[index] = self._start_worker(index, port)
                restarted.append(worker.name)
        for index, gateway in enumerate(self.gateways):
            if not gateway.process.alive:
                self.restart_gateway(index)
                restarted.append(gateway.process.name)
        return restarted

    def _public(self) -> str:
        if self.gateways_wanted > 1:
            return f"http://127.0.0.1:{self.public_port}"
        return ""

    def _start_gateway(self, index: int, port: int | None = None) -> Gateway:
        port = port or free_port()
        data = self.workdir / f"gateway-{index}"
        data.mkdir(exist_ok=True)
        public = self._public() or f"http://127.0.0.1:{port}"
        env = self._env(
            HOST="127.0.0.1",
            PORT=str(port),
            PUBLIC_URL=public,
            DATA_DIR=str(data),
            GATEWAY_URL=f"http://127.0.0.1:{port}",
        )
        log = self.workdir / f"gateway-{index}.log"
        process = Process(f"gateway-{index}", [sys.executable, "-m", "cli", "serve"], env, log)
        return Gateway(process.start(), port)

    def restart_gateway(self, index: int) -> None:
        """A gateway back on its own port (HAProxy's health check takes it in again)."""
        old = self.gateways[index]
        old.process.stop()
        self.gateways[index] = self._start_gateway(index, old.port)

    def _start_haproxy(self) -> None:
        """deploy/haproxy.cfg as shipped, but on loopback: plain HTTP on the public port
        (no certificate here), and this run's gateways for the example addresses."""
        config = HAPROXY_CFG.read_text()
        bind = next(line for line in config.splitlines() if line.strip().startswith("bind "))
        config = config.replace(bind, f"    bind 127.0.0.1:{self.public_port}")
        config = config.replace("    http-request set-header X-Forwarded-Proto https\n", "")
        for example, gateway in zip(EXAMPLE_GATEWAYS, self.gateways, strict=False):
            config = config.replace(example, f"127.0.0.1:{gateway.port}")
        path = self.workdir / "haproxy.cfg"
        path.write_text(config)
        log = self.workdir / "haproxy.log"
        argv = ["haproxy", "-db", "-f", str(path)]
        self.haproxy = Process("haproxy", argv, dict(os.environ), log).start()

    def _make_bucket(self) -> None:
        import boto3

        client = boto3.client(
            "s3",
            endpoint_url=self.s3.endpoint,
            **{
                k.lower(): v
                for k, v in s3_environ(self.s3.endpoint).items()
                if k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
            },
            region_name="us-east-1",
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                client.create_bucket(Bucket=BUCKET)
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)

    def wait_ready(self, timeout_s: float = 900) -> None:
        deadline = time.monotonic() + timeout_s
        for gateway in self.gateways:
            while gateway.health()[1].get("status") != "ok":
                if not gateway.process.alive:
                    raise RuntimeError(f"{gateway.process.name} exited: {gateway.process.tail()}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{gateway.process.name} not ready")
                time.sleep(0.5)
        for worker in self.workers:
            if not worker.alive:
                raise RuntimeError(f"{worker.name} exited: {worker.tail()}")
        if self.haproxy is not None:
            while True:
                try:
                    if httpx.get(f"{self.public_url}/healthz", timeout=5).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline or not self.haproxy.alive:
                    raise RuntimeError(f"haproxy not ready: {self.haproxy.tail()}")
                time.sleep(0.3)

    def close(self) -> None:
        for process in [*(g.process for g in self.gateways), *self.workers]:
            process.stop()
        if self.haproxy is not None:
            self.haproxy.stop()
        self.s3.stop()
        self.redis.stop()
