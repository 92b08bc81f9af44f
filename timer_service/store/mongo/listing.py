"""Listing jobs in identity order: through the locator, or, for one biz type in one
state, by merging the buckets' (biz_type, state, _id) indexes."""

from __future__ import annotations

import asyncio
import heapq
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from pymongo import ASCENDING

from timer_service.model import Job, JobState
from timer_service.store.mongo.layout import Doc, Layout, doc_to_job

_LIST_SCAN = 500  # locators read per page while filling a list response

ReadJobs = Callable[[Sequence[Doc]], Awaitable[dict[str, Doc]]]


async def list_jobs(
    layout: Layout,
    read_jobs: ReadJobs,
    biz_type: str | None,
    state: JobState | None,
    limit: int,
    cursor: str | None,
) -> tuple[list[Job], str | None]:
    if biz_type is not None and state is not None:
        return await _list_in_state(layout, biz_type, state, limit, cursor)
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
            await layout.locator.find(query).sort("_id", ASCENDING).limit(_LIST_SCAN).to_list(None)
        )
        if not page:
            return items, None
        docs = await read_jobs(page)
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
    layout: Layout, biz_type: str, state: JobState, limit: int, cursor: str | None
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

    async def read(bucket: int, after: str | None, n: int) -> list[Doc]:
        keys = dict(key_range) if after is None else {**key_range, "$gt": after}
        query = {"biz_type": biz_type, "state": state.value, "_id": keys}
        found = layout.buckets[bucket].find(query).sort("_id", ASCENDING).limit(n)
        return await found.to_list(None)

    n_buckets = layout.buckets_n
    first = min(limit, max(4, -(-2 * limit // n_buckets)))
    pages = await asyncio.gather(*(read(b, None, first) for b in range(n_buckets)))
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
