"""The endpoints of docs/api.md as request descriptions, shared by both clients.

A `Call` says what one endpoint sends, whether a repeat of it is safe, and how its answer
reads; the clients only send it (and repeat it when it is safe).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from itertools import islice
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel

from timer_service.client.bodies import (
    batch_item,
    create_body,
    exactly_one_time,
    plain_fields,
    reschedule_body,
)
from timer_service.client.errors import checked
from timer_service.client.models import BatchItemResult, BizTypeConfig, Job, JobPage, Schedule

BATCH_SIZE = 1000
# A batch request may take longer than a single call: the store writes every item. Its
# timeout is the client's plus this much per item (1000 items: 10 s more).
BATCH_TIMEOUT_S_PER_ITEM = 0.01

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    body: Any = None
    params: dict[str, str | int] | None = None
    retry: bool = True
    # A DELETE whose first try succeeded unseen answers 404 on the retry: that is success.
    gone_is_done: bool = False
    # Added to the client's timeout for this call (a batch: per item).
    extra_timeout_s: float = 0.0

    def outcome(self, response: httpx.Response, attempt_number: int) -> T:
        """The answer of try `attempt_number` (from 1), or the error it carries, raised."""
        if self.gone_is_done and attempt_number > 1 and response.status_code == 404:
            return self.parse(response)
        return self.parse(checked(response))


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


def _chunks(items: Iterable[T], size: int) -> Iterator[list[T]]:
    it = iter(items)
    while chunk := list(islice(it, size)):
        yield chunk


class Calls:
    """One call per endpoint; the clients' methods of the same names send them."""

    @staticmethod
    def put_biz_type(biz_type: str, config: Mapping[str, Any]) -> Call[BizTypeConfig]:
        body = plain_fields(config)
        return Call("PUT", _path("biz-types", biz_type), _one(BizTypeConfig), body)

    @staticmethod
    def get_biz_type(biz_type: str) -> Call[BizTypeConfig]:
        return Call("GET", _path("biz-types", biz_type), _one(BizTypeConfig))

    @staticmethod
    def list_biz_types() -> Call[list[BizTypeConfig]]:
        return Call("GET", _path("biz-types"), _items(BizTypeConfig))

    @staticmethod
    def delete_biz_type(biz_type: str) -> Call[None]:
        return Call("DELETE", _path("biz-types", biz_type), _nothing, gone_is_done=True)

    @staticmethod
    def create_job(
        biz_type: str,
        due_at: int | str | datetime | None,
        delay_ms: int | None,
        payload: Any,
        job_id: str | None,
    ) -> Call[Job]:
        exactly_one_time(due_at, delay_ms)
        body = create_body(biz_type, due_at, delay_ms, payload, job_id)
        return Call("POST", _path("jobs"), _one(Job), body)

    @staticmethod
    def create_batches(
        jobs: Iterable[Mapping[str, Any] | Any], chunk_size: int = BATCH_SIZE
    ) -> Iterator[Call[list[BatchItemResult]]]:
        """Lazily: each chunk of `chunk_size` is read from `jobs` when iteration reaches it,
        every item given its `job_id` then (so a resent chunk creates nothing twice)."""
        if not 1 <= chunk_size <= BATCH_SIZE:
            raise ValueError(f"chunk_size must be 1 to {BATCH_SIZE}, not {chunk_size}")
        for chunk in _chunks(map(batch_item, jobs), chunk_size):
            extra_s = BATCH_TIMEOUT_S_PER_ITEM * len(chunk)
            body = {"jobs": chunk}
            yield Call("POST", _path("jobs:batch"), _batch_results, body, extra_timeout_s=extra_s)

    @staticmethod
    def get_job(biz_type: str, job_id: str) -> Call[Job]:
        return Call("GET", _path("jobs", biz_type, job_id), _one(Job))

    @staticmethod
    def cancel_job(biz_type: str, job_id: str) -> Call[Job]:
        return Call("DELETE", _path("jobs", biz_type, job_id), _one(Job))

    @staticmethod
    def reschedule_job(
        biz_type: str,
        job_id: str,
        due_at: int | str | datetime | None,
        delay_ms: int | None,
        payload: Any,
    ) -> Call[Job]:
        body = reschedule_body(due_at, delay_ms, payload)
        return Call("PATCH", _path("jobs", biz_type, job_id), _one(Job), body, retry=False)

    @staticmethod
    def replay_job(biz_type: str, job_id: str) -> Call[Job]:
        return Call("POST", _path("jobs", biz_type, job_id, "replay"), _one(Job), retry=False)

    @staticmethod
    def list_jobs(
        biz_type: str | None, state: str | None, page_size: int, cursor: str | None
    ) -> Call[JobPage]:
        params = _params(biz_type=biz_type, state=state, limit=page_size, cursor=cursor)
        return Call("GET", _path("jobs"), _one(JobPage), params=params)

    @staticmethod
    def put_schedule(biz_type: str, schedule_id: str, spec: Mapping[str, Any]) -> Call[Schedule]:
        body = plain_fields(spec)
        return Call("PUT", _path("schedules", biz_type, schedule_id), _one(Schedule), body)

    @staticmethod
    def get_schedule(biz_type: str, schedule_id: str) -> Call[Schedule]:
        return Call("GET", _path("schedules", biz_type, schedule_id), _one(Schedule))

    @staticmethod
    def delete_schedule(biz_type: str, schedule_id: str) -> Call[None]:
        path = _path("schedules", biz_type, schedule_id)
        return Call("DELETE", path, _nothing, gone_is_done=True)

    @staticmethod
    def list_schedules(biz_type: str | None) -> Call[list[Schedule]]:
        params = _params(biz_type=biz_type)
        return Call("GET", _path("schedules"), _items(Schedule), params=params)
