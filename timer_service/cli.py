"""The `timer-service` console script."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from timer_service import __version__


def _run_api() -> int:
    from timer_service.api.server import run

    return run()


def _run_daemon() -> int:
    from daemon.app import run

    return run()


def _run_broker() -> int:
    from broker.app import run

    return run()


def _run_dev() -> int:
    from timer_service.dev import run

    return run()


SERVICES = {"api": _run_api, "daemon": _run_daemon, "broker": _run_broker, "dev": _run_dev}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="timer-service",
        description="Distributed timer service: persisted delayed HTTP callbacks.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("api", help="run the REST API")
    sub.add_parser("daemon", help="run the scan daemon")
    sub.add_parser("broker", help="run the notifier")
    sub.add_parser("dev", help="API + daemon + broker in one process, embedded defaults")
    from timer_service import ops_cli

    ops_cli.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command in SERVICES:
        return SERVICES[args.command]()
    return int(args.handler(args))


if __name__ == "__main__":
    sys.exit(main())
