"""The endpoints of docs/api.md as request descriptions, shared by both clients.

A `Call` says what one endpoint sends, whether a repeat of it is safe, and how its answer
reads; the clients only send it (and repeat it when it is safe: client/retrying.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from itertools import islice
from typing import Generic, Literal, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel

from timer_service.client.bodies import (
    Body,
    batch_item,
    create_body,
    given,
    reschedule_body,
    to_epoch_ms,
)
from timer_service.client.errors import checked
from timer_service.client.models import (
    BatchItemResult,
    BizTypeConfig,
    Job,
    JobPage,
    JobSpec,
    JobState,
    Schedule,
    SecretRotated,
    When,
)
from timer_service.client.ops_models import (
    AuditPage,
    BizStats,
    BulkResult,
    Calendar,
    CreatedToken,
    Stats,
    Token,
)

BATCH_SIZE = 1000
# A batch request may take longer than a single call: the store writes every item. Its
# timeout is the client's plus this much per item (1000 items: 10 s more).
BATCH_TIMEOUT_S_PER_ITEM = 0.01

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
Params = dict[str, str | int | list[str]]
BulkAction = Literal["cancel", "replay"]


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    body: Body | None = None
    params: Params | None = None
    # A repeat is safe whatever became of the first try (GET, PUT, DELETE, a merge patch,
    # a create with its job_id fixed): transport errors and 502/503/504 are retried.
    idempotent: bool = True
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


def _params(**values: str | int | list[str] | None) -> Params:
    return {key: value for key, value in values.items() if value is not None}


def _epoch_ms(when: int | datetime) -> int:
    return int(to_epoch_ms(when))


def _ms(when: int | datetime | None) -> int | None:
    return None if when is None else _epoch_ms(when)


def _label_terms(labels: Mapping[str, str] | None) -> list[str] | None:
    return [f"{key}:{value}" for key, value in labels.items()] if labels else None


def _chunks(items: Iterable[T], size: int) -> Iterator[list[T]]:
    it = iter(items)
    while chunk := list(islice(it, size)):
        yield chunk


@dataclass(frozen=True, slots=True)
class JobFilter:
    """What `list_jobs` and the bulk actions select: every field given must match."""

    biz_type: str | None = None
    state: JobState | None = None
    labels: Mapping[str, str] | None = None
    job_id_prefix: str | None = None
    due_after: int | datetime | None = None  # inclusive
    due_before: int | datetime | None = None  # exclusive

    def query(self) -> Params:
        return _params(
            biz_type=self.biz_type,
            state=self.state,
            label=_label_terms(self.labels),
            job_id_prefix=self.job_id_prefix,
            due_after=_ms(self.due_after),
            due_before=_ms(self.due_before),
        )

    def body(self) -> Body:
        return given(
            biz_type=self.biz_type,
            state=self.state,
            labels=self.labels,
            job_id_prefix=self.job_id_prefix,
            due_after=_ms(self.due_after),
            due_before=_ms(self.due_before),
        )


class Calls:
    """One call per endpoint; the clients' methods of the same names send them."""

    # Business types

    @staticmethod
    def put_biz_type(biz_type: str, body: Body) -> Call[BizTypeConfig]:
        return Call("PUT", _path("biz-types", biz_type), _one(BizTypeConfig), body)

    @staticmethod
    def patch_biz_type(biz_type: str, patch: Body) -> Call[BizTypeConfig]:
        # A merge patch applied twice gives what it gives once: safe to repeat.
        return Call("PATCH", _path("biz-types", biz_type), _one(BizTypeConfig), patch)

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
    def rotate_signing_secret(biz_type: str, body: Body) -> Call[SecretRotated]:
        # Not repeated: a second rotation would drop the secret receivers still hold.
        path = _path("biz-types", biz_type, "secret:rotate")
        return Call("POST", path, _one(SecretRotated), body, idempotent=False)

    @staticmethod
    def biz_type_stats(biz_type: str) -> Call[BizStats]:
        return Call("GET", _path("biz-types", biz_type, "stats"), _one(BizStats))

    # Jobs

    @staticmethod
    def create_job(spec: JobSpec) -> Call[Job]:
        return Call("POST", _path("jobs"), _one(Job), create_body(spec))

    @staticmethod
    def create_batches(
        jobs: Iterable[JobSpec | Mapping[str, object]], chunk_size: int = BATCH_SIZE
    ) -> Iterator[tuple[list[Body], Call[list[BatchItemResult]]]]:
        """Lazily: each chunk of `chunk_size` is read from `jobs` when iteration reaches it,
        every item given its `job_id` then (so a resent chunk creates nothing twice)."""
        if not 1 <= chunk_size <= BATCH_SIZE:
            raise ValueError(f"chunk_size must be 1 to {BATCH_SIZE}, not {chunk_size}")
        for chunk in _chunks(map(batch_item, jobs), chunk_size):
            extra_s = BATCH_TIMEOUT_S_PER_ITEM * len(chunk)
            body: Body = {"jobs": chunk}
            path = _path("jobs:batch")
            yield chunk, Call("POST", path, _batch_results, body, extra_timeout_s=extra_s)

    @staticmethod
    def get_job(biz_type: str, job_id: str) -> Call[Job]:
        return Call("GET", _path("jobs", biz_type, job_id), _one(Job))

    @staticmethod
    def cancel_job(biz_type: str, job_id: str) -> Call[Job]:
        return Call("DELETE", _path("jobs", biz_type, job_id), _one(Job))

    @staticmethod
    def reschedule_job(
        biz_type: str, job_id: str, due_at: When | None, delay_ms: int | None, payload: object
    ) -> Call[Job]:
        body = reschedule_body(due_at, delay_ms, payload)
        return Call("PATCH", _path("jobs", biz_type, job_id), _one(Job), body, idempotent=False)

    @staticmethod
    def replay_job(biz_type: str, job_id: str) -> Call[Job]:
        path = _path("jobs", biz_type, job_id, "replay")
        return Call("POST", path, _one(Job), idempotent=False)

    @staticmethod
    def list_jobs(where: JobFilter, page_size: int, cursor: str | None) -> Call[JobPage]:
        params = where.query() | _params(limit=page_size, cursor=cursor)
        return Call("GET", _path("jobs"), _one(JobPage), params=params)

    @staticmethod
    def bulk(
        action: BulkAction,
        where: JobFilter,
        dry_run: bool,
        limit: int | None,
        cursor: str | None,
    ) -> Call[BulkResult]:
        if not where.biz_type:
            raise ValueError("a bulk action needs a biz_type")
        body: Body = {"filter": where.body(), "dry_run": dry_run, **given(limit=limit)}
        body.update(given(cursor=cursor))
        # A dry run changes nothing; a real run is not repeated blindly (its count would
        # be lost), but is safe to call again: it only finds what is left to change.
        path = _path(f"jobs:bulk-{action}")
        return Call("POST", path, _one(BulkResult), body, idempotent=dry_run)

    # Schedules

    @staticmethod
    def put_schedule(biz_type: str, schedule_id: str, body: Body) -> Call[Schedule]:
        return Call("PUT", _path("schedules", biz_type, schedule_id), _one(Schedule), body)

    @staticmethod
    def get_schedule(biz_type: str, schedule_id: str) -> Call[Schedule]:
        return Call("GET", _path("schedules", biz_type, schedule_id), _one(Schedule))

    @staticmethod
    def delete_schedule(biz_type: str, schedule_id: str) -> Call[None]:
        path = _path("schedules", biz_type, schedule_id)
        return Call("DELETE", path, _nothing, gone_is_done=True)

    @staticmethod
    def run_schedule_now(biz_type: str, schedule_id: str) -> Call[Job]:
        path = _path("schedules", biz_type, schedule_id, "run-now")
        return Call("POST", path, _one(Job), idempotent=False)  # a retry runs it again

    @staticmethod
    def skip_next_occurrence(biz_type: str, schedule_id: str) -> Call[Schedule]:
        path = _path("schedules", biz_type, schedule_id, "skip-next")
        return Call("POST", path, _one(Schedule), idempotent=False)  # a retry skips another

    @staticmethod
    def list_schedules(biz_type: str | None) -> Call[list[Schedule]]:
        params = _params(biz_type=biz_type)
        return Call("GET", _path("schedules"), _items(Schedule), params=params)

    # Operations: stats, audit, calendar

    @staticmethod
    def stats() -> Call[Stats]:
        return Call("GET", _path("stats"), _one(Stats))

    @staticmethod
    def audit_page(
        biz_type: str | None, action: str | None, page_size: int, cursor: str | None
    ) -> Call[AuditPage]:
        params = _params(biz_type=biz_type, action=action, limit=page_size, cursor=cursor)
        return Call("GET", _path("audit"), _one(AuditPage), params=params)

    @staticmethod
    def calendar(
        from_ms: int | datetime, to_ms: int | datetime, step_ms: int, biz_type: str | None
    ) -> Call[Calendar]:
        span: Params = {"from": _epoch_ms(from_ms), "to": _epoch_ms(to_ms)}
        params = span | _params(step_ms=step_ms, biz_type=biz_type)
        return Call("GET", _path("calendar"), _one(Calendar), params=params)

    # Access tokens

    @staticmethod
    def create_token(name: str, role: str, biz_types: Iterable[str]) -> Call[CreatedToken]:
        # Not repeated: a lost answer would leave a token nobody holds.
        body: Body = {"name": name, "role": role, "biz_types": list(biz_types)}
        return Call("POST", _path("tokens"), _one(CreatedToken), body, idempotent=False)

    @staticmethod
    def list_tokens() -> Call[list[Token]]:
        return Call("GET", _path("tokens"), _items(Token))

    @staticmethod
    def delete_token(token_id: str) -> Call[None]:
        return Call("DELETE", _path("tokens", token_id), _nothing, gone_is_done=True)
