"""Child processes never see Twilio's secrets (nor, for the embedded LLM, the LLM key)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.cascade.llm_server import _child_environment
from agents.duplex.local import LocalWorkers
from agents.environment import child_environment
from ops.local_server import free_port

SECRETS = {
    "TWILIO_AUTH_TOKEN": "tw-secret-1",
    "CALL_TOKEN_SECRET": "call-secret-2-0123456789",
    "TWILIO_ACCOUNT_SID": "AC" + "3" * 32,
}


@pytest.fixture
def secret_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LLM_API_KEY", "sk-4")
    monkeypatch.setenv("OFFHOOK_TEST_SETTING", "kept")


def test_child_environment_drops_the_servers_secrets_and_keeps_the_rest() -> None:
    environ = {**SECRETS, "PATH": "/usr/bin", "STT_MODEL": "base", "twilio_auth_token": "x"}

    assert child_environment(environ) == {"PATH": "/usr/bin", "STT_MODEL": "base"}


@pytest.mark.usefixtures("secret_environment")
def test_the_embedded_llm_server_gets_no_secret_and_no_llm_key() -> None:
    env = _child_environment()

    assert not set(SECRETS) & set(env)
    assert "LLM_API_KEY" not in env
    assert env["OFFHOOK_TEST_SETTING"] == "kept"


@pytest.mark.usefixtures("secret_environment")
def test_a_local_worker_process_starts_without_twilio_secrets(tmp_path: Path) -> None:
    workers = LocalWorkers(1, free_port(), env={"UNIT_MS": "500"}, log_dir=tmp_path)
    try:
        environ = Path(f"/proc/{workers.processes[0].pid}/environ").read_bytes()
    finally:
        workers.stop()
    variables = dict(item.split("=", 1) for item in environ.decode().split("\0") if "=" in item)
    assert not set(SECRETS) & set(variables)
    assert variables["LLM_API_KEY"] == "sk-4"  # a worker may call the hosted LLM itself
    assert variables["UNIT_MS"] == "500"
    assert variables["OFFHOOK_TEST_SETTING"] == "kept"
