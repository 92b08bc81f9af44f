"""MongoDB time pointers, fenced."""

from __future__ import annotations

from collections.abc import Sequence

from pymongo import UpdateOne
from pymongo.errors import BulkWriteError, DuplicateKeyError

from timer_service.store.mongo.layout import DUPLICATE_KEY, Layout


class MongoPointers:
    def __init__(self, layout: Layout) -> None:
        self._l = layout

    async def load_pointers(self, names: Sequence[str]) -> dict[str, int]:
        docs = await self._l.pointers.find({"_id": {"$in": list(names)}}).to_list(None)
        return {d["_id"]: int(d["second"]) for d in docs}

    async def save_pointers(self, names: Sequence[str], second: int, fence: int) -> bool:
        if len(names) == 1:
            return await self._save_pointer(names[0], second, fence)
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

    async def _save_pointer(self, name: str, second: int, fence: int) -> bool:
        try:
            await self._l.pointers.update_one(
                {"_id": name, "fence": {"$lte": fence}},
                {"$set": {"second": second, "fence": fence}},
                upsert=True,
            )
        except DuplicateKeyError:
            return False
        return True
