"""`serve --local-workers N` without LLM_BASE_URL: each worker writes on an embedded
llama.cpp server of its own, started by the gateway on a port pinned before the
workers start; the gateway's calls write on the others first."""

from __future__ import annotations

import socket

import pytest

from agents.cascade.llm_server import free_local_ports
from agents.duplex.local import share_embedded_llm
from agents.loading import fill_ports, server_ports, shared_servers
from app.settings import Settings


def test_each_worker_gets_a_server_of_its_own() -> None:
    settings, envs = share_embedded_llm(Settings.from_env({}), 2)

    first = settings.llm_embedded_port
    assert first > 0 and settings.llm_embedded_shared == 2
    assert [env["LLM_BASE_URL"] for env in envs] == [
        f"http://127.0.0.1:{first}/v1",
        f"http://127.0.0.1:{first + 1}/v1",
    ]
    assert all(env["LLM_MODEL"] for env in envs)
    # MAX_CALLS=4 servers: the workers' two on their pinned ports, two for the calls.
    assert server_ports(settings, settings.llm_servers) == [first, first + 1, 0, 0]
    assert shared_servers(settings, settings.llm_servers) == 2


def test_more_workers_than_servers_share_them_in_turn() -> None:
    settings, envs = share_embedded_llm(Settings.from_env({}, llm_embedded_servers=2), 3)

    first = settings.llm_embedded_port
    ports = [int(env["LLM_BASE_URL"].split(":")[2].split("/")[0]) for env in envs]
    assert ports == [first, first + 1, first]
    assert server_ports(settings, 2) == [first, first + 1]
    assert shared_servers(settings, 2) == 2


def test_a_configured_llm_endpoint_is_left_to_the_workers() -> None:
    hosted = Settings.from_env({}, llm_base_url="http://llm:8000/v1", llm_model="m")

    settings, envs = share_embedded_llm(hosted, 2)

    assert settings == hosted
    assert envs == [{}, {}]  # they inherit LLM_BASE_URL like every other variable
    assert shared_servers(settings, 4) == 0


def test_a_fixed_port_alone_shares_only_the_first_server() -> None:
    # LLM_EMBEDDED_PORT set by hand: another process writes on that server.
    settings = Settings.from_env({"LLM_EMBEDDED_PORT": "18000"})

    assert server_ports(settings, 4) == [18000, 0, 0, 0]
    assert shared_servers(settings, 4) == 1
    private = Settings.from_env({"LLM_EMBEDDED_PORT": "18000", "LLM_EMBEDDED_SHARED": "0"})
    assert server_ports(private, 4) == [18000, 0, 0, 0]
    assert shared_servers(private, 4) == 0


def test_no_fixed_port_shares_nothing() -> None:
    settings = Settings.from_env({})

    assert server_ports(settings, 4) == [0, 0, 0, 0]
    assert shared_servers(settings, 4) == 0


def test_consecutive_free_ports_can_all_be_bound() -> None:
    first = free_local_ports(3)

    for port in range(first, first + 3):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_llm_ports_that_would_be_the_workers_own_are_refused() -> None:
    settings = Settings.from_env({"LLM_EMBEDDED_PORT": "22399"})

    with pytest.raises(ValueError, match="overlap the workers'"):
        share_embedded_llm(settings, 2, worker_port=22400)  # 22399, 22400 vs 22400, 22401
    assert share_embedded_llm(settings, 1, worker_port=22400)[0].llm_embedded_port == 22399


def test_llm_ports_past_the_last_port_are_refused() -> None:
    settings = Settings.from_env({"LLM_EMBEDDED_PORT": "65535"})

    with pytest.raises(ValueError, match="no room for 2 servers"):
        share_embedded_llm(settings, 2)


def test_other_servers_never_get_a_port_pinned_for_a_worker() -> None:
    # The pinned ports are free until their servers start: the kernel may offer them.
    offered = iter([18001, 18000, 18002, 18003])

    assert fill_ports([18000, 18001, 0, 0], pick=lambda: next(offered)) == [
        18000,
        18001,
        18002,
        18003,
    ]


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_healthy_start_with_local_workers_logs_no_failure(tmp_path) -> None:
    # The workers warm up on the gateway's embedded LLM: started before it answered,
    # each logged "LLM warm-up failed" on every healthy start.
    import os
    import subprocess
    import sys
    import time

    import httpx

    port, worker_port = free_local_ports(1), free_local_ports(1)
    env = {
        **os.environ,
        "PORT": str(port),
        "DATA_DIR": str(tmp_path / "data"),
        "MAX_CALLS": "2",
        "LOG_LEVEL": "INFO",
    }
    env.pop("LLM_BASE_URL", None)
    log_path = tmp_path / "serve.log"
    with open(log_path, "wb") as log:
        serve = subprocess.Popen(
            [
                *(sys.executable, "-m", "cli", "serve", "--local-workers", "1"),
                *("--worker-port", str(worker_port)),
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 300
            status = 0
            while time.monotonic() < deadline and serve.poll() is None and status != 200:
                try:
                    status = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code
                except httpx.HTTPError:
                    time.sleep(0.5)
            assert status == 200, log_path.read_text()[-3000:]
        finally:
            serve.terminate()
            serve.wait(60)
    lines = log_path.read_text().splitlines()
    # The one warning a loopback start without Twilio's token must give, and no other.
    noisy = [
        line
        for line in lines
        if (" ERROR " in line or " WARNING " in line or "failed" in line.lower())
        and "TWILIO_AUTH_TOKEN is not set" not in line
    ]
    assert noisy == [], "\n".join(noisy)
