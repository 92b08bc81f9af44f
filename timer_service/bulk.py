"""Bulk cancel and replay by filter (docs/api.md, "Bulk actions").

A real run changes at most `limit` matching jobs per call, in identity order, and
returns a cursor while more remain; the cursor carries the operation's id, the
action, the filter and the last key handled, so a continuation with another filter
or action is refused, and a call retried with the same cursor changes no job twice
(a changed job no longer matches: it left the action's states). Each change is
decided by the state machine and applied under its guard, in one batch per call.
"""

from __future__ import annotations

import base64
import binascii
import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

from timer_service import jobs as machine
from timer_service.errors import Conflict, InvalidInput
from timer_service.jobs import Change
from timer_service.model import Job
from timer_service.search import BulkAction, JobFilter, counted, eligible
from timer_service.store.ports.console import ConsolePort


@dataclass(frozen=True, slots=True)
class BulkRequest:
    action: BulkAction
    where: JobFilter
    dry_run: bool
    limit: int
    cursor: str | None = None


@dataclass(frozen=True, slots=True)
class BulkResult:
    dry_run: bool
    matched: int
    changed: Sequence[Job]
    next_cursor: str | None
    operation_id: str

    def to_public(self) -> dict[str, object]:
        return {
            "dry_run": self.dry_run,
            "matched": self.matched,
            "changed": len(self.changed),
            "next_cursor": self.next_cursor,
            "operation_id": self.operation_id,
        }


def encode_cursor(operation_id: str, action: BulkAction, where: JobFilter, after: str) -> str:
    state = {"op": operation_id, "a": action.value, "f": where.to_public(), "k": after}
    text = json.dumps(state, sort_keys=True, separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode_cursor(cursor: str, action: BulkAction, where: JobFilter) -> tuple[str, str]:
    """(operation id, last key handled); InvalidInput at `cursor` when it is not one this
    API gave, or was given for another action or filter."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        state = json.loads(raw)
        op, act, given, after = state["op"], state["a"], state["f"], state["k"]
    except (binascii.Error, ValueError, KeyError, TypeError):
        raise InvalidInput("is not a cursor this API gave", ("cursor",)) from None
    if not (isinstance(op, str) and isinstance(after, str)):
        raise InvalidInput("is not a cursor this API gave", ("cursor",))
    if act != action.value:
        raise InvalidInput(f"continues a {act}, not a {action.value}", ("cursor",))
    if given != where.to_public():
        raise InvalidInput(
            "continues an operation with another filter: repeat the call with the same"
            " filter, or start over without a cursor",
            ("cursor",),
        )
    return op, after


def decide(action: BulkAction, job: Job, now_ms: int) -> Change | None:
    """The state machine's change for `job`, or None when it can no longer be made
    (its callback started, it left the action's states meanwhile)."""
    try:
        if action is BulkAction.CANCEL:
            return machine.cancel(job, now_ms)
        return machine.replay(job, now_ms)
    except Conflict:  # CallbackInFlight is a Conflict too
        return None


async def run_bulk(console: ConsolePort, request: BulkRequest, now_ms: int) -> BulkResult:
    """A dry run counts; a real run changes the next page. Raises InvalidInput for a
    state the action cannot change a job from, or a cursor not for this call."""
    try:
        where = eligible(request.action, request.where)
        count_where = counted(request.action, request.where)
    except ValueError as exc:
        raise InvalidInput(str(exc), ("filter", "state")) from None
    if request.dry_run:
        matched = await console.count_matching(count_where)
        return BulkResult(True, matched, (), None, new_operation_id())
    operation_id, after = new_operation_id(), None
    if request.cursor is not None:
        operation_id, after = decode_cursor(request.cursor, request.action, request.where)
    page, last = await console.search_jobs(where, request.limit, after)
    changes = [(job, ch) for job in page if (ch := decide(request.action, job, now_ms))]
    changed = await console.apply_changes(changes, now_ms)
    next_cursor = None
    if last is not None:
        next_cursor = encode_cursor(operation_id, request.action, request.where, last)
    return BulkResult(False, len(page), changed, next_cursor, operation_id)


def new_operation_id() -> str:
    return f"op_{secrets.token_hex(8)}"
