"""`AsyncTimerClient`: `TimerClient`'s methods as coroutines and async iterators, with the
same names and parameters, built by the same `Calls` (client/requests.py)."""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from datetime import datetime
from typing import TypeVar, Unpack

import httpx

from timer_service.client.bodies import given
from timer_service.client.errors import BatchInterrupted
from timer_service.client.fields import (
    BIZ_TYPE,
    BIZ_TYPE_PATCH,
    SCHEDULE,
    BizTypeFields,
    BizTypePatch,
    ScheduleFields,
    named,
)
from timer_service.client.models import (
    UNCHANGED,
    BatchItemResult,
    BizTypeConfig,
    Job,
    JobPage,
    JobSpec,
    JobState,
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
    CreatedToken,
    Role,
    Stats,
    Token,
)
from timer_service.client.requests import BATCH_SIZE, Call, Calls, JobFilter
from timer_service.client.retrying import DEFAULT_RETRY_DEADLINE_S, RetrySettings
from timer_service.client.session import (
    MAX_CONNECTIONS,
    headers,
    retrier_for,
    timeout_for,
)

T = TypeVar("T")


class AsyncTimerClient:
    """`async with AsyncTimerClient(url, token) as timers: await timers.create_job(...)`.

    `retry_deadline_s` bounds the time a call spends retrying, and `max_attempts` its
    tries that fail without a `Retry-After` (client/retrying.py says what is retried);
    `with_options(retry_deadline_s=...)` changes them for some calls. `sleep` and
    `clock` (monotonic seconds) are for tests.
    """

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        timeout_s: float = 10,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        retry_deadline_s: float = DEFAULT_RETRY_DEADLINE_S,
        max_attempts: int | None = 4,
        backoff_s: float = 0.2,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self._http = httpx.AsyncClient(
            base_url=base_url,
            headers=headers(token),
            timeout=timeout_s,
            transport=transport,
            limits=httpx.Limits(max_connections=max_connections),
        )
        self._owns_http = True
        # Calls past this many wait here, in order and at no cost, rather than in httpx's
        # pool, whose queue costs O(waiters) at every release (a burst of 2,000 creates
        # spent ~10 ms of CPU per try there). Shared by `with_options` views.
        self._slots = asyncio.Semaphore(max_connections)
        self._timeout_s = timeout_s
        self._retry = RetrySettings(retry_deadline_s, max_attempts, backoff_s)
        self._sleep = sleep
        self._clock = clock

    async def __aenter__(self) -> AsyncTimerClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    def with_options(
        self, *, retry_deadline_s: float | None = None, max_attempts: int | None = None
    ) -> AsyncTimerClient:
        """This client with other retry bounds, sharing its connections (closing it
        closes nothing): `await timers.with_options(retry_deadline_s=5).get_job(...)`."""
        view = copy.copy(self)
        view._owns_http = False
        view._retry = RetrySettings(
            self._retry.deadline_s if retry_deadline_s is None else retry_deadline_s,
            self._retry.max_attempts if max_attempts is None else max_attempts,
            self._retry.backoff_s,
        )
        return view

    async def _run(self, call: Call[T]) -> T:
        retrier = retrier_for(call, self._retry, self._clock)
        attempt = 0
        while True:
            attempt += 1
            try:
                async with self._slots:
                    response = await self._http.request(
                        call.method,
                        call.path,
                        json=call.body,
                        params=call.params,
                        timeout=timeout_for(call, self._timeout_s, self._retry),
                    )
                return call.outcome(response, attempt)
            except Exception as exc:
                wait_s = retrier.wait_s(attempt, exc)
                if wait_s is None:
                    raise
            await self._sleep(wait_s)

    # Business types

    async def put_biz_type(self, biz_type: str, **config: Unpack[BizTypeFields]) -> BizTypeConfig:
        """Create or replace: an absent field takes its default (use `patch_biz_type` to
        change some fields and keep the rest, the signing secret included)."""
        return await self._run(Calls.put_biz_type(biz_type, named(config, BIZ_TYPE)))

    async def patch_biz_type(self, biz_type: str, **patch: Unpack[BizTypePatch]) -> BizTypeConfig:
        return await self._run(Calls.patch_biz_type(biz_type, named(patch, BIZ_TYPE_PATCH)))

    async def pause_biz_type(self, biz_type: str) -> BizTypeConfig:
        return await self.patch_biz_type(biz_type, paused=True)

    async def resume_biz_type(self, biz_type: str) -> BizTypeConfig:
        return await self.patch_biz_type(biz_type, paused=False)

    async def get_biz_type(self, biz_type: str) -> BizTypeConfig:
        return await self._run(Calls.get_biz_type(biz_type))

    async def list_biz_types(self) -> list[BizTypeConfig]:
        return await self._run(Calls.list_biz_types())

    async def delete_biz_type(self, biz_type: str) -> None:
        await self._run(Calls.delete_biz_type(biz_type))

    async def rotate_signing_secret(
        self,
        biz_type: str,
        *,
        signing_secret: str | None = None,
        keep_previous_for_s: int | None = None,
    ) -> SecretRotated:
        """A new secret (generated when not given), shown once in the answer; callbacks are
        also signed with the old one for `keep_previous_for_s` (server default if None)."""
        body = given(signing_secret=signing_secret, keep_previous_for_s=keep_previous_for_s)
        return await self._run(Calls.rotate_signing_secret(biz_type, body))

    async def biz_type_stats(self, biz_type: str) -> BizStats:
        return await self._run(Calls.biz_type_stats(biz_type))

    # Jobs

    async def create_job(
        self,
        biz_type: str,
        *,
        due_at: When | None = None,
        delay_ms: int | None = None,
        payload: object = None,
        job_id: str | None = None,
        labels: Mapping[str, str] | None = None,
        window_ms: int | None = None,
    ) -> Job:
        """Exactly one of `due_at` and `delay_ms`. Without `job_id` one is generated here,
        so a retried create is answered 200 with the same job, never a second one."""
        spec = JobSpec(biz_type, due_at, delay_ms, payload, job_id, labels, window_ms)
        return await self._run(Calls.create_job(spec))

    async def create_jobs(
        self, jobs: Iterable[JobSpec | Mapping[str, object]], *, chunk_size: int = BATCH_SIZE
    ) -> AsyncIterator[BatchItemResult]:
        """Lazily: each chunk is sent when iteration reaches it, and its items' results
        yielded as soon as it is answered. A chunk that fails after the retries raises
        `BatchInterrupted`, which holds its items (job ids fixed: safe to resend)."""
        done: list[BatchItemResult] = []
        for chunk, call in Calls.create_batches(jobs, chunk_size):
            try:
                results = await self._run(call)
            except Exception as exc:
                raise BatchInterrupted(done, chunk, exc) from exc
            done.extend(results)
            for result in results:
                yield result

    async def get_job(self, biz_type: str, job_id: str) -> Job:
        return await self._run(Calls.get_job(biz_type, job_id))

    async def cancel_job(self, biz_type: str, job_id: str) -> Job:
        return await self._run(Calls.cancel_job(biz_type, job_id))

    async def reschedule_job(
        self,
        biz_type: str,
        job_id: str,
        *,
        due_at: When | None = None,
        delay_ms: int | None = None,
        payload: object | Unchanged = UNCHANGED,
    ) -> Job:
        return await self._run(Calls.reschedule_job(biz_type, job_id, due_at, delay_ms, payload))

    async def replay_job(self, biz_type: str, job_id: str) -> Job:
        return await self._run(Calls.replay_job(biz_type, job_id))

    async def list_jobs(
        self,
        biz_type: str | None = None,
        state: JobState | None = None,
        page_size: int = 100,
        *,
        labels: Mapping[str, str] | None = None,
        job_id_prefix: str | None = None,
        due_after: int | datetime | None = None,
        due_before: int | datetime | None = None,
    ) -> AsyncIterator[Job]:
        """Every job the filters select, page after page (`due_after` inclusive,
        `due_before` exclusive; every label must match)."""
        where = JobFilter(biz_type, state, labels, job_id_prefix, due_after, due_before)
        cursor: str | None = None
        while True:
            page = await self._run(Calls.list_jobs(where, page_size, cursor))
            for item in page.items:
                yield item
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    async def list_jobs_page(
        self,
        biz_type: str | None = None,
        state: JobState | None = None,
        page_size: int = 100,
        *,
        labels: Mapping[str, str] | None = None,
        job_id_prefix: str | None = None,
        due_after: int | datetime | None = None,
        due_before: int | datetime | None = None,
        cursor: str | None = None,
    ) -> JobPage:
        """One page; pass its `next_cursor` back (with the same filters) for the next."""
        where = JobFilter(biz_type, state, labels, job_id_prefix, due_after, due_before)
        return await self._run(Calls.list_jobs(where, page_size, cursor))

    async def bulk_cancel(
        self,
        biz_type: str,
        *,
        state: JobState | None = None,
        labels: Mapping[str, str] | None = None,
        job_id_prefix: str | None = None,
        due_after: int | datetime | None = None,
        due_before: int | datetime | None = None,
        dry_run: bool = False,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> BulkResult:
        """Cancel the pending and dispatched jobs the filter selects, `limit` per call:
        repeat with `next_cursor` until it is None. `dry_run` only counts them."""
        where = JobFilter(biz_type, state, labels, job_id_prefix, due_after, due_before)
        return await self._run(Calls.bulk("cancel", where, dry_run, limit, cursor))

    async def bulk_replay(
        self,
        biz_type: str,
        *,
        state: JobState | None = None,
        labels: Mapping[str, str] | None = None,
        job_id_prefix: str | None = None,
        due_after: int | datetime | None = None,
        due_before: int | datetime | None = None,
        dry_run: bool = False,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> BulkResult:
        """Replay the dead jobs the filter selects; paged as `bulk_cancel`."""
        where = JobFilter(biz_type, state, labels, job_id_prefix, due_after, due_before)
        return await self._run(Calls.bulk("replay", where, dry_run, limit, cursor))

    # Schedules

    async def put_schedule(
        self, biz_type: str, schedule_id: str, **spec: Unpack[ScheduleFields]
    ) -> Schedule:
        body = named(spec, SCHEDULE)
        return await self._run(Calls.put_schedule(biz_type, schedule_id, body))

    async def get_schedule(self, biz_type: str, schedule_id: str) -> Schedule:
        return await self._run(Calls.get_schedule(biz_type, schedule_id))

    async def delete_schedule(self, biz_type: str, schedule_id: str) -> None:
        await self._run(Calls.delete_schedule(biz_type, schedule_id))

    async def run_schedule_now(self, biz_type: str, schedule_id: str) -> Job:
        """One extra occurrence due now; the next one stays as it was."""
        return await self._run(Calls.run_schedule_now(biz_type, schedule_id))

    async def skip_next_occurrence(self, biz_type: str, schedule_id: str) -> Schedule:
        """Cancel the next occurrence (409 once dispatched); the schedule as it is now."""
        return await self._run(Calls.skip_next_occurrence(biz_type, schedule_id))

    async def list_schedules(self, biz_type: str | None = None) -> list[Schedule]:
        return await self._run(Calls.list_schedules(biz_type))

    # Stats, audit, calendar

    async def stats(self) -> Stats:
        return await self._run(Calls.stats())

    async def list_audit(
        self, biz_type: str | None = None, action: str | None = None, page_size: int = 100
    ) -> AsyncIterator[AuditEntry]:
        """The audit log, newest first, page after page."""
        cursor: str | None = None
        while True:
            page = await self._run(Calls.audit_page(biz_type, action, page_size, cursor))
            for item in page.items:
                yield item
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    async def audit_page(
        self,
        biz_type: str | None = None,
        action: str | None = None,
        page_size: int = 100,
        *,
        cursor: str | None = None,
    ) -> AuditPage:
        return await self._run(Calls.audit_page(biz_type, action, page_size, cursor))

    async def calendar(
        self,
        from_ms: int | datetime,
        to_ms: int | datetime,
        step_ms: int,
        biz_type: str | None = None,
    ) -> Calendar:
        """Pending jobs due in each `step_ms` of `[from_ms, to_ms)` (at most 2,000 steps)."""
        return await self._run(Calls.calendar(from_ms, to_ms, step_ms, biz_type))

    # Access tokens

    async def create_token(
        self, name: str, role: Role, biz_types: Iterable[str] = ()
    ) -> CreatedToken:
        """`biz_types`: names or prefixes ending in `*`, required for every role but admin.
        The answer's `token` is shown this once."""
        return await self._run(Calls.create_token(name, role, biz_types))

    async def list_tokens(self) -> list[Token]:
        return await self._run(Calls.list_tokens())

    async def delete_token(self, token_id: str) -> None:
        await self._run(Calls.delete_token(token_id))
