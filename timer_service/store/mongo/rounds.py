"""MongoDB claim rounds: one small document per claim on its way to the queue."""

from __future__ import annotations

from collections.abc import Collection

from pymongo import UpdateMany, UpdateOne

from timer_service.store.mongo.scope import Scoped


class MongoRounds(Scoped):
    async def open_round(
        self, claim: str, fence: int, now_ms: int, closing: Collection[str] = ()
    ) -> None:
        if not closing:
            await self._l.rounds.insert_one({"_id": claim, "fence": fence, "opened_at": now_ms})
            return
        # One `update` command: a bulk write of an insert and a delete is two. The
        # closed rounds stay as documents marked closed until the next sweep deletes
        # them (`find_unpublished`).
        opened = {"$setOnInsert": {"fence": fence, "opened_at": now_ms}}
        await self._l.rounds.bulk_write(
            [
                UpdateOne({"_id": claim}, opened, upsert=True),
                UpdateMany({"_id": {"$in": list(closing)}}, {"$set": {"closed": True}}),
            ],
            ordered=False,
        )

    async def close_rounds(self, claims: Collection[str]) -> None:
        if claims:
            await self._l.rounds.delete_many({"_id": {"$in": list(claims)}})
