"""MongoDB dispatch: the seconds index, claims as conditional range updates, and
the reconciler's reads."""

from __future__ import annotations

import asyncio
import logging
import re
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from typing import Any

from bson import ObjectId
from pymongo import ASCENDING, DeleteOne, UpdateMany, UpdateOne
from pymongo.errors import OperationFailure

from timer_service import jobs as machine
from timer_service.dispatch import Claimed, SecondEntry
from timer_service.model import Job, JobState, second_of
from timer_service.partitions import (
    is_all,
    partition_of_slot,
    second_of_slot,
    slot,
    with_legacy,
)
from timer_service.store.mongo.layout import (
    CLAIM_PROJECTION,
    LOAD_BATCH,
    LOCATOR_SLACK_MS,
    Doc,
    Layout,
    change_update,
    doc_to_job,
    guard_filter,
    one_reply,
    unmarked,
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
        self._owned: list[int] | None = None  # None: every partition, no filter

    def own(self, partitions: Collection[int] | None) -> None:
        """Scope every later call to these partitions (the daemon's leases)."""
        owned = None if partitions is None else sorted(partitions)
        self._owned = None if is_all(owned, self._l.partitions) else owned

    def _partitions(self) -> list[int]:
        return list(range(self._l.partitions)) if self._owned is None else self._owned

    def _scoped(self, query: Doc) -> Doc:
        """`query` limited to the owned partitions (a job without the field: 0)."""
        if self._owned is None:
            return query
        return {**query, "partition": {"$in": with_legacy(self._owned)}}

    async def next_seconds(self, from_s: int, to_s: int, limit: int) -> list[SecondEntry]:
        # One ordered range per partition (the slot keeps a partition's seconds
        # together), read side by side; merged per second.
        found = await asyncio.gather(
            *(
                self._l.seconds.find({"_id": {"$gte": slot(p, from_s), "$lte": slot(p, to_s)}})
                .sort("_id", ASCENDING)
                .limit(limit)
                .to_list(None)
                for p in self._partitions()
            )
        )
        by_second: dict[int, list[tuple[int, str]]] = defaultdict(list)
        for docs in found:
            for d in docs:
                at = int(d["_id"])
                by_second[second_of_slot(at)].append((partition_of_slot(at), str(d["v"])))
        return [SecondEntry.merged(s, by_second[s]) for s in sorted(by_second)[:limit]]

    async def load_second(self, second: int, fence: int) -> list[tuple[str, int]]:
        slots = [slot(p, second) for p in self._partitions()]
        stamp = {"_id": slots[0] if len(slots) == 1 else {"$in": slots}}
        await self._l.seconds.update_many(stamp, {"$max": {"f": fence}})
        pending = self._scoped({"second": second, "state": JobState.PENDING.value})
        found = self._l.bucket(second).find(pending, {"next_attempt_at": 1})
        docs = await found.batch_size(LOAD_BATCH).to_list(None)
        return [(d["_id"], d["next_attempt_at"]) for d in docs]

    async def claim_due(
        self,
        second: int,
        upto_ms: int,
        claim: str,
        fence: int,
        now_ms: int,
        limit: int | None = None,
    ) -> list[Claimed]:
        change = machine.claim(claim, fence, now_ms)
        coll = self._l.bucket(second)
        # `jobs.claimable` as a query: the guard's state, due by upto_ms, fence not higher.
        query = self._scoped(
            {
                "second": second,
                **guard_filter(change.guard),
                "next_attempt_at": {"$lte": upto_ms},
                "fence": {"$lte": fence},
                **unmarked(now_ms),
            }
        )
        if limit is not None:
            query = await self._bounded(coll, query, limit)
        result = await coll.update_many(query, change_update(change))
        if result.modified_count == 0:
            return []
        mine = self._scoped({"second": second, "claim": claim})
        found = coll.find(mine, CLAIM_PROJECTION).batch_size(one_reply(result.modified_count))
        docs = await found.to_list(None)
        return [machine.claimed(doc_to_job(d), d["second"], carry=True) for d in docs]

    @staticmethod
    async def _bounded(coll: Any, query: Doc, limit: int) -> Doc:
        """`query` cut to its first `limit` jobs in (next_attempt_at, _id) order, as a
        range on the (second, state, next_attempt_at, _id) index: the limit-th job's
        position is read first (one index walk of `limit` entries), then the claim
        takes everything up to it. A job of the range claimed or moved in between
        only makes the claim smaller."""
        last = (
            await coll.find(query, {"next_attempt_at": 1})
            .sort([("next_attempt_at", ASCENDING), ("_id", ASCENDING)])
            .skip(limit - 1)
            .limit(1)
            .to_list(1)
        )
        if not last:
            return query  # fewer than `limit`: all of them
        at, key = last[0]["next_attempt_at"], last[0]["_id"]
        before = {"next_attempt_at": {"$lt": at}}
        tie = {"next_attempt_at": at, "_id": {"$lte": key}}
        return {**query, "$or": [before, tie]}

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

    async def find_unpublished(
        self, opened_before_ms: int, limit: int, *, fence_below: int | None = None
    ) -> list[Job]:
        # The rounds collection holds only claims on their way to the queue (a few
        # documents): no index. Their jobs are found through each bucket's
        # (state, claimed_at) index, from the oldest round on.
        await self._l.rounds.delete_many({"closed": True})
        query: Doc = {"opened_at": {"$lt": opened_before_ms}, "closed": {"$ne": True}}
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
                c.find(self._scoped(jobs_query))
                .sort("claimed_at", ASCENDING)
                .limit(limit)
                .to_list(None)
                for c in self._l.buckets
            )
        )
        jobs = [doc_to_job(d) for docs in found for d in docs]
        named = {job.claim for job in jobs}
        complete = all(len(docs) < limit for docs in found)  # else a round may be unread
        if complete and (done := [c for c in claims if c not in named]):
            if self._owned is not None:
                # A round may name jobs of partitions another daemon owns: it is done
                # only when it names none at all.
                done = [c for c in done if c not in await self._claims_named(done, jobs_query)]
            if done:
                await self._l.rounds.delete_many({"_id": {"$in": done}})
        jobs.sort(key=lambda j: j.claimed_at or 0)
        return jobs[:limit]

    async def _claims_named(self, claims: list[str], jobs_query: Doc) -> set[str]:
        query = {**jobs_query, "claim": {"$in": claims}}
        found = await asyncio.gather(
            *(c.find(query, {"claim": 1}).to_list(None) for c in self._l.buckets)
        )
        return {d["claim"] for docs in found for d in docs}

    async def release_second(self, entry: SecondEntry, fence: int) -> bool:
        owned = self._partitions()
        parts = [(p, v) for p, v in entry.partition_versions() if p in owned]
        if not parts:
            return True
        unchanged = [
            {"_id": slot(p, entry.second), "v": v, "f": {"$not": {"$gt": fence}}} for p, v in parts
        ]
        if len(unchanged) == 1:
            deleted = (await self._l.seconds.delete_one(unchanged[0])).deleted_count
        else:
            result = await self._l.seconds.bulk_write(
                [DeleteOne(q) for q in unchanged], ordered=False
            )
            deleted = result.deleted_count
        if deleted == len(parts):
            return True
        slots = [slot(p, entry.second) for p, _ in parts]
        return await self._l.seconds.find_one({"_id": {"$in": slots}}, {"_id": 1}) is None

    async def find_overdue_pending(self, before_ms: int, limit: int) -> list[int]:
        # Served by the (state, next_attempt_at) index of every bucket: normally empty.
        # A job under a move's mark is not lost: the move ends, or the mark runs out.
        query = self._scoped(
            {
                "state": JobState.PENDING.value,
                "next_attempt_at": {"$lt": before_ms},
                **unmarked(before_ms),
            }
        )
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
        slots: set[int] = set()
        if self._l.partitions == 1:
            slots.update(seconds)
        elif seconds:
            # The partitions of each second that hold pending jobs (a rare repair).
            pending = self._scoped(
                {"second": {"$in": sorted(seconds)}, "state": JobState.PENDING.value}
            )
            found = await asyncio.gather(
                *(c.find(pending, {"second": 1}).to_list(None) for c in self._l.buckets)
            )
            slots.update(self._l.slot(d["_id"], d["second"]) for docs in found for d in docs)
        ops = [
            UpdateOne({"_id": s}, {"$setOnInsert": {"v": str(ObjectId())}}, upsert=True)
            for s in sorted(slots)
        ]
        if ops:
            await self._l.seconds.bulk_write(ops, ordered=False)

    async def find_stale_dispatched(
        self,
        claimed_before_ms: int,
        limit: int,
        *,
        claimed_before_by_biz: Mapping[str, int] | None = None,
        unmarked_only: bool = False,
    ) -> list[Job]:
        # Served by the (state, claimed_at) index of every bucket.
        query: Doc = {"state": JobState.DISPATCHED.value}
        bounds = claimed_before_by_biz or {}
        if bounds:
            others = {
                "biz_type": {"$nin": sorted(bounds)},
                "claimed_at": {"$lt": claimed_before_ms},
            }
            query["$or"] = [others] + [
                {"biz_type": biz, "claimed_at": {"$lt": min(bound, claimed_before_ms)}}
                for biz, bound in sorted(bounds.items())
            ]
        else:
            query["claimed_at"] = {"$lt": claimed_before_ms}
        if unmarked_only:
            query["sending"] = None
        return await self._oldest_claims_first(self._scoped(query), limit)

    async def find_sent_by(self, broker_ids: Collection[str], limit: int) -> list[Job]:
        if not broker_ids:
            return []
        # A send mark is "<broker id>/<random>" (dispatch.new_send_token).
        marks = "|".join(re.escape(b) for b in sorted(broker_ids))
        query = {"state": JobState.DISPATCHED.value, "sending": {"$regex": f"^(?:{marks})/"}}
        return await self._oldest_claims_first(self._scoped(query), limit)

    async def _oldest_claims_first(self, query: Doc, limit: int) -> list[Job]:
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
        query = self._scoped(
            {"state": {"$in": live}, "next_attempt_at": {"$lt": now_ms - LOCATOR_SLACK_MS // 2}}
        )
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
                change = machine.reclaim(j.claim, claim, fence, now_ms, j.sending)
                query = {
                    "_id": j.key,
                    **self._l.shard_key(j.key),
                    **guard_filter(change.guard),
                    "fence": {"$lte": fence},
                    **unmarked(now_ms),
                }
                ops.append(UpdateOne(query, change_update(change)))
            bucket = self._l.buckets[b]
            await bucket.bulk_write(ops, ordered=False)
            keys = [j.key for j in items]
            mine = {"_id": {"$in": keys}, **self._l.shard_keys(keys), "claim": claim}
            found = bucket.find(mine, CLAIM_PROJECTION).batch_size(one_reply(len(keys)))
            docs = await found.to_list(None)
            out.extend(machine.claimed(doc_to_job(d), d["second"], carry=True) for d in docs)
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
                    at = int(change["documentKey"]["_id"])
                    # One stream for every partition (a stream per partition would cost
                    # the store work on every write, P times): others' are passed over.
                    if self._owned is None or partition_of_slot(at) in self._owned:
                        yield second_of_slot(at)
