"""The flags of the service commands (`api`, `daemon`, `broker`, `dev`), and running
one: flags over environment (TIMER_*, .env) over defaults. `--help` prints the usage
and starts nothing; a bad flag is a usage error (exit 2)."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable, Sequence

from timer_service.settings import Settings

SERVICES = {
    "api": "run the REST API",
    "daemon": "run the scan daemon",
    "broker": "run the notifier",
    "dev": "API + daemon + broker in one process, embedded defaults",
}
EPILOG = (
    "Settings come from TIMER_* environment variables (and a .env file); a flag wins "
    "over its variable. See docs/operations.md."
)
FLAG_SETTINGS = {"host": "http_host", "port": "http_port", "data_dir": "data_dir"}


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"not a port number (0-65535): {port}")
    return port


def add_flags(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    """The flags `command` takes, on `parser` (a subcommand's, or `python -m`'s)."""
    parser.epilog = EPILOG
    if command in ("api", "dev"):
        parser.add_argument("--host", help="listen address (TIMER_HTTP_HOST, 127.0.0.1)")
        parser.add_argument("--port", type=_port, help="listen port (TIMER_HTTP_PORT, 8080)")
    if command == "dev":
        parser.add_argument(
            "--data-dir", help="where the embedded store lives (TIMER_DATA_DIR, ./.timer-data)"
        )
    return parser


def parser_for(command: str, prog: str) -> argparse.ArgumentParser:
    """The parser of `python -m daemon` and `python -m broker`."""
    return add_flags(argparse.ArgumentParser(prog=prog, description=SERVICES[command]), command)


def settings_for(command: str, args: argparse.Namespace) -> Settings:
    settings = Settings()  # type: ignore[call-arg]  # fields come from the environment
    flags = {
        field: getattr(args, flag)
        for flag, field in FLAG_SETTINGS.items()
        if getattr(args, flag, None) is not None
    }
    if flags:
        settings = settings.model_copy(update=flags)
    if command in ("api", "dev"):
        settings = settings.with_default_hosts()
    return settings


def run_service(command: str, args: argparse.Namespace) -> int:
    """Run `command` until SIGTERM/SIGINT; its exit code."""
    from timer_service.logs import setup_logging
    from timer_service.runtime import run_until_signal

    settings = settings_for(command, args)
    setup_logging(settings.log_level)
    main = _mains()[command]
    return run_until_signal(lambda stop: main(settings, stop), settings.event_loop)


def run_module(command: str, prog: str, argv: Sequence[str] | None = None) -> int:
    """`python -m daemon|broker`."""
    return run_service(command, parser_for(command, prog).parse_args(argv))


def _mains() -> dict[str, Callable[[Settings, asyncio.Event], Awaitable[None]]]:
    # Imported here: `--help` and a usage error load none of the service.
    from timer_service.dev import run_dev
    from timer_service.processes.commands import run_api, run_broker, run_daemon

    return {"api": run_api, "daemon": run_daemon, "broker": run_broker, "dev": run_dev}
