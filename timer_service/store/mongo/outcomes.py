"""MongoDB outcomes: the batched pre-send mark, and each attempt's result written
as the state machine says, in bulk."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Sequence

from pymongo import ReturnDocument, UpdateMany, UpdateOne

from timer_service import jobs as machine
from timer_service.dispatch import Outcome, SendRef
from timer_service.model import Job, job_key
from timer_service.store.mongo.layout import (
    Doc,
    Layout,
    change_update,
    doc_to_job,
    guard_filter,
    one_reply,
    unmarked,
)
from timer_service.store.mongo.moves import Move, Mover


class MongoOutcomes:
    def __init__(self, layout: Layout, mover: Mover) -> None:
        self._l = layout
        self._mover = mover

    async def start_sending(
        self, refs: Sequence[SendRef], send_token: str, now_ms: int
    ) -> dict[str, Job]:
        """One update command per bucket, one statement in it per claim among its jobs
        (the jobs of one claim round share their claim, so a batch is a few statements,
        not one per job). Where the statements marked every job they name and their
        messages carry the jobs as claimed, the marked jobs are those with the mark
        applied (nothing else writes a dispatched job and leaves it so); otherwise the
        bucket's jobs are read back by this token. A lone job (every mark, at a
        trickle) is one find-and-modify."""
        if len(refs) == 1:
            return await self._mark_one(refs[0], send_token, now_ms)
        by_bucket: dict[int, dict[tuple[str, bool], dict[str, Job | None]]] = defaultdict(
            lambda: defaultdict(dict)
        )
        for ref in refs:
            group = by_bucket[self._l.bucket_no(ref.second)][(ref.claim, ref.retake)]
            group.setdefault(_ref_key(ref), ref.job)

        async def mark(b: int, groups: dict[tuple[str, bool], dict[str, Job | None]]) -> None:
            changes = {
                group: machine.start_sending(group[0], send_token, now_ms, group[1])
                for group in groups
            }
            statements = [
                UpdateMany(
                    {
                        "_id": {"$in": list(jobs)},
                        **self._l.shard_keys(list(jobs)),
                        **guard_filter(changes[group].guard),
                        **unmarked(now_ms),
                    },
                    change_update(changes[group]),
                )
                for group, jobs in groups.items()
            ]
            result = await self._l.buckets[b].bulk_write(statements, ordered=False)
            keys = [key for jobs in groups.values() for key in jobs]
            # A statement modifies at most the jobs it names: all of them, all marked.
            carried = all(job is not None for jobs in groups.values() for job in jobs.values())
            if result.modified_count == len(keys) and carried:
                for group, jobs in groups.items():
                    marked.update((k, changes[group].apply(j)) for k, j in jobs.items() if j)
            else:
                to_read[b].extend(keys)

        marked: dict[str, Job] = {}
        to_read: dict[int, list[str]] = defaultdict(list)
        await asyncio.gather(*(mark(b, groups) for b, groups in by_bucket.items()))
        found = await asyncio.gather(
            *(
                self._l.buckets[b]
                .find({"_id": {"$in": keys}, **self._l.shard_keys(keys), "sending": send_token})
                .batch_size(one_reply(len(keys)))
                .to_list(None)
                for b, keys in to_read.items()
            )
        )
        marked.update((d["_id"], doc_to_job(d)) for docs in found for d in docs)
        return marked

    async def _mark_one(self, ref: SendRef, send_token: str, now_ms: int) -> dict[str, Job]:
        bucket = self._l.buckets[self._l.bucket_no(ref.second)]
        key = _ref_key(ref)
        change = machine.start_sending(ref.claim, send_token, now_ms, ref.retake)
        doc = await bucket.find_one_and_update(
            {
                "_id": key,
                **self._l.shard_key(key),
                **guard_filter(change.guard),
                **unmarked(now_ms),
            },
            change_update(change),
            return_document=ReturnDocument.AFTER,
        )
        if doc is None:  # cancelled or taken over meanwhile, or a retry of this mark
            doc = await bucket.find_one(
                {"_id": key, **self._l.shard_key(key), "sending": send_token}
            )
        return {} if doc is None else {key: doc_to_job(doc)}

    async def record_outcomes(self, outcomes: Sequence[Outcome], now_ms: int) -> None:
        """Outcomes that keep the job in its bucket (delivered, dead, a retry into the
        same bucket) are blind conditional updates, one bulk write per bucket; a retry
        into another bucket is read and moved. An update that missed means the job
        was cancelled meanwhile (or the outcome is stale): looked for only then."""
        layout = self._l
        expire_at = layout.expire_at(now_ms)
        in_place: dict[int, list[tuple[Outcome, machine.Change]]] = defaultdict(list)
        moving: list[tuple[Outcome, machine.Change]] = []
        for o in outcomes:
            change = machine.outcome(o, now_ms)
            second = change.next_second
            b = layout.bucket_no(o.ref.second)
            if second is None or layout.bucket_no(second) == b:
                in_place[b].append((o, change))
            else:
                moving.append((o, change))
        buckets = list(in_place)
        results = await asyncio.gather(
            *(
                layout.buckets[b].bulk_write(
                    [
                        UpdateOne(
                            {"_id": _key(o), **layout.shard_key(_key(o)), **guard_filter(c.guard)},
                            change_update(c, expire_at),
                        )
                        for o, c in in_place[b]
                    ],
                    ordered=False,
                )
                for b in buckets
            )
        )
        retried = {
            layout.slot(_key(o), second)
            for items in in_place.values()
            for o, c in items
            if (second := c.next_second) is not None
        }
        if retried:  # a retry is a new timer: its second must be indexed
            await layout.bump(retried)
        # Locators were given an expiry past their job's when written: only a job that
        # ends long after its due time needs its locator extended (normally none, and
        # then no command is sent at all).
        await layout.extend_locators(
            [
                _key(o)
                for items in in_place.values()
                for o, c in items
                if c.finishes and layout.outlives_locator(o.ref.due_at, now_ms)
            ],
            now_ms,
        )
        missed = [
            o
            for b, result in zip(buckets, results, strict=True)
            if result.modified_count < len(in_place[b])
            for o, _ in in_place[b]
        ]
        if moving:
            missed.extend(await self._move_retries(moving))
        if missed:
            await self._record_after_cancel(missed, now_ms)

    async def _move_retries(
        self, moving: Sequence[tuple[Outcome, machine.Change]]
    ) -> list[Outcome]:
        """Move retried jobs to their new bucket; returns the outcomes whose job was
        no longer dispatched under their claim."""
        by_bucket: dict[int, list[str]] = defaultdict(list)
        for o, _ in moving:
            by_bucket[self._l.bucket_no(o.ref.second)].append(_key(o))
        found = await asyncio.gather(
            *(
                self._l.buckets[b]
                .find({"_id": {"$in": keys}, **self._l.shard_keys(keys)})
                .to_list(None)
                for b, keys in by_bucket.items()
            )
        )
        docs: dict[str, Doc] = {d["_id"]: d for ds in found for d in ds}
        moves, missed = [], []
        for o, change in moving:
            doc = docs.get(_key(o))
            if doc is None:
                continue
            job = doc_to_job(doc)
            if change.guard.holds(job):
                moves.append(Move(doc, change.apply(job), guard_filter(change.guard)))
            else:
                missed.append(o)
        if moves:
            tried = {m.old["_id"] for m in moves}
            moved = set(await self._mover.move_many(moves))
            missed.extend(o for o, _ in moving if _key(o) in tried and _key(o) not in moved)
        return missed

    async def _record_after_cancel(self, outcomes: Sequence[Outcome], now_ms: int) -> None:
        """`jobs.outcome_after_cancel`, as its guard says (once per attempt)."""
        by_bucket: dict[int, list[UpdateOne]] = defaultdict(list)
        for o in outcomes:
            change = machine.outcome_after_cancel(o, now_ms)
            query = {"_id": _key(o), **self._l.shard_key(_key(o)), **guard_filter(change.guard)}
            by_bucket[self._l.bucket_no(o.ref.second)].append(
                UpdateOne(query, change_update(change))
            )
        for b, ops in by_bucket.items():
            await self._l.buckets[b].bulk_write(ops, ordered=False)


def _key(o: Outcome) -> str:
    return job_key(o.ref.biz_type, o.ref.job_id)


def _ref_key(ref: SendRef) -> str:
    return job_key(ref.biz_type, ref.job_id)
