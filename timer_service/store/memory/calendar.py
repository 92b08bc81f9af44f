"""In-memory load calendar: the counts kept beside the index of non-empty seconds."""

from __future__ import annotations

import bisect

from timer_service.partitions import second_of_slot, slot
from timer_service.store.memory.state import MemoryState


class MemoryCalendar:
    def __init__(self, state: MemoryState) -> None:
        self._s = state

    async def due_by_second(self, from_s: int, to_s: int, biz_type: str | None) -> dict[int, int]:
        slots = self._s.sorted_seconds
        counts = self._s.due if biz_type is None else self._s.due_by_biz.get(biz_type, {})
        out: dict[int, int] = {}
        for p in range(self._s.partitions):
            lo = bisect.bisect_left(slots, slot(p, from_s))
            hi = bisect.bisect_left(slots, slot(p, to_s), lo)
            for at in slots[lo:hi]:
                n = counts.get(at)
                if n:
                    second = second_of_slot(at)
                    out[second] = out.get(second, 0) + n
        return out
