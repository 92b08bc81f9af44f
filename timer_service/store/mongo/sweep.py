"""MongoDB overdue sweep and identity keeping."""

from __future__ import annotations

import asyncio
from collections.abc import Collection

from pymongo import ASCENDING

from timer_service.model import JobState
from timer_service.store.mongo.layout import LOCATOR_SLACK_MS
from timer_service.store.mongo.scope import Scoped


class MongoSweep(Scoped):
    async def find_overdue_pending(self, before_ms: int, limit: int) -> list[int]:
        # Served by the (state, next_attempt_at) index of every bucket: normally empty.
        query = self._scoped(
            {"state": JobState.PENDING.value, "next_attempt_at": {"$lt": before_ms}}
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
        """Give each of these seconds' pending jobs an entry naming its bucket, where
        none does (a writer that died between its job and its bump). An entry that is
        there and names the bucket is left as it is: the daemon has it in hand."""
        if not seconds:
            return
        pending = self._scoped(
            {"second": {"$in": sorted(seconds)}, "state": JobState.PENDING.value}
        )
        found = await asyncio.gather(
            *(c.find(pending, {"second": 1}).to_list(None) for c in self._l.buckets)
        )
        placed = {
            (self._l.slot(d["_id"], d["second"]), b) for b, docs in enumerate(found) for d in docs
        }
        if not placed:
            return
        slots = sorted({at for at, _ in placed})
        entries = await self._l.seconds.find({"_id": {"$in": slots}}, {"buckets": 1}).to_list(None)
        named = {int(e["_id"]): set(self._l.buckets_of_entry(e)) for e in entries}
        await self._l.bump((at, b) for at, b in placed if b not in named.get(at, ()))

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
