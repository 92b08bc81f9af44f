"""MongoDB scan: the seconds index, and claims as conditional range updates in the
buckets each second's entries name (store/mongo/layout.py)."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Collection
from dataclasses import replace
from typing import Any

from bson import ObjectId
from pymongo import ASCENDING, DeleteOne, UpdateOne
from pymongo.errors import OperationFailure

from timer_service import jobs as machine
from timer_service.calendar import counts_biz
from timer_service.dispatch import Claimed, SecondEntry
from timer_service.model import JobState
from timer_service.partitions import partition_of_slot, second_of_slot, slot
from timer_service.store.mongo.layout import (
    CLAIM_PROJECTION,
    LOAD_BATCH,
    Doc,
    Layout,
    SlotMoves,
    biz_of_field,
    change_update,
    count_field,
    doc_to_job,
    guard_filter,
    one_reply,
)
from timer_service.store.mongo.scope import Scope, Scoped

log = logging.getLogger(__name__)

_NAMED_KEPT = 100_000  # seconds whose buckets a scanner remembers (a few MB at most)
_CLAIMS_KEPT = 64  # recent claims whose buckets a scanner remembers (one claim at a time)


class MongoScan(Scoped):
    def __init__(self, layout: Layout, scope: Scope) -> None:
        super().__init__(layout, scope)
        # Where the change stream got to: a new watch after an error resumes there,
        # so the events in between are not lost (only a token the oplog no longer
        # holds is dropped, and the daemon's safety poll covers that gap).
        self._resume_token: Any = None
        # The buckets each second's entries named when last read (`next_seconds`,
        # `load_second`): where its claims look. An entry that names another bucket
        # later has a new version, so the daemon loads the second again before it
        # may release it, and the load reads the list again.
        self._named: dict[int, list[int]] = {}
        # The buckets each recent claim went to, for `find_claim`: a load since then
        # may have taken a bucket off the entry (its jobs no longer pending: claimed).
        self._claimed_in: dict[str, list[int]] = {}

    def own(self, partitions: Collection[int] | None) -> None:
        """Scope every later call of the daemon's ports to these partitions (the
        daemon's leases)."""
        self._scope.own(partitions)

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
        named: dict[int, set[int]] = defaultdict(set)
        for docs in found:
            for d in docs:
                at = int(d["_id"])
                by_second[second_of_slot(at)].append((partition_of_slot(at), str(d["v"])))
                named[second_of_slot(at)].update(self._l.buckets_of_entry(d))
        seconds = sorted(by_second)[:limit]
        for s in seconds:
            self._remember(s, sorted(named[s]))
        return [SecondEntry.merged(s, by_second[s]) for s in seconds]

    async def load_second(self, second: int, fence: int) -> list[tuple[str, int]]:
        slots = [slot(p, second) for p in self._partitions()]
        stamp = {"_id": slots[0] if len(slots) == 1 else {"$in": slots}}
        counts = {"n": 1, "by": 1, "cv": 1}
        if len(slots) == 1:
            entry = await self._l.seconds.find_one_and_update(
                stamp, {"$max": {"f": fence}}, {"buckets": 1, "v": 1, **counts}
            )
            entries = [] if entry is None else [entry]
        else:
            await self._l.seconds.update_many(stamp, {"$max": {"f": fence}})
            entries = await self._l.seconds.find(stamp, {"buckets": 1, **counts}).to_list(None)
        buckets = self._remember(second, self._buckets_named(second, entries))
        pending = self._scoped({"second": second, "state": JobState.PENDING.value})
        found = await asyncio.gather(
            *(
                self._l.buckets[b]
                .find(pending, {"next_attempt_at": 1})
                .batch_size(LOAD_BATCH)
                .to_list(None)
                for b in buckets
            )
        )
        if len(entries) == 1 and "buckets" in entries[0]:
            empty = [b for b, docs in zip(buckets, found, strict=True) if not docs]
            if empty:
                await self._forget_buckets(second, entries[0], empty)
        due = [(d["_id"], d["next_attempt_at"]) for docs in found for d in docs]
        await self._recount(second, entries, due)
        return due

    async def _recount(
        self, second: int, entries: list[Doc], pending: list[tuple[str, int]]
    ) -> None:
        """Set the calendar's counts of these entries to the pending jobs just read, if
        they differ and no count has moved since the entries were read (`cv`). A write
        whose count update failed or was lost, after its job was written, leaves the
        counts off by one until then (docs/architecture.md, "Load calendar")."""
        exact: dict[int, Counter[str]] = defaultdict(Counter)
        for key, _ in pending:
            biz = key.split("/", 1)[0]
            if counts_biz(biz):
                exact[self._l.slot(key, second)][biz] += 1
        fixes = []
        for entry in entries:
            want = exact.get(int(entry["_id"]), Counter())
            have = {biz_of_field(f): n for f, n in (entry.get("by") or {}).items() if n}
            if entry.get("n", 0) != sum(want.values()) or have != dict(want):
                by = {count_field(b)[len("by.") :]: n for b, n in want.items()}
                fixes.append(
                    UpdateOne(
                        {"_id": entry["_id"], "cv": entry.get("cv")},
                        {"$set": {"n": sum(want.values()), "by": by, "cv": str(ObjectId())}},
                    )
                )
        if fixes:
            await self._l.seconds.bulk_write(fixes, ordered=False)

    async def _forget_buckets(self, second: int, entry: Doc, empty: list[int]) -> None:
        """Take buckets that hold no pending job of `second` off its entry, so that its
        claims do not read them (named by jobs rescheduled, retried or cancelled out of
        the second since). Only at the version read before the load: a write into the
        second since then (which names its bucket again) makes it miss."""
        pulled = await self._l.seconds.update_one(
            {"_id": entry["_id"], "v": entry["v"]}, {"$pull": {"buckets": {"$in": empty}}}
        )
        if pulled.modified_count:
            kept = [b for b in self._l.buckets_of_entry(entry) if b not in empty]
            self._remember(second, kept or [self._l.bucket_no(second)])

    def _buckets_named(self, second: int, entries: list[Doc]) -> list[int]:
        """The buckets these entries of `second` name; with none (no entry, or one
        whose buckets were all found empty), its own bucket."""
        named = {b for e in entries for b in self._l.buckets_of_entry(e)}
        return sorted(named) or [self._l.bucket_no(second)]

    async def _buckets_of(self, second: int) -> list[int]:
        """Where `second`'s jobs are: as its entries named when last read, or read now
        (a claim of a second this process has not read)."""
        known = self._named.get(second)
        if known is not None:
            return known
        slots = [slot(p, second) for p in self._partitions()]
        entries = await self._l.seconds.find({"_id": {"$in": slots}}, {"buckets": 1}).to_list(None)
        return self._remember(second, self._buckets_named(second, entries))

    def _remember(self, second: int, buckets: list[int]) -> list[int]:
        if len(self._named) >= _NAMED_KEPT:
            self._named.clear()  # seconds never released here (another daemon's now)
        self._named[second] = buckets
        return buckets

    async def claim_due(
        self,
        second: int,
        upto_ms: int,
        claim: str,
        fence: int,
        now_ms: int,
        limit: int | None = None,
    ) -> list[Claimed]:
        buckets = await self._buckets_of(second)  # nearly always one: the second's own
        if len(self._claimed_in) >= _CLAIMS_KEPT:
            del self._claimed_in[next(iter(self._claimed_in))]
        self._claimed_in[claim] = buckets
        if limit is None:  # side by side
            found = await asyncio.gather(
                *(self._claim_in(b, second, upto_ms, claim, fence, now_ms, None) for b in buckets)
            )
            return [c for got in found for c in got]
        claimed: list[Claimed] = []
        for b in buckets:  # bounded: one after another, until the limit
            left = limit - len(claimed)
            if left == 0:
                break
            claimed += await self._claim_in(b, second, upto_ms, claim, fence, now_ms, left)
        return claimed

    async def _claim_in(
        self,
        b: int,
        second: int,
        upto_ms: int,
        claim: str,
        fence: int,
        now_ms: int,
        limit: int | None,
    ) -> list[Claimed]:
        change = machine.claim(claim, fence, now_ms)
        coll = self._l.buckets[b]
        # `jobs.claimable` as a query: the guard's state, due by upto_ms, fence not higher.
        query = self._scoped(
            {
                "second": second,
                **guard_filter(change.guard),
                "next_attempt_at": {"$lte": upto_ms},
                "fence": {"$lte": fence},
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
        if len(docs) == result.modified_count:
            # Out of the calendar, in one command for the round. (More found than
            # claimed: some were this claim's already, a round retried after a lost
            # reply, and counted then or not: the second's next load recounts.)
            await self._l.bump([], self._claimed_moves(docs))
        return [
            replace(machine.claimed(doc_to_job(d), d["second"], carry=True), bucket=b) for d in docs
        ]

    async def find_claim(self, second: int, claim: str) -> list[Claimed]:
        buckets = self._claimed_in.get(claim) or await self._buckets_of(second)
        mine = self._scoped({"second": second, "claim": claim, "state": JobState.DISPATCHED.value})
        found = await asyncio.gather(
            *(self._l.buckets[b].find(mine, CLAIM_PROJECTION).to_list(None) for b in buckets)
        )
        return [
            replace(machine.claimed(doc_to_job(d), d["second"], carry=True), bucket=b)
            for b, docs in zip(buckets, found, strict=True)
            for d in docs
        ]

    def _claimed_moves(self, docs: list[Doc]) -> SlotMoves:
        moves: SlotMoves = Counter()
        for d in docs:
            if counts_biz(d["biz_type"]):
                moves[(self._l.slot(d["_id"], d["second"]), d["biz_type"])] -= 1
        return moves

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
        # Released, or written into since it was read: either way its list is read
        # again before the next claim (a write may have named another bucket).
        self._named.pop(entry.second, None)
        if deleted == len(parts):
            return True
        slots = [slot(p, entry.second) for p, _ in parts]
        return await self._l.seconds.find_one({"_id": {"$in": slots}}, {"_id": 1}) is None

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
                    if _names_buckets_anew(change):
                        # Claims read the entry's buckets again (`_buckets_of`) before
                        # the daemon hears of the write (the yield below).
                        self._named.pop(second_of_slot(at), None)
                    # One stream for every partition (a stream per partition would cost
                    # the store work on every write, P times): others' are passed over.
                    if self._owned is None or partition_of_slot(at) in self._owned:
                        yield second_of_slot(at)


def _names_buckets_anew(change: Doc) -> bool:
    """Whether a change-stream event may have changed an entry's list of buckets."""
    if change.get("operationType") != "update":
        return True  # a new entry (or a replaced one)
    fields = change.get("updateDescription", {}).get("updatedFields", {})
    return any(name.split(".")[0] == "buckets" for name in fields)
