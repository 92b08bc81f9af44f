"""MongoDB console calls: search (`search.py`), counts, bulk changes, recent attempts."""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from pymongo import UpdateOne

from timer_service.jobs import Change
from timer_service.model import Attempt, Job, JobState
from timer_service.search import JobFilter
from timer_service.store.mongo.layout import (
    LOCATOR_SLACK_MS,
    Doc,
    Layout,
    SlotMoves,
    change_update,
    guard_filter,
)
from timer_service.store.mongo.search import ReadJobs, key_range, search_jobs
from timer_service.store.ports.console import RecentAttempt


def bucket_query(where: JobFilter) -> Doc:
    """The whole filter as one query on a bucket's documents (labels as `labels.<key>`);
    its (biz_type, state, _id) index serves the biz type, states and id prefix."""
    query: Doc = {}
    if where.biz_type is not None:
        query["biz_type"] = where.biz_type
    if where.states is not None:
        states = sorted(s.value for s in where.states)
        query["state"] = states[0] if len(states) == 1 else {"$in": states}
    keys = key_range(where, None)
    if keys:
        query["_id"] = keys
    due: Doc = {}
    if where.due_after is not None:
        due["$gte"] = where.due_after
    if where.due_before is not None:
        due["$lt"] = where.due_before
    if due:
        query["due_at"] = due
    for key, value in where.labels:
        query[f"labels.{key}"] = value
    if where.idle:
        query["sending"] = None
    return query


class MongoConsole:
    def __init__(self, layout: Layout, read_jobs: ReadJobs) -> None:
        self._l = layout
        self._read_jobs = read_jobs

    async def search_jobs(
        self, where: JobFilter, limit: int, cursor: str | None
    ) -> tuple[list[Job], str | None]:
        return await search_jobs(self._l, self._read_jobs, where, limit, cursor)

    async def count_matching(self, where: JobFilter) -> int:
        query = bucket_query(where)
        counts = await asyncio.gather(*(b.count_documents(query) for b in self._l.buckets))
        return sum(counts)

    async def apply_changes(self, changes: Sequence[tuple[Job, Change]], now_ms: int) -> list[Job]:
        if not changes:
            return []
        keys = [job.key for job, _ in changes]
        found = await self._l.locator.find(
            {"_id": {"$in": keys}}, {"bucket": 1, "second": 1, "expire_at": 1}
        ).to_list(None)
        homes = {loc["_id"]: self._l.home_of(loc) for loc in found}
        expiries = {loc["_id"]: loc.get("expire_at") for loc in found}
        by_home: dict[int, list[tuple[Job, Change]]] = defaultdict(list)
        for job, change in changes:
            if job.key in homes:  # else gone meanwhile (its retention ended)
                by_home[homes[job.key]].append((job, change))
        done: list[Job] = []
        for bucket, items in by_home.items():
            done.extend(await self._apply_in_place(bucket, items, now_ms))
        # Set to fire so much later that their locators might not outlive them: extended
        # (as `MongoJobs._apply_in_place`; normally none, and no command is sent).
        later = [
            j
            for j in done
            if j.state == JobState.PENDING
            and self._l.locator_outgrown(expiries.get(j.key), j.next_attempt_at or now_ms)
        ]
        if later:
            ends_ms = max(j.next_attempt_at or now_ms for j in later) + LOCATOR_SLACK_MS
            await self._l.extend_locators([j.key for j in later], ends_ms)
        return done

    async def _apply_in_place(
        self, bucket: int, items: Sequence[tuple[Job, Change]], now_ms: int
    ) -> list[Job]:
        """One bulk write of guarded updates; which went through is read back when not all
        did (a change sets `updated_at`, so an applied one shows it)."""
        expire_at = self._l.expire_at(now_ms)
        ops = [
            UpdateOne(
                {"_id": job.key, **self._l.shard_key(job.key), **guard_filter(ch.guard)},
                change_update(ch, expire_at),
            )
            for job, ch in items
        ]
        coll = self._l.buckets[bucket]
        result = await coll.bulk_write(ops, ordered=False)
        changed = [(ch.apply(job), ch, job) for job, ch in items]
        if result.modified_count != len(ops):
            keys = [j.key for j, _, _ in changed]
            docs = await coll.find({"_id": {"$in": keys}, **self._l.shard_keys(keys)}).to_list(None)
            now = {d["_id"]: (d["state"], d.get("updated_at")) for d in docs}
            changed = [c for c in changed if now.get(c[0].key) == (c[0].state, c[0].updated_at)]
        moves: SlotMoves = Counter()
        for after, _, before in changed:
            self._l.moves(before, after, moves)
        # The locator outlives its job (layout.locator_expire_at, outlives_locator).
        finished = [
            j.key
            for j, ch, _ in changed
            if ch.finishes and self._l.outlives_locator(j.due_at, now_ms)
        ]
        await self._l.extend_locators(finished, now_ms)
        # Jobs set to fire in a second: its entry names their bucket (they stay in it);
        # the calendar's counts move with them (out of a second, for a cancel).
        await self._l.bump(
            (
                (self._l.slot(j.key, second), bucket)
                for j, ch, _ in changed
                if (second := ch.next_second) is not None
            ),
            moves,
        )
        return [j for j, _, _ in changed]

    async def count_by_state(self, biz_type: str | None) -> dict[tuple[str, JobState], int]:
        match = {} if biz_type is None else {"biz_type": biz_type}
        pipeline: list[Doc] = [
            {"$match": match},
            {"$group": {"_id": {"b": "$biz_type", "s": "$state"}, "n": {"$sum": 1}}},
        ]

        async def count(bucket: Any) -> list[Doc]:
            return await (await bucket.aggregate(pipeline)).to_list(None)

        counts: Counter[tuple[str, JobState]] = Counter()
        for rows in await asyncio.gather(*(count(b) for b in self._l.buckets)):
            for row in rows:
                counts[(row["_id"]["b"], JobState(row["_id"]["s"]))] += int(row["n"])
        return dict(counts)

    async def recent_attempts(self, since_ms: int, biz_type: str | None) -> list[RecentAttempt]:
        # Served by each bucket's ("history.at") index: only jobs attempted since then.
        query: Doc = {"history.at": {"$gte": since_ms}}
        if biz_type is not None:
            query["biz_type"] = biz_type
        fields = {"biz_type": 1, "due_at": 1, "created_at": 1, "history": 1}
        found = await asyncio.gather(
            *(b.find(query, fields).to_list(None) for b in self._l.buckets)
        )
        return [
            RecentAttempt(
                doc["biz_type"], doc["due_at"], Attempt.from_dict(entry), doc.get("created_at", 0)
            )
            for docs in found
            for doc in docs
            for entry in doc.get("history", ())
            if entry["at"] >= since_ms
        ]
