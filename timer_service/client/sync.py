"""`TimerClient`: the blocking client, one method per endpoint (docs/api.md, "Python SDK")."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any, TypeVar

import httpx
from tenacity import Retrying

from timer_service.client.errors import BatchInterrupted
from timer_service.client.models import UNCHANGED, BatchItemResult, BizTypeConfig, Job, Schedule
from timer_service.client.requests import BATCH_SIZE, Call, Calls
from timer_service.client.session import headers, retry_options, timeout_for

T = TypeVar("T")


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
            base_url=base_url, headers=headers(token), timeout=timeout_s, transport=transport
        )
        self._timeout_s = timeout_s
        self._max_attempts = max_attempts
        self._backoff_s = backoff_s

    def __enter__(self) -> TimerClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _run(self, call: Call[T]) -> T:
        for attempt in Retrying(**retry_options(call, self._max_attempts, self._backoff_s)):
            with attempt:
                response = self._http.request(
                    call.method,
                    call.path,
                    json=call.body,
                    params=call.params,
                    timeout=timeout_for(call, self._timeout_s),
                )
                return call.outcome(response, attempt.retry_state.attempt_number)
        raise AssertionError("tenacity re-raises the last error")  # pragma: no cover

    # Business types

    def put_biz_type(self, biz_type: str, **config: Any) -> BizTypeConfig:
        return self._run(Calls.put_biz_type(biz_type, config))

    def get_biz_type(self, biz_type: str) -> BizTypeConfig:
        return self._run(Calls.get_biz_type(biz_type))

    def list_biz_types(self) -> list[BizTypeConfig]:
        return self._run(Calls.list_biz_types())

    def delete_biz_type(self, biz_type: str) -> None:
        self._run(Calls.delete_biz_type(biz_type))

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
        return self._run(Calls.create_job(biz_type, due_at, delay_ms, payload, job_id))

    def create_jobs(
        self, jobs: Iterable[Mapping[str, Any] | Any], *, chunk_size: int = BATCH_SIZE
    ) -> Iterator[BatchItemResult]:
        """Lazily: each chunk is sent when iteration reaches it, and its items' results
        yielded as soon as it is answered. A chunk that fails after the retries raises
        `BatchInterrupted`, which holds its items (job ids fixed: safe to resend)."""
        done: list[BatchItemResult] = []
        for call in Calls.create_batches(jobs, chunk_size):
            try:
                results = self._run(call)
            except Exception as exc:
                raise BatchInterrupted(done, call.body["jobs"], exc) from exc
            done.extend(results)
            yield from results

    def get_job(self, biz_type: str, job_id: str) -> Job:
        return self._run(Calls.get_job(biz_type, job_id))

    def cancel_job(self, biz_type: str, job_id: str) -> Job:
        return self._run(Calls.cancel_job(biz_type, job_id))

    def reschedule_job(
        self,
        biz_type: str,
        job_id: str,
        *,
        due_at: int | str | datetime | None = None,
        delay_ms: int | None = None,
        payload: Any = UNCHANGED,
    ) -> Job:
        return self._run(Calls.reschedule_job(biz_type, job_id, due_at, delay_ms, payload))

    def replay_job(self, biz_type: str, job_id: str) -> Job:
        return self._run(Calls.replay_job(biz_type, job_id))

    def list_jobs(
        self, biz_type: str | None = None, state: str | None = None, page_size: int = 100
    ) -> Iterator[Job]:
        cursor: str | None = None
        while True:
            page = self._run(Calls.list_jobs(biz_type, state, page_size, cursor))
            yield from page.items
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    # Schedules

    def put_schedule(self, biz_type: str, schedule_id: str, **spec: Any) -> Schedule:
        return self._run(Calls.put_schedule(biz_type, schedule_id, spec))

    def get_schedule(self, biz_type: str, schedule_id: str) -> Schedule:
        return self._run(Calls.get_schedule(biz_type, schedule_id))

    def delete_schedule(self, biz_type: str, schedule_id: str) -> None:
        self._run(Calls.delete_schedule(biz_type, schedule_id))

    def list_schedules(self, biz_type: str | None = None) -> list[Schedule]:
        return self._run(Calls.list_schedules(biz_type))
