"""What a benchmark's JSON carries besides its figures: the commit and the settings it ran
with, when, and on which machine, so that two results can be compared (or not).

    {"provenance": provenance("turns", argv, options(args)), **result}

- commit: `git rev-parse HEAD` of this checkout ("unknown" without git or a checkout),
  and whether tracked files differed from it (`dirty`; None when unknown);
- date: UTC, to the second;
- machine: CPU model, architecture, cores, OS and Python;
- options: the benchmark's own arguments, as parsed (URLs without credentials or query
  strings, as the command line's);
- settings: every application setting (environment variable) whose value differs from
  its default, secrets masked; the rest are the commit's defaults.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from agents.config import shown_url

__all__ = [
    "add_seed_and_json",
    "app_settings",
    "commit",
    "cpu_model",
    "dirty",
    "fresh_seed",
    "machine",
    "options",
    "provenance",
    "write_result",
]

ROOT = Path(__file__).resolve().parent.parent
# Arguments that are no setting of the run: the dispatcher's own, and secrets.
_NOT_OPTIONS = frozenset({"run", "show", "json", "what", "auth_token"})


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def commit(*, short: bool = False) -> str:
    """The checkout's HEAD, or "unknown"."""
    found = _git("rev-parse", *(["--short"] if short else []), "HEAD")
    return found or "unknown"


def dirty() -> bool | None:
    """Whether tracked files differ from HEAD (None: no git, or no checkout)."""
    status = _git("status", "--porcelain", "--untracked-files=no")
    return None if status is None else bool(status)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict[str, object]:
    return {
        "cpu": cpu_model(),
        "arch": platform.machine(),
        "cores": os.cpu_count() or 0,
        "os": platform.platform(),
        "python": platform.python_version(),
    }


def app_settings(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The application settings that differ from their defaults, as `offhook settings`
    shows them (secrets masked); {"error": ...} if the environment holds a bad value."""
    from app.settings import Settings, SettingsError

    try:
        current = Settings.describe(Settings.from_env(environ))
    except SettingsError as exc:
        return {"error": str(exc)}
    defaults = {env: value for env, value, _ in Settings.describe()}
    return {env: value for env, value, _ in current if value != defaults.get(env)}


def _plain(value: object) -> object:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return str(value)


def options(args: argparse.Namespace | Mapping[str, object]) -> dict[str, object]:
    """A benchmark's arguments as JSON values, less the dispatcher's and the secrets."""
    items = vars(args) if isinstance(args, argparse.Namespace) else args
    return {k: _plain(v) for k, v in items.items() if k not in _NOT_OPTIONS}


def _masked(argv: Sequence[str]) -> list[str]:
    """The command line with a token's value hidden (`--auth-token X`, `--auth-token=X`)
    and a server's URL shown without credentials (`--stt-url`, `--judge-url`, ...)."""
    shown: list[str] = []
    for arg in argv:
        name, equals, value = arg.partition("=")
        if shown and shown[-1] == "--auth-token":
            arg = "***"
        elif arg.startswith("--auth-token="):
            arg = "--auth-token=***"
        elif shown and _is_url_option(shown[-1]):
            arg = shown_url(arg)
        elif equals and _is_url_option(name):
            arg = f"{name}={shown_url(value)}"
        shown.append(arg)
    return shown


def _is_url_option(arg: str) -> bool:
    return arg.startswith("--") and arg.endswith("-url")


def _shown_options(run_options: Mapping[str, object]) -> dict[str, object]:
    """The options with every URL (an option named `*url`) shown without credentials."""
    return {
        key: shown_url(value) if key.endswith("url") and isinstance(value, str) and value else value
        for key, value in run_options.items()
    }


def provenance(
    benchmark: str,
    argv: Sequence[str] = (),
    run_options: Mapping[str, object] | None = None,
) -> dict[str, object]:
    return {
        "benchmark": benchmark,
        "command": " ".join(["python -m benchmarks", benchmark, *_masked(argv)]),
        "commit": commit(),
        "dirty": dirty(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "options": _shown_options(run_options or {}),
        "settings": app_settings(),
    }


def add_seed_and_json(
    parser: argparse.ArgumentParser, seed_help: str = "repeat a run (default: new)"
) -> None:
    """The options every bench that draws its material fresh takes: `--seed` to repeat
    a run (`fresh_seed` draws one otherwise), `--json` to keep its figures."""
    parser.add_argument("--seed", type=int, default=None, help=seed_help)
    parser.add_argument("--json", type=Path, help="also write the figures here")


def fresh_seed(given: int | None) -> int:
    """The seed given to repeat a run, else a new one: material drawn fresh, which
    nothing can have been fitted on."""
    return given if given is not None else int(time.time()) % 1_000_000


def write_result(
    path: Path,
    benchmark: str,
    argv: Sequence[str] | None,
    run_options: Mapping[str, object],
    result: Mapping[str, object],
) -> None:
    """A run's JSON: its provenance (`argv` None or empty: this process's arguments),
    then `result`."""
    if "provenance" in result:
        raise ValueError("a result's own 'provenance' would hide the run's")
    made = provenance(benchmark, argv or sys.argv[1:], run_options)
    path.write_text(json.dumps({"provenance": made, **result}, indent=1, default=str))
