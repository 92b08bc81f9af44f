"""MongoDB biz types.

A delete is two-phase, in single-document writes on the biz type's document: mark it
`deleting` (a token of its own), look for active jobs, then delete it only if the mark
is still its own. A create, after writing its jobs, reads its biz types and calls off a
delete in progress by taking the mark away, so the delete's last step misses
(ports/biz_types.py; docs/architecture.md, "Deleting a biz type")."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Sequence

from pymongo import ASCENDING
from pymongo.errors import DuplicateKeyError

from timer_service.errors import Conflict, VersionMismatch
from timer_service.model import ACTIVE_STATES, BizType
from timer_service.store.mongo.layout import Layout

# The mark of a delete in progress: its token. A create that finds it takes it away.
DELETING = "deleting"


class MongoBizTypes:
    def __init__(self, layout: Layout) -> None:
        self._l = layout

    async def put_biz_type(
        self, biz: BizType, *, only_if_updated_at: int | None = None, create_only: bool = False
    ) -> bool:
        doc = biz.to_doc()
        if create_only:
            try:
                await self._l.biz.insert_one({"_id": biz.biz_type, **doc})
            except DuplicateKeyError:
                raise VersionMismatch(f"biz type {biz.biz_type!r} exists") from None
            return True
        created_at = doc.pop("created_at")
        if only_if_updated_at is not None:
            result = await self._l.biz.update_one(
                {"_id": biz.biz_type, "updated_at": only_if_updated_at}, {"$set": doc}
            )
            if result.matched_count == 0:
                raise VersionMismatch(f"biz type {biz.biz_type!r} is not at the version named")
            return False
        result = await self._l.biz.update_one(
            {"_id": biz.biz_type},
            {"$set": doc, "$setOnInsert": {"created_at": created_at}},
            upsert=True,
        )
        return result.upserted_id is not None

    async def get_biz_type(self, name: str) -> BizType | None:
        doc = await self._l.biz.find_one({"_id": name})
        return BizType.from_doc(doc) if doc else None

    async def get_biz_types(self, names: Sequence[str]) -> dict[str, BizType]:
        found = await self._l.biz.find({"_id": {"$in": list(set(names))}}).to_list(None)
        return {d["_id"]: BizType.from_doc(d) for d in found}

    async def list_biz_types(self) -> list[BizType]:
        docs = await self._l.biz.find({}).sort("_id", ASCENDING).to_list(None)
        return [BizType.from_doc(d) for d in docs]

    async def keep_biz_types(self, names: Sequence[str]) -> set[str]:
        found = self._l.biz.find({"_id": {"$in": list(set(names))}}, {DELETING: 1})
        kept = set()
        for doc in await found.to_list(None):
            if DELETING in doc:
                calling_off = {"$unset": {DELETING: ""}}
                if await self._l.biz.find_one_and_update({"_id": doc["_id"]}, calling_off) is None:
                    continue  # the delete finished first
            kept.add(doc["_id"])
        return kept

    async def delete_biz_type(self, name: str) -> bool:
        # Each step is one retryable single-document write or a read of the primary,
        # acknowledged by a majority (Layout): across an election the mark, the jobs the
        # check must see and a create's call-off all survive, or the step fails and the
        # client repeats the delete (a new token takes the mark over).
        token = secrets.token_hex(8)
        marked = await self._l.biz.find_one_and_update(
            {"_id": name}, {"$set": {DELETING: token}}, {"_id": 1}
        )
        if marked is None:
            return False
        active = {"biz_type": name, "state": {"$in": sorted(s.value for s in ACTIVE_STATES)}}
        found = await asyncio.gather(*(c.find_one(active, {"_id": 1}) for c in self._l.buckets))
        if any(found):
            await self._l.biz.update_one({"_id": name, DELETING: token}, {"$unset": {DELETING: ""}})
            raise Conflict(f"biz type {name!r} still has pending or dispatched jobs")
        result = await self._l.biz.delete_one({"_id": name, DELETING: token})
        if result.deleted_count == 0:
            raise Conflict(f"jobs of biz type {name!r} were created while it was being deleted")
        return True
