"""The API's resources as the SDK returns them, field for field (docs/api.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    JsonValue,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    model_serializer,
)

JobState = Literal["pending", "dispatched", "delivered", "dead", "cancelled"]
When = int | str | datetime
"""A time as the API reads it: epoch ms, an RFC 3339 string with offset, or an aware
datetime (sent as epoch ms)."""


class _Resource(BaseModel):
    # extra="allow": the contract lets the server add fields; keep them rather than fail.
    model_config = ConfigDict(extra="allow", frozen=True)
    # Fields newer than some servers: dumped only when the server sent them, so that a
    # dump says what the server said (the CLI prints these dumps).
    OPTIONAL_FIELDS: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _as_sent(
        self, handler: SerializerFunctionWrapHandler, info: SerializationInfo
    ) -> dict[str, object]:
        dumped: dict[str, object] = handler(self)
        for name in self.OPTIONAL_FIELDS - self.model_fields_set:
            dumped.pop(name, None)
        return dumped


class AttemptResponse(_Resource):
    """What the endpoint answered to one attempt, as the service keeps it (docs/api.md,
    "Attempt responses"): a few headers, the body's first KiB (None when empty or
    binary), whether it was longer, whether it was binary."""

    headers: dict[str, str] = {}
    body: str | None = None
    truncated: bool = False
    binary: bool = False


class Attempt(_Resource):
    # `response` is shown on a job read alone (get_job), not in listings, and not by
    # servers older than it: None then.
    OPTIONAL_FIELDS = frozenset({"response"})

    attempt: int
    at: int
    status_code: int | None = None
    error: str | None = None
    duration_ms: int | None = None
    response: AttemptResponse | None = None


class Lateness(_Resource):
    """Why a job is late (docs/api.md, "Why late"); members that do not apply are None.

    `kind` "waiting": an open job past its moment, `waiting_for` one of "retry",
    "paused", "no_daemon", "daemon_behind", "claim", "no_broker", "rate_limit",
    "concurrency", "broker", "endpoint", "reconcile" (a str: a newer server may add
    one), `until` when the wait should end. `kind` "final": a delivered or dead job
    more than 1 s late, with its breakdown in ms."""

    kind: str
    late_ms: int
    waiting_for: str | None = None
    detail: str = ""
    until: int | None = None
    send_ms: int | None = None
    publish_ms: int | None = None
    hold_ms: int | None = None
    retries_ms: int | None = None
    endpoint_ms: int | None = None


class Job(_Resource):
    biz_type: str
    job_id: str
    due_at: int
    payload: JsonValue = None
    state: str
    attempts: int = 0
    next_attempt_at: int | None = None
    created_at: int
    updated_at: int
    delivered_at: int | None = None
    last_error: str | None = None
    history: tuple[Attempt, ...] = ()
    labels: dict[str, str] = {}
    OPTIONAL_FIELDS = frozenset({"window_ms", "fire_at", "lateness"})
    # Flexible windows (docs/api.md, "Load calendar and flexible windows"): absent from
    # servers that predate them.
    window_ms: int | None = None
    fire_at: int | None = None
    # Only `get_job` answers carry it (null when on time), never listings.
    lateness: Lateness | None = None


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
    OPTIONAL_FIELDS = frozenset(
        {
            "signing_secret_rotating_until",
            "registration_rate_per_s",
            "registration_burst",
            "created_at",
            "updated_at",
        }
    )
    signing_secret_rotating_until: int | None = None
    paused: bool = False
    registration_rate_per_s: float | None = None
    registration_burst: int | None = None
    created_at: int | None = None
    updated_at: int | None = None


class SecretRotated(BizTypeConfig):
    """A biz type's config after a secret rotation, with the new secret: shown this once."""

    signing_secret: str


class Schedule(_Resource):
    biz_type: str | None = None
    schedule_id: str | None = None
    cron: str | None = None
    timezone: str | None = None
    intervals_ms: tuple[int, ...] | None = None
    cycle: bool | None = None
    payload: JsonValue = None
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
    error: dict[str, JsonValue] | None = None

    @property
    def ok(self) -> bool:
        return self.status in (200, 201)


class JobPage(_Resource):
    items: tuple[Job, ...]
    next_cursor: str | None = None


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One job to create; `create_jobs` takes these or plain dicts of the same fields.
    `payload` is any JSON value; `job_id` is generated when absent (so a resend is safe)."""

    biz_type: str
    due_at: When | None = None
    delay_ms: int | None = None
    payload: object = None
    job_id: str | None = None
    labels: Mapping[str, str] | None = None
    window_ms: int | None = None


class _Unchanged(Enum):
    UNCHANGED = "unchanged"


UNCHANGED = _Unchanged.UNCHANGED
"""`reschedule_job(payload=UNCHANGED)` (the default) keeps the job's payload; in
`patch_biz_type`, a field left UNCHANGED is not in the patch (None resets it)."""
Unchanged = Literal[_Unchanged.UNCHANGED]
