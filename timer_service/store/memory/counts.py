"""In-memory job counts."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection

from timer_service.model import JobState
from timer_service.store.memory.scope import Scoped


class MemoryCounts(Scoped):
    async def count_jobs(self, states: Collection[JobState]) -> dict[tuple[str, JobState], int]:
        wanted = set(states)
        jobs = self._s.jobs.values()
        return dict(Counter((j.biz_type, j.state) for j in jobs if j.state in wanted))
