"""The MongoDB audit log: collection ``audit``, ``_id`` the entry's id (time-ordered),
removed by a TTL index after the retention period."""

from __future__ import annotations

from typing import Any

from pymongo import ASCENDING, DESCENDING

from timer_service.audit import AuditAction, AuditEntry
from timer_service.constants import AUDIT_COLLECTION
from timer_service.store.mongo.layout import Doc, Layout


class MongoAudit:
    def __init__(self, layout: Layout) -> None:
        self._l = layout
        self._coll = layout.db[AUDIT_COLLECTION]

    async def create_indexes(self) -> None:
        await self._coll.create_index("expire_at", expireAfterSeconds=0)
        await self._coll.create_index([("biz_type", ASCENDING), ("_id", ASCENDING)])
        await self._coll.create_index([("action", ASCENDING), ("_id", ASCENDING)])

    async def record(self, entry: AuditEntry) -> None:
        doc: Doc = {**entry.to_public(), "expire_at": self._l.expire_at(entry.at)}
        doc["_id"] = doc.pop("id")
        await self._coll.replace_one({"_id": doc["_id"]}, doc, upsert=True)

    async def list_entries(
        self, biz_type: str | None, action: AuditAction | None, limit: int, cursor: str | None
    ) -> tuple[list[AuditEntry], str | None]:
        query: dict[str, Any] = {}
        if biz_type is not None:
            query["biz_type"] = biz_type
        if action is not None:
            query["action"] = action.value
        if cursor is not None:
            query["_id"] = {"$lt": cursor}
        found = self._coll.find(query, {"expire_at": 0}).sort("_id", DESCENDING).limit(limit + 1)
        docs = await found.to_list(None)
        entries = [AuditEntry.from_public({**d, "id": d["_id"]}) for d in docs[:limit]]
        more = len(docs) > limit
        return entries, (entries[-1].id if more and entries else None)
