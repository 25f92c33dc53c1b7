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
from agents.duplex.worker import create_worker_app
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
    from agents.duplex.cascade_backend import SettingsCascadeBackend

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
    backend = _backend(args.backend, args.model, settings, minicpmo_loader)
    if args.self_test:
        if not isinstance(backend, MiniCPMOBackend):
            parser.error("--self-test needs --backend minicpmo")
        return _self_test(backend, Path(args.self_test), Path(args.reply_wav))
    import uvicorn

    app = create_worker_app(
        backend,
        worker_id=args.worker_id or f"{args.backend}-{args.port}",
        token=token,
        session_timeout_s=settings.worker_session_timeout_s if settings is not None else 30.0,
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
