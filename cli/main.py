"""`offhook` — serve the bot, prepare models, simulate a caller, look after call records.

Benchmarks are not part of the installed command: they need a source checkout, its dev
dependencies and test material, and run from it as `python -m benchmarks`.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING, Any

from app.settings import Settings, SettingsError

if TYPE_CHECKING:
    import uvicorn

    from app.services import Services

DRAIN_GRACE_S = 2.0  # streams due for webhooks answered just before SIGTERM


def _configure_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def serve(args: argparse.Namespace) -> int:
    from app.heap import limit_arenas

    limit_arenas()  # before uvicorn, the models and their threads allocate
    import uvicorn

    from app.http_guard import limit_refusal_logs, server_options
    from app.main import create_app

    overrides = {}
    if args.host:
        overrides["host"] = args.host
    if args.port:
        overrides["port"] = args.port
    settings = Settings.from_env(**overrides)
    _configure_logging(settings.log_level)
    workers = None
    if args.local_workers:
        from agents.duplex.local import share_embedded_llm
        from agents.duplex.supervisor import WorkerSupervisor

        try:
            settings, worker_envs = share_embedded_llm(
                settings, args.local_workers, worker_port=args.worker_port
            )
        except ValueError as exc:
            raise SettingsError(str(exc)) from exc
        workers = WorkerSupervisor(
            args.local_workers,
            args.worker_port,
            worker_envs=worker_envs,
            backend=args.worker_backend,
        )
        urls = [*settings.worker_urls, *workers.urls]
        settings = settings.replace(duplex_workers=",".join(urls))
    fatal: list[str] = []

    def stop_serving(reason: str) -> None:
        # A bot whose models cannot run must not look healthy: stop, and say why.
        fatal.append(reason)
        server.should_exit = True

    # The app starts, waits for, watches and stops the local workers.
    app = create_app(settings, local_workers=workers, on_fatal=stop_serving)
    config = uvicorn.Config(
        app,
        host=settings.bind_host,
        port=settings.port,
        log_level=settings.log_level.lower(),
        proxy_headers=True,
        # A whole request head within HTTP_HEAD_TIMEOUT_S, at most MAX_CONNECTIONS open.
        **server_options(
            head_timeout_s=settings.http_head_timeout_s,
            max_connections=settings.connection_limit,
        ),
    )
    limit_refusal_logs()  # after uvicorn's logging setup, which the Config did
    server = draining_server(config, app.state.services)
    server.run()
    if fatal:
        print(f"offhook serve: cannot start: {fatal[0]}", file=sys.stderr)
        return 1
    if not server.started:
        return 3  # uvicorn's own start failed (a taken port); it said why
    return 0


def draining_server(config: uvicorn.Config, services: Services) -> uvicorn.Server:
    """uvicorn's server, draining at SIGTERM (app.drain): no new calls, the live ones
    go on, and it exits 0 once they have ended or DRAIN_TIMEOUT_S has passed. A second
    SIGTERM, or SIGINT, stops it at once, as uvicorn always did."""
    import asyncio
    import signal
    from types import FrameType

    import uvicorn

    class DrainingServer(uvicorn.Server):
        loop: asyncio.AbstractEventLoop | None = None
        _draining: asyncio.Future[None] | None = None

        async def serve(self, sockets: list[Any] | None = None) -> None:
            self.loop = asyncio.get_running_loop()
            await super().serve(sockets)

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            if sig == signal.SIGTERM and self.loop is not None and not services.drain.draining:
                # Not uvicorn's capture: it would re-raise SIGTERM at exit (status 143).
                services.drain.begin()
                self.loop.call_soon_threadsafe(self._drain)
                return
            super().handle_exit(sig, frame)

        def _drain(self) -> None:
            self._draining = asyncio.ensure_future(self._drain_then_exit())

        async def _drain_then_exit(self) -> None:
            # A stream whose webhook was answered just before is still let in meanwhile.
            await asyncio.sleep(DRAIN_GRACE_S)
            timeout_s = max(0.0, services.settings.drain_timeout_s - DRAIN_GRACE_S)
            await services.drain.wait_idle(lambda: services.active_calls, timeout_s)
            self.should_exit = True

    return DrainingServer(config)


def models(args: argparse.Namespace) -> int:
    from rich.console import Console

    from agents.assets import ModelCache

    console = Console()
    settings = Settings.from_env()
    cache = ModelCache(settings.model_cache_dir)
    paths = cache.prepare_all(progress=lambda name: console.print(f"checking [bold]{name}[/]"))
    for name, path in paths.items():
        console.print(f"[green]ok[/] {name}: {path}")
    return 0


def show_settings(args: argparse.Namespace) -> int:
    if args.markdown:
        from app.configuration_page import configuration_markdown

        sys.stdout.write(configuration_markdown())
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table("variable", "value", "meaning")
    for row in Settings.describe(Settings.from_env()):
        table.add_row(*row)
    Console().print(table)
    return 0


def call(args: argparse.Namespace) -> int:
    """`offhook call +1555...`: place an outbound call through Twilio's REST API."""
    from app.outbound import OutboundError, place_call
    from telephony.errors import CallControlError

    settings = Settings.from_env()
    _configure_logging(settings.log_level)
    if not settings.public_url:
        print(
            "offhook call: PUBLIC_URL must be set: Twilio fetches its webhook there",
            file=sys.stderr,
        )
        return 2
    try:
        call_sid = place_call(settings, settings.public_url, args.to, args.from_, args.greeting)
    except OutboundError as exc:
        print(f"offhook call: {exc}", file=sys.stderr)
        return 2
    except CallControlError as exc:
        print(f"offhook call: Twilio refused the call: {exc}", file=sys.stderr)
        return 1
    print(call_sid)
    return 0


def simulate(argv: list[str]) -> int:
    from ops.simulate import main as simulate_main

    return simulate_main(argv)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # simulate, worker and calls own their arguments.
    if argv and argv[0] == "simulate":
        return simulate(argv[1:])
    if argv and argv[0] == "worker":
        from app.heap import limit_arenas

        limit_arenas()
        from agents.duplex.worker_cli import worker_main

        return worker_main(argv[1:], load_settings=Settings.from_env)
    if argv and argv[0] == "calls":
        from ops.calls import main as calls_main

        return calls_main(argv[1:])
    parser = argparse.ArgumentParser(prog="offhook", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    serve_parser = commands.add_parser("serve", help="run the phone bot (settings from env)")
    serve_parser.add_argument("--host", default="")
    serve_parser.add_argument("--port", type=int, default=0)
    serve_parser.add_argument(
        "--local-workers", type=int, default=0, help="also run N duplex workers on this host"
    )
    serve_parser.add_argument("--worker-port", type=int, default=22400, help="first worker port")
    serve_parser.add_argument(
        "--worker-backend",
        choices=["cascade", "minicpmo"],
        default="cascade",
        help="what the local workers run",
    )
    serve_parser.set_defaults(func=serve)
    commands.add_parser("models", help="assemble and verify the bundled models").set_defaults(
        func=models
    )
    settings_parser = commands.add_parser("settings", help="list every setting")
    settings_parser.add_argument(
        "--markdown", action="store_true", help="defaults as docs/configuration.md has them"
    )
    settings_parser.set_defaults(func=show_settings)
    call_parser = commands.add_parser(
        "call", help="place an outbound call to NUMBER (Twilio REST; prints its CallSid)"
    )
    call_parser.add_argument("to", metavar="NUMBER", help="E.164, like +15551234567")
    call_parser.add_argument(
        "--from", dest="from_", default="", metavar="NUMBER", help="caller ID (OUTBOUND_FROM)"
    )
    call_parser.add_argument(
        "--greeting", default="", help="said once a person answers (OUTBOUND_GREETING)"
    )
    call_parser.set_defaults(func=call)
    commands.add_parser("simulate", help="call a running server as Twilio would (see --help)")
    commands.add_parser("worker", help="run one duplex worker (see --help)")
    commands.add_parser("calls", help="list, show, replay, export, plot, clean up call records")
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except SettingsError as exc:
        print(f"offhook: {exc}", file=sys.stderr)
        return 2
