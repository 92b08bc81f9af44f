"""A find-and-modify of a job carries its partition, the first field of the buckets'
shard key (docs/operations.md, "Sharding MongoDB"): MongoDB before 7.1 refuses a
find-and-modify on a sharded collection without an equality on the full shard key,
and any version sends a write by `_id` alone to every shard. No sharded cluster here:
the commands the store sends are read with a PyMongo command listener."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pymongo import AsyncMongoClient, monitoring

from timer_service.dispatch import SendRef
from timer_service.jobs import NewJob
from timer_service.model import BizType
from timer_service.store.mongo import MongoStore

pytestmark = pytest.mark.integration

P = 8
FENCE = 1


class FindAndModifies(monitoring.CommandListener):
    def __init__(self) -> None:
        self.queries: list[tuple[str, dict[str, Any]]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name == "findAndModify":
            self.queries.append((event.command["findAndModify"], dict(event.command["query"])))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


@pytest.fixture
async def watched(
    mongo_url: str, mongo_db: str
) -> AsyncIterator[tuple[MongoStore, FindAndModifies]]:
    listener = FindAndModifies()
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        mongo_url, tz_aware=True, event_listeners=[listener]
    )
    store = MongoStore(mongo_url, mongo_db, buckets=60, partitions=P, client=client)
    await store.setup()
    await store.biz_types.put_biz_type(BizType("orders", "http://127.0.0.1:9/cb"))
    try:
        yield store, listener
    finally:
        await store.drop_database()
        await store.close()


async def test_a_lone_send_mark_and_a_cancel_name_the_job_s_partition(
    watched: tuple[MongoStore, FindAndModifies],
) -> None:
    store, listener = watched
    now = int(time.time() * 1000)
    due = (now // 1000 + 60) * 1000
    await store.jobs.create_jobs(
        [NewJob("orders", "sent", due, "null"), NewJob("orders", "cancelled", due, "null")], now
    )
    [claimed] = await store.dispatch.claim_due(due // 1000, due, "c1", FENCE, now, limit=1)
    ref = SendRef("orders", claimed.job_id, claimed.second, "c1")
    listener.queries.clear()
    assert await store.outcomes.start_sending([ref], "s1", now)  # a lone mark
    other = "cancelled" if claimed.job_id == "sent" else "sent"
    await store.jobs.cancel_job("orders", other, now)  # an in-place change
    on_buckets = [(c, q) for c, q in listener.queries if c.startswith("jobs_b")]
    assert len(on_buckets) == 2, listener.queries
    for _, query in on_buckets:
        key = query["_id"]
        assert query.get("partition") == store.layout.partition(key), query
