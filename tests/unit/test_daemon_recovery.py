"""The daemon under store failures: what a failed call leaves behind is picked up,
never lost (a claim or reclaim whose reply was lost included), and the scan pointer
keeps moving."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.daemon_harness import BIZ, Harness, create, run_until
from timer_service.clock import FakeClock
from timer_service.dispatch import Outcome, OutcomeKind, SendRef
from timer_service.errors import StoreUnavailable
from timer_service.model import Attempt, JobState, second_of
from timer_service.store.faulty import FaultyStore
from timer_service.store.memory import MemoryStore
from timer_service.store.recording import RecordingStore


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore(buckets=60)


def fail_claims_of(store: MemoryStore, second: int, times: int) -> list[int]:
    """The next `times` claims of `second` fail before they apply."""
    real = store.scan.claim_due
    failed: list[int] = []

    async def claim_due(s: int, *args: Any) -> Any:
        if s == second and len(failed) < times:
            failed.append(s)
            raise StoreUnavailable("injected")
        return await real(s, *args)

    store.scan.claim_due = claim_due  # type: ignore[method-assign]
    return failed


async def test_a_failed_claim_does_not_hold_back_the_round_s_other_claims(
    store: MemoryStore, clock: FakeClock
) -> None:
    h = Harness(store, clock)
    start = clock.now_ms()
    first, second = start + 3000, start + 4000
    await create(store, start, ("a", first), ("b", second))
    await h.step()  # loads both seconds into the wheel
    failed = fail_claims_of(store, second_of(second), times=1)
    clock.set(start + 3500)  # both jobs' claim moments have passed: one round
    with pytest.raises(StoreUnavailable):
        await h.step()
    assert failed, "the fault was not injected"
    await h.daemon.publisher.drain()
    assert h.queue.times("a") == [start + 3500], "a's claim waited for b's failure"
    await h.step()
    assert h.queue.times("b") == [start + 3500], "b was not claimed on the next round"
    await run_until(start + 8000, h)
    assert h.daemon.scanner._held == {}, "a second was never released"
    lag = start + 8000 - 1000 * ((await store.pointers.load_pointers(["p0"])).get("p0") or 0)
    assert lag <= 1000, f"the pointer stuck {lag} ms behind"


async def test_a_pending_job_without_an_index_entry_is_found_and_sent(
    store: MemoryStore, clock: FakeClock
) -> None:
    start = clock.now_ms()
    due = start - 60_000
    await create(store, start, ("lost", due))
    # A crash between the job's write and its entry's renewal.
    [entry] = await store.scan.next_seconds(second_of(due), second_of(due), 1)
    await store.scan.release_second(entry, 0)
    h = Harness(store, clock)
    await run_until(start + 5000, h)
    assert h.queue.times("lost"), "the orphaned job was never published"
    job = await store.jobs.get_job(BIZ, "lost")
    assert job is not None and job.state == JobState.DISPATCHED
    assert h.daemon.metrics.registry.get_sample_value("timer_seconds_restored_total") == 1


# -- the reconciler finds what a lost reply left dispatched, however idle the daemon -----

RECONCILE_AFTER_MS = 60_000


async def test_a_claim_whose_reply_was_lost_is_found_by_its_token_at_once(
    clock: FakeClock,
) -> None:
    """Issue 30, break 8: the claim applied, the daemon heard an error. Its jobs are
    found by the claim's token at once and published on time, not by the reconciler
    a timeout later."""
    store = FaultyStore(MemoryStore(buckets=60))
    h = Harness(store, clock, reconcile_after_ms=RECONCILE_AFTER_MS)  # type: ignore[arg-type]
    start = clock.now_ms()
    due = start + 300_000
    await create(store, start, ("lonely", due))  # type: ignore[arg-type]
    store.fail("claim_due", when="after")  # the claim applies; the daemon sees an error
    await run_until(due, h, through_faults=True)
    assert store.injected_count("claim_due", "after") == 1, "the fault was not injected"
    times = h.queue.times("lonely")
    assert len(times) == 1 and times[0] <= due, f"expected one publish before {due}: {times}"


async def test_a_lost_claim_whose_token_cannot_be_read_is_republished_by_an_idle_daemon(
    clock: FakeClock,
) -> None:
    """The backstop: the claim's reply lost and every read by its token failing too, the
    reconciler republishes the job within 1.5 timeouts, however idle the daemon."""
    store = FaultyStore(MemoryStore(buckets=60))
    h = Harness(store, clock, reconcile_after_ms=RECONCILE_AFTER_MS)  # type: ignore[arg-type]
    start = clock.now_ms()
    due = start + 300_000  # long after the takeover's own sweeps have stopped
    await create(store, start, ("lonely", due))  # type: ignore[arg-type]
    store.fail("claim_due", when="after")
    store.fail("find_claim", times=None)
    await run_until(due - 500, h, through_faults=True)
    assert store.injected_count("claim_due", "after") == 1, "the fault was not injected"
    job = await store.jobs.get_job(BIZ, "lonely")
    assert job is not None and job.state == JobState.DISPATCHED, job
    assert h.queue.times("lonely") == [], "nobody knew of the claim, yet it was published"
    await run_until(due + 2 * RECONCILE_AFTER_MS, h, through_faults=True)
    times = h.queue.times("lonely")
    assert times, "the lost claim stayed dispatched and unpublished"
    late_ms = times[0] - due
    assert late_ms <= RECONCILE_AFTER_MS * 3 // 2, f"expected within 1.5 timeouts, got {late_ms}"


async def test_a_reclaim_whose_reply_was_lost_is_republished_too(clock: FakeClock) -> None:
    store = FaultyStore(MemoryStore(buckets=60))
    h = Harness(store, clock, reconcile_after_ms=RECONCILE_AFTER_MS)  # type: ignore[arg-type]
    start = clock.now_ms()
    due = start + 300_000
    await create(store, start, ("lonely", due))  # type: ignore[arg-type]
    store.fail("claim_due", when="after")
    store.fail("find_claim", times=None)  # so that the reconciler's repair is needed
    store.fail("reclaim", when="after")  # and is lost the same way
    await run_until(due + 4 * RECONCILE_AFTER_MS, h, through_faults=True)
    assert store.injected_count("reclaim", "after") == 1, "the fault was not injected"
    assert h.queue.times("lonely"), "the lost reclaim stayed dispatched and unpublished"


async def test_sweeps_that_fail_are_owed_until_one_succeeds(clock: FakeClock) -> None:
    store = FaultyStore(MemoryStore(buckets=60))
    h = Harness(store, clock, reconcile_after_ms=RECONCILE_AFTER_MS)  # type: ignore[arg-type]
    start = clock.now_ms()
    due = start + 300_000
    await create(store, start, ("lonely", due))  # type: ignore[arg-type]
    store.fail("claim_due", when="after")
    await run_until(due, h, through_faults=True)
    # The store fails every sweep for as long as the sweeps' window lasts.
    store.fail("find_stale_dispatched", times=None)
    await run_until(due + 3 * RECONCILE_AFTER_MS, h, through_faults=True)
    assert store.injected_count("find_stale_dispatched") > 0, "the fault was not injected"
    store.heal()
    await run_until(due + 5 * RECONCILE_AFTER_MS, h, through_faults=True)
    assert h.queue.times("lonely"), "a sweep owed across a store outage was never made"


async def test_an_idle_daemon_stops_sweeping_once_claims_stop(clock: FakeClock) -> None:
    store = RecordingStore(MemoryStore(buckets=60))
    h = Harness(store, clock, reconcile_after_ms=4000)  # type: ignore[arg-type]
    start = clock.now_ms()
    await create(store, start, ("a", start + 10_000))  # type: ignore[arg-type]
    await run_until(start + 12_000, h)
    [sent] = [job for _, job in h.queue.at]
    ref = SendRef(sent.biz_type, sent.job_id, sent.second, sent.claim, bucket=sent.bucket)
    done = Attempt(1, start + 10_000, 200, None, 3)
    await store.outcomes.record_outcomes([Outcome(ref, OutcomeKind.DELIVERED, done)], start)
    await run_until(start + 60_000, h)
    before = store.ops["find_stale_dispatched"]
    await run_until(start + 600_000, h, max_step_ms=60_000)
    assert store.ops["find_stale_dispatched"] == before, (
        f"expected no sweeps while idle, got {store.ops['find_stale_dispatched'] - before}"
    )
