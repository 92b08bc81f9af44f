"""The MongoDB layout: collections, documents, and a `Change` as a query.

- ``jobs_b{n}``: the job documents whose *home* is bucket ``n``: the bucket of
  their first due second (``second % buckets``). A job document never moves:
  reschedule, retry and replay update it in place, so a job may fire in a second
  of another bucket. Each bucket is indexed on (second, state, next_attempt_at,
  _id), ``second`` being the second the job fires next.
- ``locator``: ``_id = "<biz_type>/<job_id>"`` -> ``bucket`` (the home bucket),
  the first due time and payload fingerprint. Written once, never repointed: its
  unique ``_id`` is what makes create idempotent and lookups O(1). (A locator
  written before homes existed has no ``bucket``; its ``second`` names it.)
- ``seconds``: ``_id = slot``, ``v = version``, ``buckets``, ``n``, ``by``,
  ``cv``: the ordered index
  of non-empty seconds, one entry per (partition, second)
  (timer_service/partitions.py: the slot of partition 0 is the second itself),
  naming the buckets that hold jobs due in it (nearly always one: the bucket of
  the second itself; an entry without the list, written before, names that one).
  Every write into a second bumps ``v`` and adds its bucket, in one upsert, after
  writing the job; the daemon deletes an entry only with the version it read
  before loading it. ``n`` counts the entry's pending jobs and ``by`` the same per
  biz type (`count_field`), changed with every write that makes a job pending in
  the second or takes it out (``cv``, a new version each time, lets the daemon's
  load correct them: store/mongo/scan.py). The load calendar reads only these.
- No write needs a multi-document transaction: every change of a job is one
  conditional update of its one document (docs/architecture.md, "Storage").
- Final jobs get ``expire_at`` and a TTL index removes them after the retention
  period. A locator's ``expire_at`` is set when it is written, far enough past its
  job's next fire time that the job normally ends and expires first
  (``LOCATOR_SLACK_MS``), so an outcome writes only the job; the rare job that ends
  later, or is set to fire later, gets its locator extended
  (`Layout.extend_locators`, the daemon's identity keeper).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import replace
from datetime import UTC, datetime
from enum import Enum
from typing import Any

from bson import ObjectId
from pymongo import AsyncMongoClient, ReadPreference, UpdateOne, WriteConcern
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import BulkWriteError

from timer_service.calendar import pending_moves
from timer_service.constants import (
    BIZ_TYPES_COLLECTION,
    BROKERS_COLLECTION,
    BUCKET_COLLECTION_PREFIX,
    LEASES_COLLECTION,
    LOCATOR_COLLECTION,
    OWNERS_COLLECTION,
    POINTERS_COLLECTION,
    ROUNDS_COLLECTION,
    SECONDS_COLLECTION,
)
from timer_service.jobs import Change, Guard, payload_fingerprint
from timer_service.model import Attempt, Job, JobState, Labels, labels_of, second_of
from timer_service.partitions import partition_of, second_of_slot, slot
from timer_service.responses import RESPONSES_KEPT, AttemptResponse
from timer_service.tracecontext import TraceContext

Doc = dict[str, Any]
SlotMoves = Counter[tuple[int, str]]  # (slot, biz type) -> change of its pending count
Collection = AsyncCollection[Doc]
DUPLICATE_KEY = 11000

LOCATOR_GRACE_MS = 86_400_000  # a locator outlives its job by a day
# A job normally ends within this of its next fire time; a locator written when it
# is set to fire outlives it without another write (docs/architecture.md, "Identity").
LOCATOR_SLACK_MS = 7 * 86_400_000

# Job fields whose document field has another name.
_DOC_FIELD = {"payload_json": "payload"}


class Layout:
    """The client and every collection of one database, shared by the ports."""

    def __init__(
        self,
        client: AsyncMongoClient[Doc],
        db_name: str,
        buckets: int,
        retention_ms: int,
        write_concern: WriteConcern | None = None,
        partitions: int = 1,
    ) -> None:
        self.client = client
        self.buckets_n = buckets
        self.partitions = partitions
        self.retention_ms = retention_ms
        # Every read of the store must see the writes before it (a claim's read-back,
        # a create's read of the job its locator names): the primary's, whatever
        # the URL says (docs/architecture.md, "Across a replica-set election").
        self.db: AsyncDatabase[Doc] = client.get_database(
            db_name, write_concern=write_concern, read_preference=ReadPreference.PRIMARY
        )
        self.locator = self.db[LOCATOR_COLLECTION]
        self.seconds = self.db[SECONDS_COLLECTION]
        self.biz = self.db[BIZ_TYPES_COLLECTION]
        self.leases = self.db[LEASES_COLLECTION]
        self.pointers = self.db[POINTERS_COLLECTION]
        self.brokers = self.db[BROKERS_COLLECTION]
        self.owners = self.db[OWNERS_COLLECTION]
        self.rounds = self.db[ROUNDS_COLLECTION]
        self.buckets = [self.db[f"{BUCKET_COLLECTION_PREFIX}{n}"] for n in range(buckets)]

    def bucket_no(self, second: int) -> int:
        """The bucket of a second: the home of a job first due in it."""
        return second % self.buckets_n

    def bucket(self, second: int) -> Collection:
        return self.buckets[self.bucket_no(second)]

    def home_of(self, locator: Doc) -> int:
        """A job's home bucket, by its locator. A locator written before homes existed
        has none: its job was then always in the bucket of the locator's second (a
        move rewrote both in one transaction), and never moves now."""
        home = locator.get("bucket")
        return self.bucket_no(locator["second"]) if home is None else int(home)

    def home_of_ref(self, bucket: int | None, second: int) -> int:
        """The bucket a message or a claim names (None: one published before homes
        existed, whose job was in the bucket of its second)."""
        return self.bucket_no(second) if bucket is None else bucket

    def partition(self, key: str) -> int:
        return partition_of(key, self.partitions)

    def shard_key(self, key: str) -> Doc:
        """The job's partition as an equality, for a find-and-modify by `_id`: on a
        cluster sharded by `{partition, _id}` (docs/operations.md, "Sharding MongoDB")
        MongoDB before 7.1 refuses a find-and-modify without the full shard key, and
        every version sends a write by `_id` alone to every shard. Nothing with one
        partition: a store set up before partitions existed has jobs without the field
        (they read as partition 0), and it is never more than one."""
        return self.shard_keys([key])

    def shard_keys(self, keys: Iterable[str]) -> Doc:
        """The partitions of these jobs, for a query by `_id`: mongos then sends it to
        the shards that hold them, not to every shard (`shard_key`)."""
        if self.partitions == 1:
            return {}
        parts = sorted({self.partition(key) for key in keys})
        return {"partition": parts[0] if len(parts) == 1 else {"$in": parts}}

    def slot(self, key: str, second: int) -> int:
        """The seconds-index key of a job's second (timer_service/partitions.py)."""
        return slot(self.partition(key), second)

    def expire_at(self, now_ms: int) -> datetime:
        """When a job that ends now is removed by the TTL index: a retention after the
        later of the caller's clock and the store's wall clock, which the TTL monitor
        reads (a caller's clock behind it, a test's fixed time, must not date a final
        job in the past)."""
        wall_ms = time.time_ns() // 1_000_000
        return datetime.fromtimestamp((max(now_ms, wall_ms) + self.retention_ms) / 1000, tz=UTC)

    def locator_expire_at(self, now_ms: int) -> datetime:
        """Strictly after its job, if the job ends now: an identity never points at
        nothing while its job can still be read, and is never taken while its job
        still exists."""
        return datetime.fromtimestamp(
            (now_ms + self.retention_ms + LOCATOR_GRACE_MS) / 1000, tz=UTC
        )

    def locator_written_expire_at(self, job: Job, now_ms: int) -> datetime:
        """A locator's expiry when it is written: after its job's, should the job end
        up to `LOCATOR_SLACK_MS` after it is next set to fire. The TTL monitor reads
        the store's wall clock, so a caller's clock behind it (a test's fixed time)
        must not date a live job's locator in the past: the later of the two counts."""
        wall_ms = time.time_ns() // 1_000_000
        fires_ms = max(now_ms, wall_ms, job.next_attempt_at or job.due_at)
        return self.locator_expire_at(fires_ms + LOCATOR_SLACK_MS)

    def locator_outgrown(self, expiry: datetime | None, fires_ms: int) -> bool:
        """Whether a job set to fire at `fires_ms` (a reschedule, a replay) has outgrown
        its locator, written with `expiry`: when it fires more than half the slack
        later than the locator was written for. Less needs nothing: a job ending
        within half the slack of its fire time is covered, and one still waiting then
        has its locator extended by the identity keeper (`keep_identities`)."""
        if expiry is None:
            return False  # written before expiries were set at write time: none
        if expiry.tzinfo is None:  # a client without tz_aware reads naive UTC
            expiry = expiry.replace(tzinfo=UTC)
        return expiry < self.locator_expire_at(fires_ms + LOCATOR_SLACK_MS // 2)

    @staticmethod
    def outlives_locator(due_at: int | None, ends_ms: int) -> bool:
        """Whether a job due at `due_at` that ends at `ends_ms` may outlive its locator.
        Every write that sets a job's due time writes its locator, for a fire time no
        earlier than it (`locator_written_expire_at`), and expiries are only ever
        extended; so a job that ends within `LOCATOR_SLACK_MS` of its due time is
        covered, and `extend_locators` for it would match nothing. Without the due
        time, it may."""
        return due_at is None or ends_ms > due_at + LOCATOR_SLACK_MS

    async def extend_locators(
        self, keys: list[str], ends_ms: int, keep_until_ms: int | None = None
    ) -> None:
        """Locators whose expiry would come too soon for a job that ends at `ends_ms`
        get one fit for a job that ends at `keep_until_ms` (default: then): normally
        none match, and nothing is written."""
        if not keys:
            return
        soon = self.locator_expire_at(ends_ms)
        # An `_id` list and one range, no `$or`: a store that plans `$or` as a scan would
        # read the whole locator collection on every outcome batch. (A locator written
        # before expiries were set at write time has none, matches no range, and stays.)
        await self.locator.update_many(
            {"_id": {"$in": keys}, "expire_at": {"$lt": soon}},
            {"$set": {"expire_at": self.locator_expire_at(keep_until_ms or ends_ms)}},
        )

    def moves(self, before: Job | None, after: Job | None, into: SlotMoves) -> SlotMoves:
        """What a write of one job from `before` to `after` does to the pending counts
        of the seconds index (`calendar.pending_moves`), by slot, added to `into`."""
        key = (after or before).key  # type: ignore[union-attr]
        for (second, biz), n in pending_moves(before, after).items():
            into[(self.slot(key, second), biz)] += n
        return into

    async def bump(self, placed: Iterable[tuple[int, int]], moves: SlotMoves | None = None) -> None:
        """Renew the entries of these (slot, bucket) pairs, creating them: after the
        jobs are written. One upsert per slot sets a new version and adds the buckets
        to the entry's list, in one command; it also adds `moves` to the entries'
        pending counts (docs/architecture.md, "Load calendar"), those of slots not
        renewed by updates that create nothing (a released entry stays released).
        Each write gets a version no earlier write had (an ObjectId: unique across
        processes), so a release with a version read before can only miss."""
        by_slot: dict[int, set[int]] = {}
        for at, bucket in placed:
            by_slot.setdefault(at, set()).add(bucket)
        incs: dict[int, Doc] = {}
        for (at, biz), n in sorted((moves or {}).items()):
            if n:
                inc = incs.setdefault(at, {})
                inc["n"] = inc.get("n", 0) + n
                inc[count_field(biz)] = n
        ops: list[UpdateOne] = []
        for at, homes in sorted(by_slot.items()):
            own = self.bucket_no(second_of_slot(at))
            if homes != {own}:
                # An entry written before entries named buckets names its second's own
                # bucket by having no list (`buckets_of_entry`): give it that list
                # before adding another, so that its jobs are not passed over.
                ops.append(
                    UpdateOne(
                        {"_id": at, "buckets": {"$exists": False}}, {"$set": {"buckets": [own]}}
                    )
                )
            update: Doc = {
                "$set": {"v": str(ObjectId())},
                "$addToSet": {"buckets": {"$each": sorted(homes)}},
            }
            inc = incs.pop(at, {})
            if inc:
                update["$set"]["cv"] = str(ObjectId())
                update["$inc"] = inc
            ops.append(UpdateOne({"_id": at}, update, upsert=True))
        for at, inc in incs.items():
            ops.append(UpdateOne({"_id": at}, {"$inc": inc, "$set": {"cv": str(ObjectId())}}))
        if ops:
            await self.seconds.bulk_write(ops, ordered=True)

    def buckets_of_entry(self, entry: Doc) -> list[int]:
        """The buckets an entry of the seconds index names (one written before entries
        named buckets: its second's own, where the jobs then always were)."""
        named = entry.get("buckets")
        if named is None:
            return [self.bucket_no(second_of_slot(int(entry["_id"])))]
        return sorted(int(b) for b in named)


def count_field(biz_type: str) -> str:
    """The field of an entry of the seconds index that counts a biz type's pending jobs:
    under `by`, a biz type's '.' spelt ':' (which no biz type holds), so that it is
    one field and not a path."""
    return "by." + biz_type.replace(".", ":")


def biz_of_field(name: str) -> str:
    return name.replace(":", ".")


async def insert_ignoring_duplicates(coll: Collection, docs: list[Doc]) -> set[str]:
    """Insert all; return the _ids that already existed."""
    if not docs:
        return set()
    try:
        await coll.insert_many(docs, ordered=False)
    except BulkWriteError as exc:
        errors = exc.details.get("writeErrors", [])
        if any(e.get("code") != DUPLICATE_KEY for e in errors):
            raise
        return {docs[e["index"]]["_id"] for e in errors}
    return set()


# --------------------------------------------------------------------------- documents


def job_to_doc(job: Job, second: int, partition: int = 0) -> Doc:
    return {
        "_id": job.key,
        "partition": partition,
        "biz_type": job.biz_type,
        "job_id": job.job_id,
        "second": second,
        "due_at": job.due_at,
        "payload": job.payload_json,
        "state": job.state.value,
        "attempts": job.attempts,
        "next_attempt_at": job.next_attempt_at,
        "created_at": job.created_at,
        "updated_at": job.updated_at,
        "delivered_at": job.delivered_at,
        "last_error": job.last_error,
        "history": [a.to_dict() for a in job.history],
        "responses": [answer_doc(a) for a in job.history if a.response is not None],
        "claim": job.claim,
        "fence": job.fence,
        "claimed_at": job.claimed_at,
        "budget_base": job.budget_base,
        "sending": job.sending,
        "labels": dict(job.labels),
        "expire_at": None,
        **window_fields(job),
        **trace_fields(job.trace),
    }


def window_fields(job: Job) -> Doc:
    """A flexible job's window and chosen moment: none for the many jobs without."""
    if job.window_ms == 0 and job.fire_at is None:
        return {}
    return {"window_ms": job.window_ms, "fire_at": job.fire_at}


def trace_fields(trace: TraceContext | None) -> Doc:
    """A job's trace context as document fields: none for the many jobs without one."""
    if trace is None:
        return {}
    fields: Doc = {"traceparent": trace.traceparent}
    if trace.tracestate is not None:
        fields["tracestate"] = trace.tracestate
    return fields


def trace_of(doc: Doc) -> TraceContext | None:
    traceparent = doc.get("traceparent")
    return None if traceparent is None else TraceContext(traceparent, doc.get("tracestate"))


def locator_doc(job: Job, now_ms: int, expire_at: datetime, bucket: int) -> Doc:
    """The identity's entry, never changed once written (but for its expiry): where the
    job lives, and what a repeated create compares."""
    return {
        "_id": job.key,
        "biz_type": job.biz_type,
        "bucket": bucket,
        "second": second_of(job.next_attempt_at or job.due_at),
        "due_at": job.due_at,
        "payload_hash": payload_fingerprint(job.payload_json),
        "labels": label_terms(job.labels),
        **({"window_ms": job.window_ms} if job.window_ms else {}),
        "created_at": now_ms,
        "expire_at": expire_at,
    }


def label_terms(labels: Labels) -> list[str]:
    """Labels as the locator indexes them: one "key:value" string per pair (a key never
    holds ':'), in a multikey index with the biz type (docs/api.md, "Search")."""
    return [f"{key}:{value}" for key, value in labels]


def labels_of_terms(terms: list[str] | None) -> Labels:
    return tuple(sorted(tuple(t.split(":", 1)) for t in terms or ()))  # type: ignore[misc]


def doc_to_job(doc: Doc) -> Job:
    """A job from its document; a projection without payload or history reads as
    null payload and no history."""
    return Job(
        biz_type=doc["biz_type"],
        job_id=doc["job_id"],
        due_at=doc["due_at"],
        payload_json=doc.get("payload", "null"),
        state=JobState(doc["state"]),
        attempts=doc["attempts"],
        next_attempt_at=doc.get("next_attempt_at"),
        created_at=doc.get("created_at", 0),
        updated_at=doc.get("updated_at", 0),
        delivered_at=doc.get("delivered_at"),
        last_error=doc.get("last_error"),
        history=history_of(doc),
        claim=doc.get("claim"),
        fence=doc.get("fence", 0),
        claimed_at=doc.get("claimed_at"),
        budget_base=doc.get("budget_base", 0),
        sending=doc.get("sending"),
        trace=trace_of(doc),
        labels=labels_of(doc.get("labels")),
        window_ms=doc.get("window_ms", 0),
        fire_at=doc.get("fire_at"),
    )


def answer_doc(attempt: Attempt) -> Doc:
    """An attempt's answer as stored: apart from the history, in `responses`, the last
    RESPONSES_KEPT of them (a `$push` with `$slice` bounds it in the outcome's own
    update), named by the attempt's number and time."""
    assert attempt.response is not None
    return {"attempt": attempt.attempt, "at": attempt.at, **attempt.response.to_dict()}


def history_of(doc: Doc) -> tuple[Attempt, ...]:
    """The attempts of a job document, each with its answer if still kept."""
    answers = {(r["attempt"], r["at"]): r for r in doc.get("responses", ())}
    history = []
    for entry in doc.get("history", ()):
        attempt = Attempt.from_dict(entry)
        answer = answers.get((attempt.attempt, attempt.at))
        if answer is not None:
            attempt = replace(attempt, response=AttemptResponse.from_dict(answer))
        history.append(attempt)
    return tuple(history)


# What a listing reads (`ConsolePort.search_jobs`): the jobs without their answers.
LISTING_PROJECTION = {"responses": 0}

# What a claim reads back to publish (`jobs.claimed`): the job without its history.
# The message carries it, so that the broker's send mark need not read it again.
CLAIM_PROJECTION = {"history": 0, "responses": 0}

# Documents a second's load brings in its first reply (a few MB of projected keys).
LOAD_BATCH = 50_000


def one_reply(expected: int) -> int:
    """The batch size of a find that should answer `expected` documents in one reply.
    A cursor's first batch is 101 documents unless the find says otherwise, and each
    further batch is a `getMore`, one more round trip (a claim of 150 jobs was three
    commands, not two). One over, so the server sees the end and closes the cursor."""
    return expected + 1


# --------------------------------------------------------------------------- changes


def guard_filter(guard: Guard) -> Doc:
    """The query that matches a job the guard holds for."""
    states = sorted(s.value for s in guard.states)
    query: Doc = {"state": states[0] if len(states) == 1 else {"$in": states}}
    if guard.claim is not None:
        query["claim"] = guard.claim
    if guard.idle:
        # None also matches a document without the field.
        query["sending"] = None if guard.sending is None else {"$in": [None, guard.sending]}
    if guard.unrecorded_at is not None:
        query["history.at"] = {"$ne": guard.unrecorded_at}
    return query


def change_update(change: Change, expire_at: datetime | None = None) -> Doc:
    """The update that applies `change` in place (a job never leaves its bucket); a
    change that finishes the job needs the end of its retention."""
    sets = {_DOC_FIELD.get(name, name): _doc_value(v) for name, v in change.sets.items()}
    second = change.next_second
    if second is not None:
        sets["second"] = second
    if change.finishes:
        assert expire_at is not None
        sets["expire_at"] = expire_at
    update: Doc = {"$set": sets}
    if change.attempt is not None:
        update["$inc"] = {"attempts": 1}
        update["$push"] = {"history": change.attempt.to_dict()}
        if change.attempt.response is not None:
            # The last RESPONSES_KEPT answers, as `jobs.with_answers_kept` keeps them.
            answers = {"$each": [answer_doc(change.attempt)], "$slice": -RESPONSES_KEPT}
            update["$push"]["responses"] = answers
    return update


def _doc_value(value: Any) -> Any:
    return value.value if isinstance(value, Enum) else value
