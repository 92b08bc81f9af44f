"""MongoDB jobs for the API: create through the locator, read, and the state
machine's changes applied as conditional writes to the job's one document, in its
home bucket (store/mongo/layout.py): a job never moves, so what the locator names
is where the job is, for its whole life."""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import replace

from pymongo import ReturnDocument

from timer_service import jobs as machine
from timer_service.errors import Conflict, NotFound
from timer_service.jobs import CreateResult, CreateStatus, NewJob
from timer_service.model import Job, JobState, job_key, second_of
from timer_service.store.mongo.layout import (
    LOCATOR_SLACK_MS,
    Doc,
    Layout,
    SlotMoves,
    change_update,
    doc_to_job,
    guard_filter,
    insert_ignoring_duplicates,
    job_to_doc,
    labels_of_terms,
    locator_doc,
    one_reply,
)

# A change whose guard missed (the job changed between the read and the write: a
# claim, an outcome) is decided again on the job as it now is, this many times.
_CHANGE_RETRIES = 5
# A locator without its job this old was left by a creator that died: its
# identity is free for a request that differs from the one that died.
ORPHAN_LOCATOR_MS = 30_000


class MongoJobs:
    def __init__(self, layout: Layout) -> None:
        self._l = layout

    # -- create ------------------------------------------------------------------
    async def create_jobs(self, jobs: Sequence[NewJob], now_ms: int) -> list[CreateResult]:
        first: dict[str, NewJob] = {}
        for new in jobs:
            first.setdefault(job_key(new.biz_type, new.job_id), new)
        fresh = {key: machine.new_job(new, now_ms) for key, new in first.items()}
        locators = [self._locator(job, now_ms) for job in fresh.values()]
        taken = await insert_ignoring_duplicates(self._l.locator, locators)
        created = {k: j for k, j in fresh.items() if k not in taken}
        await self._write_new_jobs([(j, self._home(j)) for j in created.values()])
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

    def _home(self, job: Job) -> int:
        """A new job's home: the bucket of its first due second, for life."""
        assert job.next_attempt_at is not None
        return self._l.bucket_no(second_of(job.next_attempt_at))

    def _locator(self, job: Job, now_ms: int) -> Doc:
        expire_at = self._l.locator_written_expire_at(job, now_ms)
        return locator_doc(job, now_ms, expire_at, self._home(job))

    async def _write_new_jobs(self, jobs: Iterable[tuple[Job, int]]) -> None:
        """Insert job documents into their homes, then bump their seconds (in that
        order). A document already there (a creator that got there first) stays: one
        `_id` per bucket, and an identity's home never changes, so one document."""
        by_bucket: dict[int, list[Doc]] = defaultdict(list)
        placed: set[tuple[int, int]] = set()
        written: list[Job] = []
        for job, home in jobs:
            assert job.next_attempt_at is not None
            s = second_of(job.next_attempt_at)
            by_bucket[home].append(job_to_doc(job, s, self._l.partition(job.key)))
            placed.add((self._l.slot(job.key, s), home))
            written.append(job)
        there = await asyncio.gather(
            *(insert_ignoring_duplicates(self._l.buckets[b], docs) for b, docs in by_bucket.items())
        )
        # Only the documents this call inserted count in the calendar: one already
        # there was counted by the creator that wrote it.
        before = set().union(*there)
        moves: SlotMoves = Counter()
        for job in written:
            if job.key not in before:
                self._l.moves(None, job, moves)
        await self._l.bump(placed, moves)

    async def _existing_results(
        self, news: dict[str, NewJob], now_ms: int
    ) -> dict[str, tuple[CreateStatus, Job]]:
        locators = await self._l.locator.find({"_id": {"$in": list(news)}}).to_list(None)
        docs = await self.read_jobs(locators)
        out: dict[str, tuple[CreateStatus, Job]] = {}
        repair: list[tuple[Job, int]] = []
        takeover: list[tuple[Doc, Job]] = []
        renew: set[tuple[int, int]] = set()
        for loc in locators:
            key, new = loc["_id"], news[loc["_id"]]
            if key in docs:
                job = doc_to_job(docs[key])
                status = machine.repeat_status(job, new)
                if status == CreateStatus.EXISTS and job.state == JobState.PENDING:
                    # The first create may have died before renewing the entry: a
                    # client's retry makes sure the job is indexed.
                    renew.add((self._l.slot(key, docs[key]["second"]), self._l.home_of(loc)))
            else:
                # A locator without its job: its creator is mid-flight or died, or the
                # job's retention ended (never a job elsewhere: a job never leaves the
                # home its locator names) (the locator outlives it by a day; a job that
                # ends expires no sooner than a retention after its locator was
                # created). Judge by the locator and finish the creator's work; an
                # identity whose job may have expired, or whose creator left it long
                # ago, is free for a new request.
                status = machine.repeat_status_by_fingerprint(
                    loc["due_at"],
                    loc["payload_hash"],
                    labels_of_terms(loc.get("labels")),
                    new,
                    loc.get("window_ms", 0),
                )
                job = machine.new_job(replace(new, due_at=loc["due_at"]), now_ms)
                abandoned = now_ms - loc.get("created_at", now_ms) > ORPHAN_LOCATOR_MS
                may_have_expired = now_ms >= loc.get("created_at", 0) + self._l.retention_ms
                if may_have_expired or (status == CreateStatus.CONFLICT and abandoned):
                    takeover.append((loc, machine.new_job(new, now_ms)))
                    continue
                if status == CreateStatus.EXISTS:
                    repair.append((job, self._l.home_of(loc)))
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
        replaced = await self._l.locator.replace_one(same, self._locator(job, now_ms))
        if replaced.modified_count != 1:
            return CreateStatus.CONFLICT, job
        await self._write_new_jobs([(job, self._home(job))])
        return CreateStatus.CREATED, job

    async def read_jobs(
        self, locators: Sequence[Doc], projection: Doc | None = None
    ) -> dict[str, Doc]:
        by_bucket: dict[int, list[str]] = defaultdict(list)
        for loc in locators:
            by_bucket[self._l.home_of(loc)].append(loc["_id"])
        found = await asyncio.gather(
            *(
                self._l.buckets[b]
                .find({"_id": {"$in": keys}, **self._l.shard_keys(keys)}, projection)
                .batch_size(one_reply(len(keys)))
                .to_list(None)
                for b, keys in by_bucket.items()
            )
        )
        return {d["_id"]: d for docs in found for d in docs}

    # -- read ----------------------------------------------------------------------
    async def _locate(self, biz_type: str, job_id: str) -> tuple[Doc, Doc]:
        """The job's locator and document, or NotFound: two reads by `_id`, and the
        document is where the locator says (it never moves)."""
        key = job_key(biz_type, job_id)
        loc = await self._l.locator.find_one({"_id": key})
        if loc is not None:
            home = self._l.buckets[self._l.home_of(loc)]
            doc = await home.find_one({"_id": key, **self._l.shard_key(key)})
            if doc is not None:
                return loc, doc
        # No locator, or one whose creator never finished: not an accepted job.
        raise NotFound(f"no job {job_id!r} of biz type {biz_type!r}")

    async def get_job(self, biz_type: str, job_id: str) -> Job | None:
        try:
            return doc_to_job((await self._locate(biz_type, job_id))[1])
        except NotFound:
            return None

    # -- changes -------------------------------------------------------------------
    async def cancel_job(self, biz_type: str, job_id: str, now_ms: int) -> Job:
        for _ in range(_CHANGE_RETRIES):
            loc, doc = await self._locate(biz_type, job_id)
            job = doc_to_job(doc)
            change = machine.cancel(job, now_ms)
            if change is None:
                return job
            applied = await self._apply_in_place(loc, doc, change, now_ms)
            if applied is not None:
                return applied
        raise Conflict("the job kept changing; try again")

    async def reschedule_job(
        self, biz_type: str, job_id: str, due_at: int, payload_json: str | None, now_ms: int
    ) -> Job:
        for _ in range(_CHANGE_RETRIES):
            loc, doc = await self._locate(biz_type, job_id)
            change = machine.reschedule(doc_to_job(doc), due_at, payload_json, now_ms)
            applied = await self._apply_in_place(loc, doc, change, now_ms)
            if applied is not None:
                return applied
        raise Conflict("the job kept changing; try again")

    async def replay_job(self, biz_type: str, job_id: str, now_ms: int) -> Job:
        for _ in range(_CHANGE_RETRIES):
            loc, doc = await self._locate(biz_type, job_id)
            job = doc_to_job(doc)
            change = machine.replay(job, now_ms)
            if change is None:  # still where a replay put it: a retried replay
                return job
            applied = await self._apply_in_place(loc, doc, change, now_ms)
            if applied is not None:
                return applied
        raise Conflict("the job kept changing; try again")

    async def withdraw_jobs(self, jobs: Sequence[Job], now_ms: int) -> None:
        for written in jobs:  # rare (a create that lost to a delete): one at a time
            for _ in range(_CHANGE_RETRIES):
                try:
                    loc, doc = await self._locate(written.biz_type, written.job_id)
                except NotFound:
                    break
                change = machine.withdraw(doc_to_job(doc), now_ms)
                if change is None:
                    break
                if await self._apply_in_place(loc, doc, change, now_ms) is not None:
                    break
            else:
                raise Conflict("the job kept changing; try again")

    async def _apply_in_place(
        self, loc: Doc, doc: Doc, change: machine.Change, now_ms: int
    ) -> Job | None:
        """A change of the job's document in its home, under its guard (None if it
        missed); one that sets it to fire in a second then bumps that second's entry,
        naming the home bucket."""
        home = self._l.home_of(loc)
        # The document before the change: what it was is what the calendar's counts
        # move from (the guard may hold for a state other than the one read).
        was = await self._l.buckets[home].find_one_and_update(
            {"_id": doc["_id"], **self._l.shard_key(doc["_id"]), **guard_filter(change.guard)},
            change_update(change, self._l.expire_at(now_ms)),
            return_document=ReturnDocument.BEFORE,
        )
        if was is None:
            return None
        before = doc_to_job(was)
        job = change.apply(before)
        moves = self._l.moves(before, job, Counter())
        second = change.next_second
        if second is None and any(moves.values()):
            await self._l.bump([], moves)  # out of its second (a cancel)
        if second is not None:
            await self._l.bump([(self._l.slot(job.key, second), home)], moves)
            # Set to fire so much later than its locator was written for that the
            # locator might not outlive it: extended (an API call, rare; a reschedule
            # by less than half the slack sends nothing: the identity keeper extends
            # a job still waiting half the slack after its fire time).
            fires_ms = max(job.next_attempt_at or now_ms, now_ms)
            if self._l.locator_outgrown(loc.get("expire_at"), fires_ms):
                await self._l.extend_locators([job.key], fires_ms + LOCATOR_SLACK_MS)
        # The locator outlives its job (layout.locator_expire_at, outlives_locator).
        if change.finishes and self._l.outlives_locator(doc["due_at"], now_ms):
            await self._l.extend_locators([doc["_id"]], now_ms)
        return job
