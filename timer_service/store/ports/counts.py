"""The leading daemon's job count sample (the jobs-by-state gauges)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol

from timer_service.model import JobState


class CountsPort(Protocol):
    async def count_jobs(self, states: Collection[JobState]) -> dict[tuple[str, JobState], int]:
        """How many jobs each biz type has in each of `states`; pairs with none are left
        out. Reads every such job once: meant for an occasional sample (the leading
        daemon's gauges), not a hot path."""
        ...
