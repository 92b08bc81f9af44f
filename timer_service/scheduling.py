"""Schedules turned into jobs, one occurrence ahead.

- A PUT (or a resume) creates the job of the next occurrence.
- When the daemon dispatches an occurrence's job, `on_dispatched` advances the
  schedule past it (a conditional write: it applies once, however many daemons
  see the dispatch) and only the caller whose advance applied creates the next
  occurrence's job. Job ids are deterministic, so that create is idempotent too.
- Advance first, create second: a crash in between leaves a schedule whose
  next_run_at has no job. `repair` finds such schedules by next_run_at (an
  index) and creates the job, or advances past an occurrence whose dispatch
  was never seen. An identical PUT repairs its schedule the same way.
- Delete, pause and a replace that moves the next occurrence cancel the
  already-created job if it is still pending. `on_dispatched` reads the
  schedule again after creating a job and cancels it if the schedule was
  deleted, paused or replaced meanwhile, so that no race leaves a new job behind.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from timer_service.clock import Clock
from timer_service.dispatch import Claimed
from timer_service.errors import Conflict, InvalidInput, NotFound
from timer_service.jobs import CreateResult, CreateStatus, NewJob
from timer_service.metrics import Metrics
from timer_service.model import JobState, same_payload
from timer_service.registration import Registrar
from timer_service.schedules import (
    LATE_GRACE_MS,
    Schedule,
    ScheduleSpec,
    next_occurrence,
    parse_occurrence,
    plan_after,
    schedule_key,
)
from timer_service.store.ports.jobs import JobsPort
from timer_service.store.ports.schedules import SchedulesPort

log = logging.getLogger(__name__)

# A schedule whose next occurrence is this far past due with its job not pending
# lost an advance or a create; well beyond the normal dispatch-to-hook delay.
REPAIR_MARGIN_MS = 60_000
REPAIR_LIMIT = 1000
# An occurrence whose job id is held by a cancelled job (an earlier incarnation of
# the schedule was deleted or paused) is skipped; a few in a row at most.
_MAX_SKIPS = 8


@dataclass(frozen=True, slots=True)
class PutResult:
    schedule: Schedule
    created: bool


class Scheduler:
    def __init__(
        self,
        schedules: SchedulesPort,
        jobs: JobsPort,
        metrics: Metrics,
        clock: Clock,
        registrar: Registrar | None = None,
    ) -> None:
        self.schedules = schedules
        self.jobs = jobs
        self.registrar = registrar or Registrar(jobs, metrics)
        self.metrics = metrics
        self.clock = clock

    # -- API -----------------------------------------------------------------------------
    async def put(self, biz_type: str, schedule_id: str, spec: ScheduleSpec) -> PutResult:
        now = self.clock.now_ms()
        prev = await self.schedules.get(schedule_key(biz_type, schedule_id))
        same = prev is not None and prev.spec.same_rule(spec)
        anchor = spec.start_at if spec.start_at is not None else now
        if prev is not None and same:
            anchor = prev.anchor_at
        runs = prev.runs if prev else 0
        last_run_at = prev.last_run_at if prev else None
        if spec.paused:
            nxt = None
        elif prev is not None and same and not prev.spec.paused:
            nxt = prev.next_run_at  # a retried PUT: nothing moves
        elif prev is not None and same:
            nxt = plan_after(spec, anchor, last_run_at, runs, now)  # resume: catch up
        else:
            # Never again an occurrence that already ran under an earlier rule.
            after = now if last_run_at is None else max(now, last_run_at)
            nxt = next_occurrence(spec, anchor, after, runs)
        schedule = Schedule(
            biz_type=biz_type,
            schedule_id=schedule_id,
            spec=spec,
            anchor_at=anchor,
            next_run_at=nxt,
            runs=runs,
            last_run_at=last_run_at,
            last_job_id=prev.last_job_id if prev else None,
            created_at=prev.created_at if prev else now,
            updated_at=now,
        )
        before = await self.schedules.put(schedule)
        schedule = await self._ensure_next(schedule, now)
        old_next = before.next_run_at if before else None
        if old_next is not None and old_next != schedule.next_run_at:
            await self._cancel_pending(biz_type, schedule.job_id(old_next), now)
        return PutResult(schedule, before is None)

    async def get(self, biz_type: str, schedule_id: str) -> Schedule | None:
        return await self.schedules.get(schedule_key(biz_type, schedule_id))

    async def list(self, biz_type: str | None) -> builtins.list[Schedule]:
        return await self.schedules.list(biz_type)

    async def delete(self, biz_type: str, schedule_id: str) -> bool:
        removed = await self.schedules.delete(schedule_key(biz_type, schedule_id))
        if removed is None:
            return False
        if removed.next_run_at is not None:
            now = self.clock.now_ms()
            await self._cancel_pending(biz_type, removed.job_id(removed.next_run_at), now)
        return True

    async def run_now(self, biz_type: str, schedule_id: str) -> CreateResult:
        """An extra occurrence due now, with the schedule's payload (paused or not): the
        job `{schedule_id}:{now}`. It leaves the next occurrence, `runs` and `max_runs`
        as they are: `on_dispatched` advances a schedule only past its `next_run_at`."""
        schedule = await self._existing(biz_type, schedule_id)
        now = self.clock.now_ms()
        new = NewJob(biz_type, schedule.job_id(now), now, schedule.spec.payload_json)
        [result] = await self.registrar.register([new], now)
        if isinstance(result, InvalidInput):  # the biz type was deleted under the schedule
            raise Conflict(f"no job made: {result}")
        return result

    async def skip_next(self, biz_type: str, schedule_id: str) -> tuple[int, Schedule]:
        """Cancel the next occurrence's job while it waits and go on with the one after
        (`_ensure_next` steps over an occurrence whose job is cancelled). Conflict when
        there is none (paused, over) or it is already on its way. Returns the occurrence
        skipped and the schedule as it is now."""
        schedule = await self._existing(biz_type, schedule_id)
        occ = schedule.next_run_at
        if occ is None:
            raise Conflict("The schedule has no next occurrence to skip (paused or over).")
        now = self.clock.now_ms()
        job = await self.jobs.get_job(biz_type, schedule.job_id(occ))
        if job is not None and job.state is JobState.PENDING:
            try:
                await self.jobs.cancel_job(biz_type, job.job_id, now)
            except (NotFound, Conflict):
                job = await self.jobs.get_job(biz_type, job.job_id)
        if job is not None and job.state not in (JobState.PENDING, JobState.CANCELLED):
            raise Conflict(f"The next occurrence ({job.job_id}) is already {job.state.value}.")
        if job is None:  # its create is pending (a crash between advance and create)
            schedule = schedule.evolve(
                next_run_at=next_occurrence(schedule.spec, schedule.anchor_at, occ, schedule.runs)
            )
            await self.schedules.put(schedule)
        return occ, await self._ensure_next(await self._existing(biz_type, schedule_id), now)

    async def _existing(self, biz_type: str, schedule_id: str) -> Schedule:
        schedule = await self.schedules.get(schedule_key(biz_type, schedule_id))
        if schedule is None:
            raise NotFound(f"No schedule {schedule_id!r} of biz type {biz_type!r}.")
        return schedule

    # -- daemon ----------------------------------------------------------------------------
    async def on_dispatched(self, claimed: Sequence[Claimed]) -> None:
        """Advance the schedules whose occurrences were just dispatched and create
        their next occurrences. No store call unless a job id looks like one."""
        occurrences: dict[tuple[str, int], None] = {}
        for job in claimed:
            if ":" not in job.job_id:
                continue
            parsed = parse_occurrence(job.job_id)
            if parsed is not None:
                occurrences[(schedule_key(job.biz_type, parsed[0]), parsed[1])] = None
        if not occurrences:
            return
        found = await self.schedules.get_many(sorted({key for key, _ in occurrences}))
        pairs = [(found[key], occ) for key, occ in occurrences if key in found]
        if pairs:
            await self._after_dispatch(pairs, self.clock.now_ms())

    async def on_cancelled(self, biz_type: str, job_id: str) -> None:
        """An occurrence's job was cancelled: the schedule goes on with the next one at
        once (it would otherwise wait for the repair, skipping runs meanwhile)."""
        parsed = parse_occurrence(job_id) if ":" in job_id else None
        if parsed is None:
            return
        schedule_id, occurrence = parsed
        schedule = await self.schedules.get(schedule_key(biz_type, schedule_id))
        if schedule is None or schedule.next_run_at != occurrence:
            return
        await self._ensure_next(schedule, self.clock.now_ms())

    async def repair(self, now_ms: int | None = None, margin_ms: int = REPAIR_MARGIN_MS) -> int:
        """Mend schedules stuck on an occurrence long past: create its job if it is
        missing, or advance past it if its job went out unseen. Returns how many."""
        now = self.clock.now_ms() if now_ms is None else now_ms
        stale = await self.schedules.stale(now - margin_ms, REPAIR_LIMIT)
        if not stale:
            return 0
        jobs = await asyncio.gather(
            *(self.jobs.get_job(s.biz_type, s.job_id(s.next_run_at or 0)) for s in stale)
        )
        missing = [s for s, job in zip(stale, jobs, strict=True) if job is None]
        consumed = [
            (s, s.next_run_at or 0)
            for s, job in zip(stale, jobs, strict=True)
            if job is not None and job.state is not JobState.PENDING
        ]
        if missing:
            await self._create([(s, s.next_run_at or 0) for s in missing], now)
        if consumed:
            await self._after_dispatch(consumed, now)
        if missing or consumed:
            log.info(
                "schedules repaired",
                extra={"jobs_created": len(missing), "advanced": len(consumed)},
            )
        return len(missing) + len(consumed)

    # -- internals ---------------------------------------------------------------------------
    async def _after_dispatch(self, pairs: Sequence[tuple[Schedule, int]], now: int) -> None:
        plans = [
            (s, occ, plan_after(s.spec, s.anchor_at, occ, s.runs + 1, now))
            for s, occ in pairs
            if not s.spec.paused and s.next_run_at == occ
        ]
        if not plans:
            return
        applied = await asyncio.gather(
            *(self.schedules.advance(s.key, occ, nxt, s.job_id(occ), now) for s, occ, nxt in plans)
        )
        won = [plan for plan, ok in zip(plans, applied, strict=True) if ok]
        for s, _, _ in won:
            self.metrics.schedule_run(s.biz_type)
        following = [(s, nxt) for s, _, nxt in won if nxt is not None]
        if not following:
            return
        await self._create(following, now)
        # A delete, pause or replace between our read and our create: take it back.
        current = await self.schedules.get_many([s.key for s, _ in following])
        for s, nxt in following:
            now_doc = current.get(s.key)
            if now_doc is None or now_doc.spec.paused or now_doc.next_run_at != nxt:
                await self._cancel_pending(s.biz_type, s.job_id(nxt), now)

    async def _create(self, items: Sequence[tuple[Schedule, int]], now: int) -> None:
        await self.registrar.register(
            [NewJob(s.biz_type, s.job_id(occ), occ, s.spec.payload_json) for s, occ in items],
            now,
        )

    async def _ensure_next(self, schedule: Schedule, now: int) -> Schedule:
        """Make the job of next_run_at exist with the schedule's payload; step over an
        occurrence whose id a cancelled job holds; advance past one already sent."""
        for _ in range(_MAX_SKIPS):
            occ = schedule.next_run_at
            if occ is None:
                return schedule
            new = NewJob(schedule.biz_type, schedule.job_id(occ), occ, schedule.spec.payload_json)
            [result] = await self.registrar.register([new], now)
            assert not isinstance(result, InvalidInput)  # biz types are checked at PUT
            job = result.job
            if result.status is CreateStatus.CREATED:
                return schedule
            if job.state is JobState.PENDING:
                if result.status is CreateStatus.CONFLICT and not same_payload(
                    job.payload_json, schedule.spec.payload_json
                ):
                    await self._reschedule_payload(schedule, occ, now)
                return schedule
            if job.state is JobState.CANCELLED:
                nxt = next_occurrence(schedule.spec, schedule.anchor_at, occ, schedule.runs)
                schedule = schedule.evolve(next_run_at=nxt)
                await self.schedules.put(schedule)
                continue
            # Sent or being sent: its dispatch may not have been seen (a missed advance).
            if occ < now - LATE_GRACE_MS or job.state is not JobState.DISPATCHED:
                await self._after_dispatch([(schedule, occ)], now)
                return await self.schedules.get(schedule.key) or schedule
            return schedule
        log.warning("schedule skipped too many cancelled occurrences", extra={"key": schedule.key})
        return schedule

    async def _reschedule_payload(self, schedule: Schedule, occ: int, now: int) -> None:
        try:
            await self.jobs.reschedule_job(
                schedule.biz_type, schedule.job_id(occ), occ, schedule.spec.payload_json, now
            )
        except (NotFound, Conflict):  # dispatched meanwhile: it goes out as it was
            pass

    async def _cancel_pending(self, biz_type: str, job_id: str, now: int) -> None:
        """Cancel an occurrence's job only while it waits; one already dispatched goes out."""
        job = await self.jobs.get_job(biz_type, job_id)
        if job is None or job.state is not JobState.PENDING:
            return
        try:
            await self.jobs.cancel_job(biz_type, job_id, now)
        except (NotFound, Conflict):
            pass
