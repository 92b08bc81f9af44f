"""The reconciler on a FakeClock: unpublished claims (open rounds) and lost messages are
republished, held biz types left alone, and an idle daemon is quiet."""

from __future__ import annotations

from daemon.lease import LEASE_NAME
from daemon.rounds import CLOSE_WITHIN_MS
from tests.unit.daemon_harness import (
    BIZ,
    Harness,
    create,
    run_until,
)
from timer_service.clock import FakeClock
from timer_service.dispatch import HeldBiz
from timer_service.jobs import NewJob
from timer_service.model import second_of
from timer_service.store.memory import MemoryStore


async def test_reconciler_republishes_unpublished_and_skips_held_biz_types(
    store: MemoryStore, clock: FakeClock
) -> None:
    start = clock.now_ms()
    await create(store, start, ("lost", start), biz="free")
    await create(store, start, ("queued", start), biz="held")
    await create(store, start, ("gone-msg", start), biz="free2")
    # A previous daemon claimed all three; it published two, then died.
    s = second_of(start)
    await store.rounds.open_round("dead-1", 1, start)
    await store.scan.claim_due(s, start, "dead-1", 1, start)
    await store.rounds.close_rounds(["dead-1"])
    await store.jobs.create_jobs([NewJob("free", "lost2", start, "null")], start)
    await store.rounds.open_round("dead-2", 1, start)
    await store.scan.claim_due(s, start, "dead-2", 1, start)  # never published

    clock.advance(61_000)
    await store.brokers.broker_heartbeat(
        "broker-1", [HeldBiz("held", 1, start)], clock.now_ms(), 30_000
    )
    h = Harness(store, clock)
    await h.step()

    republished = sorted(j.job_id for j in h.queue.published)
    assert republished == ["gone-msg", "lost", "lost2"], (
        f"expected the unpublished job and the published ones of biz types nobody holds, "
        f"got {republished}"
    )
    job = await store.jobs.get_job("free", "lost2")
    assert job is not None and job.claim != "dead-2", job
    # The republish's own round closes with the next one opened, or within a second.
    await clock.run_for(CLOSE_WITHIN_MS)
    assert await store.reconcile.find_unpublished(clock.now_ms() + 1, 100) == []
    queued = await store.jobs.get_job("held", "queued")
    assert queued is not None and queued.claim == "dead-1", "a held biz type's job is left alone"


async def test_a_large_held_backlog_does_not_hide_an_unpublished_job(
    store: MemoryStore, clock: FakeClock
) -> None:
    start = clock.now_ms()
    s = second_of(start)
    # 2,500 published jobs of a held biz type, claimed first: more than two pages.
    await store.jobs.create_jobs(
        [NewJob("held", f"q{i}", start, "null") for i in range(2500)], start
    )
    await store.rounds.open_round("dead-1", 1, start)
    await store.scan.claim_due(s, start, "dead-1", 1, start)
    await store.rounds.close_rounds(["dead-1"])
    await create(store, start + 1, ("lost", start + 1), biz="free")
    await store.rounds.open_round("dead-2", 1, start + 1)
    await store.scan.claim_due(s, start + 1, "dead-2", 1, start + 1)  # never published

    clock.advance(61_000)
    await store.brokers.broker_heartbeat(
        "broker-1", [HeldBiz("held", 1, start)], clock.now_ms(), 30_000
    )
    h = Harness(store, clock)
    await h.step()

    assert [j.job_id for j in h.queue.published] == ["lost"]
    held = await store.jobs.get_job("held", "q0")
    assert held is not None and held.claim == "dead-1"


async def test_takeover_republishes_the_old_leaders_unpublished_claims_at_once(
    store: MemoryStore, clock: FakeClock
) -> None:
    start = clock.now_ms()
    await create(store, start, ("claimed-then-crashed", start + 900), ("sent", start + 900))
    s = second_of(start)
    # The old leader (fence 1) claimed both, saw one confirmed, and died.
    old_fence = await store.leases.next_fence(0)
    assert old_fence == 1
    assert await store.leases.acquire_leases([LEASE_NAME], "old-leader", old_fence, 300, start) == [
        LEASE_NAME
    ]
    await store.rounds.open_round("old-1", 1, start)
    await store.scan.claim_due(s, start + 1000, "old-1", 1, start)
    await store.jobs.create_jobs([NewJob(BIZ, "late", start + 950, "null")], start)
    await store.rounds.open_round("old-2", 1, start)
    await store.scan.claim_due(s, start + 1000, "old-2", 1, start)
    await store.rounds.close_rounds(["old-1"])

    clock.advance(500)  # far less than reconcile_after (60 s)
    h = Harness(store, clock)
    await h.step()

    republished = sorted(j.job_id for j in h.queue.published)
    assert republished == ["late"], (
        f"expected only the never-confirmed job to go out at takeover, got {republished}"
    )
    job = await store.jobs.get_job(BIZ, "late")
    assert job is not None and job.claim != "old-2"
    await clock.run_for(CLOSE_WITHIN_MS)
    assert await store.reconcile.find_unpublished(clock.now_ms() + 1, 100) == []


async def test_reconciler_is_quiet_when_nothing_was_claimed(
    store: MemoryStore, clock: FakeClock
) -> None:
    h = Harness(store, clock, reconcile_after_ms=4000)
    await run_until(clock.now_ms() + 60_000, h)
    # One sweep at takeover, then sweeps only until after + margin past the last claim;
    # a sweep makes two queries (unpublished jobs, then published ones nobody holds).
    sweeps = 1 + (4000 * 3 // 2 + 1000) // 1000 + 2
    assert store.ops["find_stale_dispatched"] <= 2 * sweeps, store.ops
