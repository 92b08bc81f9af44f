"""Searching jobs by the console's filter, in identity order, with a bounded scan.

Three ways in, by what the filter names (docs/api.md, "Search"):

- labels and a biz type: the locator's multikey (biz_type, labels, _id) index.
  Labels never change after create, so the locator (written once per job, never
  on the hot path) carries them; the jobs of a page are then read by key.
- states and a biz type: a merge of the buckets' (biz_type, state, _id) indexes.
- anything else: the locator in key order ((biz_type, _id) when a biz type is
  given), then the page's jobs read by key.

A job id prefix narrows the key range on each path. The rest of the filter (a due
range, further labels, states on the locator paths) is checked on what the index
gives, and at most `SEARCH_SCAN_LIMIT` documents are read per call: a page may then
end short, with a cursor to go on from.
"""

from __future__ import annotations

import asyncio
import heapq
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from pymongo import ASCENDING

from timer_service.model import Job
from timer_service.search import SEARCH_SCAN_LIMIT, JobFilter
from timer_service.store.mongo.layout import (
    LISTING_PROJECTION,
    Doc,
    Layout,
    doc_to_job,
    label_terms,
)

_LOCATOR_BATCH = 500  # locators read per round trip

# (locators, projection) -> the job documents by `_id`
ReadJobs = Callable[[Sequence[Doc], Doc | None], Awaitable[dict[str, Doc]]]
Page = tuple[list[Job], str | None]


def key_range(where: JobFilter, cursor: str | None) -> dict[str, Any]:
    """The `_id` range of the filter's jobs after `cursor` (empty: every key)."""
    keys: dict[str, Any] = {}
    prefix = where.key_prefix
    if prefix is not None:
        keys = {"$gte": prefix, "$lt": prefix + "\uffff"}
    if cursor is not None:
        keys["$gt"] = cursor  # with $gte kept: a foreign cursor stays in range
    return keys


async def search_jobs(
    layout: Layout, read_jobs: ReadJobs, where: JobFilter, limit: int, cursor: str | None
) -> Page:
    if where.biz_type is not None and where.states is not None and not where.labels:
        return await _merge_buckets(layout, where, limit, cursor)
    return await _through_locator(layout, read_jobs, where, limit, cursor)


async def _through_locator(
    layout: Layout, read_jobs: ReadJobs, where: JobFilter, limit: int, cursor: str | None
) -> Page:
    items: list[Job] = []
    scanned = 0
    after = cursor
    while True:
        query: Doc = {}
        if where.biz_type is not None:
            query["biz_type"] = where.biz_type
        if where.labels:
            query["labels"] = {"$all": label_terms(where.labels)}
        keys = key_range(where, after)
        if keys:
            query["_id"] = keys
        batch = min(_LOCATOR_BATCH, SEARCH_SCAN_LIMIT - scanned)
        page = await layout.locator.find(query).sort("_id", ASCENDING).limit(batch).to_list(None)
        if not page:
            return items, None
        scanned += len(page)
        wanted = [loc for loc in page if where.matches_due(loc["due_at"])]
        docs = await read_jobs(wanted, LISTING_PROJECTION) if wanted else {}
        for loc in page:
            after = loc["_id"]
            doc = docs.get(after)
            if doc is None:
                continue
            job = doc_to_job(doc)
            if where.matches(job):
                items.append(job)
                if len(items) == limit:
                    return items, after
        if len(page) < batch:
            return items, None
        if scanned >= SEARCH_SCAN_LIMIT:
            return items, after


async def _merge_buckets(layout: Layout, where: JobFilter, limit: int, cursor: str | None) -> Page:
    """The filter's jobs in key order: a merge of the buckets, each read through its
    (biz_type, state, _id) index from the cursor on.

    Walking the locator instead reads every job of the biz type: listing its 3 dead
    jobs among a month of delivered ones (what an operator does after a dead-letter
    alert) would read them all. A bucket that runs dry while it may hold more is read
    again before anything past its last key is taken, so the merge stays in order.
    """
    assert where.states is not None
    states = sorted(s.value for s in where.states)
    state = states[0] if len(states) == 1 else {"$in": states}
    base = key_range(where, cursor)

    async def read(bucket: int, after: str | None, n: int) -> list[Doc]:
        keys = base if after is None else {**base, "$gt": after}
        query = {"biz_type": where.biz_type, "state": state, "_id": keys}
        found = layout.buckets[bucket].find(query, LISTING_PROJECTION).sort("_id", ASCENDING)
        found = found.limit(n)
        return await found.to_list(None)

    n_buckets = layout.buckets_n
    chunk = min(limit, max(4, -(-2 * limit // n_buckets)))
    pages = await asyncio.gather(*(read(b, None, chunk) for b in range(n_buckets)))
    buffers = [deque(page) for page in pages]
    more = [len(page) == chunk for page in pages]
    heads = [(buf[0]["_id"], b) for b, buf in enumerate(buffers) if buf]
    heapq.heapify(heads)
    scanned = sum(len(page) for page in pages)
    items: list[Job] = []
    last: str | None = None
    while heads and len(items) < limit:
        key, b = heapq.heappop(heads)
        last = key
        job = doc_to_job(buffers[b].popleft())
        if where.matches(job):
            items.append(job)
        if not buffers[b] and more[b] and len(items) < limit:
            if scanned >= SEARCH_SCAN_LIMIT:
                return items, last  # every key up to `last` is read: go on from there
            wanted = min(max(limit - len(items), chunk), SEARCH_SCAN_LIMIT - scanned)
            page = await read(b, key, wanted)
            scanned += len(page)
            buffers[b].extend(page)
            more[b] = len(page) == wanted
        if buffers[b]:
            heapq.heappush(heads, (buffers[b][0]["_id"], b))
    done = not heads and not any(more)
    return items, (None if done or last is None else last)
