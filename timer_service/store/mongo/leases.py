"""MongoDB leases (with fencing tokens), time pointers and broker heartbeats."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime

from pymongo import ReturnDocument, UpdateOne
from pymongo.errors import BulkWriteError, DuplicateKeyError

from timer_service.dispatch import BrokerBeat, HeldBiz, LeaseState
from timer_service.partitions import FENCE_COUNTER
from timer_service.store.mongo.layout import DUPLICATE_KEY, Layout


class MongoLeases:
    def __init__(self, layout: Layout) -> None:
        self._l = layout

    async def acquire_lease(self, name: str, holder: str, ttl_ms: int, now_ms: int) -> int | None:
        leases = self._l.leases
        expires = now_ms + ttl_ms
        mine = await leases.find_one_and_update(
            {"_id": name, "holder": holder},
            {"$set": {"expires_at": expires}},
            return_document=ReturnDocument.AFTER,
        )
        if mine is not None:
            return int(mine["token"])
        taken = await leases.find_one_and_update(
            {"_id": name, "expires_at": {"$lt": now_ms}},
            {"$set": {"holder": holder, "expires_at": expires}, "$inc": {"token": 1}},
            return_document=ReturnDocument.AFTER,
        )
        if taken is not None:
            return int(taken["token"])
        try:
            await leases.insert_one(
                {"_id": name, "holder": holder, "token": 1, "expires_at": expires}
            )
        except DuplicateKeyError:
            return None
        return 1

    async def renew_lease(
        self, name: str, holder: str, token: int, ttl_ms: int, now_ms: int
    ) -> bool:
        result = await self._l.leases.update_one(
            {"_id": name, "holder": holder, "token": token},
            {"$set": {"expires_at": now_ms + ttl_ms}},
        )
        return result.matched_count == 1

    async def release_lease(self, name: str, holder: str, token: int) -> None:
        await self._l.leases.update_one(
            {"_id": name, "holder": holder, "token": token}, {"$set": {"expires_at": 0}}
        )

    async def load_pointer(self, name: str) -> int | None:
        doc = await self._l.pointers.find_one({"_id": name})
        return int(doc["second"]) if doc else None

    async def save_pointer(self, name: str, second: int, fence: int) -> bool:
        try:
            await self._l.pointers.update_one(
                {"_id": name, "fence": {"$lte": fence}},
                {"$set": {"second": second, "fence": fence}},
                upsert=True,
            )
        except DuplicateKeyError:
            return False
        return True

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

    async def load_pointers(self, names: Sequence[str]) -> dict[str, int]:
        docs = await self._l.pointers.find({"_id": {"$in": list(names)}}).to_list(None)
        return {d["_id"]: int(d["second"]) for d in docs}

    async def save_pointers(self, names: Sequence[str], second: int, fence: int) -> bool:
        if len(names) == 1:
            return await self.save_pointer(names[0], second, fence)
        ops = [
            UpdateOne(
                {"_id": name, "fence": {"$lte": fence}},
                {"$set": {"second": second, "fence": fence}},
                upsert=True,
            )
            for name in names
        ]
        try:
            await self._l.pointers.bulk_write(ops, ordered=False)
        except BulkWriteError as exc:
            if any(e.get("code") != DUPLICATE_KEY for e in exc.details.get("writeErrors", [])):
                raise
            return False
        return True

    async def broker_heartbeat(
        self,
        broker_id: str,
        held: Sequence[HeldBiz],
        now_ms: int,
        ttl_ms: int,
        consuming: Sequence[str] = (),
    ) -> int:
        # A list, not a document keyed by biz type: biz type names may hold dots.
        entries = [
            {"b": h.biz_type, "n": h.messages, "oldest": h.oldest_claimed_at}
            for h in sorted(held, key=lambda h: h.biz_type)
        ]
        # The expiry on the store's clock when the write applies ($$NOW), which also
        # comes back with the write for the skew guard: no extra round trip.
        doc = await self._l.brokers.find_one_and_update(
            {"_id": broker_id},
            [
                {
                    "$set": {
                        "held": {"$literal": entries},
                        "c": {"$literal": sorted(consuming)},
                        "at": "$$NOW",
                        "expires_at": {"$add": [{"$toLong": "$$NOW"}, ttl_ms]},
                    }
                }
            ],
            upsert=True,
            return_document=ReturnDocument.AFTER,
        )
        return _epoch_ms(doc["at"]) if doc is not None and "at" in doc else now_ms

    async def broker_beats(self) -> list[BrokerBeat]:
        # An aggregation, not a find: it reads the store's clock with the beats.
        cursor = await self._l.brokers.aggregate([{"$addFields": {"_read_at": "$$NOW"}}])
        return [
            BrokerBeat(
                d["_id"],
                int(d.get("expires_at", 0)),
                tuple(HeldBiz(h["b"], int(h["n"]), int(h["oldest"])) for h in d.get("held", ())),
                tuple(d.get("c", ())),
                read_at=_epoch_ms(d["_read_at"]),
            )
            async for d in cursor
        ]

    async def broker_gone(self, broker_id: str) -> None:
        await self._l.brokers.delete_one({"_id": broker_id})


def _epoch_ms(at: datetime) -> int:
    if at.tzinfo is None:  # a client without tz_aware: BSON dates are UTC
        at = at.replace(tzinfo=UTC)
    return round(at.timestamp() * 1000)
