"""A job never moves (docs/architecture.md, "Storage"), on both adapters: a job set
to fire in a second of another bucket (a retry, a reschedule, a replay) stays in its
home bucket, is claimed there in its new second, and answers by identity.

Buckets are 60 (the fixture's): NOW + 5 s and NOW + 7 s are in different buckets."""

from __future__ import annotations

from tests.contract.stores import NOW, attempt, claim_second, create, drop_entry, new
from timer_service.dispatch import Claimed, Outcome, OutcomeKind, SendRef
from timer_service.model import JobState, second_of
from timer_service.store.base import Store

FIRST = second_of(NOW + 5000)
LATER = second_of(NOW + 7000)  # another bucket than FIRST's


def ref_of(c: Claimed) -> SendRef:
    return SendRef(c.biz_type, c.job_id, c.second, c.claim, bucket=c.bucket, due_at=c.due_at)


async def retried(store: Store, job_id: str = "a") -> Claimed:
    """Create a job, claim it, and report a failed attempt that retries it at LATER."""
    await create(store, new(job_id))
    [c] = [c for c in await claim_second(store, FIRST) if c.job_id == job_id]
    retry = Outcome(ref_of(c), OutcomeKind.RETRY, attempt(1, status=503), NOW + 7000)
    await store.outcomes.record_outcomes([retry], NOW + 5000)
    return c


async def test_a_retry_into_another_bucket_fires_from_its_home(store: Store) -> None:
    first = await retried(store)
    assert first.bucket is not None, "a claim names the bucket its job lives in"
    [c] = await claim_second(store, LATER, "c2")
    assert (c.job_id, c.second, c.bucket) == ("a", LATER, first.bucket), (
        f"expected job a in second {LATER}, still in bucket {first.bucket}, got {c}"
    )
    await store.outcomes.record_outcomes(
        [Outcome(ref_of(c), OutcomeKind.DELIVERED, attempt(2, at=NOW + 7000))], NOW + 7000
    )
    job = await store.jobs.get_job("orders", "a")
    assert job is not None and job.state == JobState.DELIVERED and job.attempts == 2, job


async def test_a_retried_job_is_found_and_cancelled_by_identity(store: Store) -> None:
    await retried(store)
    job = await store.jobs.get_job("orders", "a")
    assert job is not None and job.state == JobState.PENDING, job
    assert job.next_attempt_at == NOW + 7000, job
    cancelled = await store.jobs.cancel_job("orders", "a", NOW + 6000)
    assert cancelled.state == JobState.CANCELLED, cancelled
    assert await claim_second(store, LATER, "c2") == [], "a cancelled job was claimed"


async def test_a_rescheduled_and_a_replayed_job_fire_in_their_new_second(store: Store) -> None:
    await create(store, new("r"), new("d", due_at=NOW + 6000))
    await store.jobs.reschedule_job("orders", "r", NOW + 7000, None, NOW)
    [dead] = await claim_second(store, second_of(NOW + 6000))
    await store.outcomes.record_outcomes(
        [Outcome(ref_of(dead), OutcomeKind.DEAD, attempt(1, at=NOW + 6000, status=400))],
        NOW + 6000,
    )
    await store.jobs.replay_job("orders", "d", NOW + 6500)  # due at once: its second
    assert await claim_second(store, FIRST) == [], "the rescheduled job fired at its old second"
    [r] = await claim_second(store, LATER, "c2")
    [d] = await claim_second(store, second_of(NOW + 6500), "c3")
    assert (r.job_id, d.job_id) == ("r", "d"), (r, d)
    assert r.bucket == FIRST % 60 and d.bucket == second_of(NOW + 6000) % 60, (r, d)


async def test_a_second_names_the_buckets_of_its_jobs_and_releases_with_them(
    store: Store,
) -> None:
    await retried(store)
    await create(store, new("b", due_at=NOW + 7000))  # LATER's own bucket
    [entry] = await store.scan.next_seconds(LATER, LATER, 1)
    loaded = await store.scan.load_second(LATER, 1)
    assert sorted(key for key, _ in loaded) == ["orders/a", "orders/b"], loaded
    claimed = await claim_second(store, LATER, "c2")
    assert sorted(c.job_id for c in claimed) == ["a", "b"], claimed
    assert await store.scan.release_second(entry, 1) is True
    assert await store.scan.next_seconds(LATER, LATER, 1) == []


async def test_a_write_into_a_loaded_second_from_another_bucket_keeps_it(store: Store) -> None:
    await create(store, new("b", due_at=NOW + 7000))
    [entry] = await store.scan.next_seconds(LATER, LATER, 1)
    await store.scan.load_second(LATER, 1)
    await retried(store)  # a job of FIRST's bucket joins LATER after the load
    assert await store.scan.release_second(entry, 1) is False, "released past a new bucket"
    claimed = await claim_second(store, LATER, "c2")
    assert sorted(c.job_id for c in claimed) == ["a", "b"], claimed


async def test_the_sweep_restores_the_entry_naming_the_home_bucket(store: Store) -> None:
    await retried(store)
    await drop_entry(store, LATER)
    assert await store.sweep.find_overdue_pending(NOW + 8000, 10) == [LATER]
    await store.sweep.restore_seconds([LATER])
    [c] = await claim_second(store, LATER, "c2")
    assert c.job_id == "a" and c.bucket == FIRST % 60, c
