"""MongoDB only: an identity's locator and its job live and die together.

The locator is what makes create idempotent and lookups O(1); the in-memory
store has none, so these checks read the MongoDB documents themselves."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from tests.contract.stores import NOW, attempt, new
from tests.support import SecantusServer, unique_name
from timer_service import jobs as machine
from timer_service.dispatch import Outcome, OutcomeKind, SendRef
from timer_service.jobs import CreateStatus
from timer_service.model import JobState, second_of
from timer_service.search import JobFilter
from timer_service.store.mongo import MongoStore
from timer_service.store.mongo.layout import LOCATOR_SLACK_MS

pytestmark = pytest.mark.integration


@pytest.fixture
async def store(secantus: SecantusServer) -> AsyncIterator[MongoStore]:
    mongo = MongoStore(secantus.url, unique_name("identity"), buckets=60)
    await mongo.setup()
    yield mongo
    await mongo.drop_database()
    await mongo.close()


async def delivered(store: MongoStore, at: int) -> None:
    s = second_of(NOW + 5000)
    [c] = await store.scan.claim_due(s, s * 1000 + 999, "c1", 1, NOW)
    ref = SendRef(
        c.biz_type, c.job_id, c.second, c.claim, bucket=c.bucket, due_at=c.due_at
    )  # as a broker's
    await store.outcomes.record_outcomes([Outcome(ref, OutcomeKind.DELIVERED, attempt(1))], at)


async def dead_job(store: MongoStore) -> None:
    await store.jobs.create_jobs([new("a")], NOW)
    s = second_of(NOW + 5000)
    [c] = await store.scan.claim_due(s, s * 1000 + 999, "c1", 1, NOW)
    ref = SendRef(c.biz_type, c.job_id, c.second, c.claim, bucket=c.bucket)
    await store.outcomes.record_outcomes(
        [Outcome(ref, OutcomeKind.DEAD, attempt(1, status=400))], NOW + 5000
    )


async def test_a_finished_job_s_locator_expires_after_it(store: MongoStore) -> None:
    await dead_job(store)
    job_doc = await store.layout.bucket(second_of(NOW + 5000)).find_one({"_id": "orders/a"})
    loc = await store.layout.locator.find_one({"_id": "orders/a"})
    assert job_doc is not None and loc is not None
    assert loc["expire_at"] > job_doc["expire_at"], (loc["expire_at"], job_doc["expire_at"])


@pytest.mark.parametrize("how", ["cancel", "bulk cancel"])
async def test_a_cancelled_job_s_locator_expires_after_it(store: MongoStore, how: str) -> None:
    await store.jobs.create_jobs([new("a")], NOW)
    if how == "cancel":
        await store.jobs.cancel_job("orders", "a", NOW + 1)
    else:
        [job], _ = await store.console.search_jobs(JobFilter(biz_type="orders"), 10, None)
        change = machine.cancel(job, NOW + 1)
        assert change is not None
        await store.console.apply_changes([(job, change)], NOW + 1)
    job_doc = await store.layout.bucket(second_of(NOW + 5000)).find_one({"_id": "orders/a"})
    loc = await store.layout.locator.find_one({"_id": "orders/a"})
    assert job_doc is not None and job_doc["state"] == "cancelled" and loc is not None
    assert loc["expire_at"] > job_doc["expire_at"], (loc["expire_at"], job_doc["expire_at"])


async def test_a_job_cancelled_long_after_its_due_time_extends_its_locator(
    store: MongoStore,
) -> None:
    await store.jobs.create_jobs([new("a")], NOW)
    late = NOW + 5000 + LOCATOR_SLACK_MS + 3_600_000  # never fired: no daemon ran
    await store.jobs.cancel_job("orders", "a", late)
    job_doc = await store.layout.bucket(second_of(NOW + 5000)).find_one({"_id": "orders/a"})
    loc = await store.layout.locator.find_one({"_id": "orders/a"})
    assert job_doc is not None and job_doc["state"] == "cancelled" and loc is not None
    assert loc["expire_at"] > job_doc["expire_at"], (loc["expire_at"], job_doc["expire_at"])


async def test_a_replay_keeps_the_locator_and_its_expiry_fits(
    store: MongoStore,
) -> None:
    await dead_job(store)
    before = await store.layout.locator.find_one({"_id": "orders/a"})
    replay_at = NOW + 65_000
    job = await store.jobs.replay_job("orders", "a", replay_at)
    assert job.state == JobState.PENDING
    loc = await store.layout.locator.find_one({"_id": "orders/a"})
    assert loc == before, f"a replay rewrote the locator: {before} -> {loc}"
    assert loc is not None
    needed = store.layout.locator_expire_at(replay_at + LOCATOR_SLACK_MS)
    assert loc["expire_at"] >= needed, (loc, needed)


class LocatorCalls:
    """The locator collection, with every call on it counted."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> object:
        self.calls.append(name)
        return getattr(self.inner, name)


async def test_an_outcome_on_time_writes_no_locator(
    store: MongoStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    await store.jobs.create_jobs([new("a")], NOW)
    before = await store.layout.locator.find_one({"_id": "orders/a"})
    assert before is not None and before["expire_at"] is not None, before
    spy = LocatorCalls(store.layout.locator)
    monkeypatch.setattr(store.layout, "locator", spy)
    await delivered(store, at=NOW + 5000)
    assert spy.calls == [], "an outcome on time sent the locator a command (a round trip)"
    monkeypatch.undo()
    after = await store.layout.locator.find_one({"_id": "orders/a"})
    assert after == before, "the locator was written although its expiry already fit"
    job_doc = await store.layout.bucket(second_of(NOW + 5000)).find_one({"_id": "orders/a"})
    assert job_doc is not None and after is not None
    assert after["expire_at"] > job_doc["expire_at"] + timedelta(days=1), after


async def test_a_job_that_ends_long_after_its_fire_time_extends_its_locator(
    store: MongoStore,
) -> None:
    await store.jobs.create_jobs([new("a")], NOW)
    late = NOW + 5000 + LOCATOR_SLACK_MS + 3_600_000  # e.g. its biz type was paused
    await delivered(store, at=late)
    job_doc = await store.layout.bucket(second_of(NOW + 5000)).find_one({"_id": "orders/a"})
    loc = await store.layout.locator.find_one({"_id": "orders/a"})
    assert job_doc is not None and loc is not None
    assert loc["expire_at"] > job_doc["expire_at"], (loc["expire_at"], job_doc["expire_at"])


async def test_the_keeper_extends_the_locators_of_jobs_still_waiting(store: MongoStore) -> None:
    await store.jobs.create_jobs([new("a"), new("b", due_at=NOW + 6 * 86_400_000)], NOW)
    loc_b = await store.layout.locator.find_one({"_id": "orders/b"})
    assert await store.sweep.keep_identities(NOW + 6000, 100) == 0  # nothing waits long
    later = NOW + 5000 + LOCATOR_SLACK_MS  # "a" still pending, long after its fire time
    assert await store.sweep.keep_identities(later, 100) == 1
    loc_a = await store.layout.locator.find_one({"_id": "orders/a"})
    assert loc_a is not None
    assert loc_a["expire_at"] >= store.layout.locator_expire_at(later + LOCATOR_SLACK_MS // 2)
    assert await store.layout.locator.find_one({"_id": "orders/b"}) == loc_b, "b was touched"


async def test_an_identity_whose_job_expired_is_free_again(store: MongoStore) -> None:
    await dead_job(store)
    # The TTL monitor removed the job; its locator is still there for a day.
    await store.layout.bucket(second_of(NOW + 5000)).delete_one({"_id": "orders/a"})
    [again] = await store.jobs.create_jobs([new("a")], NOW + 40 * 86_400_000)
    assert again.status == CreateStatus.CREATED, again
    assert await store.jobs.get_job("orders", "a") is not None


async def test_a_locator_left_by_a_dead_creator_is_taken_over(store: MongoStore) -> None:
    [first] = await store.jobs.create_jobs([new("a", payload=1)], NOW)
    # The creator died after its locator, before its job.
    await store.layout.bucket(second_of(NOW + 5000)).delete_one({"_id": "orders/a"})
    [soon] = await store.jobs.create_jobs([new("a", payload=2)], NOW + 1000)
    assert soon.status == CreateStatus.CONFLICT, "a creator may still be mid-flight"
    [later] = await store.jobs.create_jobs([new("a", payload=2)], NOW + 60_000)
    assert later.status == CreateStatus.CREATED, later
    job = await store.jobs.get_job("orders", "a")
    assert job is not None and job.payload == 2, job
    assert first.status == CreateStatus.CREATED


async def test_a_live_job_s_locator_is_never_dated_in_the_past(store: MongoStore) -> None:
    """The TTL monitor reads the store's wall clock: a caller's clock far behind it (these
    tests' fixed NOW is months ago) must not write a locator that expires at once (seen
    in CI: the label search found no jobs once the monitor had run)."""
    await store.jobs.create_jobs([new("a")], NOW)
    loc = await store.layout.locator.find_one({"_id": "orders/a"})
    assert loc is not None
    wall = datetime.now(UTC) + timedelta(days=30)
    assert loc["expire_at"].replace(tzinfo=UTC) > wall, loc["expire_at"]


async def test_a_finished_job_is_never_dated_in_the_past(store: MongoStore) -> None:
    """A final job keeps its retention from the later of the caller's clock and the
    store's wall clock (seen in CI: with these tests' fixed NOW months ago, the label
    search lost the dead jobs once the TTL monitor had run)."""
    await dead_job(store)
    job_doc = await store.layout.bucket(second_of(NOW + 5000)).find_one({"_id": "orders/a"})
    assert job_doc is not None
    wall = datetime.now(UTC) + timedelta(days=29)
    assert job_doc["expire_at"].replace(tzinfo=UTC) > wall, job_doc["expire_at"]


async def test_a_reschedule_far_ahead_extends_the_locator_and_a_near_one_writes_none(
    store: MongoStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    await store.jobs.create_jobs([new("a"), new("b")], NOW)
    spy = LocatorCalls(store.jobs._l.locator)
    monkeypatch.setattr(store.jobs._l, "locator", spy)
    await store.jobs.reschedule_job("orders", "a", NOW + 3_600_000, None, NOW)
    assert spy.calls == ["find_one"], f"a reschedule by an hour wrote the locator: {spy.calls}"
    monkeypatch.undo()
    far = NOW + 400 * 86_400_000  # past what the locator was written for
    await store.jobs.reschedule_job("orders", "b", far, None, NOW)
    loc = await store.layout.locator.find_one({"_id": "orders/b"})
    assert loc is not None
    assert loc["expire_at"] >= store.layout.locator_expire_at(far + LOCATOR_SLACK_MS), loc
