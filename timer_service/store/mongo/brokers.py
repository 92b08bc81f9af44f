"""MongoDB broker heartbeats, on the store's clock."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from pymongo import ReturnDocument

from timer_service.dispatch import BrokerBeat, HeldBiz
from timer_service.store.mongo.layout import Layout


class MongoBrokers:
    def __init__(self, layout: Layout) -> None:
        self._l = layout

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

    async def own_biz_type(self, biz_type: str, broker_id: str) -> int:
        # One document per biz type: an upsert that increments is atomic on it.
        doc = await self._l.owners.find_one_and_update(
            {"_id": biz_type},
            {"$inc": {"epoch": 1}, "$set": {"broker": broker_id}},
            upsert=True,
            return_document=ReturnDocument.AFTER,
        )
        assert doc is not None  # an upsert returning the document after it
        return int(doc["epoch"])


def _epoch_ms(at: datetime) -> int:
    if at.tzinfo is None:  # a client without tz_aware: BSON dates are UTC
        at = at.replace(tzinfo=UTC)
    return round(at.timestamp() * 1000)
