"""MongoDB job counts, a bucket at a time."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from typing import Any

from timer_service.model import JobState
from timer_service.store.mongo.scope import Scoped


class MongoCounts(Scoped):
    async def count_jobs(self, states: Collection[JobState]) -> dict[tuple[str, JobState], int]:
        pipeline: list[dict[str, Any]] = [
            # Served by the (state, claimed_at) index of every bucket.
            {"$match": {"state": {"$in": sorted(states)}}},
            {"$group": {"_id": {"b": "$biz_type", "s": "$state"}, "n": {"$sum": 1}}},
        ]
        counts: Counter[tuple[str, JobState]] = Counter()
        # One bucket after another: a sample must not hold the store up for the hot path.
        for coll in self._l.buckets:
            async for row in await coll.aggregate(pipeline):
                counts[(row["_id"]["b"], JobState(row["_id"]["s"]))] += int(row["n"])
        return dict(counts)
