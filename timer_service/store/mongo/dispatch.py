"""MongoDB dispatch: the seconds index, claims as conditional range updates, and
the reconciler's reads."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Collection, Sequence
from typing import Any

from bson import ObjectId
from pymongo import ASCENDING, UpdateOne
from pymongo.errors import OperationFailure

from timer_service import jobs as machine
from timer_service.dispatch import Claimed, SecondEntry
from timer_service.model import Job, JobState, second_of
from timer_service.store.mongo.layout import (
    CLAIM_PROJECTION,
    LOCATOR_SLACK_MS,
    Doc,
    Layout,
    change_update,
    doc_to_job,
    guard_filter,
)

log = logging.getLogger(__name__)

ROUNDS_PAGE = 1000  # open rounds read per sweep (one per claim: normally a handful)


class MongoDispatch:
    def __init__(self, layout: Layout) -> None:
        self._l = layout
        # Where the change stream got to: a new watch after an error resumes there,
        # so the events in between are not lost (only a token the oplog no longer
        # holds is dropped, and the daemon's safety poll covers that gap).
        self._resume_token: Any = None

    async def next_seconds(self, from_s: int, to_s: int, limit: int) -> list[SecondEntry]:
        docs = (
            await self._l.seconds.find({"_id": {"$gte": from_s, "$lte": to_s}})
            .sort("_id", ASCENDING)
            .limit(limit)
            .to_list(None)
        )
        return [SecondEntry(d["_id"], str(d["v"])) for d in docs]

    async def load_second(self, second: int, fence: int) -> list[tuple[str, int]]:
        await self._l.seconds.update_one({"_id": second}, {"$max": {"f": fence}})
        pending = {"second": second, "state": JobState.PENDING.value}
        docs = await self._l.bucket(second).find(pending, {"next_attempt_at": 1}).to_list(None)
        return [(d["_id"], d["next_attempt_at"]) for d in docs]

    async def claim_due(
        self, second: int, upto_ms: int, claim: str, fence: int, now_ms: int
    ) -> list[Claimed]:
        change = machine.claim(claim, fence, now_ms)
        coll = self._l.bucket(second)
        # `jobs.claimable` as a query: the guard's state, due by upto_ms, fence not higher.
        query = {
            "second": second,
            **guard_filter(change.guard),
            "next_attempt_at": {"$lte": upto_ms},
            "fence": {"$lte": fence},
        }
        result = await coll.update_many(query, change_update(change))
        if result.modified_count == 0:
            return []
        docs = await coll.find({"second": second, "claim": claim}, CLAIM_PROJECTION).to_list(None)
        return [machine.claimed(doc_to_job(d), d["second"]) for d in docs]

    async def open_round(self, claim: str, fence: int, now_ms: int) -> None:
        await self._l.rounds.insert_one({"_id": claim, "fence": fence, "opened_at": now_ms})

    async def close_rounds(self, claims: Collection[str]) -> None:
        if claims:
            await self._l.rounds.delete_many({"_id": {"$in": list(claims)}})

    async def find_unpublished(
        self, opened_before_ms: int, limit: int, *, fence_below: int | None = None
    ) -> list[Job]:
        # The rounds collection holds only claims on their way to the queue (a few
        # documents): no index. Their jobs are found through each bucket's
        # (state, claimed_at) index, from the oldest round on.
        query: Doc = {"opened_at": {"$lt": opened_before_ms}}
        if fence_below is not None:
            query["fence"] = {"$lt": fence_below}
        rounds = await self._l.rounds.find(query).to_list(ROUNDS_PAGE)
        if not rounds:
            return []
        claims = sorted(r["_id"] for r in rounds)
        jobs_query = {
            "state": JobState.DISPATCHED.value,
            "claimed_at": {"$gte": min(r["opened_at"] for r in rounds)},
            "claim": {"$in": claims},
            "sending": None,
        }
        found = await asyncio.gather(
            *(
                c.find(jobs_query).sort("claimed_at", ASCENDING).limit(limit).to_list(None)
                for c in self._l.buckets
            )
        )
        jobs = [doc_to_job(d) for docs in found for d in docs]
        named = {job.claim for job in jobs}
        complete = all(len(docs) < limit for docs in found)  # else a round may be unread
        if complete and (done := [c for c in claims if c not in named]):
            await self._l.rounds.delete_many({"_id": {"$in": done}})
        jobs.sort(key=lambda j: j.claimed_at or 0)
        return jobs[:limit]

    async def release_second(self, entry: SecondEntry, fence: int) -> bool:
        result = await self._l.seconds.delete_one(
            {"_id": entry.second, "v": entry.version, "f": {"$not": {"$gt": fence}}}
        )
        if result.deleted_count == 1:
            return True
        return await self._l.seconds.find_one({"_id": entry.second}, {"_id": 1}) is None

    async def find_overdue_pending(self, before_ms: int, limit: int) -> list[int]:
        # Served by the (state, next_attempt_at) index of every bucket: normally empty.
        query = {"state": JobState.PENDING.value, "next_attempt_at": {"$lt": before_ms}}
        found = await asyncio.gather(
            *(
                c.find(query, {"second": 1, "next_attempt_at": 1})
                .sort("next_attempt_at", ASCENDING)
                .limit(limit)
                .to_list(None)
                for c in self._l.buckets
            )
        )
        docs = sorted((d for ds in found for d in ds), key=lambda d: d["next_attempt_at"])
        return sorted({d["second"] for d in docs[:limit]})

    async def restore_seconds(self, seconds: Collection[int]) -> None:
        ops = [
            UpdateOne({"_id": s}, {"$setOnInsert": {"v": str(ObjectId())}}, upsert=True)
            for s in sorted(seconds)
        ]
        if ops:
            await self._l.seconds.bulk_write(ops, ordered=False)

    async def find_stale_dispatched(
        self,
        claimed_before_ms: int,
        limit: int,
        *,
        skip_biz_types: Collection[str] = (),
    ) -> list[Job]:
        # Served by the (state, claimed_at) index of every bucket.
        query: Doc = {
            "state": JobState.DISPATCHED.value,
            "claimed_at": {"$lt": claimed_before_ms},
        }
        if skip_biz_types:
            query["biz_type"] = {"$nin": sorted(skip_biz_types)}
        found = await asyncio.gather(
            *(
                c.find(query).sort("claimed_at", ASCENDING).limit(limit).to_list(None)
                for c in self._l.buckets
            )
        )
        jobs = [doc_to_job(d) for docs in found for d in docs]
        jobs.sort(key=lambda j: j.claimed_at or 0)
        return jobs[:limit]

    async def keep_identities(self, now_ms: int, limit: int) -> int:
        # Jobs still waiting half the slack after they were set to fire: served by each
        # bucket's (state, next_attempt_at) index, normally an empty range.
        live = [JobState.PENDING.value, JobState.DISPATCHED.value]
        query = {"state": {"$in": live}, "next_attempt_at": {"$lt": now_ms - LOCATOR_SLACK_MS // 2}}
        found = await asyncio.gather(
            *(c.find(query, {"_id": 1}).limit(limit).to_list(None) for c in self._l.buckets)
        )
        keys = [d["_id"] for docs in found for d in docs][:limit]
        await self._l.extend_locators(
            keys, now_ms + LOCATOR_SLACK_MS // 2, keep_until_ms=now_ms + LOCATOR_SLACK_MS
        )
        return len(keys)

    async def reclaim(
        self, jobs: Sequence[Job], claim: str, fence: int, now_ms: int
    ) -> list[Claimed]:
        by_bucket: dict[int, list[Job]] = defaultdict(list)
        for job in jobs:
            if job.next_attempt_at is not None and job.claim is not None:
                by_bucket[self._l.bucket_no(second_of(job.next_attempt_at))].append(job)
        out: list[Claimed] = []
        for b, items in by_bucket.items():
            ops = []
            for j in items:
                assert j.claim is not None
                change = machine.reclaim(j.claim, claim, fence, now_ms)
                query = {"_id": j.key, **guard_filter(change.guard), "fence": {"$lte": fence}}
                ops.append(UpdateOne(query, change_update(change)))
            bucket = self._l.buckets[b]
            await bucket.bulk_write(ops, ordered=False)
            mine = {"_id": {"$in": [j.key for j in items]}, "claim": claim}
            docs = await bucket.find(mine, CLAIM_PROJECTION).to_list(None)
            out.extend(machine.claimed(doc_to_job(d), d["second"]) for d in docs)
        return out

    async def count_jobs(self, states: Collection[JobState]) -> dict[tuple[str, JobState], int]:
        pipeline: list[dict[str, Any]] = [
            # Served by the (state, claimed_at) index of every bucket.
            {"$match": {"state": {"$in": sorted(states)}}},
            {"$group": {"_id": {"b": "$biz_type", "s": "$state"}, "n": {"$sum": 1}}},
        ]
        counts: Counter[tuple[str, JobState]] = Counter()
        # One bucket after another: a sample must not hold the store up for the hot path.
        for coll in self._l.buckets:
            async for row in await coll.aggregate(pipeline):
                counts[(row["_id"]["b"], JobState(row["_id"]["s"]))] += int(row["n"])
        return dict(counts)

    async def watch_seconds(  # type: ignore[override]
        self, stop: asyncio.Event | None = None
    ) -> AsyncIterator[int]:
        # Writes into a second (a new entry, a renewed version), not a daemon's fence
        # stamp on it (`load_second`), which would nudge the daemon about its own load.
        pipeline = [
            {
                "$match": {
                    "$or": [
                        {"operationType": {"$in": ["insert", "replace"]}},
                        {
                            "operationType": "update",
                            "updateDescription.updatedFields.v": {"$exists": True},
                        },
                    ]
                }
            }
        ]
        token = self._resume_token
        try:
            # Each getMore returns within a second (MongoDB's default await, explicit),
            # so `stop` is seen between two of them and the stream closes with none
            # pending: cancelled mid-getMore, closing it waits for SecantusDB's
            # killCursors reply, which it holds behind the getMore (seen hanging shutdown).
            stream = await self._l.seconds.watch(
                pipeline, max_await_time_ms=1000, resume_after=token
            )
        except OperationFailure:
            if token is None:
                raise
            log.warning("change stream cannot resume; starting afresh (safety poll covers)")
            self._resume_token = None
            raise
        async with stream:
            while stop is None or not stop.is_set():
                change = await stream.try_next()
                self._resume_token = stream.resume_token
                if change is not None:
                    yield change["documentKey"]["_id"]
