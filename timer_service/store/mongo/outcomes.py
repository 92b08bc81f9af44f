"""MongoDB outcomes: the batched pre-send mark, and each attempt's result written
as the state machine says, in bulk."""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from collections.abc import Sequence

from pymongo import ReturnDocument, UpdateMany, UpdateOne
from pymongo.results import BulkWriteResult

from timer_service import jobs as machine
from timer_service.calendar import counts_biz
from timer_service.dispatch import Outcome, SendRef
from timer_service.errors import StaleEpoch
from timer_service.model import Job, job_key, second_of
from timer_service.store.mongo.layout import (
    CLAIM_PROJECTION,
    LOCATOR_SLACK_MS,
    Layout,
    SlotMoves,
    change_update,
    doc_to_job,
    guard_filter,
    one_reply,
)


class MongoOutcomes:
    def __init__(self, layout: Layout) -> None:
        self._l = layout

    async def start_sending(
        self, refs: Sequence[SendRef], send_token: str, now_ms: int
    ) -> dict[str, Job]:
        """One update command per bucket, one statement in it per claim among its jobs
        (the jobs of one claim round share their claim, so a batch is a few statements,
        not one per job). Where the statements marked every job they name and their
        messages carry the jobs as claimed, the marked jobs are those with the mark
        applied (nothing else writes a dispatched job and leaves it so); otherwise the
        bucket's jobs are read back by this token. A lone job (every mark, at a
        trickle) is one find-and-modify.

        Refs with an ownership epoch first read their biz types' epochs (one find):
        a check, then the write. A new owner taking the epoch between the two cannot
        get a second send out of it: its messages of these jobs reach it only once
        this broker's channel has closed (single active consumer), and this broker
        sends nothing once its ownership lapsed (broker/ownership.py)."""
        await self._check_epochs(refs)
        if len(refs) == 1:
            return await self._mark_one(refs[0], send_token, now_ms)
        by_bucket: dict[int, dict[tuple[str, bool], dict[str, Job | None]]] = defaultdict(
            lambda: defaultdict(dict)
        )
        for ref in refs:
            group = by_bucket[_home(self._l, ref)][(ref.claim, ref.retake)]
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
                .find(
                    {"_id": {"$in": keys}, **self._l.shard_keys(keys), "sending": send_token},
                    CLAIM_PROJECTION,
                )
                .batch_size(one_reply(len(keys)))
                .to_list(None)
                for b, keys in to_read.items()
            )
        )
        marked.update((d["_id"], doc_to_job(d)) for docs in found for d in docs)
        return marked

    async def _check_epochs(self, refs: Sequence[SendRef]) -> None:
        asked = {ref.biz_type: ref.epoch for ref in refs if ref.epoch is not None}
        if not asked:
            return
        docs = await self._l.owners.find({"_id": {"$in": sorted(asked)}}).to_list(None)
        current = {d["_id"]: d.get("epoch") for d in docs}
        stale = frozenset(
            ref.biz_type
            for ref in refs
            if ref.epoch is not None and current.get(ref.biz_type) != ref.epoch
        )
        if stale:
            raise StaleEpoch(stale)

    async def _mark_one(self, ref: SendRef, send_token: str, now_ms: int) -> dict[str, Job]:
        bucket = self._l.buckets[_home(self._l, ref)]
        key = _ref_key(ref)
        change = machine.start_sending(ref.claim, send_token, now_ms, ref.retake)
        doc = await bucket.find_one_and_update(
            {
                "_id": key,
                **self._l.shard_key(key),
                **guard_filter(change.guard),
            },
            change_update(change),
            CLAIM_PROJECTION,
            return_document=ReturnDocument.AFTER,
        )
        if doc is None:  # cancelled or taken over meanwhile, or a retry of this mark
            doc = await bucket.find_one(
                {"_id": key, **self._l.shard_key(key), "sending": send_token}, CLAIM_PROJECTION
            )
        return {} if doc is None else {key: doc_to_job(doc)}

    async def record_outcomes(self, outcomes: Sequence[Outcome], now_ms: int) -> None:
        """Every outcome is a blind conditional update of its job in its home bucket,
        one bulk write per bucket (a retry too: it stays where it is and fires from
        there), then one bump of the retried jobs' seconds naming their homes. An
        update that missed means the job was cancelled meanwhile (or the outcome is
        stale): looked for only then. No outcome can fail for ever: each is one
        statement on one document, which applies or misses."""
        layout = self._l
        expire_at = layout.expire_at(now_ms)
        by_bucket: dict[int, list[tuple[Outcome, machine.Change]]] = defaultdict(list)
        for o in outcomes:
            by_bucket[_home(layout, o.ref)].append((o, machine.outcome(o, now_ms)))
        buckets = list(by_bucket)
        results = await asyncio.gather(
            *(
                layout.buckets[b].bulk_write(
                    [
                        UpdateOne(
                            {"_id": _key(o), **layout.shard_key(_key(o)), **guard_filter(c.guard)},
                            change_update(c, expire_at),
                        )
                        for o, c in by_bucket[b]
                    ],
                    ordered=False,
                )
                for b in buckets
            )
        )
        retried = {
            (layout.slot(_key(o), second), b)
            for b, items in by_bucket.items()
            for o, c in items
            if (second := c.next_second) is not None
        }
        if retried:  # a retry is a new timer: its second must name its bucket
            await layout.bump(retried, await self._retry_moves(by_bucket, results, now_ms))
        # Locators were given an expiry past their job's when written: only a job that
        # ends, or is retried, long after its due time needs its locator extended
        # (normally none, and then no command is sent at all).
        await layout.extend_locators(
            [
                _key(o)
                for items in by_bucket.values()
                for o, c in items
                if c.finishes and layout.outlives_locator(o.ref.due_at, now_ms)
            ],
            now_ms,
        )
        late = [
            (_key(o), at)
            for items in by_bucket.values()
            for o, c in items
            if (at := o.next_attempt_at) is not None
            and c.next_second is not None
            and layout.outlives_locator(o.ref.due_at, at)
        ]
        if late:
            ends_ms = max(at for _, at in late) + LOCATOR_SLACK_MS
            await layout.extend_locators([key for key, _ in late], ends_ms)
        missed = [
            o
            for b, result in zip(buckets, results, strict=True)
            if result.modified_count < len(by_bucket[b])
            for o, _ in by_bucket[b]
        ]
        if missed:
            await self._record_after_cancel(missed, now_ms)

    async def _retry_moves(
        self,
        by_bucket: dict[int, list[tuple[Outcome, machine.Change]]],
        results: Sequence[BulkWriteResult],
        now_ms: int,
    ) -> SlotMoves:
        """The calendar counts of the retries that applied: each is pending again in
        its new second. A bucket whose updates all applied needs no read; one where
        some missed (cancelled meanwhile, or written already by an earlier call whose
        reply was lost, which counted them or failed before it could: the second's
        next load recounts) is read back for the retried jobs this call wrote (their
        `updated_at`)."""
        layout = self._l
        moves: SlotMoves = Counter()
        for (b, items), result in zip(by_bucket.items(), results, strict=True):
            retries = {
                _key(o): o
                for o, c in items
                if c.next_second is not None and counts_biz(o.ref.biz_type)
            }
            if not retries:
                continue
            if result.modified_count < len(items):
                keys = list(retries)
                docs = (
                    await layout.buckets[b]
                    .find(
                        {
                            "_id": {"$in": keys},
                            **layout.shard_keys(keys),
                            "state": "pending",
                            "updated_at": now_ms,
                        },
                        {"next_attempt_at": 1},
                    )
                    .to_list(None)
                )
                pending = {d["_id"]: d.get("next_attempt_at") for d in docs}
                retries = {k: o for k, o in retries.items() if pending.get(k) == o.next_attempt_at}
            for key, o in retries.items():
                assert o.next_attempt_at is not None
                at = layout.slot(key, second_of(o.next_attempt_at))
                moves[(at, o.ref.biz_type)] += 1
        return moves

    async def _record_after_cancel(self, outcomes: Sequence[Outcome], now_ms: int) -> None:
        """`jobs.outcome_after_cancel`, as its guard says (once per attempt)."""
        by_bucket: dict[int, list[UpdateOne]] = defaultdict(list)
        for o in outcomes:
            change = machine.outcome_after_cancel(o, now_ms)
            query = {"_id": _key(o), **self._l.shard_key(_key(o)), **guard_filter(change.guard)}
            by_bucket[_home(self._l, o.ref)].append(UpdateOne(query, change_update(change)))
        for b, ops in by_bucket.items():
            await self._l.buckets[b].bulk_write(ops, ordered=False)


def _home(layout: Layout, ref: SendRef) -> int:
    return layout.home_of_ref(ref.bucket, ref.second)


def _key(o: Outcome) -> str:
    return job_key(o.ref.biz_type, o.ref.job_id)


def _ref_key(ref: SendRef) -> str:
    return job_key(ref.biz_type, ref.job_id)
