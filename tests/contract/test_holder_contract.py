"""Contract of what the reconciler asks about holders (both adapters): the brokers'
heartbeats with what each holds and the store's clock, the queries that find what
nobody holds, and a reclaim that misses a job a broker marked meanwhile."""

from __future__ import annotations

import pytest

from tests.contract.stores import NOW, create, new
from timer_service.clock import FakeClock
from timer_service.dispatch import HeldBiz, SendRef, new_send_token, sender_of
from timer_service.model import Job, second_of
from timer_service.store.base import Store
from timer_service.store.memory import MemoryStore

S = second_of(NOW + 5000)


def ids(jobs: list[Job]) -> list[str]:
    return sorted(j.job_id for j in jobs)


async def test_heartbeats_say_what_each_broker_holds_and_consumes(store: Store) -> None:
    held = [HeldBiz("orders.eu", 3, NOW - 500), HeldBiz("coupons", 1, NOW - 9)]
    store_ms = await store.brokers.broker_heartbeat(
        "b1", held, NOW, 6000, consuming=["orders.eu", "coupons"]
    )
    await store.brokers.broker_heartbeat("b2", [], NOW, -1)  # lapsed as it lands
    # The memory store has no clock of its own and answers the caller's; a real store
    # answers its own, which is the machine's here.
    assert isinstance(store_ms, int) and store_ms > 0, store_ms
    beats = sorted(await store.brokers.broker_beats(), key=lambda b: b.broker_id)
    said = [(b.broker_id, b.held, b.consuming) for b in beats]
    expected = [
        ("b1", (HeldBiz("coupons", 1, NOW - 9), held[0]), ("coupons", "orders.eu")),
        ("b2", (), ()),
    ]
    assert said == expected, f"expected {expected}, got {said}"
    b1, b2 = beats
    # Alive for its time to live from the moment the store applied it, on that clock.
    assert b1.expires_at == store_ms + 6000, (b1, store_ms)
    assert 0 < b1.left_ms(NOW) <= 6000, b1
    assert b2.left_ms(NOW) < 0, b2
    await store.brokers.broker_gone("b1")
    assert [b.broker_id for b in await store.brokers.broker_beats()] == ["b2"]


async def test_a_beat_is_judged_by_the_store_clock_not_the_callers(store: Store) -> None:
    """A beat stamped on the store's clock, and read with it: however far behind the
    broker's clock and whoever reads it, a beat just applied has its whole life left
    (the memory store, with no clock of its own, goes by the callers')."""
    if isinstance(store, MemoryStore):
        store = MemoryStore(buckets=60, clock=FakeClock(NOW))
    behind = NOW - 60_000  # the broker's clock, or a beat that waited a minute
    await store.brokers.broker_heartbeat("b1", [], behind, 6000)
    (beat,) = await store.brokers.broker_beats()
    assert beat.read_at is not None, beat
    assert 0 < beat.left_ms(behind) <= 6000, beat
    # A reader whose clock is a minute ahead of the store's judges it alive all the same.
    assert 0 < beat.left_ms(NOW + 60_000) <= 6000, beat


async def test_stale_dispatched_bounds_per_biz_type_and_unmarked_only(store: Store) -> None:
    await create(store, new("a"), new("b"), new("c"))
    claimed = await store.scan.claim_due(S, NOW + 6000, "c1", 1, NOW)
    ref = next(SendRef(c.biz_type, c.job_id, c.second, c.claim) for c in claimed if c.job_id == "b")
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
        c.job_id: SendRef(c.biz_type, c.job_id, c.second, c.claim)
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


@pytest.mark.parametrize("marked_before", [False, True])
async def test_a_reclaim_misses_a_job_marked_since_it_was_read(
    store: Store, marked_before: bool
) -> None:
    await create(store, new("a"))
    (claimed,) = await store.scan.claim_due(S, NOW + 6000, "c1", 1, NOW)
    ref = SendRef(claimed.biz_type, claimed.job_id, claimed.second, claimed.claim)
    if marked_before:  # a dead broker's mark: the reconciler read it, and takes over
        await store.outcomes.start_sending([ref], "dead/t1", NOW + 1)
    read = await store.reconcile.find_stale_dispatched(NOW + 1, 10)
    # Meanwhile a broker marks it (a redelivered message takes the send over).
    retake = SendRef(ref.biz_type, ref.job_id, ref.second, ref.claim, retake=True)
    assert list(await store.outcomes.start_sending([retake], "live/t2", NOW + 2)) == ["orders/a"]
    assert await store.reconcile.reclaim(read, "c2", 1, NOW + 3) == [], "reclaimed a live send"
    job = await store.jobs.get_job("orders", "a")
    assert job is not None and job.claim == "c1" and job.sending == "live/t2", job
    # Read again, the mark is what the reconciler saw: the reclaim goes through.
    again = await store.reconcile.find_stale_dispatched(NOW + 4, 10)
    assert [c.claim for c in await store.reconcile.reclaim(again, "c3", 1, NOW + 5)] == ["c3"]
