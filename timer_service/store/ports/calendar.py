"""The load calendar's port (the API's `GET /v1/calendar` and flexible windows)."""

from __future__ import annotations

from typing import Protocol


class CalendarPort(Protocol):
    async def due_by_second(self, from_s: int, to_s: int, biz_type: str | None) -> dict[int, int]:
        """How many pending jobs (of `biz_type`, or of every business biz type) are
        due in each second of `[from_s, to_s)` that has any: read from the counts of
        the index of non-empty seconds, never from the jobs, so it costs one entry per
        non-empty second (and partition) of the range."""
        ...
