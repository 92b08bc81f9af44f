"""MongoDB load calendar: the counts on the entries of the seconds index
(store/mongo/layout.py), one range of `_id`s per partition, never a job."""

from __future__ import annotations

import asyncio

from timer_service.partitions import second_of_slot, slot
from timer_service.store.mongo.layout import Doc, Layout, count_field


class MongoCalendar:
    def __init__(self, layout: Layout) -> None:
        self._l = layout

    async def due_by_second(self, from_s: int, to_s: int, biz_type: str | None) -> dict[int, int]:
        field = "n" if biz_type is None else count_field(biz_type)
        # Entries with a count only: the projected field exists and is not 0.
        wanted: Doc = {field: {"$gt": 0}}
        found = await asyncio.gather(
            *(
                self._l.seconds.find(
                    {"_id": {"$gte": slot(p, from_s), "$lt": slot(p, to_s)}, **wanted},
                    {field: 1},
                ).to_list(None)
                for p in range(self._l.partitions)
            )
        )
        out: dict[int, int] = {}
        for docs in found:
            for d in docs:
                n = d["n"] if biz_type is None else d["by"][field[len("by.") :]]
                second = second_of_slot(int(d["_id"]))
                out[second] = out.get(second, 0) + int(n)
        return out
