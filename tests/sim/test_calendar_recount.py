"""The load calendar's counts on MongoDB when a count update is lost after its job's
write (no transaction makes the two go together): off by one until the daemon's next
load of the second, which recounts it (docs/architecture.md, "Load calendar")."""

from __future__ import annotations

import pytest

from tests.contract.stores import NOW, create, new
from tests.sim.fake_store import fake_mongo_store
from tests.sim.fakemongo import Fail, FakeMongo, FaultPlan
from timer_service.clock import FakeClock
from timer_service.errors import StoreUnavailable
from timer_service.model import second_of

S = second_of(NOW + 5000)


async def test_a_cancel_whose_count_update_failed_is_recounted_at_the_next_load() -> None:
    plan = FaultPlan()
    server = FakeMongo(FakeClock(NOW), faults=plan)
    store = fake_mongo_store("timer", server, buckets=60)
    await store.setup()
    await create(store, new("a"), new("b"))
    # The cancel's job update applies; its count update (on the seconds index) fails.
    plan.add(Fail(), name="bulk_write", collection="seconds")
    with pytest.raises(StoreUnavailable):
        await store.jobs.cancel_job("orders", "a", NOW)
    assert await store.calendar.due_by_second(S, S + 1, None) == {S: 2}  # off by one
    assert [k for k, _ in await store.scan.load_second(S, 1)] == ["orders/b"]
    assert await store.calendar.due_by_second(S, S + 1, None) == {S: 1}
    assert await store.calendar.due_by_second(S, S + 1, "orders") == {S: 1}


async def test_a_recount_misses_when_a_count_moved_since_the_entry_was_read() -> None:
    store = fake_mongo_store("timer", FakeMongo(FakeClock(NOW)), buckets=60)
    await store.setup()
    await create(store, new("a"), new("b"))
    [entry] = await store.layout.seconds.find({"_id": S}).to_list(None)
    await store.jobs.cancel_job("orders", "a", NOW)  # moves the count: a new `cv`
    # A load that read the entry before that cancel, and both jobs: its recount of 2
    # must not undo the cancel's -1.
    await store.scan._recount(S, [entry], [("orders/a", NOW + 5000), ("orders/b", NOW + 5000)])
    assert await store.calendar.due_by_second(S, S + 1, None) == {S: 1}
