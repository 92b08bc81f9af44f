"""Python SDK of the timer service REST API (docs/api.md): typed models, one error per status.

Failed tries are repeated within a deadline the caller sets (`retry_deadline_s`), after
the server's `Retry-After` on 429 and 503 (client/retrying.py): every call when the
server refused it before any work (429, a 503 of the admission gate, a connection that
never opened); otherwise only calls whose repeat is safe. A create always carries a
`job_id` (generated here when not given), so a repeated create is answered 200 with the
same job, never a second one. Reschedule, replay, secret rotation, token creation and
real bulk runs are not repeated after a failure that may have done its work.

Needs only httpx and pydantic: nothing here imports the service.
"""

from timer_service.client.aio import AsyncTimerClient
from timer_service.client.bodies import new_job_id, to_epoch_ms
from timer_service.client.errors import (
    BadRequest,
    BatchInterrupted,
    ClientError,
    ConflictError,
    Forbidden,
    NotFoundError,
    PayloadTooLargeError,
    ServerError,
    TimerApiError,
    TooManyRequests,
    Unauthorized,
    ValidationFailed,
    error_for,
)
from timer_service.client.fields import BizTypeFields, BizTypePatch, RetryFields, ScheduleFields
from timer_service.client.models import (
    UNCHANGED,
    Attempt,
    AttemptResponse,
    BatchItemResult,
    BizTypeConfig,
    Job,
    JobPage,
    JobSpec,
    JobState,
    Lateness,
    RetryPolicy,
    Schedule,
    SecretRotated,
    Unchanged,
    When,
)
from timer_service.client.ops_models import (
    AuditEntry,
    AuditPage,
    BizStats,
    BulkResult,
    Calendar,
    CalendarBucket,
    CreatedToken,
    Role,
    StateCounts,
    Stats,
    Token,
)
from timer_service.client.requests import BATCH_SIZE
from timer_service.client.retrying import (
    DEFAULT_RETRY_DEADLINE_S,
    MAX_BACKOFF_S,
    RETRIED_STATUSES,
)
from timer_service.client.session import USER_AGENT
from timer_service.client.sync import TimerClient

__all__ = [
    "BATCH_SIZE",
    "DEFAULT_RETRY_DEADLINE_S",
    "MAX_BACKOFF_S",
    "RETRIED_STATUSES",
    "UNCHANGED",
    "USER_AGENT",
    "AsyncTimerClient",
    "Attempt",
    "AttemptResponse",
    "AuditEntry",
    "AuditPage",
    "BadRequest",
    "BatchInterrupted",
    "BatchItemResult",
    "BizStats",
    "BizTypeConfig",
    "BizTypeFields",
    "BizTypePatch",
    "BulkResult",
    "Calendar",
    "CalendarBucket",
    "ClientError",
    "ConflictError",
    "CreatedToken",
    "Forbidden",
    "Job",
    "JobPage",
    "JobSpec",
    "JobState",
    "Lateness",
    "NotFoundError",
    "PayloadTooLargeError",
    "RetryFields",
    "RetryPolicy",
    "Role",
    "Schedule",
    "ScheduleFields",
    "SecretRotated",
    "ServerError",
    "StateCounts",
    "Stats",
    "TimerApiError",
    "TimerClient",
    "Token",
    "TooManyRequests",
    "Unauthorized",
    "Unchanged",
    "ValidationFailed",
    "When",
    "error_for",
    "new_job_id",
    "to_epoch_ms",
]
