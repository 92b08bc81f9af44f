"""The real MongoStore over the fake driver, with faults where the adapter's
command sequences are exposed: what the simulation will do at random, done here
once by hand."""

from __future__ import annotations

import asyncio

import pytest

from tests.contract.stores import NOW, create, new
from tests.sim.fake_store import fake_mongo_store
from tests.sim.fakemongo import FakeMongo, FaultPlan, LoseReply, Stall
from tests.sim.store_faults import is_claim
from tests.unit.daemon_harness import Harness, run_until
from timer_service.clock import FakeClock
from timer_service.errors import Conflict, StoreUnavailable
from timer_service.jobs import CreateResult, CreateStatus
from timer_service.metrics import Metrics
from timer_service.model import BizType, JobState, second_of
from timer_service.registration import Registrar
from timer_service.store.mongo import MongoStore

S = second_of(NOW + 5000)


async def started(server: FakeMongo) -> MongoStore:
    store = fake_mongo_store("timer", server, buckets=60)
    await store.setup()
    return store


def stored(server: FakeMongo, key: str) -> list[tuple[str, str]]:
    """Every document of `key` in the job buckets: (bucket, state)."""
    return [
        (name, doc["state"])
        for name, coll in server.engine.dbs["timer"].items()
        if name.startswith("jobs_b")
        for doc in coll.docs.values()
        if doc["_id"] == key
    ]


async def test_a_claim_whose_reply_was_lost_has_claimed_the_jobs() -> None:
    """Break 8's ground: the claim applied, its caller heard an error."""
    plan = FaultPlan()
    server = FakeMongo(FakeClock(NOW), faults=plan)
    store = await started(server)
    await create(store, new("a"), new("b"))
    plan.add(LoseReply(), name="update_many", collection=f"jobs_b{S % 60}")
    with pytest.raises(StoreUnavailable):
        await store.scan.claim_due(S, S * 1000 + 999, "c1", 1, NOW + 5000)
    assert (
        sorted(state for _, state in stored(server, "orders/a") + stored(server, "orders/b"))
        == [JobState.DISPATCHED.value] * 2
    )
    assert await store.scan.claim_due(S, S * 1000 + 999, "c2", 1, NOW + 5000) == []
    stale = await store.reconcile.find_stale_dispatched(NOW + 5001, 10)
    assert sorted((j.job_id, j.claim) for j in stale) == [("a", "c1"), ("b", "c1")]


async def test_a_repeated_create_during_a_reschedule_leaves_one_job() -> None:
    """Break 1 (issue 30): the create's retry read the locator, a reschedule moved the
    job to another bucket, then the retry read the old bucket, found nothing, and
    "repaired" the identity with a second pending document. Jobs no longer move: the
    reschedule updates the job in its home bucket, where the retry finds it."""
    plan = FaultPlan()
    server = FakeMongo(FakeClock(NOW), faults=plan)
    store = await started(server)
    await create(store, new("a"))
    stall = Stall()
    plan.add(stall, name="find", collection=f"jobs_b{S % 60}")  # the retry's job read
    retry = asyncio.create_task(create(store, new("a")))
    await stall.reached.wait()
    await store.jobs.reschedule_job("orders", "a", NOW + 6000, None, NOW + 1)
    stall.release()
    await retry
    assert len(stored(server, "orders/a")) == 1, stored(server, "orders/a")


async def test_a_create_between_a_delete_s_look_and_its_last_step_calls_it_off() -> None:
    """Break 7 (issue 30), the interleaving the contract suite cannot place: the delete
    marked the biz type and found no job; a create wrote its job, then read the biz
    type, found the mark and took it away; the delete's last step, conditional on its
    mark, misses and answers 409. The job was accepted and its biz type stays."""
    plan = FaultPlan()
    server = FakeMongo(FakeClock(NOW), faults=plan)
    store = await started(server)
    await store.biz_types.put_biz_type(BizType("orders", "http://x/", created_at=1, updated_at=1))
    stall = Stall()
    plan.add(stall, name="delete_one", collection="biz_types")
    delete = asyncio.create_task(store.biz_types.delete_biz_type("orders"))
    await stall.reached.wait()

    registrar = Registrar(store.jobs, Metrics(), biz_types=store.biz_types)
    [result] = await registrar.register([new("a")], NOW)
    stall.release()

    with pytest.raises(Conflict):
        await delete
    assert isinstance(result, CreateResult) and result.status == CreateStatus.CREATED, result
    assert await store.biz_types.get_biz_type("orders") is not None
    [doc] = server.engine.dbs["timer"]["biz_types"].docs.values()
    assert "deleting" not in doc, doc
    assert stored(server, "orders/a") == [(f"jobs_b{S % 60}", JobState.PENDING.value)]


async def test_a_claim_whose_reply_was_lost_is_published_by_its_token_at_once() -> None:
    """Break 8 (issue 30): the claim's `update_many` applied and its reply was lost (a
    multi-document update is not a retryable write). The daemon finds the claim by its
    token at once and publishes it before the job is due; before, the job waited for
    the reconciler's timeout (a minute here) and went out that late."""
    clock = FakeClock(NOW)
    plan = FaultPlan()
    server = FakeMongo(clock, faults=plan)
    store = await started(server)
    h = Harness(store, clock, watch=False, reconcile_after_ms=60_000)  # type: ignore[arg-type]
    due = NOW + 10_000
    await create(store, new("a", due_at=due))
    rule = plan.add(LoseReply(), name="update_many", collection="jobs_b*", when=is_claim)
    await run_until(due, h, through_faults=True)
    assert rule.hits == 1, "the claim's reply was not lost"
    times = h.queue.times("a")
    assert len(times) == 1 and times[0] <= due, f"expected one publish by {due}: {times}"
