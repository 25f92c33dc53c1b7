"""`worker_main` as a process: the MiniCPM-o backend without torch reports ERROR on /health."""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
import sys

import httpx
import pytest

from ops.local_server import free_port


def test_help_exits_cleanly(capsys: pytest.CaptureFixture[str]) -> None:
    from agents.duplex.worker_cli import worker_main

    with pytest.raises(SystemExit) as done:
        worker_main(["--help"])
    assert done.value.code == 0
    assert "--backend" in capsys.readouterr().out


def test_the_cascade_backend_takes_its_settings_from_whoever_starts_the_worker() -> None:
    """agents never import the app: `offhook worker` (cli.main) hands the settings in."""
    from agents.duplex.cascade_worker_backend import SettingsCascadeBackend
    from agents.duplex.worker_cli import _backend, worker_main
    from app.settings import Settings

    with pytest.raises(SystemExit, match="offhook worker"):
        worker_main(["--backend", "cascade"])
    settings = Settings.from_env({})
    backend = _backend("cascade", "", settings)
    assert isinstance(backend, SettingsCascadeBackend)
    assert backend.settings is settings


async def test_a_worker_whose_backend_cannot_load_says_so() -> None:
    if importlib.util.find_spec("torch") is not None:
        pytest.skip("torch is importable here: the backend would try to load for real")
    port = free_port()
    code = (
        "from agents.duplex.worker_cli import worker_main; "
        f"raise SystemExit(worker_main(['--backend', 'minicpmo', '--port', '{port}']))"
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        body: dict[str, object] = {}
        async with httpx.AsyncClient() as client, asyncio.timeout(30):
            while body.get("state") != "error":
                try:
                    body = (await client.get(f"http://127.0.0.1:{port}/health")).json()
                except httpx.TransportError:
                    pass  # not listening yet
                await asyncio.sleep(0.1)
    finally:
        process.terminate()
        await process.wait()
    assert body["backend"] == "minicpmo"
    assert "torch" in str(body["error"])


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.10", "::"])
def test_a_worker_without_a_token_refuses_to_listen_beyond_loopback(
    host: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from agents.duplex.worker_cli import worker_main
    from app.settings import Settings

    code = worker_main(["--host", host], load_settings=lambda: Settings.from_env({}))

    assert code == 2
    err = capsys.readouterr().err.strip()
    assert "WORKER_TOKEN is not set" in err and len(err.splitlines()) == 1
