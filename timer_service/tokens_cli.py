"""`timer-service tokens create|list|delete`: access tokens over the API (an admin's
token in TIMER_API_TOKEN). `create` prints the secret once; keep it then."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any, cast

from timer_service.client import Role, TimerClient

TOKEN_COLUMNS = ("id", "name", "role", "biz_types", "created_at")
ROLES = ("viewer", "producer", "operator", "admin")

Leaf = Callable[..., argparse.ArgumentParser]


def _create(client: TimerClient, args: argparse.Namespace) -> Any:
    return client.create_token(args.name, cast(Role, args.role), args.biz_type or ())


def _list(client: TimerClient, args: argparse.Namespace) -> Any:
    return client.list_tokens()


def _delete(client: TimerClient, args: argparse.Namespace) -> Any:
    client.delete_token(args.token_id)
    return None


def register_tokens(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    output: argparse.ArgumentParser,
    leaf: Leaf,
) -> None:
    """`leaf(group, name, help, output, action, columns)` is ops_cli's `_leaf`."""
    tokens = subparsers.add_parser(
        "tokens", help="access tokens (an admin's TIMER_API_TOKEN)", parents=[output]
    )
    group = tokens.add_subparsers(dest="tokens_command", required=True, metavar="ACTION")
    columns: Sequence[str] = (*TOKEN_COLUMNS, "token")
    create = leaf(
        group, "create", "create a token; its secret is printed this once", output, _create,
        columns,
    )  # fmt: skip
    create.add_argument("name", help="who holds it; the audit log's actor")
    create.add_argument("--role", choices=ROLES, required=True)
    create.add_argument(
        "--biz-type",
        action="append",
        metavar="NAME_OR_PREFIX*",
        help="a biz type or a prefix ending in '*'; repeat for more (required but for admin)",
    )
    leaf(group, "list", "list tokens (never their secrets)", output, _list, TOKEN_COLUMNS)
    delete = leaf(
        group, "delete", "revoke a token (refused everywhere within 5 s)", output, _delete, ()
    )
    delete.add_argument("token_id")
