"""The API's jobs: create, read, list, and the operator's changes.

Every change goes through the state machine (`timer_service.jobs`): the adapter
reads the job, asks the machine for the `Change`, and applies it under its guard.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from timer_service.jobs import CreateResult, NewJob
from timer_service.model import Job


class JobsPort(Protocol):
    async def create_jobs(self, jobs: Sequence[NewJob], now_ms: int) -> list[CreateResult]:
        """Create in request order with bulk writes; a repeated identity later in the
        list is compared with the earlier one. Concurrent creates of one identity
        leave exactly one job."""
        ...

    async def get_job(self, biz_type: str, job_id: str) -> Job | None: ...

    async def cancel_job(self, biz_type: str, job_id: str, now_ms: int) -> Job:
        """`jobs.cancel`. NotFound; Conflict if final."""
        ...

    async def reschedule_job(
        self, biz_type: str, job_id: str, due_at: int, payload_json: str | None, now_ms: int
    ) -> Job:
        """`jobs.reschedule`. NotFound; Conflict unless pending."""
        ...

    async def replay_job(self, biz_type: str, job_id: str, now_ms: int) -> Job:
        """`jobs.replay`. NotFound; Conflict unless dead, or still where a replay put it
        (`jobs.replayed`: then the job as it is, unchanged: a retried replay)."""
        ...

    async def withdraw_jobs(self, jobs: Sequence[Job], now_ms: int) -> None:
        """`jobs.withdraw` of each (jobs a create wrote and then found its biz type
        deleted); one that is gone or final already is left alone."""
        ...
