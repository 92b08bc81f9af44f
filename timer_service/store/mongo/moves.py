"""Moving jobs between buckets: one transaction per group, then the seconds bumped.

A job that changes its next fire second (reschedule, retry, replay) may change
bucket. Within one bucket it is an in-place conditional update; across buckets
a multi-document transaction deletes it from the old bucket, inserts it into
the new one and repoints the locator. Production MongoDB is a replica set
(change streams need it), so transactions are available.

Before its transaction, a move marks the old documents with a plain conditional
write (`move`, `move_until`), committed at once. The hot path (the daemon's
claims and reclaims, the broker's send marks) passes a marked document by
until the mark runs out (`layout.unmarked`). A process that dies inside the
transaction leaves it open until the store ends it (mongod: after
`transactionLifetimeLimitSeconds`, 60 s), and every write to the documents it
wrote waits that long: without the mark, the daemon's claim of the old second
would wait with them, and the scan loop with it. With it, only the moved jobs
wait: their move never committed, so they are where they were, and the hot
path takes them again once the mark runs out (`MOVE_MARK_MS`, past that
lifetime). A move that fails takes its mark off again (best effort: else it runs
out). The API's own writes (cancel, reschedule) do not look at the mark: a job
whose move is in flight still answers them, waiting for the move to end.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bson import ObjectId
from pymongo import UpdateOne

from timer_service.jobs import payload_fingerprint
from timer_service.model import Job
from timer_service.store.mongo.layout import (
    MOVE_MARK_FIELDS,
    Collection,
    Doc,
    Layout,
    job_to_doc,
    next_second_of,
)

log = logging.getLogger(__name__)

_MOVE_CHUNK = 100  # jobs per bucket-moving transaction
_MOVE_TIMEOUT_S = 30.0  # a move that long is retried by the caller, not waited on
# How long a move's mark keeps the hot path off the old documents: past the store's
# transaction lifetime (mongod: 60 s) and the move's own timeout, with a margin for
# the hosts' clocks (the mark is stamped with the mover's, read with the claimer's).
MOVE_MARK_MS = 120_000
_UNMARK_TIMEOUT_S = 5.0  # a mark not taken off by then runs out by itself
_NO_MARK = {"$unset": dict.fromkeys(MOVE_MARK_FIELDS, "")}


class _GroupChanged(Exception):
    """A job of a move group no longer matched; the transaction is aborted."""


@dataclass(frozen=True, slots=True)
class Move:
    """Rewrite `old` as `job` (in the bucket of its next second) if `old` still
    matches `expect`."""

    old: Doc
    job: Job
    expect: Doc


class Mover:
    def __init__(self, layout: Layout) -> None:
        self._l = layout
        self._lock = asyncio.Lock()

    async def move_one(self, move: Move) -> bool:
        """Apply one move, then bump its second. False when `old` changed meanwhile."""
        return bool(await self.move_many([move]))

    async def move_many(self, moves: Sequence[Move]) -> list[str]:
        """Apply moves (in place when the bucket is the same), then bump their seconds;
        returns the keys moved. A job that no longer matches its `expect` is skipped."""
        layout = self._l
        in_place: dict[int, list[Move]] = defaultdict(list)
        across: list[Move] = []
        for move in moves:
            old_b = layout.bucket_no(move.old["second"])
            if layout.bucket_no(next_second_of(move.job)) == old_b:
                in_place[old_b].append(move)
            else:
                across.append(move)
        # Each move's second is bumped after its jobs are written (the rewrites', then
        # each transaction's), never inside a transaction: see `_move_group`.
        moved: list[str] = []
        for b, items in in_place.items():
            moved.extend(await self._rewrite_in_place(b, items))
        done = set(moved)
        await layout.bump(
            {layout.slot(m.job.key, next_second_of(m.job)) for m in moves if m.old["_id"] in done}
        )
        if across:
            moved.extend(await self._move_across(across))
        return moved

    async def _rewrite_in_place(self, b: int, items: Sequence[Move]) -> list[str]:
        ops = []
        for m in items:
            doc = job_to_doc(m.job, next_second_of(m.job), self._l.partition(m.job.key))
            doc.pop("_id")
            # A mark left by a failed move of this job is taken off with it.
            update = {"$set": doc, **_NO_MARK}
            key = m.old["_id"]
            ops.append(UpdateOne({"_id": key, **self._l.shard_key(key), **m.expect}, update))
        bucket = self._l.buckets[b]
        result = await bucket.bulk_write(ops, ordered=False)
        if result.modified_count == len(ops):
            moved = [m.old["_id"] for m in items]
        else:  # find which went through
            keys = [m.old["_id"] for m in items]
            found = await bucket.find({"_id": {"$in": keys}, **self._l.shard_keys(keys)}).to_list(
                None
            )
            by_key = {d["_id"]: d for d in found}
            moved = []
            for m in items:
                d = by_key.get(m.old["_id"])
                if (
                    d is not None
                    and d.get("updated_at") == m.job.updated_at
                    and d.get("next_attempt_at") == m.job.next_attempt_at
                ):
                    moved.append(m.old["_id"])
        done = set(moved)
        await self._repoint([m for m in items if m.old["_id"] in done])
        return moved

    async def _repoint(self, moves: Sequence[Move], session: Any = None) -> None:
        """The locators follow their jobs: second, due time, payload, and an expiry past
        the job's next fire time."""
        # A moved job's updated_at is the move's own time (every moving change sets it).
        expiry = self._l.locator_written_expire_at
        ops = [_locator_update(m, expiry(m.job, m.job.updated_at)) for m in moves]
        if ops:
            await self._l.locator.bulk_write(ops, ordered=False, session=session)

    async def _move_across(self, moves: Sequence[Move]) -> list[str]:
        """Move jobs to other buckets: one transaction per (old bucket, new bucket) group
        of at most `_MOVE_CHUNK` jobs, one transaction at a time per process.

        Each transaction writes every collection once (a delete_many in the old bucket,
        an insert_many in the new one, one locator bulk write). That is three statements
        however many jobs move, and no transaction ever goes back to a collection it
        has written: SecantusDB deadlocks when a transaction waits for a collection
        that a plain update_many holds while retrying a write conflict against that
        same transaction (seen as the whole store freezing on a burst of retries).
        A group whose mark or delete misses a job (cancelled or moved meanwhile) is redone
        job by job, so that only the changed jobs are left where they are."""
        layout = self._l
        groups: dict[tuple[int, int], list[Move]] = defaultdict(list)
        for m in moves:
            key = (layout.bucket_no(m.old["second"]), layout.bucket_no(next_second_of(m.job)))
            groups[key].append(m)
        moved: list[str] = []
        async with self._lock:
            for items in groups.values():
                for start in range(0, len(items), _MOVE_CHUNK):
                    chunk = items[start : start + _MOVE_CHUNK]
                    if await self._move_group(chunk):
                        moved.extend(m.old["_id"] for m in chunk)
                        continue
                    if len(chunk) == 1:
                        continue  # that one job changed: nothing to redo
                    for m in chunk:
                        if await self._move_group([m]):
                            moved.append(m.old["_id"])
        return moved

    async def _move_group(self, moves: Sequence[Move]) -> bool:
        """Mark the old documents, then apply all of `moves` (one old bucket, one new
        bucket) in one transaction, or none of them: False when one no longer matches
        its `expect`."""
        layout = self._l
        old_bucket = layout.bucket(moves[0].old["second"])
        keys = [m.old["_id"] for m in moves]
        expects = {repr(sorted(m.expect.items())) for m in moves}
        if len(expects) == 1:
            matching = {"_id": {"$in": keys}, **moves[0].expect}
        else:
            matching = {"$or": [{"_id": m.old["_id"], **m.expect} for m in moves]}
        matching.update(layout.shard_keys(keys))
        docs = [
            job_to_doc(m.job, next_second_of(m.job), layout.partition(m.job.key)) for m in moves
        ]
        new_bucket = layout.bucket(docs[0]["second"])
        token = str(ObjectId())
        until = max(m.job.updated_at for m in moves) + MOVE_MARK_MS
        mark = {"$set": {"move": token, "move_until": until}}
        if (await old_bucket.update_many(matching, mark)).modified_count != len(keys):
            await self._unmark(old_bucket, moves, token)
            return False
        matching = {**matching, "move": token}

        async def move(session: Any) -> None:
            deleted = await old_bucket.delete_many(matching, session=session)
            if deleted.deleted_count != len(keys):
                raise _GroupChanged()  # with_transaction aborts, then re-raises it
            await new_bucket.insert_many(docs, session=session)
            await self._repoint(moves, session)

        try:
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for drops a cancel
            # that comes as the transaction commits.
            async with layout.client.start_session() as session, asyncio.timeout(_MOVE_TIMEOUT_S):
                await session.with_transaction(move)
        except _GroupChanged:
            await self._unmark(old_bucket, moves, token)
            return False
        except Exception:
            await self._unmark(old_bucket, moves, token)
            raise
        # The new seconds' entries are renewed after the commit, not inside the
        # transaction: every creator of a second and the daemon's load write that
        # entry, so a transaction left open by a dead process (until the store ends it,
        # 60 s on mongod) would hold them all, not only the moved jobs. A crash before
        # this bump leaves pending jobs with no entry: the overdue sweep's case.
        await layout.bump({layout.slot(d["_id"], d["second"]) for d in docs})
        return True

    async def _unmark(self, bucket: Collection, moves: Sequence[Move], token: str) -> None:
        """Take a failed move's mark off the documents still carrying it, then renew
        their seconds' entries: a claim that passed them by while marked may have let
        the daemon release the second, and the renewal makes it read it again. Bounded:
        a document still held (by the transaction the store has not ended yet) keeps
        its mark until it runs out."""
        keys = [m.old["_id"] for m in moves]
        try:
            async with asyncio.timeout(_UNMARK_TIMEOUT_S):
                mine = {"_id": {"$in": keys}, **self._l.shard_keys(keys), "move": token}
                await bucket.update_many(mine, _NO_MARK)
                await self._l.bump({self._l.slot(m.old["_id"], m.old["second"]) for m in moves})
        except Exception as exc:
            log.warning(
                "a failed move's mark stays until it runs out",
                extra={"jobs": len(keys), "mark_ms": MOVE_MARK_MS, "error": repr(exc)},
            )


def _locator_update(move: Move, expire_at: datetime) -> UpdateOne:
    job = move.job
    return UpdateOne(
        {"_id": move.old["_id"]},
        {
            "$set": {
                "second": next_second_of(job),
                "due_at": job.due_at,
                "expire_at": expire_at,
                "payload_hash": payload_fingerprint(job.payload_json),
            }
        },
    )
