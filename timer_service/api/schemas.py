"""Request and response models of the REST API.

Request models validate already-parsed JSON in strict mode (a string is not a
number, a boolean is not an integer). Response models document the answers in
the OpenAPI schema; handlers send `Job.to_public()` / `BizType.to_public()`.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    StringConstraints,
    WithJsonSchema,
)

from timer_service.calendar import MAX_WINDOW_MS
from timer_service.constants import (
    BIZ_TYPE_PATTERN,
    DEFAULT_SECRET_OVERLAP_S,
    JOB_ID_PATTERN,
    LABEL_KEY_PATTERN,
    MAX_BURST,
    MAX_CONCURRENCY,
    MAX_LABEL_VALUE_CHARS,
    MAX_LABELS,
    MAX_REGISTRATION_RATE_PER_S,
    MAX_SECRET_OVERLAP_S,
    MAX_TIMEOUT_MS,
    MIN_CYCLE_INTERVAL_MS,
    MIN_DUE_AT_MS,
    MIN_RATE_LIMIT_PER_S,
)
from timer_service.lateness import WaitingFor
from timer_service.model import JobState, RetryPolicy
from timer_service.schedules import MAX_CRON_LEN, MAX_INTERVALS
from timer_service.signing import signing_key

# Every stored integer fits MongoDB's int64 and a JSON double exactly.
MAX_INT = 2**53
_DEFAULT_RETRY = RetryPolicy()

BizTypeName = Annotated[str, StringConstraints(pattern=BIZ_TYPE_PATTERN)]
JobId = Annotated[str, StringConstraints(pattern=JOB_ID_PATTERN)]

_RFC3339 = re.compile(
    r"^(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}:\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:\d{2})$"
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def rfc3339_to_ms(text: str) -> int:
    """Epoch ms of an RFC 3339 time; the offset is required (a naive time is ambiguous)."""
    match = _RFC3339.match(text)
    if match is None:
        raise ValueError("must be epoch milliseconds or an RFC 3339 time with an offset")
    date, time, fraction, offset = match.groups()
    micros = (fraction or "").ljust(6, "0")[:6]
    zone = "+00:00" if offset in ("Z", "z") else offset
    try:
        moment = datetime.fromisoformat(f"{date}T{time}.{micros}{zone}")
    except ValueError as exc:
        raise ValueError(f"not a valid time: {exc}") from None
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def _integral(value: object) -> object:
    """A JSON number with no fraction (`5.0`) is the integer it equals: JSON has one number
    type, and many encoders write every number as a float. `5.5` is refused."""
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(f"must be an integer, not {value!r}")
        return int(value)
    return value


Int = Annotated[int, BeforeValidator(_integral)]


def _due_at_ms(value: object) -> int:
    value = _integral(value)
    if isinstance(value, str):
        ms = rfc3339_to_ms(value)
        if ms < 0:
            raise ValueError("must not be before 1970-01-01T00:00:00Z")
        return ms
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError("must be epoch milliseconds (an integer) or an RFC 3339 time")
    if value < MIN_DUE_AT_MS:
        raise ValueError(
            f"{value} looks like seconds, not milliseconds: epoch milliseconds before"
            f" {MIN_DUE_AT_MS} (2001-01-01T00:00:00Z) are refused; multiply by 1000"
        )
    return value


def _http_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an absolute http or https URL")
    if any(c.isspace() for c in value):
        raise ValueError("must not contain whitespace")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise ValueError("must not contain control characters")
    try:
        port = parts.port
    except ValueError:
        raise ValueError("has an invalid port") from None
    if port == 0:
        raise ValueError("has port 0, which nothing listens on")
    try:
        parts.hostname.encode("idna")  # as the notifier will: fails on what it cannot send
    except UnicodeError:
        raise ValueError(
            "has a host name that cannot be encoded (an empty label, or one over 63 characters)"
        ) from None
    return value


def _usable_secret(value: str) -> str:
    signing_key(value)  # raises InvalidSecret (a ValueError) saying what is wrong
    return value


SigningSecret = Annotated[
    str,
    StringConstraints(min_length=1, max_length=4096),
    AfterValidator(_usable_secret),
    Field(
        description=(
            "A Standard Webhooks secret (`whsec_` + base64 of at least 16 bytes), or any other"
            " string, whose UTF-8 bytes are then the HMAC key."
        ),
        examples=["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"],
    ),
]

DueAt = Annotated[
    int,
    PlainValidator(_due_at_ms),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": MIN_DUE_AT_MS},
                {"type": "string", "format": "date-time"},
            ],
            "description": (
                "Epoch milliseconds, or an RFC 3339 time with an offset. A number before"
                f" {MIN_DUE_AT_MS} (2001-01-01 in ms) is refused: it can only be seconds."
            ),
            "examples": [1767225600000, "2026-01-01T00:00:00Z"],
        }
    ),
]
DelayMs = Annotated[
    Int, Field(ge=0, le=MAX_INT, description="Milliseconds from now (the server's clock).")
]
CallbackUrl = Annotated[
    str,
    StringConstraints(min_length=1, max_length=2048),
    AfterValidator(_http_url),
    Field(json_schema_extra={"format": "uri"}, examples=["https://orders.internal/timer"]),
]


LabelKey = Annotated[str, StringConstraints(pattern=LABEL_KEY_PATTERN)]
LabelValue = Annotated[str, StringConstraints(max_length=MAX_LABEL_VALUE_CHARS)]
Labels = Annotated[
    dict[LabelKey, LabelValue],
    Field(
        max_length=MAX_LABELS,
        description=(
            f"At most {MAX_LABELS} pairs; key `{LABEL_KEY_PATTERN}`, value a string of at most"
            f" {MAX_LABEL_VALUE_CHARS} characters. Filter by them with `label=key:value`."
        ),
        examples=[{"tenant": "acme", "region": "eu-1"}],
    ),
]


class _Strict(BaseModel):
    """Strict types (a string is not a number), integral floats as integers (`Int`), and
    unknown fields refused: a misspelt `paylod` is a 422 naming it, not a null payload."""

    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)


# -- requests -----------------------------------------------------------------


class RetryPolicyIn(_Strict):
    max_attempts: Int = Field(_DEFAULT_RETRY.max_attempts, ge=1, le=MAX_INT)
    initial_backoff_ms: Int = Field(_DEFAULT_RETRY.initial_backoff_ms, ge=0, le=MAX_INT)
    max_backoff_ms: Int = Field(_DEFAULT_RETRY.max_backoff_ms, ge=0, le=MAX_INT)
    multiplier: float = Field(_DEFAULT_RETRY.multiplier, ge=1)


class BizTypeIn(_Strict):
    callback_url: CallbackUrl
    rate_limit_per_s: float | None = Field(
        None,
        ge=MIN_RATE_LIMIT_PER_S,
        description=(
            f"Callbacks per second, at least {MIN_RATE_LIMIT_PER_S}; null or absent = unlimited."
        ),
    )
    burst: Int = Field(1, ge=1, le=MAX_BURST)
    max_concurrency: Int = Field(16, ge=1, le=MAX_CONCURRENCY)
    timeout_ms: Int = Field(
        10000, ge=1, le=MAX_TIMEOUT_MS, description="Time allowed for one callback."
    )
    retry: RetryPolicyIn = Field(default_factory=lambda: RetryPolicyIn.model_validate({}))
    signing_secret: SigningSecret | None = None
    paused: bool = False
    registration_rate_per_s: float | None = Field(
        None,
        ge=MIN_RATE_LIMIT_PER_S,
        le=MAX_REGISTRATION_RATE_PER_S,
        description=(
            "Jobs this biz type may create per second on each API process (over it: 429"
            f" with `Retry-After`), {MIN_RATE_LIMIT_PER_S} to {MAX_REGISTRATION_RATE_PER_S};"
            " null or absent = unlimited."
        ),
    )
    registration_burst: Int | None = Field(
        None,
        ge=1,
        le=MAX_BURST,
        description=(
            "Jobs it may create at once on top of the rate; absent = one second's worth"
            " (`ceil(registration_rate_per_s)`)."
        ),
    )


class RetryPolicyPatchIn(_Strict):
    """Members given replace the stored ones; `null` resets one to its default."""

    max_attempts: Int | None = Field(None, ge=1, le=MAX_INT)
    initial_backoff_ms: Int | None = Field(None, ge=0, le=MAX_INT)
    max_backoff_ms: Int | None = Field(None, ge=0, le=MAX_INT)
    multiplier: float | None = Field(None, ge=1)


class BizTypePatchIn(_Strict):
    """A JSON Merge Patch (RFC 7396) of the stored config, which `BizTypeIn` then checks
    whole: an absent member keeps its value, `null` resets it to its default (for
    `callback_url`, which has none: 422), `retry` merges member by member."""

    callback_url: CallbackUrl | None = None
    rate_limit_per_s: float | None = Field(None, ge=MIN_RATE_LIMIT_PER_S)
    burst: Int | None = Field(None, ge=1, le=MAX_BURST)
    max_concurrency: Int | None = Field(None, ge=1, le=MAX_CONCURRENCY)
    timeout_ms: Int | None = Field(None, ge=1, le=MAX_TIMEOUT_MS)
    retry: RetryPolicyPatchIn | None = None
    signing_secret: SigningSecret | None = Field(
        None, description="A new secret (ends a rotation); null removes it; absent keeps it."
    )
    paused: bool | None = None
    registration_rate_per_s: float | None = Field(
        None, ge=MIN_RATE_LIMIT_PER_S, le=MAX_REGISTRATION_RATE_PER_S
    )
    registration_burst: Int | None = Field(None, ge=1, le=MAX_BURST)


class SecretRotateIn(_Strict):
    signing_secret: SigningSecret | None = Field(
        None, description="The new secret; absent = a new random `whsec_` secret."
    )
    keep_previous_for_s: Int = Field(
        DEFAULT_SECRET_OVERLAP_S,
        ge=0,
        le=MAX_SECRET_OVERLAP_S,
        description="How long callbacks are also signed with the secret replaced (0 = not).",
    )


def _exactly_one_due(schema: dict[str, Any]) -> None:
    """Documents the rule the handlers enforce (null counts as absent), so clients and
    schema-driven tests know a body with neither or both is refused."""
    schema["oneOf"] = [
        {"required": [name], "properties": {name: {"not": {"type": "null"}}}}
        for name in ("due_at", "delay_ms")
    ]


class JobCreateIn(_Strict):
    """Exactly one of `due_at` and `delay_ms`."""

    model_config = ConfigDict(**_Strict.model_config, json_schema_extra=_exactly_one_due)

    biz_type: BizTypeName
    job_id: JobId | None = Field(None, description="Generated by the server when absent.")
    due_at: DueAt | None = None
    delay_ms: DelayMs | None = None
    payload: Any = Field(None, description="Any JSON value (absent = null).")
    labels: Labels | None = Field(None, description="Absent or null = no labels.")
    window_ms: int = Field(
        0,
        ge=0,
        le=MAX_WINDOW_MS,
        description=(
            "A flexible window: the job may fire at any moment of [due_at, due_at +"
            " window_ms]; the service picks, at creation, the least-loaded second of it by"
            " the load calendar (`fire_at` on the job). 0: at due_at. A repeated create"
            " compares the window, not the moment picked."
        ),
    )


class JobBatchIn(_Strict):
    jobs: list[JobCreateIn] = Field(min_length=1, max_length=1000)


class JobPatchIn(_Strict):
    """Exactly one of `due_at` and `delay_ms`; `payload` replaces the payload when given."""

    model_config = ConfigDict(**_Strict.model_config, json_schema_extra=_exactly_one_due)

    due_at: DueAt | None = None
    delay_ms: DelayMs | None = None
    payload: Any = Field(None, description="Any JSON value; absent = keep the payload.")


class ScheduleIn(_Strict):
    """Exactly one of `cron` (with `timezone`) and `intervals_ms` (with `cycle`)."""

    cron: str | None = Field(
        None,
        min_length=1,
        max_length=MAX_CRON_LEN,
        description="5 fields, or 6 with seconds first; evaluated in `timezone`.",
        examples=["0 9 * * MON-FRI", "*/10 * * * * *"],
    )
    timezone: str | None = Field(None, description="IANA zone of `cron`; default UTC.")
    intervals_ms: list[Annotated[Int, Field(ge=1, le=MAX_INT)]] | None = Field(
        None,
        min_length=1,
        max_length=MAX_INTERVALS,
        description=(
            "Gaps between occurrences; with `cycle: true` each at least"
            f" {MIN_CYCLE_INTERVAL_MS} ms."
        ),
    )
    cycle: bool | None = Field(None, description="Repeat `intervals_ms` forever; default false.")
    payload: Any = Field(None, description="Any JSON value; each occurrence's job payload.")
    start_at: DueAt | None = None
    end_at: DueAt | None = None
    max_runs: Int | None = Field(None, ge=1, le=MAX_INT)
    paused: bool = False
    catchup: Literal["skip", "one", "all"] = "skip"


# -- responses ------------------------------------------------------------------


class RetryPolicyOut(BaseModel):
    max_attempts: int
    initial_backoff_ms: int
    max_backoff_ms: int
    multiplier: float


class BizTypeOut(BaseModel):
    biz_type: str
    callback_url: str
    rate_limit_per_s: float | None
    burst: int
    max_concurrency: int
    timeout_ms: int
    retry: RetryPolicyOut
    has_signing_secret: bool
    signing_secret_rotating_until: int | None = Field(
        description="While callbacks are also signed with the previous secret: until when."
    )
    paused: bool
    registration_rate_per_s: float | None
    registration_burst: int | None
    created_at: int
    updated_at: int


class BizTypeListOut(BaseModel):
    items: list[BizTypeOut]


class SecretRotatedOut(BizTypeOut):
    signing_secret: str = Field(description="The new secret; shown this once, never again.")


class AttemptResponseOut(BaseModel):
    """What the endpoint answered to one attempt, as kept (docs/api.md, "Attempt
    responses"): a few headers and the body's first KiB, never a signing secret."""

    headers: dict[str, str] = Field(
        description="Only these, when sent: Content-Type, Content-Length, Content-Encoding, "
        "Retry-After, Location, WWW-Authenticate, X-Request-Id; each value at most 128 bytes."
    )
    body: str | None = Field(
        description="The body's first 1024 bytes, decoded as UTF-8 (invalid bytes as "
        "U+FFFD) and cut on a character boundary; null when empty or binary. A signing "
        "secret or signature echoed back reads `[redacted]`."
    )
    truncated: bool = Field(description="The body was longer than what is kept.")
    binary: bool = Field(
        description="The body is not text (a non-text Content-Type, a Content-Encoding, "
        "NUL bytes, or mostly invalid UTF-8): not kept."
    )


class AttemptOut(BaseModel):
    attempt: int
    at: int
    status_code: int | None
    error: str | None
    duration_ms: int
    response: AttemptResponseOut | None = Field(
        default=None,
        description="What the endpoint answered: null when no answer came (timeout, "
        "connection error) or when older than the job's last 10 answers. Shown on GET of "
        "one job; listings leave it out.",
    )


class JobOut(BaseModel):
    biz_type: str
    job_id: str
    due_at: int
    payload: Any
    state: JobState
    attempts: int
    next_attempt_at: int | None
    created_at: int
    updated_at: int
    delivered_at: int | None
    last_error: str | None
    history: list[AttemptOut]
    labels: dict[str, str]
    window_ms: int = Field(description="The flexible window the job was created with (0: none).")
    fire_at: int = Field(
        description="The moment its first attempt was set for: due_at, or the one chosen in"
        " its window (a reschedule sets it to the new due_at)."
    )


class LatenessOut(BaseModel):
    """Why a job is late (docs/api.md, "Why late"); members that do not apply are null."""

    kind: Literal["waiting", "final"] = Field(
        description="`waiting`: an open job past its moment; `final`: delivered or dead, late."
    )
    late_ms: int = Field(description="How late: now (or the outcome) - the job's moment.")
    waiting_for: WaitingFor | None = Field(description="What a waiting job waits for.")
    detail: str = Field(description="One sentence for a person, with the figures it rests on.")
    until: int | None = Field(description="When the wait should end (epoch ms, may estimate).")
    send_ms: int | None = Field(description="First callback sent - the job's moment.")
    publish_ms: int | None = Field(description="Claim (publish) - moment; null if not stored.")
    hold_ms: int | None = Field(description="First send - claim: queue and broker hold.")
    retries_ms: int | None = Field(description="Last attempt's send - the first's.")
    endpoint_ms: int | None = Field(description="The last attempt's round trip.")


class JobDetailOut(JobOut):
    lateness: LatenessOut | None = Field(
        description="Null when on time; on GET of one job only, never in listings."
    )


class JobPageOut(BaseModel):
    items: list[JobOut]
    next_cursor: str | None


class FieldErrorOut(BaseModel):
    loc: list[str | int]
    msg: str


class ProblemOut(BaseModel):
    """RFC 9457 problem document."""

    type: str
    title: str
    status: int
    detail: str
    errors: list[FieldErrorOut] | None = Field(None, description="Present on 422.")


class BatchItemOut(BaseModel):
    status: int = Field(description="201, 200, 409, 413 or 422")
    job: JobOut | None = None
    error: ProblemOut | None = None


class BatchOut(BaseModel):
    results: list[BatchItemOut]


class HealthOut(BaseModel):
    status: str
