"""`AsyncTimerClient`: `TimerClient`'s methods as coroutines and async iterators."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from datetime import datetime
from typing import Any, TypeVar

import httpx
from tenacity import AsyncRetrying

from timer_service.client.errors import BatchInterrupted
from timer_service.client.models import UNCHANGED, BatchItemResult, BizTypeConfig, Job, Schedule
from timer_service.client.requests import BATCH_SIZE, Call, Calls
from timer_service.client.session import headers, retry_options, timeout_for

T = TypeVar("T")


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
            base_url=base_url, headers=headers(token), timeout=timeout_s, transport=transport
        )
        self._timeout_s = timeout_s
        self._max_attempts = max_attempts
        self._backoff_s = backoff_s

    async def __aenter__(self) -> AsyncTimerClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    async def _run(self, call: Call[T]) -> T:
        options = retry_options(call, self._max_attempts, self._backoff_s)
        async for attempt in AsyncRetrying(**options):
            with attempt:
                response = await self._http.request(
                    call.method,
                    call.path,
                    json=call.body,
                    params=call.params,
                    timeout=timeout_for(call, self._timeout_s),
                )
                return call.outcome(response, attempt.retry_state.attempt_number)
        raise AssertionError("tenacity re-raises the last error")  # pragma: no cover

    # Business types

    async def put_biz_type(self, biz_type: str, **config: Any) -> BizTypeConfig:
        return await self._run(Calls.put_biz_type(biz_type, config))

    async def get_biz_type(self, biz_type: str) -> BizTypeConfig:
        return await self._run(Calls.get_biz_type(biz_type))

    async def list_biz_types(self) -> list[BizTypeConfig]:
        return await self._run(Calls.list_biz_types())

    async def delete_biz_type(self, biz_type: str) -> None:
        await self._run(Calls.delete_biz_type(biz_type))

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
        return await self._run(Calls.create_job(biz_type, due_at, delay_ms, payload, job_id))

    async def create_jobs(
        self, jobs: Iterable[Mapping[str, Any] | Any], *, chunk_size: int = BATCH_SIZE
    ) -> AsyncIterator[BatchItemResult]:
        """`TimerClient.create_jobs`, as an async iterator."""
        done: list[BatchItemResult] = []
        for call in Calls.create_batches(jobs, chunk_size):
            try:
                results = await self._run(call)
            except Exception as exc:
                raise BatchInterrupted(done, call.body["jobs"], exc) from exc
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
        due_at: int | str | datetime | None = None,
        delay_ms: int | None = None,
        payload: Any = UNCHANGED,
    ) -> Job:
        return await self._run(Calls.reschedule_job(biz_type, job_id, due_at, delay_ms, payload))

    async def replay_job(self, biz_type: str, job_id: str) -> Job:
        return await self._run(Calls.replay_job(biz_type, job_id))

    async def list_jobs(
        self, biz_type: str | None = None, state: str | None = None, page_size: int = 100
    ) -> AsyncIterator[Job]:
        cursor: str | None = None
        while True:
            page = await self._run(Calls.list_jobs(biz_type, state, page_size, cursor))
            for job in page.items:
                yield job
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    # Schedules

    async def put_schedule(self, biz_type: str, schedule_id: str, **spec: Any) -> Schedule:
        return await self._run(Calls.put_schedule(biz_type, schedule_id, spec))

    async def get_schedule(self, biz_type: str, schedule_id: str) -> Schedule:
        return await self._run(Calls.get_schedule(biz_type, schedule_id))

    async def delete_schedule(self, biz_type: str, schedule_id: str) -> None:
        await self._run(Calls.delete_schedule(biz_type, schedule_id))

    async def list_schedules(self, biz_type: str | None = None) -> list[Schedule]:
        return await self._run(Calls.list_schedules(biz_type))
