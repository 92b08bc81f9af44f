"""MongoDB overdue sweep and identity keeping."""

from __future__ import annotations

import asyncio
from collections.abc import Collection

from bson import ObjectId
from pymongo import ASCENDING, UpdateOne

from timer_service.model import JobState
from timer_service.store.mongo.layout import LOCATOR_SLACK_MS, unmarked
from timer_service.store.mongo.scope import Scoped


class MongoSweep(Scoped):
    async def find_overdue_pending(self, before_ms: int, limit: int) -> list[int]:
        # Served by the (state, next_attempt_at) index of every bucket: normally empty.
        # A job under a move's mark is not lost: the move ends, or the mark runs out.
        query = self._scoped(
            {
                "state": JobState.PENDING.value,
                "next_attempt_at": {"$lt": before_ms},
                **unmarked(before_ms),
            }
        )
        found = await asyncio.gather(
            *(
                c.find(query, {"second": 1, "next_attempt_at": 1})
                .sort("next_attempt_at", ASCENDING)
                .limit(limit)
                .to_list(None)
                for c in self._l.buckets
            )
        )
        docs = sorted((d for ds in found for d in ds), key=lambda d: d["next_attempt_at"])
        return sorted({d["second"] for d in docs[:limit]})

    async def restore_seconds(self, seconds: Collection[int]) -> None:
        slots: set[int] = set()
        if self._l.partitions == 1:
            slots.update(seconds)
        elif seconds:
            # The partitions of each second that hold pending jobs (a rare repair).
            pending = self._scoped(
                {"second": {"$in": sorted(seconds)}, "state": JobState.PENDING.value}
            )
            found = await asyncio.gather(
                *(c.find(pending, {"second": 1}).to_list(None) for c in self._l.buckets)
            )
            slots.update(self._l.slot(d["_id"], d["second"]) for docs in found for d in docs)
        ops = [
            UpdateOne({"_id": s}, {"$setOnInsert": {"v": str(ObjectId())}}, upsert=True)
            for s in sorted(slots)
        ]
        if ops:
            await self._l.seconds.bulk_write(ops, ordered=False)

    async def keep_identities(self, now_ms: int, limit: int) -> int:
        # Jobs still waiting half the slack after they were set to fire: served by each
        # bucket's (state, next_attempt_at) index, normally an empty range.
        live = [JobState.PENDING.value, JobState.DISPATCHED.value]
        query = self._scoped(
            {"state": {"$in": live}, "next_attempt_at": {"$lt": now_ms - LOCATOR_SLACK_MS // 2}}
        )
        found = await asyncio.gather(
            *(c.find(query, {"_id": 1}).limit(limit).to_list(None) for c in self._l.buckets)
        )
        keys = [d["_id"] for docs in found for d in docs][:limit]
        await self._l.extend_locators(
            keys, now_ms + LOCATOR_SLACK_MS // 2, keep_until_ms=now_ms + LOCATOR_SLACK_MS
        )
        return len(keys)
