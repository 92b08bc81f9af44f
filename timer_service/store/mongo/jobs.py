"""MongoDB jobs for the API: create through the locator, read, and the state
machine's changes applied as conditional writes."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import replace

from pymongo import ReturnDocument

from timer_service import jobs as machine
from timer_service.errors import Conflict, NotFound
from timer_service.jobs import CreateResult, CreateStatus, NewJob
from timer_service.model import Job, JobState, job_key, second_of
from timer_service.store.mongo.layout import (
    Doc,
    Layout,
    change_update,
    doc_to_job,
    guard_filter,
    insert_ignoring_duplicates,
    job_to_doc,
    labels_of_terms,
    locator_doc,
    one_reply,
    stays_in_bucket,
)
from timer_service.store.mongo.moves import Move, Mover

_MOVE_RETRIES = 5
# A locator without its job this old was left by a creator that died: its
# identity is free for a request that differs from the one that died.
ORPHAN_LOCATOR_MS = 30_000


class MongoJobs:
    def __init__(self, layout: Layout, mover: Mover) -> None:
        self._l = layout
        self._mover = mover

    # -- create ------------------------------------------------------------------
    async def create_jobs(self, jobs: Sequence[NewJob], now_ms: int) -> list[CreateResult]:
        first: dict[str, NewJob] = {}
        for new in jobs:
            first.setdefault(job_key(new.biz_type, new.job_id), new)
        fresh = {key: machine.new_job(new, now_ms) for key, new in first.items()}
        locators = [
            locator_doc(job, now_ms, self._l.locator_written_expire_at(job, now_ms))
            for job in fresh.values()
        ]
        taken = await insert_ignoring_duplicates(self._l.locator, locators)
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
                status = machine.repeat_status(job, new)
            results.append(CreateResult(status, job))
        return results

    async def _write_new_jobs(self, jobs: Iterable[Job]) -> None:
        """Insert job documents by bucket, then bump their seconds (in that order)."""
        by_bucket: dict[int, list[Doc]] = defaultdict(list)
        slots: set[int] = set()
        for job in jobs:
            assert job.next_attempt_at is not None
            s = second_of(job.next_attempt_at)
            by_bucket[self._l.bucket_no(s)].append(job_to_doc(job, s, self._l.partition(job.key)))
            slots.add(self._l.slot(job.key, s))
        await asyncio.gather(
            *(insert_ignoring_duplicates(self._l.buckets[b], docs) for b, docs in by_bucket.items())
        )
        await self._l.bump(slots)

    async def _existing_results(
        self, news: dict[str, NewJob], now_ms: int
    ) -> dict[str, tuple[CreateStatus, Job]]:
        locators = await self._l.locator.find({"_id": {"$in": list(news)}}).to_list(None)
        docs = await self.read_jobs(locators)
        out: dict[str, tuple[CreateStatus, Job]] = {}
        repair: list[Job] = []
        takeover: list[tuple[Doc, Job]] = []
        renew: set[int] = set()
        for loc in locators:
            key, new = loc["_id"], news[loc["_id"]]
            if key in docs:
                job = doc_to_job(docs[key])
                status = machine.repeat_status(job, new)
                if status == CreateStatus.EXISTS and job.state == JobState.PENDING:
                    # The first create may have died before renewing the entry: a
                    # client's retry makes sure the job is indexed.
                    renew.add(self._l.slot(key, docs[key]["second"]))
            else:
                # A locator without its job: its creator is mid-flight or died, or the
                # job's retention ended (the locator outlives it by a day; a job that
                # ends expires no sooner than a retention after its locator was
                # created). Judge by the locator and finish the creator's work; an
                # identity whose job may have expired, or whose creator left it long
                # ago, is free for a new request.
                status = machine.repeat_status_by_fingerprint(
                    loc["due_at"], loc["payload_hash"], labels_of_terms(loc.get("labels")), new
                )
                job = machine.new_job(replace(new, due_at=loc["due_at"]), now_ms)
                abandoned = now_ms - loc.get("created_at", now_ms) > ORPHAN_LOCATOR_MS
                may_have_expired = now_ms >= loc.get("created_at", 0) + self._l.retention_ms
                if may_have_expired or (status == CreateStatus.CONFLICT and abandoned):
                    takeover.append((loc, machine.new_job(new, now_ms)))
                    continue
                if status == CreateStatus.EXISTS:
                    repair.append(job)
            out[key] = (status, job)
        for loc, job in takeover:
            out[loc["_id"]] = await self._take_over(loc, job, now_ms)
        if renew:
            await self._l.bump(renew)
        if repair:
            await self._write_new_jobs(repair)
            # Answer with what is stored (the first creator's document), not our copy.
            stored = await self.read_jobs([loc for loc in locators if loc["_id"] in out])
            for key, (status, _) in list(out.items()):
                if key in stored:
                    out[key] = (status, doc_to_job(stored[key]))
        return out

    async def _take_over(self, loc: Doc, job: Job, now_ms: int) -> tuple[CreateStatus, Job]:
        """Replace a job-less locator by this request's, if nobody else did; then write
        the job. A lost race answers as a conflict (the other request won)."""
        same = {"_id": loc["_id"], "due_at": loc["due_at"], "payload_hash": loc["payload_hash"]}
        expire_at = self._l.locator_written_expire_at(job, now_ms)
        replaced = await self._l.locator.replace_one(same, locator_doc(job, now_ms, expire_at))
        if replaced.modified_count != 1:
            return CreateStatus.CONFLICT, job
        await self._write_new_jobs([job])
        return CreateStatus.CREATED, job

    async def read_jobs(self, locators: Sequence[Doc]) -> dict[str, Doc]:
        by_bucket: dict[int, list[str]] = defaultdict(list)
        for loc in locators:
            by_bucket[self._l.bucket_no(loc["second"])].append(loc["_id"])
        found = await asyncio.gather(
            *(
                self._l.buckets[b]
                .find({"_id": {"$in": keys}, **self._l.shard_keys(keys)})
                .batch_size(one_reply(len(keys)))
                .to_list(None)
                for b, keys in by_bucket.items()
            )
        )
        return {d["_id"]: d for docs in found for d in docs}

    # -- read ----------------------------------------------------------------------
    async def _locate(self, biz_type: str, job_id: str) -> Doc:
        """The job document, or NotFound. Re-reads across a concurrent move."""
        key = job_key(biz_type, job_id)
        for _ in range(_MOVE_RETRIES):
            loc = await self._l.locator.find_one({"_id": key})
            if loc is None:
                break
            doc = await self._l.bucket(loc["second"]).find_one(
                {"_id": key, **self._l.shard_key(key)}
            )
            if doc is not None:
                return doc
            again = await self._l.locator.find_one({"_id": key})
            if again is None or again["second"] == loc["second"]:
                break  # a create that never finished: not an accepted job
        raise NotFound(f"no job {job_id!r} of biz type {biz_type!r}")

    async def get_job(self, biz_type: str, job_id: str) -> Job | None:
        try:
            return doc_to_job(await self._locate(biz_type, job_id))
        except NotFound:
            return None

    # -- changes -------------------------------------------------------------------
    async def cancel_job(self, biz_type: str, job_id: str, now_ms: int) -> Job:
        for _ in range(_MOVE_RETRIES):
            doc = await self._locate(biz_type, job_id)
            job = doc_to_job(doc)
            change = machine.cancel(job, now_ms)
            if change is None:
                return job
            applied = await self._apply_in_place(doc, change, now_ms)
            if applied is not None:
                return applied
        raise Conflict("the job kept changing; try again")

    async def reschedule_job(
        self, biz_type: str, job_id: str, due_at: int, payload_json: str | None, now_ms: int
    ) -> Job:
        for _ in range(_MOVE_RETRIES):
            doc = await self._locate(biz_type, job_id)
            job = doc_to_job(doc)
            change = machine.reschedule(job, due_at, payload_json, now_ms)
            moved = change.apply(job)
            if await self._mover.move_one(Move(doc, moved, guard_filter(change.guard))):
                return moved
        raise Conflict("the job kept changing; try again")

    async def replay_job(self, biz_type: str, job_id: str, now_ms: int) -> Job:
        for _ in range(_MOVE_RETRIES):
            doc = await self._locate(biz_type, job_id)
            job = doc_to_job(doc)
            change = machine.replay(job, now_ms)
            if change is None:  # still where a replay put it: a retried replay
                return job
            moved = change.apply(job)
            if await self._mover.move_one(Move(doc, moved, guard_filter(change.guard))):
                return moved
        raise Conflict("the job kept changing; try again")

    async def _apply_in_place(self, doc: Doc, change: machine.Change, now_ms: int) -> Job | None:
        """A change that keeps the job in its bucket, under its guard; None if it missed."""
        assert stays_in_bucket(self._l, doc, change)
        expire_at = self._l.expire_at(now_ms)
        updated = await self._l.bucket(doc["second"]).find_one_and_update(
            {"_id": doc["_id"], **self._l.shard_key(doc["_id"]), **guard_filter(change.guard)},
            change_update(change, expire_at),
            return_document=ReturnDocument.AFTER,
        )
        if updated is None:
            return None
        # The locator outlives its job (layout.locator_expire_at, outlives_locator).
        if change.finishes and self._l.outlives_locator(doc["due_at"], now_ms):
            await self._l.extend_locators([doc["_id"]], now_ms)
        return doc_to_job(updated)
