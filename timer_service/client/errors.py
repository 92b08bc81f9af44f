"""One error class per status the API answers with, built from its problem document."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import httpx

from timer_service.client.retry_after import retry_after_s

if TYPE_CHECKING:
    from timer_service.client.models import BatchItemResult


class TimerApiError(Exception):
    """The timer service answered with an error."""

    def __init__(
        self, status: int, problem: dict[str, object], retry_after_s: float | None = None
    ) -> None:
        self.status = status
        self.problem = problem
        # The server's `Retry-After`, in seconds from when the answer came; None when absent.
        self.retry_after_s = retry_after_s
        title = problem.get("title") or (self.__doc__ or "").strip()
        detail = problem.get("detail")
        super().__init__(f"{status} {title}" + (f": {detail}" if detail else ""))


class ClientError(TimerApiError):
    """The request was refused (4xx)."""


class BadRequest(ClientError):
    """The body is not valid JSON (400)."""


class Unauthorized(ClientError):
    """Missing or wrong bearer token (401)."""


class NotFoundError(ClientError):
    """No such resource (404)."""


class Forbidden(ClientError):
    """The token may not do this, or not on this biz type (403)."""


class ConflictError(ClientError):
    """The resource is in a state that does not allow this (409)."""


class PayloadTooLargeError(ClientError):
    """The body or payload is too large (413)."""


class ValidationFailed(ClientError):
    """A well-formed request broke a rule (422); see `problem["errors"]`."""


class TooManyRequests(ClientError):
    """The biz type's registration quota is used up for now (429); see `retry_after_s`."""


class ServerError(TimerApiError):
    """The service failed (5xx)."""


_ERROR_BY_STATUS: dict[int, type[TimerApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFoundError,
    409: ConflictError,
    413: PayloadTooLargeError,
    422: ValidationFailed,
    429: TooManyRequests,
}


def error_for(
    status: int, problem: dict[str, object], retry_after: float | None = None
) -> TimerApiError:
    default = ServerError if status >= 500 else ClientError
    return _ERROR_BY_STATUS.get(status, default)(status, problem, retry_after)


def checked(response: httpx.Response) -> httpx.Response:
    """The response itself when it is not an error; else its error, raised."""
    if response.is_error:
        wait_s = retry_after_s(response.headers.get("retry-after"))
        raise error_for(response.status_code, _problem_of(response), wait_s)
    return response


def _problem_of(response: httpx.Response) -> dict[str, object]:
    try:
        doc = response.json()
    except ValueError:
        doc = None
    if isinstance(doc, dict):
        return doc
    return {
        "type": "about:blank",
        "title": response.reason_phrase,
        "status": response.status_code,
        "detail": response.text[:1000],
    }


class BatchInterrupted(Exception):
    """`create_jobs` stopped at a chunk whose outcome is unknown (its request failed after
    the retries). `results` are the items answered before it; `chunk` is that chunk's
    items, each with the `job_id` it was sent with: some may have been created. Sending
    `chunk` again, then the rest of the input, is safe: an item created already is
    answered 200 with its job."""

    def __init__(
        self,
        results: Sequence[BatchItemResult],
        chunk: list[dict[str, object]],
        cause: BaseException,
    ) -> None:
        self.results = list(results)
        self.chunk = chunk
        super().__init__(
            f"create_jobs stopped after {len(results)} items: a chunk of {len(chunk)}"
            f" failed ({cause!r}); resend .chunk (its job ids are fixed) and the rest"
        )
