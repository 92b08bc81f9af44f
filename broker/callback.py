"""The callback protocol (docs/api.md, "Callback protocol"), pure: request, verdict, backoff.

No I/O here: the sender does the HTTP, this module says what to send and what
the answer means for the job.
"""

from __future__ import annotations

import email.utils
import json
from collections.abc import Sequence
from dataclasses import dataclass

from timer_service import __version__
from timer_service.dispatch import OutcomeKind
from timer_service.model import Attempt, BizType, Job, RetryPolicy
from timer_service.responses import capture, signature_values
from timer_service.signing import SECRET_PREFIX, signature_header

RETRYABLE_STATUSES = frozenset({408, 425, 429})
USER_AGENT = f"timer-service/{__version__}"


@dataclass(frozen=True, slots=True)
class CallbackRequest:
    body: bytes
    headers: dict[str, str]


@dataclass(frozen=True, slots=True)
class Response:
    """What came back: a status (and its Retry-After), or an error with no status."""

    status_code: int | None
    retry_after: str | None = None
    error: str | None = None  # "timeout", "connection error: ..." when no status came
    # The callback target policy refused the host: nothing was sent, and retrying
    # cannot change that (docs/operations.md, "Callback targets").
    refused: bool = False
    # What came with the status, for the attempt's record (timer_service.responses):
    # every header, the body's first bytes, and whether nothing came after them.
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""
    complete: bool = True


@dataclass(frozen=True, slots=True)
class Verdict:
    kind: OutcomeKind
    error: str | None
    next_attempt_at: int | None = None


def build_request(
    biz: BizType, job: Job, attempt: int, fired_at: int, traceparent: str | None = None
) -> CallbackRequest:
    """Body and headers of one attempt sent at `fired_at`; the payload goes out as the exact
    JSON registered. Signed as Standard Webhooks says (timer_service.signing) with every
    secret of the biz type valid at `fired_at`. `traceparent`: the attempt's span in the
    job's trace (timer_service.tracing), sent with the job's `tracestate`."""
    body = (
        f'{{"biz_type":{json.dumps(job.biz_type)},"job_id":{json.dumps(job.job_id)},'
        f'"payload":{job.payload_json},"due_at":{job.due_at},"fired_at":{fired_at},'
        f'"attempt":{attempt},"labels":{json.dumps(dict(job.labels), ensure_ascii=False)}}}'
    ).encode()
    msg_id = f"{job.biz_type}:{job.job_id}"
    timestamp_s = fired_at // 1000
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "Idempotency-Key": msg_id,
        "X-Timer-Attempt": str(attempt),
        "X-Timer-Timestamp": str(fired_at),
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp_s),
    }
    if traceparent is not None:
        headers["traceparent"] = traceparent
        if job.trace is not None and job.trace.tracestate is not None:
            headers["tracestate"] = job.trace.tracestate
    signatures = signature_header(biz.signing_secrets(fired_at), msg_id, timestamp_s, body)
    if signatures:
        headers["webhook-signature"] = signatures
    return CallbackRequest(body, headers)


_MAX_DELTA_DIGITS = 12  # 10^12 s: far beyond any max_backoff_ms
_VERY_LONG_MS = 10**15


def is_retryable(status_code: int | None) -> bool:
    """No status (timeout, connection error), 408, 425, 429 or any 5xx."""
    return status_code is None or status_code in RETRYABLE_STATUSES or status_code >= 500


def parse_retry_after(value: str | None, now_ms: int) -> int | None:
    """Retry-After as milliseconds from now: delta-seconds or an HTTP date; None if unusable."""
    if value is None:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():  # "²" is a digit to str.isdigit, not to HTTP
        # More digits than any wait the policy allows: read as "very long" (capped by
        # the caller), never as a number too large to parse.
        return int(value) * 1000 if len(value) <= _MAX_DELTA_DIGITS else _VERY_LONG_MS
    try:
        when = email.utils.parsedate_to_datetime(value)
        if when.tzinfo is None:  # RFC 9110 dates are GMT
            return None
        return max(0, int(when.timestamp() * 1000) - now_ms)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def retry_wait_ms(
    policy: RetryPolicy, attempt: int, retry_after: str | None, now_ms: int, spread: float = 0.0
) -> int:
    """Retry-After when given and readable (exactly: the endpoint asked for it), else
    the backoff with its jitter; capped by max_backoff_ms."""
    hinted = parse_retry_after(retry_after, now_ms)
    if hinted is not None:
        return policy.capped(hinted)
    return policy.backoff_ms(attempt, spread)


def judge(
    response: Response,
    policy: RetryPolicy,
    attempt: int,
    budget_base: int,
    known_at: int,
    spread: float = 0.0,
) -> Verdict:
    """The job's fate after attempt number `attempt`, its outcome known at `known_at`;
    `spread` in [0, 1) picks the backoff's jitter (`RetryPolicy.backoff_ms`)."""
    status = response.status_code
    if status is not None and 200 <= status < 300:
        return Verdict(OutcomeKind.DELIVERED, None)
    error = response.error if status is None else f"HTTP {status}"
    if response.refused or not is_retryable(status):
        return Verdict(OutcomeKind.DEAD, error)
    if attempt - budget_base >= policy.max_attempts:
        return Verdict(OutcomeKind.DEAD, error)
    wait_ms = retry_wait_ms(policy, attempt, response.retry_after, known_at, spread)
    return Verdict(OutcomeKind.RETRY, error, known_at + wait_ms)


def attempt_record(
    attempt: int,
    fired_at: int,
    response: Response,
    verdict: Verdict,
    duration_ms: int,
    sent: tuple[BizType, CallbackRequest] | None = None,
) -> Attempt:
    """The attempt as the job keeps it, with what the endpoint answered (when a status
    came). `sent`: the biz type and the request, whose secrets and signatures an answer
    that echoes them must not keep (`secrets_of`)."""
    answer = None
    if response.status_code is not None:
        never_kept = () if sent is None else secrets_of(sent[0], sent[1], fired_at)
        answer = capture(response.headers, response.body, response.complete, never_kept)
    return Attempt(attempt, fired_at, response.status_code, verdict.error, duration_ms, answer)


def secrets_of(biz: BizType, request: CallbackRequest, fired_at: int) -> Sequence[str]:
    """The biz type's signing secrets and the request's signatures: never stored, even
    when an endpoint echoes them back."""
    secrets = list(biz.signing_secrets(fired_at))
    secrets += [s.removeprefix(SECRET_PREFIX) for s in secrets if s.startswith(SECRET_PREFIX)]
    return secrets + signature_values(request.headers.get("webhook-signature"))
