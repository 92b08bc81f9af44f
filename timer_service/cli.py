"""The `timer-service` console script."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from timer_service import __version__
from timer_service.processes.args import SERVICES, add_flags, run_service


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="timer-service",
        description="Distributed timer service: persisted delayed HTTP callbacks.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for command, what in SERVICES.items():
        add_flags(sub.add_parser(command, help=what, description=what), command)
    from timer_service import ops_cli

    ops_cli.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command in SERVICES:
        return run_service(args.command, args)
    return int(args.handler(args))


if __name__ == "__main__":
    sys.exit(main())
