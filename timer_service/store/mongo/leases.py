"""MongoDB partition leases, with fencing tokens."""

from __future__ import annotations

import re
from collections.abc import Sequence

from pymongo import ReturnDocument
from pymongo.errors import DuplicateKeyError

from timer_service.dispatch import LeaseState
from timer_service.partitions import FENCE_COUNTER
from timer_service.store.mongo.layout import Layout


class MongoLeases:
    def __init__(self, layout: Layout) -> None:
        self._l = layout

    async def next_fence(self, above: int) -> int:
        # Two writes, rare (a daemon gains partitions): raise the counter to `above`,
        # then count on from there.
        await self._l.leases.update_one(
            {"_id": FENCE_COUNTER}, {"$max": {"token": above}}, upsert=True
        )
        doc = await self._l.leases.find_one_and_update(
            {"_id": FENCE_COUNTER},
            {"$inc": {"token": 1}},
            return_document=ReturnDocument.AFTER,
        )
        assert doc is not None
        return int(doc["token"])

    async def acquire_leases(
        self, names: Sequence[str], holder: str, token: int, ttl_ms: int, now_ms: int
    ) -> list[str]:
        leases = self._l.leases
        takeable = {
            "_id": {"$in": list(names)},
            "token": {"$lte": token},
            "$or": [{"holder": holder}, {"expires_at": {"$lt": now_ms}}],
        }
        lease = {"holder": holder, "token": token, "expires_at": now_ms + ttl_ms}
        await leases.update_many(takeable, {"$set": lease})
        known = await leases.find({"_id": {"$in": list(names)}}, {"_id": 1}).to_list(None)
        missing = [n for n in names if n not in {d["_id"] for d in known}]
        for name in missing:  # never held before: the first holder creates it
            try:
                await leases.insert_one({"_id": name, **lease})
            except DuplicateKeyError:
                pass
        return await self._held(names, holder, token)

    async def _held(self, names: Sequence[str], holder: str, token: int) -> list[str]:
        mine = {"_id": {"$in": list(names)}, "holder": holder, "token": token}
        docs = await self._l.leases.find(mine, {"_id": 1}).to_list(None)
        held = {d["_id"] for d in docs}
        return [n for n in names if n in held]

    async def renew_leases(
        self, names: Sequence[str], holder: str, token: int, ttl_ms: int, now_ms: int
    ) -> list[str]:
        mine = {"_id": {"$in": list(names)}, "holder": holder, "token": token}
        result = await self._l.leases.update_many(mine, {"$set": {"expires_at": now_ms + ttl_ms}})
        if result.matched_count == len(names):
            return list(names)
        return await self._held(names, holder, token)  # some were taken over: which

    async def release_leases(self, names: Sequence[str], holder: str, token: int) -> None:
        if names:
            await self._l.leases.update_many(
                {"_id": {"$in": list(names)}, "holder": holder, "token": token},
                {"$set": {"expires_at": 0}},
            )

    async def list_leases(self, prefix: str) -> list[LeaseState]:
        docs = await self._l.leases.find({"_id": {"$regex": f"^{re.escape(prefix)}"}}).to_list(None)
        return sorted(
            (
                LeaseState(d["_id"], d["holder"], int(d["token"]), int(d["expires_at"]))
                for d in docs
                if "holder" in d
            ),
            key=lambda lease: lease.name,
        )
