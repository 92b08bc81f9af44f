"""MongoDB schedules (`SchedulesPort`): one collection beside the jobs."""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Sequence
from typing import Any

from pymongo import ASCENDING
from pymongo.errors import DuplicateKeyError

from timer_service.constants import SCHEDULES_COLLECTION
from timer_service.schedules import Catchup, Schedule, ScheduleSpec
from timer_service.store.ports.schedules import KEPT_ON_REPLACE, check_forward


def schedule_to_doc(schedule: Schedule) -> dict[str, Any]:
    spec = schedule.spec
    return {
        "_id": schedule.key,
        "biz_type": schedule.biz_type,
        "schedule_id": schedule.schedule_id,
        "cron": spec.cron,
        "timezone": spec.timezone,
        "intervals_ms": list(spec.intervals_ms) if spec.intervals_ms is not None else None,
        "cycle": spec.cycle,
        "payload": spec.payload_json,
        "start_at": spec.start_at,
        "end_at": spec.end_at,
        "max_runs": spec.max_runs,
        "paused": spec.paused,
        "catchup": spec.catchup.value,
        "anchor_at": schedule.anchor_at,
        "next_run_at": schedule.next_run_at,
        "runs": schedule.runs,
        "last_run_at": schedule.last_run_at,
        "last_job_id": schedule.last_job_id,
        "created_at": schedule.created_at,
        "updated_at": schedule.updated_at,
    }


def doc_to_schedule(doc: dict[str, Any]) -> Schedule:
    intervals = doc.get("intervals_ms")
    spec = ScheduleSpec(
        cron=doc.get("cron"),
        timezone=doc.get("timezone"),
        intervals_ms=tuple(intervals) if intervals is not None else None,
        cycle=doc.get("cycle"),
        payload_json=doc.get("payload", "null"),
        start_at=doc.get("start_at"),
        end_at=doc.get("end_at"),
        max_runs=doc.get("max_runs"),
        paused=doc.get("paused", False),
        catchup=Catchup(doc.get("catchup", "skip")),
    )
    return Schedule(
        biz_type=doc["biz_type"],
        schedule_id=doc["schedule_id"],
        spec=spec,
        anchor_at=doc["anchor_at"],
        next_run_at=doc.get("next_run_at"),
        runs=doc.get("runs", 0),
        last_run_at=doc.get("last_run_at"),
        last_job_id=doc.get("last_job_id"),
        created_at=doc.get("created_at", 0),
        updated_at=doc.get("updated_at", 0),
    )


class MongoSchedules:
    """Collection ``schedules``; indexes on (biz_type, _id) for listing and on
    next_run_at for the repair, made on first use (`MongoStore.setup` does not
    create them)."""

    def __init__(self, database: Any) -> None:
        self._coll = database[SCHEDULES_COLLECTION]
        self._ready = False
        self._setup_lock = asyncio.Lock()

    async def _ensure_indexes(self) -> None:
        async with self._setup_lock:
            if self._ready:
                return
            await self._coll.create_index([("biz_type", ASCENDING), ("_id", ASCENDING)])
            await self._coll.create_index("next_run_at")
            self._ready = True

    async def _coll_ready(self) -> Any:
        if not self._ready:
            await self._ensure_indexes()
        return self._coll

    async def put(self, schedule: Schedule) -> Schedule | None:
        coll = await self._coll_ready()
        doc = schedule_to_doc(schedule)
        on_insert = {name: doc.pop(name) for name in KEPT_ON_REPLACE}
        del doc["_id"]
        update = {"$set": doc, "$setOnInsert": on_insert}
        for attempt in range(2):
            try:
                before = await coll.find_one_and_update({"_id": schedule.key}, update, upsert=True)
            except DuplicateKeyError:  # two concurrent upserts of a new key: one inserts
                if attempt:
                    raise
                continue
            return doc_to_schedule(before) if before else None
        return None  # unreachable: the loop returns or raises

    async def get(self, key: str) -> Schedule | None:
        coll = await self._coll_ready()
        doc = await coll.find_one({"_id": key})
        return doc_to_schedule(doc) if doc else None

    async def get_many(self, keys: Sequence[str]) -> dict[str, Schedule]:
        coll = await self._coll_ready()
        docs = await coll.find({"_id": {"$in": list(set(keys))}}).to_list(None)
        return {d["_id"]: doc_to_schedule(d) for d in docs}

    async def delete(self, key: str) -> Schedule | None:
        coll = await self._coll_ready()
        doc = await coll.find_one_and_delete({"_id": key})
        return doc_to_schedule(doc) if doc else None

    async def list(self, biz_type: str | None) -> builtins.list[Schedule]:
        coll = await self._coll_ready()
        query = {} if biz_type is None else {"biz_type": biz_type}
        docs = await coll.find(query).sort("_id", ASCENDING).to_list(None)
        return [doc_to_schedule(d) for d in docs]

    async def advance(
        self,
        key: str,
        from_occurrence_ms: int,
        to_occurrence_ms: int | None,
        job_id: str,
        now_ms: int,
    ) -> bool:
        check_forward(from_occurrence_ms, to_occurrence_ms)
        coll = await self._coll_ready()
        result = await coll.update_one(
            {"_id": key, "next_run_at": from_occurrence_ms, "paused": False},
            {
                "$set": {
                    "next_run_at": to_occurrence_ms,
                    "last_run_at": from_occurrence_ms,
                    "last_job_id": job_id,
                    "updated_at": now_ms,
                },
                "$inc": {"runs": 1},
            },
        )
        return bool(result.modified_count == 1)

    async def stale(self, before_ms: int, limit: int) -> builtins.list[Schedule]:
        coll = await self._coll_ready()
        docs = (
            await coll.find({"next_run_at": {"$ne": None, "$lt": before_ms}})
            .sort([("next_run_at", ASCENDING), ("_id", ASCENDING)])
            .limit(limit)
            .to_list(None)
        )
        return [doc_to_schedule(d) for d in docs]
