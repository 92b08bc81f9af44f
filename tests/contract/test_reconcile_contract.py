"""The reconciler's port (`store.reconcile`), on both adapters: the queries that
find what nobody holds, and a reclaim that misses a job a broker marked meanwhile."""

from __future__ import annotations

import pytest

from tests.contract.stores import NOW, create, new
from timer_service.dispatch import SendRef, new_send_token, sender_of
from timer_service.jobs import NewJob
from timer_service.model import Job, encode_payload, second_of
from timer_service.store.base import Store

S = second_of(NOW + 5000)


def ids(jobs: list[Job]) -> list[str]:
    return sorted(j.job_id for j in jobs)


async def test_stale_dispatched_and_reclaim(store: Store) -> None:
    s = second_of(NOW + 5000)
    await create(store, new("a"), new("b"))
    claimed = await store.scan.claim_due(s, NOW + 6000, "c1", 1, NOW)
    stale = await store.reconcile.find_stale_dispatched(NOW + 1, 100)
    assert sorted(j.job_id for j in stale) == ["a", "b"]
    assert await store.reconcile.find_stale_dispatched(NOW, 100) == []
    again = await store.reconcile.reclaim(stale, "c2", 1, NOW + 10)
    assert sorted(c.job_id for c in again) == ["a", "b"] and {c.claim for c in again} == {"c2"}
    assert (
        await store.reconcile.reclaim(stale, "c3", 1, NOW + 20) == []
    )  # old claim no longer matches
    old_refs = [SendRef(c.biz_type, c.job_id, c.second, c.claim, bucket=c.bucket) for c in claimed]
    assert await store.outcomes.start_sending(old_refs, "t", NOW + 30) == {}  # stale: dropped


async def test_stale_dispatched_filters_and_orders_by_claim_time(store: Store) -> None:
    s = second_of(NOW + 5000)
    await create(store, new("a"), NewJob("held", "b", NOW + 5000, encode_payload(None)))
    await store.scan.claim_due(s, NOW + 6000, "c1", 1, NOW)
    await create(store, new("c"))
    await store.scan.claim_due(s, NOW + 6000, "c2", 1, NOW + 5)

    def ids(jobs: list[Job]) -> list[str]:
        return [j.job_id for j in jobs]

    found = ids(await store.reconcile.find_stale_dispatched(NOW + 10, 100))
    assert found[-1] == "c" and sorted(found) == ["a", "b", "c"]  # oldest claim first
    held_back = {"held": NOW}  # a live broker holds what of "held" was claimed from NOW on
    skipped = await store.reconcile.find_stale_dispatched(
        NOW + 10, 100, claimed_before_by_biz=held_back
    )
    assert ids(skipped)[-1] == "c" and sorted(ids(skipped)) == ["a", "c"]  # oldest first
    assert ids(
        await store.reconcile.find_stale_dispatched(NOW + 10, 1, claimed_before_by_biz=held_back)
    ) == ["a"]


async def test_stale_dispatched_bounds_per_biz_type_and_unmarked_only(store: Store) -> None:
    await create(store, new("a"), new("b"), new("c"))
    claimed = await store.scan.claim_due(S, NOW + 6000, "c1", 1, NOW)
    ref = next(
        SendRef(c.biz_type, c.job_id, c.second, c.claim, bucket=c.bucket)
        for c in claimed
        if c.job_id == "b"
    )
    assert list(await store.outcomes.start_sending([ref], "b1/t", NOW + 1)) == ["orders/b"]

    assert ids(await store.reconcile.find_stale_dispatched(NOW + 1, 10)) == ["a", "b", "c"]
    unmarked = await store.reconcile.find_stale_dispatched(NOW + 1, 10, unmarked_only=True)
    assert ids(unmarked) == ["a", "c"], (
        f"expected the jobs no send has started, got {ids(unmarked)}"
    )
    # A live broker holds "orders" claimed from NOW on: nothing older than that is stale.
    bounded = await store.reconcile.find_stale_dispatched(
        NOW + 1, 10, claimed_before_by_biz={"orders": NOW}
    )
    assert bounded == [], f"expected nothing (all may be held), got {ids(bounded)}"
    later = await store.reconcile.find_stale_dispatched(
        NOW + 1, 10, claimed_before_by_biz={"orders": NOW + 1}
    )
    assert ids(later) == ["a", "b", "c"]


async def test_find_sent_by_names_the_jobs_a_broker_marked(store: Store) -> None:
    await create(store, new("a"), new("b"), new("c"))
    refs = {
        c.job_id: SendRef(c.biz_type, c.job_id, c.second, c.claim, bucket=c.bucket)
        for c in await store.scan.claim_due(S, NOW + 6000, "c1", 1, NOW)
    }
    dead, live = new_send_token("host-1-dead.b"), new_send_token("host-1-dead")
    assert sender_of(dead) == "host-1-dead.b" and sender_of("0af3") is None
    await store.outcomes.start_sending([refs["a"]], dead, NOW + 1)
    await store.outcomes.start_sending([refs["b"]], live, NOW + 1)
    assert ids(await store.reconcile.find_sent_by(["host-1-dead.b"], 10)) == ["a"]
    assert ids(await store.reconcile.find_sent_by(["host-1-dead"], 10)) == ["b"]
    assert ids(await store.reconcile.find_sent_by(["host-1-dead", "host-1-dead.b"], 10)) == [
        "a",
        "b",
    ]
    assert await store.reconcile.find_sent_by([], 10) == []
    assert await store.reconcile.find_sent_by(["host-1"], 10) == []  # a prefix of an id is not it


async def test_stale_dispatched_leaves_out_what_a_live_broker_marked(store: Store) -> None:
    """Issue 30, break 2: the stale sweep never takes a job whose send a live broker
    started (its callback is on its way); a dead broker's, or no mark, it takes."""
    await create(store, new("a"), new("b"), new("c"))
    refs = {
        c.job_id: SendRef(c.biz_type, c.job_id, c.second, c.claim, bucket=c.bucket)
        for c in await store.scan.claim_due(S, NOW + 6000, "c1", 1, NOW)
    }
    await store.outcomes.start_sending([refs["a"]], new_send_token("live-1"), NOW + 1)
    await store.outcomes.start_sending([refs["b"]], new_send_token("live-1.dead"), NOW + 1)
    found = await store.reconcile.find_stale_dispatched(NOW + 1, 10, not_sent_by=["live-1"])
    assert ids(found) == ["b", "c"], f"expected the live broker's send left out, got {ids(found)}"
    both = ["live-1", "live-1.dead"]
    assert ids(await store.reconcile.find_stale_dispatched(NOW + 1, 10, not_sent_by=both)) == ["c"]
    assert ids(await store.reconcile.find_stale_dispatched(NOW + 1, 10, not_sent_by=[])) == [
        "a",
        "b",
        "c",
    ]


@pytest.mark.parametrize("marked_before", [False, True])
async def test_a_reclaim_misses_a_job_marked_since_it_was_read(
    store: Store, marked_before: bool
) -> None:
    await create(store, new("a"))
    (claimed,) = await store.scan.claim_due(S, NOW + 6000, "c1", 1, NOW)
    ref = SendRef(
        claimed.biz_type, claimed.job_id, claimed.second, claimed.claim, bucket=claimed.bucket
    )
    if marked_before:  # a dead broker's mark: the reconciler read it, and takes over
        await store.outcomes.start_sending([ref], "dead/t1", NOW + 1)
    read = await store.reconcile.find_stale_dispatched(NOW + 1, 10)
    # Meanwhile a broker marks it (a redelivered message takes the send over).
    retake = SendRef(
        ref.biz_type, ref.job_id, ref.second, ref.claim, bucket=ref.bucket, retake=True
    )
    assert list(await store.outcomes.start_sending([retake], "live/t2", NOW + 2)) == ["orders/a"]
    assert await store.reconcile.reclaim(read, "c2", 1, NOW + 3) == [], "reclaimed a live send"
    job = await store.jobs.get_job("orders", "a")
    assert job is not None and job.claim == "c1" and job.sending == "live/t2", job
    # Read again, the mark is what the reconciler saw: the reclaim goes through.
    again = await store.reconcile.find_stale_dispatched(NOW + 4, 10)
    assert [c.claim for c in await store.reconcile.reclaim(again, "c3", 1, NOW + 5)] == ["c3"]
