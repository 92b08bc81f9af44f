"""Python SDK of the timer service REST API (docs/api.md): typed models, one error per status.

Transport failures (connect errors, timeouts, 502/503/504) are retried with backoff only
where a repeat is safe: GET, PUT, DELETE and job creation, which always carries a `job_id`
(generated here when not given), so a repeated create is answered 200 with the same job.
PATCH (reschedule) and replay are never retried.

Needs only httpx, pydantic and tenacity: nothing here imports the service.
"""

from timer_service.client.aio import AsyncTimerClient
from timer_service.client.bodies import new_job_id, to_epoch_ms
from timer_service.client.errors import (
    BadRequest,
    BatchInterrupted,
    ClientError,
    ConflictError,
    NotFoundError,
    PayloadTooLargeError,
    ServerError,
    TimerApiError,
    Unauthorized,
    ValidationFailed,
    error_for,
)
from timer_service.client.models import (
    UNCHANGED,
    Attempt,
    BatchItemResult,
    BizTypeConfig,
    Job,
    JobPage,
    JobSpec,
    RetryPolicy,
    Schedule,
)
from timer_service.client.requests import BATCH_SIZE
from timer_service.client.session import MAX_BACKOFF_S, RETRIED_STATUSES, USER_AGENT
from timer_service.client.sync import TimerClient

__all__ = [
    "BATCH_SIZE",
    "MAX_BACKOFF_S",
    "RETRIED_STATUSES",
    "UNCHANGED",
    "USER_AGENT",
    "AsyncTimerClient",
    "Attempt",
    "BadRequest",
    "BatchInterrupted",
    "BatchItemResult",
    "BizTypeConfig",
    "ClientError",
    "ConflictError",
    "Job",
    "JobPage",
    "JobSpec",
    "NotFoundError",
    "PayloadTooLargeError",
    "RetryPolicy",
    "Schedule",
    "ServerError",
    "TimerApiError",
    "TimerClient",
    "Unauthorized",
    "ValidationFailed",
    "error_for",
    "new_job_id",
    "to_epoch_ms",
]
