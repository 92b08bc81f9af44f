"""Python SDK of the timer service REST API (docs/api.md): typed models, one error per status.

Transport failures (connect errors, timeouts, 502/503/504) are retried with backoff only
where a repeat is safe: GET, PUT, DELETE and job creation, which always carries a `job_id`
(generated here when not given), so a repeated create is answered 200 with the same job.
PATCH (reschedule) and replay are never retried.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from importlib.metadata import PackageNotFoundError, version
from itertools import islice
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ConfigDict
from tenacity import (
    AsyncRetrying,
    Retrying,
    before_sleep_log,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)

log = logging.getLogger(__name__)

BATCH_SIZE = 1000
RETRIED_STATUSES = frozenset({502, 503, 504})
MAX_BACKOFF_S = 5.0

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)


def _sdk_version() -> str:
    # From the installed distribution, not `timer_service.__version__`: an editable install
    # can leave `timer_service` a namespace package (no __init__), and the import then failed.
    try:
        return version("timer-service")
    except PackageNotFoundError:
        return "0+unknown"


USER_AGENT = f"timer-service-sdk/{_sdk_version()}"


# --- Models: the contract's resources, field for field ----------------------------------------


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


# --- Errors ----------------------------------------------------------------------------------


class TimerApiError(Exception):
    """The timer service answered with an error."""

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        self.status = status
        self.problem = problem
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


class ConflictError(ClientError):
    """The resource is in a state that does not allow this (409)."""


class PayloadTooLargeError(ClientError):
    """The body or payload is too large (413)."""


class ValidationFailed(ClientError):
    """A well-formed request broke a rule (422); see `problem["errors"]`."""


class ServerError(TimerApiError):
    """The service failed (5xx)."""


_ERROR_BY_STATUS: dict[int, type[TimerApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    404: NotFoundError,
    409: ConflictError,
    413: PayloadTooLargeError,
    422: ValidationFailed,
}


def error_for(status: int, problem: dict[str, Any]) -> TimerApiError:
    default = ServerError if status >= 500 else ClientError
    return _ERROR_BY_STATUS.get(status, default)(status, problem)


def _problem_of(response: httpx.Response) -> dict[str, Any]:
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


def _checked(response: httpx.Response) -> httpx.Response:
    if response.is_error:
        raise error_for(response.status_code, _problem_of(response))
    return response


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, ServerError):
        return exc.status in RETRIED_STATUSES
    return isinstance(exc, httpx.TransportError) and not isinstance(exc, httpx.UnsupportedProtocol)


# --- Values --------------------------------------------------------------------------------


def new_job_id() -> str:
    return uuid.uuid4().hex


def to_epoch_ms(when: int | str | datetime) -> int | str:
    """Epoch ms and RFC 3339 strings pass through; an aware datetime becomes epoch ms."""
    if not isinstance(when, datetime):
        return when
    if when.tzinfo is None or when.utcoffset() is None:
        raise ValueError(f"naive datetime {when.isoformat()}: give it a timezone")
    return round(when.timestamp() * 1000)


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, datetime):
        return to_epoch_ms(value)
    return value


def _create_body(
    biz_type: str,
    due_at: int | str | datetime | None,
    delay_ms: int | None,
    payload: Any,
    job_id: str | None,
) -> dict[str, Any]:
    body: dict[str, Any] = {"biz_type": biz_type, "job_id": job_id or new_job_id()}
    if due_at is not None:
        body["due_at"] = to_epoch_ms(due_at)
    if delay_ms is not None:
        body["delay_ms"] = delay_ms
    if payload is not None:
        body["payload"] = payload
    return body


def _batch_item(item: Mapping[str, Any] | Any) -> dict[str, Any]:
    if isinstance(item, Mapping):
        body = {key: _plain(value) for key, value in item.items()}
        body["job_id"] = body.get("job_id") or new_job_id()
        return body
    return _create_body(
        item.biz_type,
        getattr(item, "due_at", None),
        getattr(item, "delay_ms", None),
        getattr(item, "payload", None),
        getattr(item, "job_id", None),
    )


def _chunks(items: Iterable[T], size: int) -> Iterator[list[T]]:
    it = iter(items)
    while chunk := list(islice(it, size)):
        yield chunk


def _exactly_one_time(due_at: object, delay_ms: object) -> None:
    if (due_at is None) == (delay_ms is None):
        raise ValueError("give exactly one of due_at and delay_ms")


# --- Requests: what each endpoint sends and how its answer reads ----------------------------


@dataclass(frozen=True, slots=True)
class _Call(Generic[T]):
    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    body: Any = None
    params: dict[str, str | int] | None = None
    retry: bool = True
    # A DELETE whose first try succeeded unseen answers 404 on the retry: that is success.
    gone_is_done: bool = False


def _path(*segments: str) -> str:
    return "/v1/" + "/".join(quote(segment, safe=":") for segment in segments)


def _one(model: type[M]) -> Callable[[httpx.Response], M]:
    return lambda response: model.model_validate(response.json())


def _items(model: type[M]) -> Callable[[httpx.Response], list[M]]:
    return lambda response: [model.model_validate(x) for x in response.json()["items"]]


def _batch_results(response: httpx.Response) -> list[BatchItemResult]:
    return [BatchItemResult.model_validate(r) for r in response.json()["results"]]


def _nothing(response: httpx.Response) -> None:
    return None


def _params(**values: str | int | None) -> dict[str, str | int]:
    return {key: value for key, value in values.items() if value is not None}


class _Calls:
    """The endpoints of docs/api.md as request descriptions, shared by both clients."""

    @staticmethod
    def put_biz_type(biz_type: str, config: Mapping[str, Any]) -> _Call[BizTypeConfig]:
        body = {key: _plain(value) for key, value in config.items()}
        return _Call("PUT", _path("biz-types", biz_type), _one(BizTypeConfig), body)

    @staticmethod
    def get_biz_type(biz_type: str) -> _Call[BizTypeConfig]:
        return _Call("GET", _path("biz-types", biz_type), _one(BizTypeConfig))

    @staticmethod
    def list_biz_types() -> _Call[list[BizTypeConfig]]:
        return _Call("GET", _path("biz-types"), _items(BizTypeConfig))

    @staticmethod
    def delete_biz_type(biz_type: str) -> _Call[None]:
        return _Call("DELETE", _path("biz-types", biz_type), _nothing, gone_is_done=True)

    @staticmethod
    def create_job(body: dict[str, Any]) -> _Call[Job]:
        return _Call("POST", _path("jobs"), _one(Job), body)

    @staticmethod
    def create_batch(bodies: list[dict[str, Any]]) -> _Call[list[BatchItemResult]]:
        return _Call("POST", _path("jobs:batch"), _batch_results, {"jobs": bodies})

    @staticmethod
    def get_job(biz_type: str, job_id: str) -> _Call[Job]:
        return _Call("GET", _path("jobs", biz_type, job_id), _one(Job))

    @staticmethod
    def cancel_job(biz_type: str, job_id: str) -> _Call[Job]:
        return _Call("DELETE", _path("jobs", biz_type, job_id), _one(Job))

    @staticmethod
    def reschedule_job(
        biz_type: str,
        job_id: str,
        due_at: int | str | datetime | None,
        delay_ms: int | None,
        payload: Any,
    ) -> _Call[Job]:
        _exactly_one_time(due_at, delay_ms)
        body: dict[str, Any] = {"due_at": to_epoch_ms(due_at)} if due_at is not None else {}
        if delay_ms is not None:
            body["delay_ms"] = delay_ms
        if payload is not UNCHANGED:
            body["payload"] = payload
        return _Call("PATCH", _path("jobs", biz_type, job_id), _one(Job), body, retry=False)

    @staticmethod
    def replay_job(biz_type: str, job_id: str) -> _Call[Job]:
        return _Call("POST", _path("jobs", biz_type, job_id, "replay"), _one(Job), retry=False)

    @staticmethod
    def list_jobs(
        biz_type: str | None, state: str | None, page_size: int, cursor: str | None
    ) -> _Call[JobPage]:
        params = _params(biz_type=biz_type, state=state, limit=page_size, cursor=cursor)
        return _Call("GET", _path("jobs"), _one(JobPage), params=params)

    @staticmethod
    def put_schedule(biz_type: str, schedule_id: str, spec: Mapping[str, Any]) -> _Call[Schedule]:
        body = {key: _plain(value) for key, value in spec.items()}
        return _Call("PUT", _path("schedules", biz_type, schedule_id), _one(Schedule), body)

    @staticmethod
    def get_schedule(biz_type: str, schedule_id: str) -> _Call[Schedule]:
        return _Call("GET", _path("schedules", biz_type, schedule_id), _one(Schedule))

    @staticmethod
    def delete_schedule(biz_type: str, schedule_id: str) -> _Call[None]:
        path = _path("schedules", biz_type, schedule_id)
        return _Call("DELETE", path, _nothing, gone_is_done=True)

    @staticmethod
    def list_schedules(biz_type: str | None) -> _Call[list[Schedule]]:
        params = _params(biz_type=biz_type)
        return _Call("GET", _path("schedules"), _items(Schedule), params=params)


def _outcome(call: _Call[T], response: httpx.Response, attempt_number: int) -> T:
    if call.gone_is_done and attempt_number > 1 and response.status_code == 404:
        return call.parse(response)
    return call.parse(_checked(response))


def _headers(token: str | None) -> dict[str, str]:
    headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return headers


def _retry_options(call: _Call[Any], max_attempts: int, backoff_s: float) -> dict[str, Any]:
    return {
        "retry": retry_if_exception(_transient),
        "stop": stop_after_attempt(max_attempts if call.retry else 1),
        "wait": wait_random_exponential(multiplier=backoff_s, max=MAX_BACKOFF_S),
        "before_sleep": before_sleep_log(log, logging.WARNING),
        "reraise": True,
    }


# --- Clients ---------------------------------------------------------------------------------


class TimerClient:
    """Blocking client. `with TimerClient(url, token) as timers: timers.create_job(...)`."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        timeout_s: float = 10,
        *,
        transport: httpx.BaseTransport | None = None,
        max_attempts: int = 4,
        backoff_s: float = 0.2,
    ) -> None:
        self._http = httpx.Client(
            base_url=base_url, headers=_headers(token), timeout=timeout_s, transport=transport
        )
        self._max_attempts = max_attempts
        self._backoff_s = backoff_s

    def __enter__(self) -> TimerClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _run(self, call: _Call[T]) -> T:
        for attempt in Retrying(**_retry_options(call, self._max_attempts, self._backoff_s)):
            with attempt:
                response = self._http.request(
                    call.method, call.path, json=call.body, params=call.params
                )
                return _outcome(call, response, attempt.retry_state.attempt_number)
        raise AssertionError("tenacity re-raises the last error")  # pragma: no cover

    # Business types

    def put_biz_type(self, biz_type: str, **config: Any) -> BizTypeConfig:
        return self._run(_Calls.put_biz_type(biz_type, config))

    def get_biz_type(self, biz_type: str) -> BizTypeConfig:
        return self._run(_Calls.get_biz_type(biz_type))

    def list_biz_types(self) -> list[BizTypeConfig]:
        return self._run(_Calls.list_biz_types())

    def delete_biz_type(self, biz_type: str) -> None:
        self._run(_Calls.delete_biz_type(biz_type))

    # Jobs

    def create_job(
        self,
        biz_type: str,
        *,
        due_at: int | str | datetime | None = None,
        delay_ms: int | None = None,
        payload: Any = None,
        job_id: str | None = None,
    ) -> Job:
        _exactly_one_time(due_at, delay_ms)
        body = _create_body(biz_type, due_at, delay_ms, payload, job_id)
        return self._run(_Calls.create_job(body))

    def create_jobs(self, jobs: Iterable[Mapping[str, Any] | Any]) -> Iterator[BatchItemResult]:
        """Lazily: each chunk of 1000 is sent when iteration reaches it."""
        for chunk in _chunks(map(_batch_item, jobs), BATCH_SIZE):
            yield from self._run(_Calls.create_batch(chunk))

    def get_job(self, biz_type: str, job_id: str) -> Job:
        return self._run(_Calls.get_job(biz_type, job_id))

    def cancel_job(self, biz_type: str, job_id: str) -> Job:
        return self._run(_Calls.cancel_job(biz_type, job_id))

    def reschedule_job(
        self,
        biz_type: str,
        job_id: str,
        *,
        due_at: int | str | datetime | None = None,
        delay_ms: int | None = None,
        payload: Any = UNCHANGED,
    ) -> Job:
        return self._run(_Calls.reschedule_job(biz_type, job_id, due_at, delay_ms, payload))

    def replay_job(self, biz_type: str, job_id: str) -> Job:
        return self._run(_Calls.replay_job(biz_type, job_id))

    def list_jobs(
        self, biz_type: str | None = None, state: str | None = None, page_size: int = 100
    ) -> Iterator[Job]:
        cursor: str | None = None
        while True:
            page = self._run(_Calls.list_jobs(biz_type, state, page_size, cursor))
            yield from page.items
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    # Schedules

    def put_schedule(self, biz_type: str, schedule_id: str, **spec: Any) -> Schedule:
        return self._run(_Calls.put_schedule(biz_type, schedule_id, spec))

    def get_schedule(self, biz_type: str, schedule_id: str) -> Schedule:
        return self._run(_Calls.get_schedule(biz_type, schedule_id))

    def delete_schedule(self, biz_type: str, schedule_id: str) -> None:
        self._run(_Calls.delete_schedule(biz_type, schedule_id))

    def list_schedules(self, biz_type: str | None = None) -> list[Schedule]:
        return self._run(_Calls.list_schedules(biz_type))


class AsyncTimerClient:
    """`async with AsyncTimerClient(url, token) as timers: await timers.create_job(...)`."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        timeout_s: float = 10,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        max_attempts: int = 4,
        backoff_s: float = 0.2,
    ) -> None:
        self._http = httpx.AsyncClient(
            base_url=base_url, headers=_headers(token), timeout=timeout_s, transport=transport
        )
        self._max_attempts = max_attempts
        self._backoff_s = backoff_s

    async def __aenter__(self) -> AsyncTimerClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    async def _run(self, call: _Call[T]) -> T:
        options = _retry_options(call, self._max_attempts, self._backoff_s)
        async for attempt in AsyncRetrying(**options):
            with attempt:
                response = await self._http.request(
                    call.method, call.path, json=call.body, params=call.params
                )
                return _outcome(call, response, attempt.retry_state.attempt_number)
        raise AssertionError("tenacity re-raises the last error")  # pragma: no cover

    # Business types

    async def put_biz_type(self, biz_type: str, **config: Any) -> BizTypeConfig:
        return await self._run(_Calls.put_biz_type(biz_type, config))

    async def get_biz_type(self, biz_type: str) -> BizTypeConfig:
        return await self._run(_Calls.get_biz_type(biz_type))

    async def list_biz_types(self) -> list[BizTypeConfig]:
        return await self._run(_Calls.list_biz_types())

    async def delete_biz_type(self, biz_type: str) -> None:
        await self._run(_Calls.delete_biz_type(biz_type))

    # Jobs

    async def create_job(
        self,
        biz_type: str,
        *,
        due_at: int | str | datetime | None = None,
        delay_ms: int | None = None,
        payload: Any = None,
        job_id: str | None = None,
    ) -> Job:
        _exactly_one_time(due_at, delay_ms)
        body = _create_body(biz_type, due_at, delay_ms, payload, job_id)
        return await self._run(_Calls.create_job(body))

    async def create_jobs(
        self, jobs: Iterable[Mapping[str, Any] | Any]
    ) -> AsyncIterator[BatchItemResult]:
        """Lazily: each chunk of 1000 is sent when iteration reaches it."""
        for chunk in _chunks(map(_batch_item, jobs), BATCH_SIZE):
            for result in await self._run(_Calls.create_batch(chunk)):
                yield result

    async def get_job(self, biz_type: str, job_id: str) -> Job:
        return await self._run(_Calls.get_job(biz_type, job_id))

    async def cancel_job(self, biz_type: str, job_id: str) -> Job:
        return await self._run(_Calls.cancel_job(biz_type, job_id))

    async def reschedule_job(
        self,
        biz_type: str,
        job_id: str,
        *,
        due_at: int | str | datetime | None = None,
        delay_ms: int | None = None,
        payload: Any = UNCHANGED,
    ) -> Job:
        return await self._run(_Calls.reschedule_job(biz_type, job_id, due_at, delay_ms, payload))

    async def replay_job(self, biz_type: str, job_id: str) -> Job:
        return await self._run(_Calls.replay_job(biz_type, job_id))

    async def list_jobs(
        self, biz_type: str | None = None, state: str | None = None, page_size: int = 100
    ) -> AsyncIterator[Job]:
        cursor: str | None = None
        while True:
            page = await self._run(_Calls.list_jobs(biz_type, state, page_size, cursor))
            for job in page.items:
                yield job
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    # Schedules

    async def put_schedule(self, biz_type: str, schedule_id: str, **spec: Any) -> Schedule:
        return await self._run(_Calls.put_schedule(biz_type, schedule_id, spec))

    async def get_schedule(self, biz_type: str, schedule_id: str) -> Schedule:
        return await self._run(_Calls.get_schedule(biz_type, schedule_id))

    async def delete_schedule(self, biz_type: str, schedule_id: str) -> None:
        await self._run(_Calls.delete_schedule(biz_type, schedule_id))

    async def list_schedules(self, biz_type: str | None = None) -> list[Schedule]:
        return await self._run(_Calls.list_schedules(biz_type))
