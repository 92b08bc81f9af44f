"""MongoDB only: a job's document never moves (store/mongo/layout.py).

A retry, a reschedule or a replay into a second of another bucket updates the one
document in its home bucket, under its `_id`; the locator is never rewritten; no
interleaving of a create with a retry can make a second document (issue 30, break
1); and an outcome is one statement on one document, so none can fail for ever
(break 5)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tests.contract.stores import NOW, attempt, claim_second, new
from tests.support import SecantusServer, unique_name
from timer_service.dispatch import Claimed, Outcome, OutcomeKind, SendRef
from timer_service.jobs import CreateStatus
from timer_service.model import JobState, second_of
from timer_service.store.mongo import MongoStore
from timer_service.store.mongo.layout import Doc

pytestmark = pytest.mark.integration

FIRST = second_of(NOW + 5000)
LATER = second_of(NOW + 7000)  # another bucket than FIRST's (60 buckets)


@pytest.fixture
async def store(secantus: SecantusServer) -> AsyncIterator[MongoStore]:
    mongo = MongoStore(secantus.url, unique_name("home"), buckets=60)
    await mongo.setup()
    yield mongo
    await mongo.drop_database()
    await mongo.close()


def ref_of(c: Claimed) -> SendRef:
    return SendRef(c.biz_type, c.job_id, c.second, c.claim, bucket=c.bucket, due_at=c.due_at)


def retry_of(c: Claimed, at: int = NOW + 7000) -> Outcome:
    return Outcome(ref_of(c), OutcomeKind.RETRY, attempt(c.attempt, status=503), at)


async def copies(store: MongoStore, key: str) -> list[tuple[int, Doc]]:
    """Every document of `key`, in every bucket, with its bucket."""
    found = await asyncio.gather(*(b.find_one({"_id": key}) for b in store.layout.buckets))
    return [(n, d) for n, d in enumerate(found) if d is not None]


async def test_a_retried_rescheduled_and_replayed_job_stays_in_its_home(
    store: MongoStore,
) -> None:
    await store.jobs.create_jobs([new("a")], NOW)
    locator = await store.layout.locator.find_one({"_id": "orders/a"})
    [c] = await claim_second(store, FIRST)
    await store.outcomes.record_outcomes([retry_of(c)], NOW + 5000)
    await store.jobs.reschedule_job("orders", "a", NOW + 9000, None, NOW + 6000)
    [c] = await claim_second(store, second_of(NOW + 9000), "c2")
    dead = Outcome(ref_of(c), OutcomeKind.DEAD, attempt(2, at=NOW + 9000, status=400))
    await store.outcomes.record_outcomes([dead], NOW + 9000)
    await store.jobs.replay_job("orders", "a", NOW + 11_000)
    [(home, doc)] = await copies(store, "orders/a")
    assert home == FIRST % 60, f"the job left its home bucket {FIRST % 60} for {home}"
    assert doc["second"] == second_of(NOW + 11_000) and doc["state"] == "pending", doc
    after = await store.layout.locator.find_one({"_id": "orders/a"})
    assert after == locator, f"the locator was rewritten: {locator} -> {after}"
    [c] = await claim_second(store, second_of(NOW + 11_000), "c3")
    assert (c.job_id, c.bucket) == ("a", home), c


async def test_a_create_retried_while_a_broker_retries_the_job_makes_one_document(
    store: MongoStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Break 1: the create read the locator, the retry went through, then the create
    read the job. It used to find no job where the locator had said (the retry had
    moved it) and "repair" the identity with a second pending document."""
    [created] = await store.jobs.create_jobs([new("a")], NOW)
    [c] = await claim_second(store, FIRST)
    read_jobs = store.jobs.read_jobs

    async def retry_between(locators: list[Doc]) -> dict[str, Doc]:
        await store.outcomes.record_outcomes([retry_of(c)], NOW + 5000)
        return await read_jobs(locators)

    monkeypatch.setattr(store.jobs, "read_jobs", retry_between)
    [again] = await store.jobs.create_jobs([new("a")], NOW + 5000)
    monkeypatch.undo()
    assert again.status == CreateStatus.EXISTS, again
    assert again.job.state == JobState.PENDING and again.job.attempts == 1, again.job
    assert len(await copies(store, "orders/a")) == 1, "a retried create made a second document"
    cancelled = await store.jobs.cancel_job("orders", "a", NOW + 6000)
    assert cancelled.state == JobState.CANCELLED
    assert await claim_second(store, LATER, "c2") == [], "a job fired after its 200 cancel"
    assert created.status == CreateStatus.CREATED


async def test_creates_and_retries_side_by_side_never_fork_an_identity(
    store: MongoStore,
) -> None:
    await store.jobs.create_jobs([new(f"j{i}") for i in range(20)], NOW)
    claimed = await claim_second(store, FIRST)
    await asyncio.gather(
        store.outcomes.record_outcomes([retry_of(c) for c in claimed], NOW + 5000),
        *(store.jobs.create_jobs([new(f"j{i}")], NOW + 5000) for i in range(20)),
    )
    for i in range(20):
        assert len(await copies(store, f"orders/j{i}")) == 1, f"j{i} has two documents"


async def test_an_outcome_passes_a_stray_copy_by(store: MongoStore) -> None:
    """Break 5: a retry's move met a leftover document with the same `_id` in the
    new bucket and failed in its transaction, its whole outcome batch with it, for
    ever. Now an outcome writes the home document only."""
    await store.jobs.create_jobs([new("a"), new("b")], NOW)
    claimed = await claim_second(store, FIRST)
    [home_doc] = [d for _, d in await copies(store, "orders/a")]
    await store.layout.bucket(LATER).insert_one(home_doc)  # as break 1 left them
    outcomes = [
        retry_of(c) if c.job_id == "a" else Outcome(ref_of(c), OutcomeKind.DELIVERED, attempt(1))
        for c in claimed
    ]
    await store.outcomes.record_outcomes(outcomes, NOW + 5000)  # raises nothing
    a, b = await store.jobs.get_job("orders", "a"), await store.jobs.get_job("orders", "b")
    assert a is not None and a.state == JobState.PENDING and a.next_attempt_at == NOW + 7000
    assert b is not None and b.state == JobState.DELIVERED, b


async def test_a_claim_of_a_second_this_process_never_listed_reads_its_buckets(
    store: MongoStore, secantus: SecantusServer
) -> None:
    await store.jobs.create_jobs([new("a")], NOW)
    [c] = await claim_second(store, FIRST)
    await store.outcomes.record_outcomes([retry_of(c)], NOW + 5000)
    other = MongoStore(secantus.url, store.layout.db.name, buckets=60)  # a fresh daemon
    try:
        await other.setup()
        [again] = await claim_second(other, LATER, "c2")
        assert again.job_id == "a" and again.bucket == FIRST % 60, again
    finally:
        await other.close()


async def test_a_load_forgets_another_bucket_whose_jobs_left_the_second(
    store: MongoStore,
) -> None:
    await store.jobs.create_jobs([new("a"), new("d"), new("b", due_at=NOW + 7000)], NOW)
    claimed = {c.job_id: c for c in await claim_second(store, FIRST)}
    await store.outcomes.record_outcomes([retry_of(claimed["a"])], NOW + 5000)  # into LATER
    await store.jobs.reschedule_job("orders", "a", NOW + 9000, None, NOW + 5000)  # out again
    [entry] = await store.scan.next_seconds(LATER, LATER, 1)
    assert [key for key, _ in await store.scan.load_second(LATER, 1)] == ["orders/b"]
    stored = await store.layout.seconds.find_one({"_id": LATER})
    assert stored is not None and stored["buckets"] == [LATER % 60], stored
    # Another job of FIRST's bucket is retried into LATER: the release misses, and the
    # claims that follow read FIRST's bucket again.
    await store.outcomes.record_outcomes([retry_of(claimed["d"])], NOW + 5000)
    assert await store.scan.release_second(entry, 1) is False
    later = await claim_second(store, LATER, "c2")
    assert sorted(c.job_id for c in later) == ["b", "d"], later
