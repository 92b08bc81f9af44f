"""Queries of jobs by identity carry their partition, the first field of the buckets'
shard key (docs/operations.md, "Sharding MongoDB"): MongoDB before 7.1 refuses a
find-and-modify on a sharded collection without an equality on the full shard key,
and any version sends a query by `_id` alone to every shard. No sharded cluster here:
the commands the store sends are read with a PyMongo command listener."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pymongo import AsyncMongoClient, monitoring

from timer_service.dispatch import Outcome, OutcomeKind, SendRef
from timer_service.jobs import NewJob
from timer_service.model import Attempt, BizType
from timer_service.store.mongo import MongoStore

pytestmark = pytest.mark.integration

P = 8
FENCE = 1


class FindAndModifies(monitoring.CommandListener):
    """Every filter sent to a bucket collection, by command: find-and-modify, find,
    update and delete (each statement's)."""

    def __init__(self) -> None:
        self.queries: list[tuple[str, dict[str, Any]]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        c, name = event.command, event.command_name
        if not str(c.get(name, "")).startswith("jobs_b"):
            return
        if name == "findAndModify":
            self.queries.append((name, dict(c["query"])))
        elif name == "find":
            self.queries.append((name, dict(c["filter"])))
        elif name in ("update", "delete"):
            field = "updates" if name == "update" else "deletes"
            self.queries.extend((name, dict(statement["q"])) for statement in c[field])

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
    [claimed] = await store.scan.claim_due(due // 1000, due, "c1", FENCE, now, limit=1)
    ref = SendRef("orders", claimed.job_id, claimed.second, "c1")
    listener.queries.clear()
    assert await store.outcomes.start_sending([ref], "s1", now)  # a lone mark
    other = "cancelled" if claimed.job_id == "sent" else "sent"
    await store.jobs.cancel_job("orders", other, now)  # an in-place change
    modified = [q for c, q in listener.queries if c == "findAndModify"]
    assert len(modified) == 2, listener.queries
    for query in modified:
        assert query.get("partition") == store.layout.partition(query["_id"]), query


async def test_the_api_s_and_the_broker_s_queries_by_identity_name_partitions(
    watched: tuple[MongoStore, FindAndModifies],
) -> None:
    """Get, cancel and reschedule (to another bucket: a move), send marks (batched),
    outcomes (delivered, a retry into another bucket) and a reclaim: every query of a
    bucket names the partitions of the jobs it is about."""
    store, listener = watched
    now = int(time.time() * 1000)
    due = (now // 1000 + 60) * 1000
    ids = [f"j{i}" for i in range(8)]
    await store.jobs.create_jobs([NewJob("orders", i, due, "null") for i in ids], now)
    claimed = await store.scan.claim_due(due // 1000, due, "c1", FENCE, now)
    assert len(claimed) == len(ids)
    listener.queries.clear()

    await store.jobs.get_job("orders", "j0")
    refs = [SendRef("orders", c.job_id, c.second, "c1") for c in claimed]
    marked = await store.outcomes.start_sending(refs[:4], "s1", now)
    assert len(marked) == 4
    done = Attempt(1, now, 200, None, 3)
    failed = Attempt(1, now, 503, None, 3)
    await store.outcomes.record_outcomes(
        [
            Outcome(refs[0], OutcomeKind.DELIVERED, done),
            Outcome(refs[1], OutcomeKind.RETRY, failed, next_attempt_at=due + 30_000),
        ],
        now,
    )
    stale = [j for j in [await store.jobs.get_job("orders", i) for i in ("j4", "j5")] if j]
    assert len(await store.reconcile.reclaim(stale, "c2", FENCE, now)) == 2
    await store.jobs.create_jobs([NewJob("orders", "later", due + 60_000, "null")], now)
    await store.jobs.reschedule_job("orders", "later", due + 90_000, None, now)
    await store.jobs.cancel_job("orders", "j6", now)

    assert listener.queries
    missing = [(c, q) for c, q in listener.queries if "partition" not in q]
    assert missing == [], f"{len(missing)} of {len(listener.queries)} name no partition"
