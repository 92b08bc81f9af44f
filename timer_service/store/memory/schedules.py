"""In-memory schedules (`SchedulesPort`)."""

from __future__ import annotations

import builtins
from collections.abc import Sequence

from timer_service.schedules import Schedule
from timer_service.store.memory.state import MemoryState
from timer_service.store.ports.schedules import KEPT_ON_REPLACE, check_forward


class MemorySchedules:
    """Each method runs without awaiting in the middle: atomic on the event loop."""

    def __init__(self, state: MemoryState) -> None:
        self._docs = state.schedules

    async def put(self, schedule: Schedule) -> Schedule | None:
        old = self._docs.get(schedule.key)
        if old is not None:
            schedule = schedule.evolve(**{name: getattr(old, name) for name in KEPT_ON_REPLACE})
        self._docs[schedule.key] = schedule
        return old

    async def get(self, key: str) -> Schedule | None:
        return self._docs.get(key)

    async def get_many(self, keys: Sequence[str]) -> dict[str, Schedule]:
        return {key: self._docs[key] for key in keys if key in self._docs}

    async def delete(self, key: str) -> Schedule | None:
        return self._docs.pop(key, None)

    async def list(self, biz_type: str | None) -> builtins.list[Schedule]:
        return [
            self._docs[key]
            for key in sorted(self._docs)
            if biz_type is None or self._docs[key].biz_type == biz_type
        ]

    async def advance(
        self,
        key: str,
        from_occurrence_ms: int,
        to_occurrence_ms: int | None,
        job_id: str,
        now_ms: int,
    ) -> bool:
        check_forward(from_occurrence_ms, to_occurrence_ms)
        doc = self._docs.get(key)
        if doc is None or doc.spec.paused or doc.next_run_at != from_occurrence_ms:
            return False
        self._docs[key] = doc.evolve(
            next_run_at=to_occurrence_ms,
            runs=doc.runs + 1,
            last_run_at=from_occurrence_ms,
            last_job_id=job_id,
            updated_at=now_ms,
        )
        return True

    async def stale(self, before_ms: int, limit: int) -> builtins.list[Schedule]:
        # A scan is fine in memory; the MongoDB adapter reads an index on next_run_at.
        found = [
            s
            for s in self._docs.values()
            if s.next_run_at is not None and s.next_run_at < before_ms
        ]
        found.sort(key=lambda s: (s.next_run_at or 0, s.key))
        return found[:limit]
