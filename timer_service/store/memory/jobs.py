"""In-memory jobs for the API: the state machine's changes applied to a dict."""

from __future__ import annotations

from collections.abc import Sequence

from timer_service import jobs as machine
from timer_service.errors import Conflict, NotFound
from timer_service.jobs import CreateResult, CreateStatus, NewJob
from timer_service.model import Job, JobState, job_key, second_of
from timer_service.store.memory.state import MemoryState


class MemoryJobs:
    def __init__(self, state: MemoryState) -> None:
        self._s = state

    async def create_jobs(self, jobs: Sequence[NewJob], now_ms: int) -> list[CreateResult]:
        results = []
        for new in jobs:
            existing = self._s.job(new.biz_type, new.job_id)
            if existing is not None:
                status = machine.repeat_status(existing, new)
                if status == CreateStatus.EXISTS and existing.state == JobState.PENDING:
                    key = existing.key  # as the MongoDB store
                    self._s.bump(self._s.slot(key, self._s.second_of_job[key]), self._s.home[key])
                results.append(CreateResult(status, existing))
                continue
            job = machine.new_job(new, now_ms)
            assert job.next_attempt_at is not None
            self._s.put(job, second_of(job.next_attempt_at))  # a flexible job's fire_at
            results.append(CreateResult(CreateStatus.CREATED, job))
        return results

    async def get_job(self, biz_type: str, job_id: str) -> Job | None:
        return self._s.job(biz_type, job_id)

    async def cancel_job(self, biz_type: str, job_id: str, now_ms: int) -> Job:
        job = self._existing(biz_type, job_id)
        change = machine.cancel(job, now_ms)
        return job if change is None else self._apply(job, change)

    async def reschedule_job(
        self, biz_type: str, job_id: str, due_at: int, payload_json: str | None, now_ms: int
    ) -> Job:
        job = self._existing(biz_type, job_id)
        return self._apply(job, machine.reschedule(job, due_at, payload_json, now_ms))

    async def replay_job(self, biz_type: str, job_id: str, now_ms: int) -> Job:
        job = self._existing(biz_type, job_id)
        change = machine.replay(job, now_ms)
        return job if change is None else self._apply(job, change)

    async def withdraw_jobs(self, jobs: Sequence[Job], now_ms: int) -> None:
        for written in jobs:
            job = self._s.job(written.biz_type, written.job_id)
            change = None if job is None else machine.withdraw(job, now_ms)
            if job is not None and change is not None:
                self._apply(job, change)

    def _existing(self, biz_type: str, job_id: str) -> Job:
        job = self._s.jobs.get(job_key(biz_type, job_id))
        if job is None:
            raise NotFound(f"no job {job_id!r} of biz type {biz_type!r}")
        return job

    def _apply(self, job: Job, change: machine.Change) -> Job:
        changed = self._s.apply(job, change)
        if changed is None:  # cannot happen without an await in between; kept honest
            raise Conflict("the job changed meanwhile; try again")
        return changed
