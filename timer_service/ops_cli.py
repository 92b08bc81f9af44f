"""Operator subcommands of `timer-service`: `jobs ...`, `biz-types ...`, `schedules ...`
and `tokens ...` (timer_service/tokens_cli.py), over the REST API.

JSON on stdout by default, a table with `--table` (before or after the command or the
action). An error prints its problem document on stderr and exits 3 when the resource
does not exist, 4 when the API cannot be reached (after the SDK's retries, which are not
logged here: the problem document is the one line of news), 1 for any other error (2:
the command line is wrong).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from itertools import islice
from typing import Any

import httpx
from pydantic import BaseModel

from timer_service.client import (
    UNCHANGED,
    BizTypeConfig,
    NotFoundError,
    TimerApiError,
    TimerClient,
)
from timer_service.client.requests import Calls
from timer_service.tokens_cli import register_tokens

DEFAULT_API_URL = "http://127.0.0.1:8080"
JOB_STATES = ("pending", "dispatched", "delivered", "dead", "cancelled")
JOB_COLUMNS = (
    "biz_type", "job_id", "state", "due_at", "attempts", "next_attempt_at", "last_error",
)  # fmt: skip
BIZ_TYPE_COLUMNS = (
    "biz_type", "callback_url", "rate_limit_per_s", "burst", "max_concurrency", "timeout_ms",
    "paused", "has_signing_secret",
)  # fmt: skip
SCHEDULE_COLUMNS = (
    "biz_type", "schedule_id", "cron", "timezone", "intervals_ms", "paused", "next_run_at",
    "runs",
)  # fmt: skip
SCHEDULE_FLAGS = ("cron", "timezone", "intervals_ms", "cycle", "payload", "paused", "catchup")
BIZ_TYPE_FLAGS = (
    "callback_url", "rate_limit_per_s", "burst", "max_concurrency", "timeout_ms",
    "signing_secret", "paused",
)  # fmt: skip

EXIT_API_ERROR = 1
EXIT_NOT_FOUND = 3
EXIT_UNREACHABLE = 4

Result = BaseModel | list[Any] | None
Action = Callable[[TimerClient, argparse.Namespace], Result]


def make_client() -> TimerClient:
    """The seam tests replace; the CLI edge is where the environment is read."""
    url = os.environ.get("TIMER_API_URL") or DEFAULT_API_URL
    return TimerClient(url, token=os.environ.get("TIMER_API_TOKEN") or None)


# --- Argument types ------------------------------------------------------------------------


def json_document(text: str) -> Any:
    return json.loads(text)


def json_object(text: str) -> dict[str, Any]:
    doc = json.loads(text)
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    return doc


def due_time(text: str) -> int | str:
    """Epoch ms, or an RFC 3339 time with offset passed on for the server to read."""
    return int(text) if text.isdigit() else text


class LabelAction(argparse.Action):
    """`--label key=value`, repeatable, into one dict; the value may hold `=`. The server
    checks keys and values (docs/api.md, "Labels")."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        key, eq, value = str(values).partition("=")
        if not (key and eq):
            raise argparse.ArgumentError(self, f"expected key=value, got {values!r}")
        labels = dict(getattr(namespace, self.dest) or {})
        if key in labels:
            raise argparse.ArgumentError(self, f"label {key!r} given twice")
        labels[key] = value
        setattr(namespace, self.dest, labels)


# --- Actions -------------------------------------------------------------------------------


def _create_job(client: TimerClient, args: argparse.Namespace) -> Result:
    return client.create_job(
        args.biz_type,
        job_id=args.job_id,
        due_at=args.due_at,
        delay_ms=args.delay_ms,
        payload=args.payload,
        labels=args.labels or None,
    )


def _get_job(client: TimerClient, args: argparse.Namespace) -> Result:
    return client.get_job(args.biz_type, args.job_id)


def _list_jobs(client: TimerClient, args: argparse.Namespace) -> Result:
    jobs = client.list_jobs(args.biz_type, args.state, args.page_size)
    return list(islice(jobs, args.max_items))


def _cancel_job(client: TimerClient, args: argparse.Namespace) -> Result:
    return client.cancel_job(args.biz_type, args.job_id)


def _reschedule_job(client: TimerClient, args: argparse.Namespace) -> Result:
    return client.reschedule_job(
        args.biz_type, args.job_id, due_at=args.due_at, delay_ms=args.delay_ms, payload=args.payload
    )


def _replay_job(client: TimerClient, args: argparse.Namespace) -> Result:
    return client.replay_job(args.biz_type, args.job_id)


def _list_biz_types(client: TimerClient, args: argparse.Namespace) -> Result:
    return client.list_biz_types()


def _get_biz_type(client: TimerClient, args: argparse.Namespace) -> Result:
    return client.get_biz_type(args.biz_type)


def _put_biz_type(client: TimerClient, args: argparse.Namespace) -> Result:
    config = dict(args.json or {})
    config.update(
        {flag: getattr(args, flag) for flag in BIZ_TYPE_FLAGS if getattr(args, flag) is not None}
    )
    return client.put_biz_type(args.biz_type, **config)


def patch_biz_type(client: TimerClient, biz_type: str, patch: dict[str, Any]) -> BizTypeConfig:
    """`PATCH /v1/biz-types/{biz_type}`, a JSON Merge Patch: only the fields it names
    change; the signing secret and the limits stay as stored. Sent through the client's
    own retrying call (a merge patch is idempotent, so a retry is safe)."""
    return client._run(Calls.patch_biz_type(biz_type, patch))


def _patch_biz_type(client: TimerClient, args: argparse.Namespace) -> Result:
    return patch_biz_type(client, args.biz_type, args.json)


def _pause_biz_type(client: TimerClient, args: argparse.Namespace) -> Result:
    return client.pause_biz_type(args.biz_type)


def _resume_biz_type(client: TimerClient, args: argparse.Namespace) -> Result:
    return client.resume_biz_type(args.biz_type)


def _delete_biz_type(client: TimerClient, args: argparse.Namespace) -> Result:
    client.delete_biz_type(args.biz_type)
    return None


def _list_schedules(client: TimerClient, args: argparse.Namespace) -> Result:
    return client.list_schedules(args.biz_type)


def _get_schedule(client: TimerClient, args: argparse.Namespace) -> Result:
    return client.get_schedule(args.biz_type, args.schedule_id)


def _put_schedule(client: TimerClient, args: argparse.Namespace) -> Result:
    spec = dict(args.json or {})
    spec.update(
        {flag: getattr(args, flag) for flag in SCHEDULE_FLAGS if getattr(args, flag) is not None}
    )
    return client.put_schedule(args.biz_type, args.schedule_id, **spec)


def _delete_schedule(client: TimerClient, args: argparse.Namespace) -> Result:
    client.delete_schedule(args.biz_type, args.schedule_id)
    return None


# --- Output --------------------------------------------------------------------------------


def _plain(result: Result) -> Any:
    if isinstance(result, list):
        return [_plain(item) for item in result]
    if isinstance(result, BaseModel):
        return result.model_dump(mode="json")
    return result


def _cell(column: str, value: Any) -> str:
    if value is None:
        return "-"
    if column.endswith("_at") and isinstance(value, int):
        when = datetime.fromtimestamp(value / 1000, UTC)
        return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return str(value)


def render_table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    cells = [list(columns)] + [[_cell(c, row.get(c)) for c in columns] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)) for line in cells
    ]
    return "\n".join(line.rstrip() for line in lines)


def _emit(result: Result, columns: Sequence[str], table: bool) -> None:
    if result is None:
        return
    doc = _plain(result)
    if table:
        print(render_table(doc if isinstance(doc, list) else [doc], columns))
    else:
        print(json.dumps(doc, indent=2, ensure_ascii=False))


def _print_problem(problem: dict[str, Any]) -> None:
    print(json.dumps(problem, indent=2, ensure_ascii=False), file=sys.stderr)


@contextmanager
def _quiet_retries() -> Iterator[None]:
    """The SDK logs each retry for services that use it; on a terminal those lines would
    come before, and say less than, the one problem the command prints."""
    sdk_log = logging.getLogger("timer_service.client")
    level = sdk_log.level
    sdk_log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        sdk_log.setLevel(level)


def _unreachable(exc: httpx.HTTPError) -> dict[str, Any]:
    try:
        url = exc.request.url.copy_with(path="/", query=None)
        where = f" at {str(url).rstrip('/')} (TIMER_API_URL)"
    except RuntimeError:  # an error raised before any request was made
        where = ""
    reason = str(exc) or type(exc).__name__
    return {"title": "timer service unreachable", "detail": f"no answer{where}: {reason}"}


def _handler(action: Action, columns: Sequence[str]) -> Callable[[argparse.Namespace], int]:
    def handle(args: argparse.Namespace) -> int:
        try:
            with _quiet_retries(), make_client() as client:
                result = action(client, args)
        except TimerApiError as exc:
            _print_problem(exc.problem)
            return EXIT_NOT_FOUND if isinstance(exc, NotFoundError) else EXIT_API_ERROR
        except httpx.HTTPError as exc:
            _print_problem(_unreachable(exc))
            return EXIT_UNREACHABLE
        _emit(result, columns, getattr(args, "table", False))
        return 0

    return handle


# --- Parsers -------------------------------------------------------------------------------


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    # SUPPRESS: a leaf's default must not undo `--table` given before the action.
    output = argparse.ArgumentParser(add_help=False)
    output.add_argument(
        "--table",
        action="store_true",
        default=argparse.SUPPRESS,
        help="a readable table instead of JSON",
    )
    _register_jobs(subparsers, output)
    _register_biz_types(subparsers, output)
    _register_schedules(subparsers, output)
    register_tokens(subparsers, output, _leaf)


def _leaf(
    group: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    help_text: str,
    output: argparse.ArgumentParser,
    action: Action,
    columns: Sequence[str],
) -> argparse.ArgumentParser:
    parser = group.add_parser(name, help=help_text, parents=[output])
    parser.set_defaults(handler=_handler(action, columns))
    return parser


def _identity(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("biz_type")
    parser.add_argument("job_id")
    return parser


def _register_jobs(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    output: argparse.ArgumentParser,
) -> None:
    jobs = subparsers.add_parser(
        "jobs", help="create, inspect and steer jobs (TIMER_API_URL)", parents=[output]
    )
    group = jobs.add_subparsers(dest="jobs_command", required=True, metavar="ACTION")
    create = _leaf(group, "create", "create a job", output, _create_job, JOB_COLUMNS)
    create.add_argument("biz_type")
    create.add_argument("--job-id", help="default: generated (and kept on a retry)")
    _when(create)
    create.add_argument("--payload", type=json_document, default=None, help="payload as JSON")
    create.add_argument(
        "--label",
        dest="labels",
        action=LabelAction,
        metavar="KEY=VALUE",
        help="a label of the job (repeat for more)",
    )
    _identity(_leaf(group, "get", "show one job", output, _get_job, JOB_COLUMNS))
    _identity(_leaf(group, "cancel", "cancel a job", output, _cancel_job, JOB_COLUMNS))
    _identity(_leaf(group, "replay", "retry a dead job", output, _replay_job, JOB_COLUMNS))

    listing = _leaf(group, "list", "list jobs, all pages", output, _list_jobs, JOB_COLUMNS)
    listing.add_argument("--biz-type")
    listing.add_argument("--state", choices=JOB_STATES)
    listing.add_argument("--page-size", type=int, default=100)
    listing.add_argument("--max-items", type=int, default=None, help="stop after this many")

    reschedule = _identity(
        _leaf(group, "reschedule", "move a pending job", output, _reschedule_job, JOB_COLUMNS)
    )
    _when(reschedule)
    reschedule.add_argument(
        "--payload", type=json_document, default=UNCHANGED, help="new payload as JSON"
    )


def _when(parser: argparse.ArgumentParser) -> None:
    when = parser.add_mutually_exclusive_group(required=True)
    when.add_argument("--due-at", type=due_time, help="epoch ms or RFC 3339 with offset")
    when.add_argument("--delay-ms", type=int)


def _register_biz_types(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    output: argparse.ArgumentParser,
) -> None:
    biz_types = subparsers.add_parser(
        "biz-types", help="business type configs (TIMER_API_URL)", parents=[output]
    )
    group = biz_types.add_subparsers(dest="biz_types_command", required=True, metavar="ACTION")
    _leaf(group, "list", "list biz types", output, _list_biz_types, BIZ_TYPE_COLUMNS)
    get = _leaf(group, "get", "show one biz type", output, _get_biz_type, BIZ_TYPE_COLUMNS)
    get.add_argument("biz_type")
    delete = _leaf(group, "delete", "delete a biz type", output, _delete_biz_type, ())
    delete.add_argument("biz_type")

    put = _leaf(
        group,
        "put",
        "create or replace a biz type: the whole config (unset fields take their defaults)",
        output,
        _put_biz_type,
        BIZ_TYPE_COLUMNS,
    )
    put.add_argument("biz_type")
    put.add_argument("--json", type=json_object, help="the config as JSON; flags override it")
    put.add_argument("--callback-url")
    put.add_argument("--rate-limit-per-s", type=float)
    put.add_argument("--burst", type=int)
    put.add_argument("--max-concurrency", type=int)
    put.add_argument("--timeout-ms", type=int)
    put.add_argument("--signing-secret")
    put.add_argument("--paused", action=argparse.BooleanOptionalAction, default=None)

    patch = _leaf(
        group,
        "patch",
        "change some fields of a biz type (a JSON Merge Patch: null resets a field)",
        output,
        _patch_biz_type,
        BIZ_TYPE_COLUMNS,
    )
    patch.add_argument("biz_type")
    patch.add_argument("--json", type=json_object, required=True, help="the patch as JSON")
    for name, action, verb in (
        ("pause", _pause_biz_type, "stop"),
        ("resume", _resume_biz_type, "restart"),
    ):
        help_text = f"{verb} its callbacks; the secret and limits stay as they are"
        leaf = _leaf(group, name, help_text, output, action, BIZ_TYPE_COLUMNS)
        leaf.add_argument("biz_type")


def _schedule_identity(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("biz_type")
    parser.add_argument("schedule_id")
    return parser


def _intervals(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def _register_schedules(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    output: argparse.ArgumentParser,
) -> None:
    schedules = subparsers.add_parser(
        "schedules", help="recurring schedules (TIMER_API_URL)", parents=[output]
    )
    group = schedules.add_subparsers(dest="schedules_command", required=True, metavar="ACTION")
    listing = _leaf(group, "list", "list schedules", output, _list_schedules, SCHEDULE_COLUMNS)
    listing.add_argument("--biz-type")
    get = _leaf(group, "get", "show one schedule", output, _get_schedule, SCHEDULE_COLUMNS)
    _schedule_identity(get)
    delete = _leaf(group, "delete", "delete a schedule", output, _delete_schedule, ())
    _schedule_identity(delete)

    put = _leaf(
        group,
        "put",
        "create or replace a schedule: the whole spec (unset fields take their defaults)",
        output,
        _put_schedule,
        SCHEDULE_COLUMNS,
    )
    _schedule_identity(put)
    put.add_argument("--json", type=json_object, help="the spec as JSON; flags override it")
    put.add_argument("--cron", help='e.g. "0 9 * * MON-FRI"')
    put.add_argument("--timezone", help="IANA zone of --cron (default UTC)")
    put.add_argument("--intervals-ms", type=_intervals, help="gaps, comma-separated: 500,1000")
    put.add_argument("--cycle", action=argparse.BooleanOptionalAction, default=None)
    put.add_argument("--payload", type=json_document, help="each occurrence's payload as JSON")
    put.add_argument("--paused", action=argparse.BooleanOptionalAction, default=None)
    put.add_argument("--catchup", choices=("skip", "one", "all"))
