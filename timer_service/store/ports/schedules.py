"""The scheduler's port: recurring schedules, stored beside the jobs.

A schedule document is keyed ``"<biz_type>/<schedule_id>"``. Besides plain
put/get/delete/list, the port has one conditional write, `advance`: it moves a
schedule past the occurrence just dispatched only if the schedule still
expects that occurrence, so two daemons (or a daemon and the repair) that both
see it dispatched advance it once, and the one that did creates the next job.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Protocol

from timer_service.schedules import Schedule

# Fields a put leaves alone on a replaced schedule: they count what happened.
KEPT_ON_REPLACE = ("runs", "last_run_at", "last_job_id", "created_at")


def check_forward(from_ms: int, to_ms: int | None) -> None:
    """`SchedulesPort.advance` only moves a schedule forward."""
    if to_ms is not None and to_ms <= from_ms:
        raise ValueError(f"advance must move forward: {from_ms} -> {to_ms}")


class SchedulesPort(Protocol):
    async def put(self, schedule: Schedule) -> Schedule | None:
        """Create or replace; a replace keeps runs, last_run_at, last_job_id and
        created_at. Returns the schedule as it was before (None when created)."""

    async def get(self, key: str) -> Schedule | None: ...

    async def get_many(self, keys: Sequence[str]) -> dict[str, Schedule]: ...

    async def delete(self, key: str) -> Schedule | None:
        """Remove; the removed schedule, or None when unknown."""

    async def list(self, biz_type: str | None) -> builtins.list[Schedule]:
        """In key order; all biz types when None."""

    async def advance(
        self,
        key: str,
        from_occurrence_ms: int,
        to_occurrence_ms: int | None,
        job_id: str,
        now_ms: int,
    ) -> bool:
        """If the schedule is unpaused and its next_run_at is `from_occurrence_ms`:
        count one run (last_run_at = from, last_job_id = job_id) and set next_run_at to
        `to_occurrence_ms` (later, or None when over). True when applied."""

    async def stale(self, before_ms: int, limit: int) -> builtins.list[Schedule]:
        """Schedules whose next_run_at is before `before_ms`, oldest first (the repair)."""
