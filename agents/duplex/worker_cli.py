"""`offhook worker`: serve one duplex backend on one port, or self-test a MiniCPM-o box."""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import sys
from collections.abc import Callable
from pathlib import Path

from agents.config import WorkerSettings
from agents.duplex.backend import DuplexBackend
from agents.duplex.minicpmo import DEFAULT_MODEL, Loader, MiniCPMOBackend
from agents.duplex.omni_voice import default_voice_wav
from agents.duplex.protocol import MAX_WORKER_FRAME_BYTES
from agents.duplex.registry import DEFAULT_PREFIX, WorkerRegistration, open_redis
from agents.duplex.worker import WorkerStatus, create_worker_app
from agents.errors import BackendUnavailable


def _backend(
    name: str,
    model: str,
    settings: WorkerSettings | None,
    minicpmo_loader: Loader | None = None,
) -> DuplexBackend:
    if name == "minicpmo":
        return _minicpmo(model, settings, minicpmo_loader)
    if settings is None:
        # Settings come from whoever starts the worker (cli.main: `offhook worker`), as
        # agents never import the app.
        raise SystemExit("the cascade backend needs settings: start it with `offhook worker`")
    from agents.duplex.cascade_worker_backend import SettingsCascadeBackend

    return SettingsCascadeBackend(settings)


def _minicpmo(
    model: str, settings: WorkerSettings | None, loader: Loader | None
) -> MiniCPMOBackend:
    if settings is None:
        return MiniCPMOBackend(model_id=model, loader=loader)
    if settings.omni_voice_wav:
        path = Path(settings.omni_voice_wav).expanduser()
        return MiniCPMOBackend(voice_wav=lambda: path, model_id=model, loader=loader)
    cache, threads = settings.model_cache_dir, settings.model_threads

    def voice() -> Path:
        return default_voice_wav(cache, threads=threads)

    return MiniCPMOBackend(voice_wav=voice, model_id=model, loader=loader)


def worker_main(
    argv: list[str] | None = None,
    *,
    load_settings: Callable[[], WorkerSettings] | None = None,
    minicpmo_loader: Loader | None = None,
) -> int:
    """`offhook worker`: serve one duplex backend on one port until stopped.

    `load_settings` reads the settings (the app passes `Settings.from_env`); it is called
    once, before anything starts. `minicpmo_loader` replaces the GPU model (tests).
    """
    parser = argparse.ArgumentParser(prog="offhook worker", description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=["cascade", "minicpmo"], default="cascade")
    parser.add_argument(
        "--host", default="127.0.0.1", help="interface to listen on (loopback unless told)"
    )
    parser.add_argument("--port", type=int, default=22400)
    parser.add_argument("--worker-id", default="")
    parser.add_argument(
        "--worker-url",
        default=None,
        help="with REDIS_URL: the address gateways reach this worker at, registered in "
        "the worker registry (default $WORKER_URL, else ws://HOST:PORT for a loopback or "
        "named --host)",
    )
    parser.add_argument("--model", default=DEFAULT_MODEL, help="MiniCPM-o model id or folder")
    parser.add_argument(
        "--self-test",
        metavar="QUESTION.wav",
        help="minicpmo: answer this WAV once, print timings and GPU memory, and exit",
    )
    parser.add_argument("--reply-wav", default="reply.wav", help="where --self-test writes")
    args = parser.parse_args(argv)
    settings = load_settings() if load_settings is not None else None
    token = settings.worker_token if settings is not None else ""
    if not args.self_test:
        if not token and not _loopback(args.host):
            # As `serve` refuses to listen beyond loopback without a signature token.
            print(
                f"offhook worker: WORKER_TOKEN is not set, so --host {args.host} would let "
                "anyone who reaches this port use the worker: set WORKER_TOKEN (on the gateway "
                "too), or listen on 127.0.0.1",
                file=sys.stderr,
            )
            return 2
    redis_url = settings.redis_url if settings is not None and not args.self_test else ""
    worker_url = ""
    if settings is not None and redis_url:
        worker_url = _worker_url(args.worker_url or settings.worker_url, args.host, args.port)
        if not worker_url:
            print(
                f"offhook worker: REDIS_URL is set but not WORKER_URL, and --host {args.host} "
                "does not say where gateways reach this worker: set WORKER_URL (or "
                "--worker-url), e.g. ws://10.0.0.7:22400",
                file=sys.stderr,
            )
            return 2
    backend = _backend(args.backend, args.model, settings, minicpmo_loader)
    if args.self_test:
        if not isinstance(backend, MiniCPMOBackend):
            parser.error("--self-test needs --backend minicpmo")
        return _self_test(backend, Path(args.self_test), Path(args.reply_wav))
    import uvicorn

    worker_id = args.worker_id or f"{args.backend}-{args.port}"
    app = create_worker_app(
        backend,
        worker_id=worker_id,
        token=token,
        session_timeout_s=settings.worker_session_timeout_s if settings is not None else 30.0,
        announcer=registration(redis_url, worker_url, worker_id) if worker_url else None,
    )
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        ws="websockets-sansio",
        ws_max_size=MAX_WORKER_FRAME_BYTES,
        log_level="info",
    )
    return 0


def registration(
    redis_url: str, worker_url: str, worker_id: str, *, prefix: str = DEFAULT_PREFIX
) -> Callable[[WorkerStatus], WorkerRegistration]:
    """What registers a worker under `worker_url` in the registry at `redis_url`, built
    from its status when its app starts (the client is made on the app's event loop)."""

    def announce(status: WorkerStatus) -> WorkerRegistration:
        return WorkerRegistration(
            open_redis(redis_url),
            worker_url,
            state=lambda: status.machine.state.value,
            backend=status.backend,
            worker_id=worker_id,
            prefix=prefix,
        )

    return announce


def _worker_url(given: str, host: str, port: int) -> str:
    """WORKER_URL, or ws://HOST:PORT when --host names one address (not a wildcard)."""
    if given:
        return given
    if host in ("0.0.0.0", "::", ""):
        return ""
    shown = f"[{host}]" if ":" in host else host
    return f"ws://{shown}:{port}"


def _self_test(backend: MiniCPMOBackend, question: Path, reply: Path) -> int:
    from agents.duplex.self_test import self_test

    try:
        return asyncio.run(self_test(backend, question, reply, sys.stdout))
    except BackendUnavailable as exc:
        print(f"offhook worker: {exc}", file=sys.stderr)
        return 2


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
