"""Problem documents (RFC 9457): every 4xx/5xx the API sends is one of these."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from timer_service.errors import (
    CallbackInFlight,
    Conflict,
    InvalidInput,
    NotFound,
    PayloadTooLarge,
    StoreUnavailable,
    TimerServiceError,
    VersionMismatch,
)
from timer_service.quota import OverQuota

log = logging.getLogger(__name__)

PROBLEM_MEDIA_TYPE = "application/problem+json"

TITLES = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    412: "Precondition Failed",
    413: "Content Too Large",
    415: "Unsupported Media Type",
    422: "Unprocessable Content",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}

Loc = Sequence[str | int]


# Problem types (RFC 9457 "type"): URI references relative to the API's root, so each
# resolves to the API that sent it, where `GET /problems/{kind}` describes it. One per
# kind of failure; a client branches on `type`, never on `detail`.
PROBLEMS_PATH = "/problems/"
BAD_REQUEST = PROBLEMS_PATH + "malformed-request"
UNAUTHORIZED = PROBLEMS_PATH + "unauthorized"
FORBIDDEN = PROBLEMS_PATH + "forbidden"
NOT_FOUND = PROBLEMS_PATH + "not-found"
METHOD_NOT_ALLOWED = PROBLEMS_PATH + "method-not-allowed"
CONFLICT = PROBLEMS_PATH + "conflict"
CALLBACK_IN_FLIGHT = PROBLEMS_PATH + "callback-in-flight"
PRECONDITION_FAILED = PROBLEMS_PATH + "precondition-failed"
TOO_LARGE = PROBLEMS_PATH + "too-large"
UNSUPPORTED_MEDIA_TYPE = PROBLEMS_PATH + "unsupported-media-type"
VALIDATION = PROBLEMS_PATH + "validation"
HEADERS_TOO_LARGE = PROBLEMS_PATH + "headers-too-large"
UNKNOWN_HOST = PROBLEMS_PATH + "unknown-host"
INTERNAL = PROBLEMS_PATH + "internal"
UNAVAILABLE = PROBLEMS_PATH + "unavailable"
OVERLOADED = PROBLEMS_PATH + "overloaded"
OVER_QUOTA = PROBLEMS_PATH + "over-quota"

TYPE_BY_STATUS = {
    400: BAD_REQUEST,
    401: UNAUTHORIZED,
    403: FORBIDDEN,
    404: NOT_FOUND,
    405: METHOD_NOT_ALLOWED,
    409: CONFLICT,
    412: PRECONDITION_FAILED,
    413: TOO_LARGE,
    415: UNSUPPORTED_MEDIA_TYPE,
    422: VALIDATION,
    429: OVER_QUOTA,
    431: HEADERS_TOO_LARGE,
    500: INTERNAL,
    503: UNAVAILABLE,
}

# What each type means, served at GET /problems/{kind}.
PROBLEM_DESCRIPTIONS = {
    BAD_REQUEST: "The body is not valid JSON, or not UTF-8.",
    UNAUTHORIZED: "The request needs 'Authorization: Bearer <token>' with a valid token.",
    FORBIDDEN: "The token is valid but its role or its biz types do not allow this"
    ' request; nothing was changed (docs/api.md, "Access control").',
    NOT_FOUND: "No such biz type, job, schedule or route.",
    METHOD_NOT_ALLOWED: "The path exists, not with this method; `Allow` lists the methods.",
    CONFLICT: "The resource's state does not allow this, or the identity exists with"
    " different data.",
    CALLBACK_IN_FLIGHT: "The job's callback has started: it cannot be cancelled now. Should"
    " that attempt fail and a retry be scheduled, the job can be cancelled again.",
    PRECONDITION_FAILED: "`If-Match` names a version (ETag) that is not the current one.",
    TOO_LARGE: "The body is over TIMER_MAX_BODY_BYTES, or the payload over"
    " TIMER_MAX_PAYLOAD_BYTES.",
    UNSUPPORTED_MEDIA_TYPE: "A body must be JSON: Content-Type application/json (or"
    " application/*+json), UTF-8.",
    VALIDATION: "A well-formed body, path or query parameter breaks a rule; `errors` lists"
    " each with its `loc`.",
    HEADERS_TOO_LARGE: "More than 100 header fields or 16 KiB of headers.",
    UNKNOWN_HOST: "The Host header is not one this API answers to (TIMER_ALLOWED_HOSTS).",
    INTERNAL: "An unexpected error; it is logged.",
    UNAVAILABLE: "The job store (or a dependency) is not answering; retry after"
    " `Retry-After` seconds.",
    OVERLOADED: "The API has as many requests at work as it takes"
    " (TIMER_API_MAX_INFLIGHT) and refused this one at once; retry after `Retry-After`"
    " seconds.",
    OVER_QUOTA: "The biz type's registration quota (`registration_rate_per_s`,"
    " `registration_burst`) is used up for now; retry after `Retry-After` seconds.",
}


def problem_body(
    status: int,
    detail: str,
    errors: Iterable[Mapping[str, Any]] | None = None,
    type_: str | None = None,
) -> dict[str, Any]:
    title = TITLES.get(status, "Error")
    body: dict[str, Any] = {
        "type": type_ or TYPE_BY_STATUS.get(status, "about:blank"),
        "title": title,
        "status": status,
        "detail": detail,
    }
    if errors is not None:
        body["errors"] = [dict(e) for e in errors]
    return body


def problem_response(
    status: int,
    detail: str,
    errors: Iterable[Mapping[str, Any]] | None = None,
    headers: Mapping[str, str] | None = None,
    type_: str | None = None,
) -> Response:
    body = problem_body(status, detail, errors, type_)
    content = json.dumps(body, ensure_ascii=False).encode()
    return Response(content, status, headers=dict(headers or {}), media_type=PROBLEM_MEDIA_TYPE)


def field_error(loc: Loc, msg: str) -> dict[str, Any]:
    return {"loc": list(loc), "msg": msg}


class Problem(Exception):
    """Raised by handlers to answer with a problem document."""

    def __init__(
        self,
        status: int,
        detail: str,
        errors: Sequence[Mapping[str, Any]] | None = None,
        headers: Mapping[str, str] | None = None,
        type_: str | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.errors = errors
        self.headers = headers
        self.type_ = type_

    @classmethod
    def invalid(cls, loc: Loc, msg: str) -> Problem:
        return cls(422, msg, [field_error(loc, msg)])

    def body(self) -> dict[str, Any]:
        return problem_body(self.status, self.detail, self.errors, self.type_)

    def response(self) -> Response:
        return problem_response(self.status, self.detail, self.errors, self.headers, self.type_)


def validation_errors(raw: Iterable[Mapping[str, Any]], prefix: Loc = ()) -> list[dict[str, Any]]:
    """Pydantic/FastAPI error dicts as the contract's `{"loc", "msg"}` entries."""
    return [
        {"loc": [*prefix, *err.get("loc", ())], "msg": str(err.get("msg", "invalid"))}
        for err in raw
    ]


def summarize(errors: Sequence[Mapping[str, Any]]) -> str:
    first = errors[0]
    where = ".".join(str(part) for part in first["loc"])
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {first['msg']}{more}" if where else f"{first['msg']}{more}"


async def on_problem(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, Problem)
    return exc.response()


async def on_http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    detail = exc.detail if isinstance(exc.detail, str) else TITLES.get(exc.status_code, "Error")
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        # Starlette names the methods of the first route that matched the path only.
        headers["Allow"] = ", ".join(sorted(_allowed_methods(request)))
    return problem_response(exc.status_code, detail, headers=headers)


def _allowed_methods(request: Request) -> set[str]:
    """Methods of every route whose path matches (set by `create_app` in app.state)."""
    path = request.url.path
    methods: set[str] = set()
    for path_regex, route_methods in getattr(request.app.state, "route_methods", ()):
        if path_regex.match(path):
            methods |= route_methods
    return methods


async def on_request_validation(_: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    raw = list(exc.errors())
    if any(err.get("type") == "json_invalid" for err in raw):
        return problem_response(400, "The request body is not valid JSON.")
    errors = validation_errors(raw)
    return problem_response(422, summarize(errors) if errors else "Invalid request.", errors)


class UnhandledErrorMiddleware:
    """The last line: an unexpected exception becomes a logged 500 problem document."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception:
            log.exception(
                "unhandled error", extra={"method": scope.get("method"), "path": scope.get("path")}
            )
            if started:
                raise
            response = problem_response(500, "An unexpected error occurred.")
            await response(scope, receive, send)


STORE_RETRY_AFTER_S = 2


def _domain_status(exc: TimerServiceError) -> int:
    if isinstance(exc, NotFound):
        return 404
    if isinstance(exc, VersionMismatch):
        return 412
    if isinstance(exc, Conflict):
        return 409
    if isinstance(exc, PayloadTooLarge):
        return 413
    if isinstance(exc, InvalidInput):
        return 422
    if isinstance(exc, StoreUnavailable):
        return 503
    if isinstance(exc, OverQuota):
        return 429
    return 500


async def on_domain_error(_: Request, exc: Exception) -> Response:
    """Store and domain exceptions as problem documents (NotFound -> 404, Conflict -> 409)."""
    assert isinstance(exc, TimerServiceError)
    status = _domain_status(exc)
    if status == 500:
        log.error("unexpected service error", exc_info=exc)
        return problem_response(500, "An unexpected error occurred.")
    if isinstance(exc, InvalidInput):
        return problem_response(422, str(exc), [field_error(exc.loc, str(exc))])
    if isinstance(exc, CallbackInFlight):
        return problem_response(409, str(exc), type_=CALLBACK_IN_FLIGHT)
    if isinstance(exc, OverQuota):
        return problem_response(429, str(exc), headers={"Retry-After": str(exc.retry_after_s)})
    if isinstance(exc, StoreUnavailable):
        log.warning("store unavailable", extra={"error": repr(exc.__cause__ or exc)})
        return problem_response(
            503,
            "The job store is not answering. Try again shortly (creates are idempotent:"
            " retrying one is safe).",
            headers={"Retry-After": str(STORE_RETRY_AFTER_S)},
        )
    return problem_response(status, str(exc))
