"""The daemon's side of recurring schedules: after a publish, advance the schedules
whose occurrences went out and create their next occurrences.

It runs beside dispatch, never in its way: a call returns at once (a batch with
no occurrence job costs one scan of the job ids), the work goes on in a task,
and its errors are logged and counted, never raised. A lost advance or create
is mended by `repair` (run it when this daemon takes the lease and now and
then after) or by the next PUT of that schedule.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence

from timer_service.dispatch import Claimed
from timer_service.scheduling import Scheduler

log = logging.getLogger(__name__)


class ScheduleHook:
    def __init__(self, scheduler: Scheduler) -> None:
        self._scheduler = scheduler
        self._tasks: set[asyncio.Task[None]] = set()

    async def __call__(self, claimed: Sequence[Claimed]) -> None:
        if not any(":" in job.job_id for job in claimed):
            return
        task = asyncio.create_task(self._advance(list(claimed)), name="schedule-advance")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _advance(self, claimed: Sequence[Claimed]) -> None:
        try:
            await self._scheduler.on_dispatched(claimed)
        except Exception as exc:  # repair or the next PUT mends it
            self._scheduler.metrics.store_error("schedule_advance")
            log.warning("schedule advance failed", extra={"jobs": len(claimed), "error": repr(exc)})

    async def repair(self) -> int:
        """Mend schedules that lost an advance or a create; never raises."""
        try:
            return await self._scheduler.repair()
        except Exception as exc:
            self._scheduler.metrics.store_error("schedule_repair")
            log.warning("schedule repair failed", extra={"error": repr(exc)})
            return 0

    async def drain(self) -> None:
        """Wait for the advances in flight (at shutdown, and in tests)."""
        while self._tasks:
            with contextlib.suppress(Exception):
                await asyncio.gather(*self._tasks)
