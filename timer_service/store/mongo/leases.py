"""MongoDB leases (with fencing tokens), time pointers and broker heartbeats."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from pymongo import ReturnDocument
from pymongo.errors import DuplicateKeyError

from timer_service.dispatch import BrokerBeat, HeldBiz
from timer_service.store.mongo.layout import Layout


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

    async def broker_heartbeat(
        self, broker_id: str, held: Sequence[HeldBiz], now_ms: int, expires_at_ms: int
    ) -> int:
        # A list, not a document keyed by biz type: biz type names may hold dots.
        entries = [
            {"b": h.biz_type, "n": h.messages, "oldest": h.oldest_claimed_at}
            for h in sorted(held, key=lambda h: h.biz_type)
        ]
        # $currentDate: the store's clock comes back with the write, no extra round trip.
        doc = await self._l.brokers.find_one_and_update(
            {"_id": broker_id},
            {"$set": {"held": entries, "expires_at": expires_at_ms}, "$currentDate": {"at": True}},
            upsert=True,
            return_document=ReturnDocument.AFTER,
        )
        return _epoch_ms(doc["at"]) if doc is not None and "at" in doc else now_ms

    async def broker_beats(self) -> list[BrokerBeat]:
        docs = await self._l.brokers.find({}).to_list(None)
        return [
            BrokerBeat(
                d["_id"],
                int(d.get("expires_at", 0)),
                tuple(HeldBiz(h["b"], int(h["n"]), int(h["oldest"])) for h in d.get("held", ())),
            )
            for d in docs
        ]

    async def broker_gone(self, broker_id: str) -> None:
        await self._l.brokers.delete_one({"_id": broker_id})


def _epoch_ms(at: datetime) -> int:
    if at.tzinfo is None:  # a client without tz_aware: BSON dates are UTC
        at = at.replace(tzinfo=UTC)
    return round(at.timestamp() * 1000)
