"""What the API answers to operators (docs/api.md): bulk actions, the audit log, stats,
the load calendar and access tokens, field for field."""

from __future__ import annotations

from typing import Literal

from pydantic import JsonValue

from timer_service.client.models import _Resource

Role = Literal["viewer", "producer", "operator", "admin"]


class BulkResult(_Resource):
    """One call of `bulk_cancel` / `bulk_replay`. A dry run counts in `matched` what the
    action would change; a real run changes a page and gives `next_cursor` while more
    remain (`bulk_*_all` follows it)."""

    dry_run: bool
    matched: int
    changed: int
    next_cursor: str | None = None
    operation_id: str | None = None


class AuditEntry(_Resource):
    id: str
    at: int
    actor: str
    action: str
    biz_type: str
    job_id: str | None = None
    filter: dict[str, JsonValue] | None = None
    count: int | None = None
    detail: dict[str, JsonValue] | None = None


class AuditPage(_Resource):
    items: tuple[AuditEntry, ...]
    next_cursor: str | None = None


class StateCounts(_Resource):
    pending: int = 0
    dispatched: int = 0
    delivered: int = 0
    dead: int = 0
    cancelled: int = 0


class BizStats(_Resource):
    biz_type: str
    paused: bool
    rate_limit_per_s: float | None = None
    counts: StateCounts
    delivered_last_minute: int
    failed_last_minute: int
    lateness_p99_ms: int | None = None


class Stats(_Resource):
    at: int
    items: tuple[BizStats, ...]


class CalendarBucket(_Resource):
    at: int
    due: int


class Calendar(_Resource):
    """How many pending jobs are due in each step of `[from, to)`."""

    step_ms: int
    buckets: tuple[CalendarBucket, ...]


class Token(_Resource):
    """An access token as listed: never the secret itself."""

    id: str
    name: str
    role: str
    biz_types: tuple[str, ...] = ()
    created_at: int | None = None


class CreatedToken(Token):
    """`create_token`'s answer: `token` (`tmr_...`) is shown this once, never again."""

    token: str
