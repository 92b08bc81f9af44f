"""MongoDB broker heartbeats, and the biz types' bucket states, on the store's clock."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from pymongo import ReturnDocument

from timer_service.dispatch import BrokerBeat, BucketTaken, HeldBiz
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

    # A biz type's bucket state lives in its document, so that deleting the biz type
    # takes it along: `rs_by` (its taker), `rs_at`, `rs_left_at`, `rs_tokens`, and the
    # same of the taker before (`rs_was_*`), which a take answers.
    async def take_bucket(self, biz_type: str, taker: str, now_ms: int) -> BucketTaken | None:
        doc = await self._l.biz.find_one_and_update(
            {"_id": biz_type},
            [
                {
                    "$set": {
                        "rs_was_by": {"$ifNull": ["$rs_by", None]},
                        "rs_was_left_at": {"$ifNull": ["$rs_left_at", None]},
                        "rs_was_tokens": {"$ifNull": ["$rs_tokens", None]},
                        "rs_by": {"$literal": taker},
                        "rs_at": "$$NOW",
                        "rs_left_at": {"$literal": None},
                        "rs_tokens": {"$literal": None},
                    }
                }
            ],
            projection={"rs_was_by": 1, "rs_was_left_at": 1, "rs_was_tokens": 1, "rs_at": 1},
            return_document=ReturnDocument.AFTER,
        )
        if doc is None:
            return None
        at_ms = _epoch_ms(doc["rs_at"])
        if doc.get("rs_was_by") is None:
            return BucketTaken(at_ms, was_taken=False)
        left_at = doc.get("rs_was_left_at")
        return BucketTaken(
            at_ms,
            was_taken=True,
            left_at=None if left_at is None else _epoch_ms(left_at),
            left_tokens=doc.get("rs_was_tokens"),
        )

    async def leave_bucket(
        self, biz_type: str, taker: str, tokens: float | None, now_ms: int
    ) -> None:
        result = await self._l.biz.update_one(
            {"_id": biz_type, "rs_by": taker},
            {"$set": {"rs_tokens": tokens}, "$currentDate": {"rs_left_at": True}},
        )
        if result.matched_count == 0:
            await self._l.biz.update_one(
                {"_id": biz_type, "rs_by": {"$exists": True, "$ne": taker}},
                {"$set": {"rs_left_at": None, "rs_tokens": None}},
            )


def _epoch_ms(at: datetime) -> int:
    if at.tzinfo is None:  # a client without tz_aware: BSON dates are UTC
        at = at.replace(tzinfo=UTC)
    return round(at.timestamp() * 1000)
