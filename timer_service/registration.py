"""Registering jobs: the one way a job comes to exist, for the API and the scheduler.

It refuses jobs of unknown biz types and, for the API, the whole request when a biz
type's registration quota is used up (`timer_service.quota`, 429); it creates the
rest in one bulk store call, then reads their biz types again: a biz type deleted
after the first check (break 7 of issue 30) has its jobs withdrawn and refused, and a
delete still in progress is called off (docs/architecture.md, "Deleting a biz type");
counts what was created (`timer_jobs_created_total`) and tells the listener
(the in-process daemon of `dev`) which seconds got jobs.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace

from timer_service.biz_hold import deleted_meanwhile
from timer_service.calendar import SECOND_MS, place, window_seconds
from timer_service.errors import InvalidInput
from timer_service.jobs import CreateResult, CreateStatus, NewJob
from timer_service.metrics import Metrics
from timer_service.model import BizType, second_of
from timer_service.quota import OverQuota, RegistrationQuota
from timer_service.store.ports.biz_types import BizTypesPort
from timer_service.store.ports.calendar import CalendarPort
from timer_service.store.ports.jobs import JobsPort

log = logging.getLogger(__name__)

JobsWritten = Callable[[Sequence[int]], None]


class Registrar:
    def __init__(
        self,
        jobs: JobsPort,
        metrics: Metrics,
        *,
        biz_types: BizTypesPort | None = None,
        on_jobs_written: JobsWritten | None = None,
        quota: RegistrationQuota | None = None,
        calendar: CalendarPort | None = None,
    ) -> None:
        self.jobs = jobs
        self._metrics = metrics
        self._biz_types = biz_types
        self._on_jobs_written = on_jobs_written
        self._quota = quota
        self._calendar = calendar

    async def register(
        self, news: Sequence[NewJob], now_ms: int
    ) -> list[CreateResult | InvalidInput]:
        """One result per request, in order: created, existing or conflicting, or the
        error that refused it (an unknown biz type, when biz types are checked).
        OverQuota, with nothing written, when a biz type's quota is short (the quota
        needs the biz types checked)."""
        results: list[CreateResult | InvalidInput | None] = [None] * len(news)
        unknown: set[str] = set()
        known: dict[str, BizType] = {}
        if self._biz_types is not None and news:
            names = {new.biz_type for new in news}
            known = await self._biz_types.get_biz_types(sorted(names))
            unknown = names - known.keys()
        accepted = []
        for i, new in enumerate(news):
            if new.biz_type in unknown:
                results[i] = _unknown(new.biz_type)
            else:
                accepted.append(i)
        if accepted and self._quota is not None:
            counts = Counter(news[i].biz_type for i in accepted)
            try:
                self._quota.admit(counts, known, now_ms)
            except OverQuota as refused:
                self._metrics.registrations_over_quota(refused.biz_type, counts[refused.biz_type])
                raise
        if accepted:
            placed = await self._place([news[i] for i in accepted])
            written = await self.jobs.create_jobs(placed, now_ms)
            gone = await self._deleted_meanwhile(written, now_ms)
            for i, result in zip(accepted, written, strict=True):
                biz_type = result.job.biz_type
                results[i] = _unknown(biz_type) if biz_type in gone else result
            self._created([r for r in written if r.job.biz_type not in gone])
        return [r for r in results if r is not None]

    async def _deleted_meanwhile(self, written: Sequence[CreateResult], now_ms: int) -> set[str]:
        """The biz types deleted between the first check and the write, with this
        request's new jobs of them withdrawn (`timer_service.biz_hold`)."""
        if self._biz_types is None:
            return set()
        names = {r.job.biz_type for r in written}
        created = [r.job for r in written if r.status is CreateStatus.CREATED]
        return await deleted_meanwhile(self._biz_types, self.jobs, names, created, now_ms)

    async def _place(self, news: list[NewJob]) -> list[NewJob]:
        """Flexible jobs get their moment: the least-loaded second of their window by
        the calendar, read once for the batch's windows (`calendar.place`). Two creates
        that read the calendar at the same time may pick the same second: each then
        adds at most the jobs in flight to it, and ties spread by identity (docs/api.md,
        "Load calendar and flexible windows")."""
        flexible = [n for n in news if n.window_ms >= SECOND_MS]
        if not flexible or self._calendar is None:
            return news
        spans = [window_seconds(n.due_at, n.window_ms) for n in flexible]
        load = await self._calendar.due_by_second(
            min(s.start for s in spans), max(s.stop for s in spans), None
        )
        moments = place([(n.key, n.due_at, n.window_ms) for n in flexible], load)
        chosen = {id(n): at for n, at in zip(flexible, moments, strict=True)}
        return [replace(n, fire_at=chosen[id(n)]) if id(n) in chosen else n for n in news]

    def _created(self, results: Sequence[CreateResult]) -> None:
        fresh = [r.job for r in results if r.status is CreateStatus.CREATED]
        if not fresh:
            return
        for biz_type, count in Counter(job.biz_type for job in fresh).items():
            self._metrics.job_created(biz_type, count)
        if self._on_jobs_written is None:
            return
        seconds = sorted({second_of(job.next_attempt_at or job.due_at) for job in fresh})
        try:
            self._on_jobs_written(seconds)
        except Exception:  # the write is done; a failing listener never fails it
            log.exception("on_jobs_written listener failed")


def _unknown(biz_type: str) -> InvalidInput:
    return InvalidInput(f"unknown biz type {biz_type!r}", ("biz_type",))
