"""The API's resources as the SDK returns them, field for field (docs/api.md)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict


class _Resource(BaseModel):
    # extra="allow": the contract lets the server add fields; keep them rather than fail.
    model_config = ConfigDict(extra="allow", frozen=True)


class Attempt(_Resource):
    attempt: int
    at: int
    status_code: int | None = None
    error: str | None = None
    duration_ms: int | None = None


class Job(_Resource):
    biz_type: str
    job_id: str
    due_at: int
    payload: Any = None
    state: str
    attempts: int = 0
    next_attempt_at: int | None = None
    created_at: int
    updated_at: int
    delivered_at: int | None = None
    last_error: str | None = None
    history: tuple[Attempt, ...] = ()
    labels: dict[str, str] = {}


class RetryPolicy(_Resource):
    max_attempts: int = 10
    initial_backoff_ms: int = 1000
    max_backoff_ms: int = 600_000
    multiplier: float = 2.0


class BizTypeConfig(_Resource):
    biz_type: str | None = None
    callback_url: str
    rate_limit_per_s: float | None = None
    burst: int = 1
    max_concurrency: int = 16
    timeout_ms: int = 10_000
    retry: RetryPolicy = RetryPolicy()
    has_signing_secret: bool = False
    paused: bool = False


class Schedule(_Resource):
    biz_type: str | None = None
    schedule_id: str | None = None
    cron: str | None = None
    timezone: str | None = None
    intervals_ms: tuple[int, ...] | None = None
    cycle: bool | None = None
    payload: Any = None
    start_at: int | None = None
    end_at: int | None = None
    max_runs: int | None = None
    paused: bool = False
    catchup: str = "skip"
    next_run_at: int | None = None
    runs: int = 0
    last_run_at: int | None = None
    last_job_id: str | None = None


class BatchItemResult(_Resource):
    status: int
    job: Job | None = None
    error: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.status in (200, 201)


class JobPage(_Resource):
    items: tuple[Job, ...]
    next_cursor: str | None = None


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One job to create; `create_jobs` takes these, plain dicts, or look-alike objects."""

    biz_type: str
    due_at: int | str | datetime | None = None
    delay_ms: int | None = None
    payload: Any = None
    job_id: str | None = None


class _Unchanged(Enum):
    UNCHANGED = "unchanged"


UNCHANGED = _Unchanged.UNCHANGED
"""`reschedule_job(payload=UNCHANGED)` (the default) keeps the job's payload."""
