"""MongoDB reconciler reads and reclaims."""

from __future__ import annotations

import asyncio
import re
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace

from pymongo import ASCENDING, UpdateOne

from timer_service import jobs as machine
from timer_service.dispatch import Claimed
from timer_service.model import Job, JobState
from timer_service.store.mongo.layout import (
    CLAIM_PROJECTION,
    Doc,
    change_update,
    doc_to_job,
    guard_filter,
    one_reply,
)
from timer_service.store.mongo.scope import Scoped

ROUNDS_PAGE = 1000  # open rounds read per sweep (one per claim: normally a handful)


class MongoReconcile(Scoped):
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

    async def find_stale_dispatched(
        self,
        claimed_before_ms: int,
        limit: int,
        *,
        claimed_before_by_biz: Mapping[str, int] | None = None,
        unmarked_only: bool = False,
        not_sent_by: Collection[str] = (),
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
        elif not_sent_by:
            query["sending"] = {"$not": {"$regex": _marks_of(not_sent_by)}}
        return await self._oldest_claims_first(self._scoped(query), limit)

    async def find_sent_by(self, broker_ids: Collection[str], limit: int) -> list[Job]:
        if not broker_ids:
            return []
        query = {"state": JobState.DISPATCHED.value, "sending": {"$regex": _marks_of(broker_ids)}}
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

    async def reclaim(
        self, jobs: Sequence[Job], claim: str, fence: int, now_ms: int
    ) -> list[Claimed]:
        wanted = [j for j in jobs if j.next_attempt_at is not None and j.claim is not None]
        if not wanted:
            return []
        # Where each job lives: its locator says, and never changes (a rare path:
        # the reconciler's, a few jobs at a time).
        keys = [j.key for j in wanted]
        found = self._l.locator.find({"_id": {"$in": keys}}, {"bucket": 1, "second": 1})
        homes = {loc["_id"]: self._l.home_of(loc) for loc in await found.to_list(None)}
        by_bucket: dict[int, list[Job]] = defaultdict(list)
        for job in wanted:
            if job.key in homes:
                by_bucket[homes[job.key]].append(job)
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
                }
                ops.append(UpdateOne(query, change_update(change)))
            bucket = self._l.buckets[b]
            await bucket.bulk_write(ops, ordered=False)
            keys = [j.key for j in items]
            mine = {"_id": {"$in": keys}, **self._l.shard_keys(keys), "claim": claim}
            found = bucket.find(mine, CLAIM_PROJECTION).batch_size(one_reply(len(keys)))
            docs = await found.to_list(None)
            out.extend(
                replace(machine.claimed(doc_to_job(d), d["second"], carry=True), bucket=b)
                for d in docs
            )
        return out


def _marks_of(broker_ids: Collection[str]) -> str:
    """The pattern of the send marks these brokers make: a mark is "<broker id>/<random>"
    (dispatch.new_send_token)."""
    return "^(?:{})/".format("|".join(re.escape(b) for b in sorted(broker_ids)))
