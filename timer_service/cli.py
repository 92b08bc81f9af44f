"""The `timer-service` console script."""

from __future__ import annotations

import argparse
import os
import signal
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
    # Here too, so that `--table` may come before the command; SUPPRESS: see ops_cli.
    parser.add_argument(
        "--table",
        action="store_true",
        default=argparse.SUPPRESS,
        help="operator commands: a readable table instead of JSON",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for command, what in SERVICES.items():
        add_flags(sub.add_parser(command, help=what, description=what), command)
    from timer_service import ops_cli

    ops_cli.register(sub)
    return parser


# How a command ends whose reader went away (`timer-service jobs list | head`): as tools
# killed by SIGPIPE do, so `set -o pipefail` sees the same.
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command in SERVICES:
        if "table" in args:
            parser.error(f"--table is for the operator commands, not {args.command}")
        return run_service(args.command, args)
    try:
        code = int(args.handler(args))
        sys.stdout.flush()  # here, not at exit, where a closed pipe cannot be caught
    except BrokenPipeError:
        # Python's advice: point stdout at devnull so that the flush at exit is quiet.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    return code


if __name__ == "__main__":
    sys.exit(main())
