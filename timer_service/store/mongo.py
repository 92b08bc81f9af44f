"""MongoDB job store (PyMongo's native asyncio API).

Layout (DESIGN.md "Storage"):

- ``jobs_b{n}``: the job documents whose next fire second ``s`` has
  ``s % buckets == n``, indexed on (second, state, next_attempt_at). Reading
  everything due in one second is one index range in one small collection.
- ``locator``: ``_id = "<biz_type>/<job_id>"`` -> bucket and second. Its unique
  ``_id`` is what makes create idempotent and lookups O(1).
- ``seconds``: ``_id = second``, ``v = version``: the ordered index of non-empty
  seconds. Every write into a second bumps ``v`` after writing the job; the
  daemon deletes an entry only with the version it read before loading it.
- Final jobs get ``expire_at`` and a TTL index removes them (and their locator)
  after the retention period.

A job that changes bucket (reschedule, retry, replay) moves in one
multi-document transaction: delete from the old bucket, insert into the new one,
repoint the locator. Production MongoDB is a replica set (change streams need
it), so transactions are available.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import heapq
from collections import Counter, defaultdict, deque
from collections.abc import AsyncIterator, Collection, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from pymongo import ASCENDING, AsyncMongoClient, ReturnDocument, UpdateOne
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import BulkWriteError, DuplicateKeyError, OperationFailure

from timer_service.constants import (
    BIZ_TYPES_COLLECTION,
    BROKERS_COLLECTION,
    BUCKET_COLLECTION_PREFIX,
    LEASES_COLLECTION,
    LOCATOR_COLLECTION,
    POINTERS_COLLECTION,
    SECONDS_COLLECTION,
)
from timer_service.dispatch import Claimed, Outcome, OutcomeKind, SecondEntry, SendRef
from timer_service.errors import Conflict, NotFound
from timer_service.model import (
    Attempt,
    BizType,
    Job,
    JobState,
    canonical_json,
    job_key,
    same_payload,
    second_of,
)
from timer_service.store.base import CreateResult, CreateStatus, NewJob

DUPLICATE_KEY = 11000
_MOVE_RETRIES = 5
_LIST_SCAN = 500  # locators read per page while filling a list response
_MOVE_CHUNK = 100  # jobs per bucket-moving transaction
_MOVE_TIMEOUT_S = 30.0  # a move that long is retried by the caller, not waited on


class _GroupChanged(Exception):
    """A job of a move group no longer matched; the transaction is aborted."""


def payload_hash(payload_json: str) -> str:
    return hashlib.sha256(canonical_json(payload_json).encode()).hexdigest()


def _expire_at(now_ms: int, retention_ms: int) -> datetime:
    return datetime.fromtimestamp((now_ms + retention_ms) / 1000, tz=UTC)


def job_to_doc(job: Job, second: int) -> dict[str, Any]:
    return {
        "_id": job.key,
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
        "claim": job.claim,
        "fence": job.fence,
        "claimed_at": job.claimed_at,
        "published": job.published,
        "budget_base": job.budget_base,
        "expire_at": None,
    }


def doc_to_job(doc: dict[str, Any]) -> Job:
    return Job(
        biz_type=doc["biz_type"],
        job_id=doc["job_id"],
        due_at=doc["due_at"],
        payload_json=doc["payload"],
        state=JobState(doc["state"]),
        attempts=doc["attempts"],
        next_attempt_at=doc.get("next_attempt_at"),
        created_at=doc["created_at"],
        updated_at=doc["updated_at"],
        delivered_at=doc.get("delivered_at"),
        last_error=doc.get("last_error"),
        history=tuple(Attempt.from_dict(a) for a in doc.get("history", ())),
        claim=doc.get("claim"),
        fence=doc.get("fence", 0),
        claimed_at=doc.get("claimed_at"),
        published=doc.get("published", False),
        budget_base=doc.get("budget_base", 0),
    )


def _claimed(doc: dict[str, Any]) -> Claimed:
    return Claimed(
        biz_type=doc["biz_type"],
        job_id=doc["job_id"],
        second=doc["second"],
        due_at=doc["due_at"],
        next_attempt_at=doc["next_attempt_at"],
        attempt=doc["attempts"] + 1,
        claim=doc["claim"],
    )


_CLAIM_FIELDS = {
    "biz_type": 1,
    "job_id": 1,
    "second": 1,
    "due_at": 1,
    "next_attempt_at": 1,
    "attempts": 1,
    "claim": 1,
}


class MongoStore:
    def __init__(
        self,
        url: str,
        db_name: str,
        *,
        buckets: int = 60,
        retention_ms: int = 30 * 86_400_000,
        client: AsyncMongoClient[dict[str, Any]] | None = None,
    ) -> None:
        self.buckets = buckets
        self.retention_ms = retention_ms
        self.ops: Counter[str] = Counter()
        self._client: AsyncMongoClient[dict[str, Any]] = client or AsyncMongoClient(
            # No store call may wait forever: a reply that never comes turns into an
            # error the caller retries (the default is to wait without limit).
            url,
            tz_aware=True,
            serverSelectionTimeoutMS=5000,
            socketTimeoutMS=60_000,
        )
        self._db = self._client[db_name]
        self._locator = self._db[LOCATOR_COLLECTION]
        self._seconds = self._db[SECONDS_COLLECTION]
        self._biz = self._db[BIZ_TYPES_COLLECTION]
        self._leases = self._db[LEASES_COLLECTION]
        self._pointers = self._db[POINTERS_COLLECTION]
        self._brokers = self._db[BROKERS_COLLECTION]
        self._buckets = [self._db[f"{BUCKET_COLLECTION_PREFIX}{n}"] for n in range(buckets)]
        self._move_lock = asyncio.Lock()

    @property
    def database(self) -> Any:
        """The database handle, for adapters that keep their own collections beside it."""
        return self._db

    def bucket(self, second: int) -> AsyncCollection[dict[str, Any]]:
        return self._buckets[second % self.buckets]

    # -- lifecycle ---------------------------------------------------------
    async def setup(self) -> None:
        self.ops["setup"] += 1
        await self._locator.create_index("expire_at", expireAfterSeconds=0)
        await self._locator.create_index([("biz_type", ASCENDING), ("_id", ASCENDING)])
        await self._brokers.create_index("expires_at")
        for coll in self._buckets:
            await coll.create_index(
                [("second", ASCENDING), ("state", ASCENDING), ("next_attempt_at", ASCENDING)]
            )
            await coll.create_index([("state", ASCENDING), ("claimed_at", ASCENDING)])
            # Lists a biz type's jobs in a state in key order; its prefix serves the
            # delete-biz-type check. Replaces (biz_type, state) of releases before.
            await coll.create_index(
                [("biz_type", ASCENDING), ("state", ASCENDING), ("_id", ASCENDING)]
            )
            with contextlib.suppress(OperationFailure):
                await coll.drop_index("biz_type_1_state_1")
            await coll.create_index("expire_at", expireAfterSeconds=0)

    async def close(self) -> None:
        await self._client.close()

    async def ping(self) -> None:
        self.ops["ping"] += 1
        await self._db.command("ping")

    async def drop_database(self) -> None:
        await self._client.drop_database(self._db.name)

    # -- biz types -----------------------------------------------------------
    async def put_biz_type(self, biz: BizType) -> bool:
        self.ops["put_biz_type"] += 1
        doc = biz.to_doc()
        created_at = doc.pop("created_at")
        result = await self._biz.update_one(
            {"_id": biz.biz_type},
            {"$set": doc, "$setOnInsert": {"created_at": created_at}},
            upsert=True,
        )
        return result.upserted_id is not None

    async def get_biz_type(self, name: str) -> BizType | None:
        self.ops["get_biz_type"] += 1
        doc = await self._biz.find_one({"_id": name})
        return BizType.from_doc(doc) if doc else None

    async def get_biz_types(self, names: Sequence[str]) -> dict[str, BizType]:
        self.ops["get_biz_types"] += 1
        found = await self._biz.find({"_id": {"$in": list(set(names))}}).to_list(None)
        return {d["_id"]: BizType.from_doc(d) for d in found}

    async def list_biz_types(self) -> list[BizType]:
        self.ops["list_biz_types"] += 1
        docs = await self._biz.find({}).sort("_id", ASCENDING).to_list(None)
        return [BizType.from_doc(d) for d in docs]

    async def delete_biz_type(self, name: str) -> bool:
        self.ops["delete_biz_type"] += 1
        if await self._biz.find_one({"_id": name}, {"_id": 1}) is None:
            return False
        active = {"biz_type": name, "state": {"$in": ["pending", "dispatched"]}}
        found = await asyncio.gather(*(c.find_one(active, {"_id": 1}) for c in self._buckets))
        if any(found):
            raise Conflict(f"biz type {name!r} still has pending or dispatched jobs")
        result = await self._biz.delete_one({"_id": name})
        return result.deleted_count == 1

    # -- jobs: API -------------------------------------------------------------
    async def create_jobs(self, jobs: Sequence[NewJob], now_ms: int) -> list[CreateResult]:
        self.ops["create_jobs"] += 1
        first: dict[str, NewJob] = {}
        for new in jobs:
            first.setdefault(job_key(new.biz_type, new.job_id), new)
        fresh = {key: _new_job(new, now_ms) for key, new in first.items()}
        locators = [
            {
                "_id": key,
                "biz_type": job.biz_type,
                "second": second_of(job.due_at),
                "due_at": job.due_at,
                "payload_hash": payload_hash(job.payload_json),
                "expire_at": None,
            }
            for key, job in fresh.items()
        ]
        taken = await self._insert_ignoring_duplicates(self._locator, locators)
        created = {k: j for k, j in fresh.items() if k not in taken}
        await self._write_new_jobs(created.values())
        final: dict[str, tuple[CreateStatus, Job]] = {
            k: (CreateStatus.CREATED, j) for k, j in created.items()
        }
        if taken:
            final.update(await self._existing_results({k: first[k] for k in taken}, now_ms))
        results = []
        for new in jobs:
            key = job_key(new.biz_type, new.job_id)
            status, job = final[key]
            if new is not first[key]:
                same_due = not new.compare_due or job.due_at == new.due_at
                ok = same_due and same_payload(job.payload_json, new.payload_json)
                status = CreateStatus.EXISTS if ok else CreateStatus.CONFLICT
            results.append(CreateResult(status, job))
        return results

    async def _write_new_jobs(self, jobs: Iterable[Job]) -> None:
        """Insert job documents by bucket, then bump their seconds (in that order)."""
        by_bucket: dict[int, list[dict[str, Any]]] = defaultdict(list)
        seconds: set[int] = set()
        for job in jobs:
            assert job.next_attempt_at is not None
            s = second_of(job.next_attempt_at)
            by_bucket[s % self.buckets].append(job_to_doc(job, s))
            seconds.add(s)
        await asyncio.gather(
            *(
                self._insert_ignoring_duplicates(self._buckets[b], docs)
                for b, docs in by_bucket.items()
            )
        )
        await self._bump(seconds)

    async def _existing_results(
        self, news: dict[str, NewJob], now_ms: int
    ) -> dict[str, tuple[CreateStatus, Job]]:
        locators = await self._locator.find({"_id": {"$in": list(news)}}).to_list(None)
        docs = await self._read_jobs(locators)
        out: dict[str, tuple[CreateStatus, Job]] = {}
        repair: list[Job] = []
        for loc in locators:
            key, new = loc["_id"], news[loc["_id"]]
            if key in docs:
                job = doc_to_job(docs[key])
                same_due = not new.compare_due or job.due_at == new.due_at
                same = same_due and same_payload(job.payload_json, new.payload_json)
            else:
                # The first creator has written the locator but not (yet) the job:
                # it is mid-flight or died. Judge by the locator, and finish its work.
                same_due = not new.compare_due or loc["due_at"] == new.due_at
                same = same_due and loc["payload_hash"] == payload_hash(new.payload_json)
                job = _new_job(new, now_ms).evolve(
                    due_at=loc["due_at"], next_attempt_at=loc["due_at"]
                )
                if same:
                    repair.append(job)
            out[key] = (CreateStatus.EXISTS if same else CreateStatus.CONFLICT, job)
        if repair:
            await self._write_new_jobs(repair)
            # Answer with what is stored (the first creator's document), not our copy.
            stored = await self._read_jobs([loc for loc in locators if loc["_id"] in out])
            for key, (status, _) in list(out.items()):
                if key in stored:
                    out[key] = (status, doc_to_job(stored[key]))
        return out

    async def _read_jobs(self, locators: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        by_bucket: dict[int, list[str]] = defaultdict(list)
        for loc in locators:
            by_bucket[loc["second"] % self.buckets].append(loc["_id"])
        found = await asyncio.gather(
            *(
                self._buckets[b].find({"_id": {"$in": keys}}).to_list(None)
                for b, keys in by_bucket.items()
            )
        )
        return {d["_id"]: d for docs in found for d in docs}

    async def _insert_ignoring_duplicates(
        self, coll: AsyncCollection[dict[str, Any]], docs: list[dict[str, Any]]
    ) -> set[str]:
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

    async def _bump(self, seconds: Iterable[int], session: Any = None) -> None:
        ops = [UpdateOne({"_id": s}, {"$inc": {"v": 1}}, upsert=True) for s in sorted(seconds)]
        if ops:
            await self._seconds.bulk_write(ops, ordered=False, session=session)

    async def _locate(self, biz_type: str, job_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """The locator and the job document, or NotFound. Re-reads across a concurrent move."""
        key = job_key(biz_type, job_id)
        for _ in range(_MOVE_RETRIES):
            loc = await self._locator.find_one({"_id": key})
            if loc is None:
                break
            doc = await self.bucket(loc["second"]).find_one({"_id": key})
            if doc is not None:
                return loc, doc
            again = await self._locator.find_one({"_id": key})
            if again is None or again["second"] == loc["second"]:
                break  # a create that never finished: not an accepted job
        raise NotFound(f"no job {job_id!r} of biz type {biz_type!r}")

    async def get_job(self, biz_type: str, job_id: str) -> Job | None:
        self.ops["get_job"] += 1
        try:
            _, doc = await self._locate(biz_type, job_id)
        except NotFound:
            return None
        return doc_to_job(doc)

    async def cancel_job(self, biz_type: str, job_id: str, now_ms: int) -> Job:
        self.ops["cancel_job"] += 1
        for _ in range(_MOVE_RETRIES):
            loc, doc = await self._locate(biz_type, job_id)
            state = JobState(doc["state"])
            if state == JobState.CANCELLED:
                return doc_to_job(doc)
            if state in (JobState.DELIVERED, JobState.DEAD):
                raise Conflict(f"job is {state.value}")
            expire_at = _expire_at(now_ms, self.retention_ms)
            updated = await self.bucket(loc["second"]).find_one_and_update(
                {"_id": doc["_id"], "state": {"$in": ["pending", "dispatched"]}},
                {
                    "$set": {
                        "state": "cancelled",
                        "next_attempt_at": None,
                        "claim": None,
                        "updated_at": now_ms,
                        "expire_at": expire_at,
                    }
                },
                return_document=ReturnDocument.AFTER,
            )
            if updated is not None:
                await self._locator.update_one(
                    {"_id": doc["_id"]}, {"$set": {"expire_at": expire_at}}
                )
                return doc_to_job(updated)
        raise Conflict("the job kept changing; try again")

    async def reschedule_job(
        self, biz_type: str, job_id: str, due_at: int, payload_json: str | None, now_ms: int
    ) -> Job:
        self.ops["reschedule_job"] += 1
        for _ in range(_MOVE_RETRIES):
            _, doc = await self._locate(biz_type, job_id)
            if doc["state"] != "pending":
                raise Conflict(f"only a pending job can be rescheduled; this one is {doc['state']}")
            job = doc_to_job(doc).evolve(
                due_at=due_at,
                next_attempt_at=due_at,
                payload_json=doc["payload"] if payload_json is None else payload_json,
                updated_at=now_ms,
            )
            if await self._move(doc, job, {"state": "pending"}):
                return job
        raise Conflict("the job kept changing; try again")

    async def replay_job(self, biz_type: str, job_id: str, now_ms: int) -> Job:
        self.ops["replay_job"] += 1
        for _ in range(_MOVE_RETRIES):
            _, doc = await self._locate(biz_type, job_id)
            if doc["state"] != "dead":
                raise Conflict(f"only a dead job can be replayed; this one is {doc['state']}")
            job = doc_to_job(doc).evolve(
                state=JobState.PENDING,
                next_attempt_at=now_ms,
                budget_base=doc["attempts"],
                claim=None,
                updated_at=now_ms,
            )
            if await self._move(doc, job, {"state": "dead"}):
                return job
        raise Conflict("the job kept changing; try again")

    async def _move(self, old: dict[str, Any], job: Job, expect: dict[str, Any]) -> bool:
        """Rewrite `old` as `job` in the bucket of its next second, if `old` still
        matches `expect`; then bump that second. False when `old` changed meanwhile."""
        assert job.next_attempt_at is not None
        moved = await self._move_many([(old, job)], expect)
        return bool(moved)

    async def _move_many(
        self,
        pairs: Sequence[tuple[dict[str, Any], Job]],
        expect: dict[str, Any],
        extra: dict[str, dict[str, Any]] | None = None,
    ) -> list[str]:
        """Move jobs between buckets in one transaction (in place when the bucket is
        the same). `extra` adds update operators per key for in-place updates.
        Returns the keys moved; a job that no longer matches `expect` is skipped."""
        in_place: dict[int, list[tuple[dict[str, Any], Job]]] = defaultdict(list)
        across: list[tuple[dict[str, Any], Job]] = []
        for old, job in pairs:
            assert job.next_attempt_at is not None
            new_second = second_of(job.next_attempt_at)
            if new_second % self.buckets == old["second"] % self.buckets:
                in_place[old["second"] % self.buckets].append((old, job))
            else:
                across.append((old, job))
        moved: list[str] = []
        seconds: set[int] = set()
        for b, items in in_place.items():
            ops = []
            for old, job in items:
                doc = job_to_doc(job, second_of(job.next_attempt_at))  # type: ignore[arg-type]
                doc.pop("_id")
                ops.append(UpdateOne({"_id": old["_id"], **expect}, {"$set": doc}))
            result = await self._buckets[b].bulk_write(ops, ordered=False)
            if result.modified_count == len(ops):
                moved.extend(old["_id"] for old, _ in items)
            else:  # find which went through
                keys = [old["_id"] for old, _ in items]
                now_docs = await self._buckets[b].find({"_id": {"$in": keys}}).to_list(None)
                by_key = {d["_id"]: d for d in now_docs}
                for old, job in items:
                    d = by_key.get(old["_id"])
                    if (
                        d is not None
                        and d.get("updated_at") == job.updated_at
                        and d.get("next_attempt_at") == job.next_attempt_at
                    ):
                        moved.append(old["_id"])
            seconds.update(second_of(j.next_attempt_at) for _, j in items)  # type: ignore[arg-type]
        if across:
            moved.extend(await self._move_across(across, expect))
            seconds.update(second_of(j.next_attempt_at) for _, j in across)  # type: ignore[arg-type]
        await self._bump(seconds)
        return moved

    async def _move_across(
        self, pairs: Sequence[tuple[dict[str, Any], Job]], expect: dict[str, Any]
    ) -> list[str]:
        """Move jobs to other buckets: one transaction per (old bucket, new bucket) group
        of at most `_MOVE_CHUNK` jobs, one transaction at a time per process.

        Each transaction writes every collection once (a delete_many in the old bucket,
        an insert_many in the new one, one locator bulk write). That is three statements
        however many jobs move, and no transaction ever goes back to a collection it
        has written: SecantusDB deadlocks when a transaction waits for a collection
        that a plain update_many holds while retrying a write conflict against that
        same transaction (seen as the whole store freezing on a burst of retries).
        A group whose delete misses a job (cancelled or moved meanwhile) is redone job
        by job, so that only the changed jobs are left where they are."""
        groups: dict[tuple[int, int], list[tuple[dict[str, Any], Job]]] = defaultdict(list)
        for old, job in pairs:
            new_b = second_of(job.next_attempt_at) % self.buckets  # type: ignore[arg-type]
            groups[(old["second"] % self.buckets, new_b)].append((old, job))
        moved: list[str] = []
        async with self._move_lock:
            for items in groups.values():
                for start in range(0, len(items), _MOVE_CHUNK):
                    chunk = items[start : start + _MOVE_CHUNK]
                    if await self._move_group(chunk, expect):
                        moved.extend(old["_id"] for old, _ in chunk)
                        continue
                    if len(chunk) == 1:
                        continue  # that one job changed: nothing to redo
                    for pair in chunk:
                        if await self._move_group([pair], expect):
                            moved.append(pair[0]["_id"])
        return moved

    async def _move_group(
        self, pairs: Sequence[tuple[dict[str, Any], Job]], expect: dict[str, Any]
    ) -> bool:
        """Move all of `pairs` (one old bucket, one new bucket) in one transaction, or
        none of them: False when one no longer matches `expect`."""
        old_bucket = self.bucket(pairs[0][0]["second"])
        keys = [old["_id"] for old, _ in pairs]
        docs, loc_ops = [], []
        for old, job in pairs:
            s = second_of(job.next_attempt_at)  # type: ignore[arg-type]
            docs.append(job_to_doc(job, s))
            loc_ops.append(
                UpdateOne(
                    {"_id": old["_id"]},
                    {
                        "$set": {
                            "second": s,
                            "due_at": job.due_at,
                            "expire_at": None,
                            "payload_hash": payload_hash(job.payload_json),
                        }
                    },
                )
            )
        new_bucket = self.bucket(docs[0]["second"])

        async def move(session: Any) -> None:
            deleted = await old_bucket.delete_many(
                {"_id": {"$in": keys}, **expect}, session=session
            )
            if deleted.deleted_count != len(keys):
                raise _GroupChanged()  # with_transaction aborts, then re-raises it
            await new_bucket.insert_many(docs, session=session)
            await self._locator.bulk_write(loc_ops, session=session)

        try:
            async with self._client.start_session() as session:
                await asyncio.wait_for(session.with_transaction(move), _MOVE_TIMEOUT_S)
        except _GroupChanged:
            return False
        return True

    async def list_jobs(
        self, biz_type: str | None, state: JobState | None, limit: int, cursor: str | None
    ) -> tuple[list[Job], str | None]:
        self.ops["list_jobs"] += 1
        if biz_type is not None and state is not None:
            return await self._list_in_state(biz_type, state, limit, cursor)
        items: list[Job] = []
        after = cursor
        while True:
            key_range: dict[str, Any] = {}
            if biz_type is not None:
                key_range = {"$gte": biz_type + "/", "$lt": biz_type + "0"}  # '0' follows '/'
            if after is not None:
                key_range["$gt"] = after  # with $gte kept: a foreign cursor stays in range
            query = {"_id": key_range} if key_range else {}
            page = (
                await self._locator.find(query)
                .sort("_id", ASCENDING)
                .limit(_LIST_SCAN)
                .to_list(None)
            )
            if not page:
                return items, None
            docs = await self._read_jobs(page)
            for loc in page:
                after = loc["_id"]
                doc = docs.get(loc["_id"])
                if doc is None or (state is not None and doc["state"] != state.value):
                    continue
                items.append(doc_to_job(doc))
                if len(items) == limit:
                    return items, after
            if len(page) < _LIST_SCAN:
                return items, None

    async def _list_in_state(
        self, biz_type: str, state: JobState, limit: int, cursor: str | None
    ) -> tuple[list[Job], str | None]:
        """A biz type's jobs in one state, in key order: a merge of the buckets, each
        read through its (biz_type, state, _id) index from the cursor on.

        Walking the locator instead reads every job of the biz type: listing its 3 dead
        jobs among a month of delivered ones (what an operator does after a dead-letter
        alert) would read them all. Here a page reads about 2 x limit documents; a
        bucket that runs dry while it may hold more is read again, for what the page
        still needs, before anything past its last key is taken.
        """
        key_range: dict[str, Any] = {"$gte": biz_type + "/", "$lt": biz_type + "0"}
        if cursor is not None:
            key_range["$gt"] = cursor

        async def read(bucket: int, after: str | None, n: int) -> list[dict[str, Any]]:
            keys = dict(key_range) if after is None else {**key_range, "$gt": after}
            query = {"biz_type": biz_type, "state": state.value, "_id": keys}
            found = self._buckets[bucket].find(query).sort("_id", ASCENDING).limit(n)
            return await found.to_list(None)

        first = min(limit, max(4, -(-2 * limit // self.buckets)))
        pages = await asyncio.gather(*(read(b, None, first) for b in range(self.buckets)))
        buffers = [deque(page) for page in pages]
        more = [len(page) == first for page in pages]
        heads = [(buf[0]["_id"], b) for b, buf in enumerate(buffers) if buf]
        heapq.heapify(heads)
        items: list[Job] = []
        while heads and len(items) < limit:
            key, b = heapq.heappop(heads)
            items.append(doc_to_job(buffers[b].popleft()))
            if not buffers[b] and more[b] and len(items) < limit:
                # Never more than the page still needs: so a bucket is read again at
                # most once per page.
                wanted = limit - len(items)
                page = await read(b, key, wanted)
                buffers[b].extend(page)
                more[b] = len(page) == wanted
            if buffers[b]:
                heapq.heappush(heads, (buffers[b][0]["_id"], b))
        done = not heads and not any(more)
        return items, (None if done or not items else items[-1].key)

    # -- daemon ------------------------------------------------------------------
    async def next_seconds(self, from_s: int, to_s: int, limit: int) -> list[SecondEntry]:
        self.ops["next_seconds"] += 1
        docs = (
            await self._seconds.find({"_id": {"$gte": from_s, "$lte": to_s}})
            .sort("_id", ASCENDING)
            .limit(limit)
            .to_list(None)
        )
        return [SecondEntry(d["_id"], d["v"]) for d in docs]

    async def load_second(self, second: int) -> list[tuple[str, int]]:
        self.ops["load_second"] += 1
        docs = (
            await self.bucket(second)
            .find({"second": second, "state": "pending"}, {"next_attempt_at": 1})
            .to_list(None)
        )
        return [(d["_id"], d["next_attempt_at"]) for d in docs]

    async def claim_due(
        self, second: int, upto_ms: int, claim: str, fence: int, now_ms: int
    ) -> list[Claimed]:
        self.ops["claim_due"] += 1
        coll = self.bucket(second)
        result = await coll.update_many(
            {
                "second": second,
                "state": "pending",
                "next_attempt_at": {"$lte": upto_ms},
                "fence": {"$lte": fence},
            },
            {
                "$set": {
                    "state": "dispatched",
                    "claim": claim,
                    "fence": fence,
                    "claimed_at": now_ms,
                    "published": False,
                    "updated_at": now_ms,
                }
            },
        )
        if result.modified_count == 0:
            return []
        docs = await coll.find({"second": second, "claim": claim}, _CLAIM_FIELDS).to_list(None)
        return [_claimed(d) for d in docs]

    async def mark_published(self, second: int, claim: str) -> None:
        self.ops["mark_published"] += 1
        await self.bucket(second).update_many(
            {"second": second, "claim": claim, "state": "dispatched"},
            {"$set": {"published": True}},
        )

    async def release_second(self, entry: SecondEntry) -> bool:
        self.ops["release_second"] += 1
        result = await self._seconds.delete_one({"_id": entry.second, "v": entry.version})
        if result.deleted_count == 1:
            return True
        return await self._seconds.find_one({"_id": entry.second}, {"_id": 1}) is None

    async def find_stale_dispatched(
        self,
        claimed_before_ms: int,
        limit: int,
        *,
        published: bool | None = None,
        skip_biz_types: Collection[str] = (),
    ) -> list[Job]:
        self.ops["find_stale_dispatched"] += 1
        # Served by the (state, claimed_at) index of every bucket.
        query: dict[str, Any] = {"state": "dispatched", "claimed_at": {"$lt": claimed_before_ms}}
        if published is not None:
            query["published"] = True if published else {"$ne": True}
        if skip_biz_types:
            query["biz_type"] = {"$nin": sorted(skip_biz_types)}
        found = await asyncio.gather(
            *(
                c.find(query).sort("claimed_at", ASCENDING).limit(limit).to_list(None)
                for c in self._buckets
            )
        )
        jobs = [doc_to_job(d) for docs in found for d in docs]
        jobs.sort(key=lambda j: j.claimed_at or 0)
        return jobs[:limit]

    async def count_jobs(self, states: Collection[JobState]) -> dict[tuple[str, JobState], int]:
        self.ops["count_jobs"] += 1
        pipeline: list[dict[str, Any]] = [
            # Served by the (state, claimed_at) index of every bucket.
            {"$match": {"state": {"$in": sorted(states)}}},
            {"$group": {"_id": {"b": "$biz_type", "s": "$state"}, "n": {"$sum": 1}}},
        ]
        counts: Counter[tuple[str, JobState]] = Counter()
        # One bucket after another: a sample must not hold the store up for the hot path.
        for coll in self._buckets:
            async for row in await coll.aggregate(pipeline):
                counts[(row["_id"]["b"], JobState(row["_id"]["s"]))] += int(row["n"])
        return dict(counts)

    async def reclaim(
        self, jobs: Sequence[Job], claim: str, fence: int, now_ms: int
    ) -> list[Claimed]:
        self.ops["reclaim"] += 1
        by_bucket: dict[int, list[Job]] = defaultdict(list)
        for job in jobs:
            if job.next_attempt_at is not None:
                by_bucket[second_of(job.next_attempt_at) % self.buckets].append(job)
        out: list[Claimed] = []
        for b, items in by_bucket.items():
            ops = [
                UpdateOne(
                    {
                        "_id": j.key,
                        "state": "dispatched",
                        "claim": j.claim,
                        "fence": {"$lte": fence},
                    },
                    {
                        "$set": {
                            "claim": claim,
                            "fence": fence,
                            "claimed_at": now_ms,
                            "published": False,
                        }
                    },
                )
                for j in items
            ]
            await self._buckets[b].bulk_write(ops, ordered=False)
            docs = (
                await self._buckets[b]
                .find({"_id": {"$in": [j.key for j in items]}, "claim": claim}, _CLAIM_FIELDS)
                .to_list(None)
            )
            out.extend(_claimed(d) for d in docs)
        return out

    async def watch_seconds(  # type: ignore[override]
        self, stop: asyncio.Event | None = None
    ) -> AsyncIterator[int]:
        pipeline = [{"$match": {"operationType": {"$in": ["insert", "update", "replace"]}}}]
        # Each getMore returns within a second (MongoDB's default await, explicit), so
        # `stop` is seen between two of them and the stream closes with none pending:
        # cancelled mid-getMore, closing it waits for SecantusDB's killCursors reply,
        # which it holds behind the getMore (seen hanging shutdown).
        async with await self._seconds.watch(pipeline, max_await_time_ms=1000) as stream:
            while stop is None or not stop.is_set():
                change = await stream.try_next()
                if change is not None:
                    yield change["documentKey"]["_id"]

    # -- lease and pointer ---------------------------------------------------
    async def acquire_lease(self, name: str, holder: str, ttl_ms: int, now_ms: int) -> int | None:
        self.ops["acquire_lease"] += 1
        expires = now_ms + ttl_ms
        mine = await self._leases.find_one_and_update(
            {"_id": name, "holder": holder},
            {"$set": {"expires_at": expires}},
            return_document=ReturnDocument.AFTER,
        )
        if mine is not None:
            return int(mine["token"])
        taken = await self._leases.find_one_and_update(
            {"_id": name, "expires_at": {"$lt": now_ms}},
            {"$set": {"holder": holder, "expires_at": expires}, "$inc": {"token": 1}},
            return_document=ReturnDocument.AFTER,
        )
        if taken is not None:
            return int(taken["token"])
        try:
            await self._leases.insert_one(
                {"_id": name, "holder": holder, "token": 1, "expires_at": expires}
            )
        except DuplicateKeyError:
            return None
        return 1

    async def renew_lease(
        self, name: str, holder: str, token: int, ttl_ms: int, now_ms: int
    ) -> bool:
        self.ops["renew_lease"] += 1
        result = await self._leases.update_one(
            {"_id": name, "holder": holder, "token": token},
            {"$set": {"expires_at": now_ms + ttl_ms}},
        )
        return result.matched_count == 1

    async def release_lease(self, name: str, holder: str, token: int) -> None:
        self.ops["release_lease"] += 1
        await self._leases.update_one(
            {"_id": name, "holder": holder, "token": token}, {"$set": {"expires_at": 0}}
        )

    async def load_pointer(self, name: str) -> int | None:
        self.ops["load_pointer"] += 1
        doc = await self._pointers.find_one({"_id": name})
        return int(doc["second"]) if doc else None

    async def save_pointer(self, name: str, second: int, fence: int) -> bool:
        self.ops["save_pointer"] += 1
        try:
            await self._pointers.update_one(
                {"_id": name, "fence": {"$lte": fence}},
                {"$set": {"second": second, "fence": fence}},
                upsert=True,
            )
        except DuplicateKeyError:
            return False
        return True

    # -- broker --------------------------------------------------------------------
    async def fetch_for_send(self, refs: Sequence[SendRef]) -> dict[str, Job]:
        self.ops["fetch_for_send"] += 1
        by_bucket: dict[int, dict[str, SendRef]] = defaultdict(dict)
        for ref in refs:
            by_bucket[ref.second % self.buckets][job_key(ref.biz_type, ref.job_id)] = ref
        found = await asyncio.gather(
            *(
                self._buckets[b]
                .find({"_id": {"$in": list(keyed)}, "state": "dispatched"})
                .to_list(None)
                for b, keyed in by_bucket.items()
            )
        )
        out = {}
        for (_, keyed), docs in zip(by_bucket.items(), found, strict=True):
            for doc in docs:
                if doc.get("claim") == keyed[doc["_id"]].claim:
                    out[doc["_id"]] = doc_to_job(doc)
        return out

    async def record_outcomes(self, outcomes: Sequence[Outcome], now_ms: int) -> None:
        self.ops["record_outcomes"] += 1
        final_ops: dict[int, list[Any]] = defaultdict(list)
        loc_ops = []
        retries: list[Outcome] = []
        expire_at = _expire_at(now_ms, self.retention_ms)
        for o in outcomes:
            key = job_key(o.ref.biz_type, o.ref.job_id)
            b = o.ref.second % self.buckets
            record = {"$inc": {"attempts": 1}, "$push": {"history": o.attempt.to_dict()}}
            if o.kind == OutcomeKind.RETRY:
                retries.append(o)
                continue
            fields: dict[str, Any] = {
                "next_attempt_at": None,
                "claim": None,
                "updated_at": now_ms,
                "expire_at": expire_at,
                "last_error": o.attempt.error,
            }
            if o.kind == OutcomeKind.DELIVERED:
                fields.update(state="delivered", delivered_at=now_ms, last_error=None)
            else:
                fields.update(state="dead")
            final_ops[b].append(
                UpdateOne({"_id": key, "state": "dispatched"}, {**record, "$set": fields})
            )
            loc_ops.append(UpdateOne({"_id": key}, {"$set": {"expire_at": expire_at}}))
        results = await asyncio.gather(
            *(self._buckets[b].bulk_write(ops, ordered=False) for b, ops in final_ops.items())
        )
        if loc_ops:
            await self._locator.bulk_write(loc_ops, ordered=False)
        missed = [
            b
            for b, result in zip(final_ops, results, strict=True)
            if result.modified_count < len(final_ops[b])
        ]
        if missed:
            await self._record_on_cancelled(outcomes, missed, now_ms)
        if retries:
            await self._record_retries(retries, now_ms)

    async def _record_on_cancelled(
        self, outcomes: Sequence[Outcome], buckets: Sequence[int], now_ms: int
    ) -> None:
        """A job cancelled while its callback was in flight keeps its state, and gets
        the record of the attempt. Rare, so only looked for when an update missed."""
        for b in buckets:
            mine = [
                o
                for o in outcomes
                if o.kind != OutcomeKind.RETRY and o.ref.second % self.buckets == b
            ]
            ops = [
                UpdateOne(
                    {
                        "_id": job_key(o.ref.biz_type, o.ref.job_id),
                        "state": "cancelled",
                        "history.at": {"$ne": o.attempt.at},
                    },
                    {
                        "$inc": {"attempts": 1},
                        "$push": {"history": o.attempt.to_dict()},
                        "$set": {"last_error": o.attempt.error, "updated_at": now_ms},
                    },
                )
                for o in mine
            ]
            if ops:
                await self._buckets[b].bulk_write(ops, ordered=False)

    async def _record_retries(self, retries: Sequence[Outcome], now_ms: int) -> None:
        by_bucket: dict[int, list[str]] = defaultdict(list)
        for o in retries:
            by_bucket[o.ref.second % self.buckets].append(job_key(o.ref.biz_type, o.ref.job_id))
        found = await asyncio.gather(
            *(
                self._buckets[b].find({"_id": {"$in": keys}}).to_list(None)
                for b, keys in by_bucket.items()
            )
        )
        docs = {d["_id"]: d for ds in found for d in ds}
        pairs = []
        cancelled_ops: dict[int, list[Any]] = defaultdict(list)
        for o in retries:
            key = job_key(o.ref.biz_type, o.ref.job_id)
            doc = docs.get(key)
            if doc is None:
                continue
            job = doc_to_job(doc)
            recorded = job.evolve(
                attempts=job.attempts + 1,
                history=(*job.history, o.attempt),
                last_error=o.attempt.error,
                updated_at=now_ms,
            )
            if job.state != JobState.DISPATCHED:
                cancelled_ops[o.ref.second % self.buckets].append(
                    UpdateOne(
                        {"_id": key, "state": doc["state"], "history.at": {"$ne": o.attempt.at}},
                        {
                            "$inc": {"attempts": 1},
                            "$push": {"history": o.attempt.to_dict()},
                            "$set": {"last_error": o.attempt.error, "updated_at": now_ms},
                        },
                    )
                )
                continue
            pairs.append(
                (
                    doc,
                    recorded.evolve(
                        state=JobState.PENDING,
                        next_attempt_at=o.next_attempt_at,
                        claim=None,
                    ),
                )
            )
        if pairs:
            await self._move_many(pairs, {"state": "dispatched"})
        for b, ops in cancelled_ops.items():
            await self._buckets[b].bulk_write(ops, ordered=False)

    async def broker_heartbeat(
        self, broker_id: str, holding: Sequence[str], expires_at_ms: int
    ) -> None:
        self.ops["broker_heartbeat"] += 1
        await self._brokers.update_one(
            {"_id": broker_id},
            {"$set": {"holding": sorted(holding), "expires_at": expires_at_ms}},
            upsert=True,
        )

    async def held_biz_types(self, now_ms: int) -> set[str]:
        self.ops["held_biz_types"] += 1
        docs = await self._brokers.find({"expires_at": {"$gte": now_ms}}).to_list(None)
        return {b for d in docs for b in d.get("holding", ())}

    async def broker_gone(self, broker_id: str) -> None:
        self.ops["broker_gone"] += 1
        await self._brokers.delete_one({"_id": broker_id})


def _new_job(new: NewJob, now_ms: int) -> Job:
    return Job(
        biz_type=new.biz_type,
        job_id=new.job_id,
        due_at=new.due_at,
        payload_json=new.payload_json,
        state=JobState.PENDING,
        attempts=0,
        next_attempt_at=new.due_at,
        created_at=now_ms,
        updated_at=now_ms,
    )
