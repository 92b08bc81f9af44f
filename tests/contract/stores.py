"""The store fixture of the contract suites (both adapters) and their small helpers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.sim.fake_store import fake_mongo_store
from tests.support import unique_name
from timer_service.jobs import NewJob
from timer_service.model import Attempt, Job, JobState, encode_payload
from timer_service.search import JobFilter
from timer_service.store.base import Store
from timer_service.store.memory import MemoryStore
from timer_service.store.mongo import MongoStore

NOW = 1_767_225_600_000  # 2026-01-01T00:00:00Z, a whole second


# "mongo-fake": the real MongoDB adapter over the in-memory fake driver (tests/sim).
STORES = ["memory", pytest.param("mongo", marks=pytest.mark.integration), "mongo-fake"]


@pytest.fixture(params=STORES)
async def store(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    if request.param == "memory":
        memory = MemoryStore(buckets=60)
        await memory.setup()
        yield memory
        return
    if request.param == "mongo-fake":
        mongo = fake_mongo_store(buckets=60)
    else:
        server = request.getfixturevalue("secantus")  # a sync, session-wide fixture
        mongo = MongoStore(server.url, unique_name("contract"), buckets=60)
    await mongo.setup()
    try:
        yield mongo
    finally:
        await mongo.drop_database()
        await mongo.close()


def new(job_id: str, due_at: int = NOW + 5000, payload: Any = None, **kw: Any) -> NewJob:
    return NewJob("orders", job_id, due_at, encode_payload(payload), **kw)


async def create(store: Store, *jobs: NewJob, now: int = NOW) -> list[Any]:
    return await store.jobs.create_jobs(list(jobs), now)


async def claim_second(store: Store, second: int, claim: str = "c1", fence: int = 1):
    return await store.scan.claim_due(second, second * 1000 + 999, claim, fence, NOW)


async def drop_entry(store: Store, second: int) -> None:
    """What a crash between a job's write and its entry's renewal leaves behind."""
    [entry] = await store.scan.next_seconds(second, second, 1)
    assert await store.scan.release_second(entry, 1) is True
    assert await store.scan.next_seconds(second, second, 1) == []


def attempt(n: int, at: int = NOW + 5000, status: int | None = 200) -> Attempt:
    return Attempt(n, at, status, None if status == 200 else f"HTTP {status}", 3)


__all__ = ["NOW", "attempt", "claim_second", "create", "drop_entry", "new", "store"]


async def list_jobs(
    store: Store, biz_type: str | None, state: JobState | None, limit: int, cursor: str | None
) -> tuple[list[Job], str | None]:
    """A page of jobs in identity order, of a biz type and a state when given: the
    console's search with nothing else in the filter."""
    states = None if state is None else frozenset({state})
    return await store.console.search_jobs(JobFilter(biz_type, states), limit, cursor)
