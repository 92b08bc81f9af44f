"""Request and response models of the console's endpoints: bulk actions, the audit
log and the stats (docs/api.md). Bodies validate in strict mode, as in `schemas`."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from timer_service.api.schemas import MAX_INT, BizTypeName, JobId, Labels, _Strict
from timer_service.audit import AuditAction
from timer_service.constants import JOB_ID_PATTERN, MAX_BATCH_ITEMS

StateName = Literal["pending", "dispatched", "delivered", "dead", "cancelled"]
DEFAULT_BULK_LIMIT = 500


class BulkFilterIn(_Strict):
    biz_type: BizTypeName = Field(description="Required: a bulk action is on one biz type.")
    state: StateName | None = Field(
        None,
        description="replay: `dead`; cancel: `pending` or `dispatched`; absent = all of those.",
    )
    labels: Labels | None = Field(None, description="Every pair must match.")
    job_id_prefix: JobId | None = Field(None, description=f"Matches `{JOB_ID_PATTERN}`.")
    due_after: int | None = Field(None, ge=0, le=MAX_INT, description="Inclusive, epoch ms.")
    due_before: int | None = Field(None, ge=0, le=MAX_INT, description="Exclusive, epoch ms.")

    @model_validator(mode="after")
    def _a_range(self) -> BulkFilterIn:
        if None not in (self.due_after, self.due_before) and self.due_after >= self.due_before:  # type: ignore[operator]
            raise ValueError("due_after must be before due_before")
        return self


class BulkIn(_Strict):
    filter: BulkFilterIn
    dry_run: bool = Field(False, description="Count what would change; change nothing.")
    limit: int = Field(
        DEFAULT_BULK_LIMIT, ge=1, le=MAX_BATCH_ITEMS, description="Jobs handled per call."
    )
    cursor: str | None = Field(
        None, min_length=1, max_length=4096, description="`next_cursor` of the previous call."
    )


class BulkOut(BaseModel):
    dry_run: bool
    matched: int = Field(
        description=(
            "Dry run: how many jobs the action would change in all. Real run: the jobs of"
            " this call's page in the action's states (`matched - changed` were in flight"
            " or changed meanwhile, and are left as they are)."
        )
    )
    changed: int
    next_cursor: str | None = Field(description="Repeat the call with it until null.")
    operation_id: str = Field(description="The same across a continuation; in the audit log.")


class AuditEntryOut(BaseModel):
    id: str
    at: int
    actor: str
    action: AuditAction
    biz_type: str
    job_id: str | None
    filter: dict[str, Any] | None
    count: int | None
    detail: dict[str, Any] | None


class AuditPageOut(BaseModel):
    items: list[AuditEntryOut]
    next_cursor: str | None


class StateCountsOut(BaseModel):
    pending: int
    dispatched: int
    delivered: int
    dead: int
    cancelled: int


class BizStatsOut(BaseModel):
    biz_type: str
    paused: bool
    rate_limit_per_s: float | None
    counts: StateCountsOut
    delivered_last_minute: int = Field(description="Attempts that delivered in the last 60 s.")
    failed_last_minute: int = Field(description="Attempts that ended retry or dead, last 60 s.")
    lateness_p99_ms: int | None = Field(
        description=(
            "p99 of first-attempt send time - due time, last 5 minutes, of jobs registered"
            " at or before their due time; null if none."
        )
    )


class StatsOut(BaseModel):
    at: int
    items: list[BizStatsOut]


class SeriesPointOut(BaseModel):
    at: int = Field(description="The minute's start (epoch ms); it covers [at, at + step_ms).")
    delivered: int = Field(description="Attempts that delivered in this minute.")
    failed: int = Field(description="Attempts that ended retry or dead in this minute.")
    lateness_p50_ms: int | None = Field(
        description="p50 of first-attempt send time - due time of this minute; null if none."
    )
    lateness_p99_ms: int | None


class SeriesOut(BaseModel):
    biz_type: str
    at: int
    from_: int = Field(alias="from", description="The first minute's start (epoch ms).")
    to: int = Field(description="The end of the last minute, which is still filling.")
    step_ms: int
    points: list[SeriesPointOut]
