"""The daemon under store failures: what a failed call leaves behind is picked up,
never lost, and the scan pointer keeps moving."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.daemon_harness import BIZ, Harness, create, run_until
from timer_service.clock import FakeClock
from timer_service.errors import StoreUnavailable
from timer_service.model import JobState, second_of
from timer_service.store.memory import MemoryStore


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore(buckets=60)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_767_225_600_000)


def fail_claims_of(store: MemoryStore, second: int, times: int) -> list[int]:
    """The next `times` claims of `second` fail before they apply."""
    real = store.dispatch.claim_due
    failed: list[int] = []

    async def claim_due(s: int, *args: Any) -> Any:
        if s == second and len(failed) < times:
            failed.append(s)
            raise StoreUnavailable("injected")
        return await real(s, *args)

    store.dispatch.claim_due = claim_due  # type: ignore[method-assign]
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
    lag = start + 8000 - 1000 * (await store.leases.load_pointer("p0") or 0)
    assert lag <= 1000, f"the pointer stuck {lag} ms behind"


async def test_a_pending_job_without_an_index_entry_is_found_and_sent(
    store: MemoryStore, clock: FakeClock
) -> None:
    start = clock.now_ms()
    due = start - 60_000
    await create(store, start, ("lost", due))
    # A crash between the job's write and its entry's renewal.
    [entry] = await store.dispatch.next_seconds(second_of(due), second_of(due), 1)
    await store.dispatch.release_second(entry, 0)
    h = Harness(store, clock)
    await run_until(start + 5000, h)
    assert h.queue.times("lost"), "the orphaned job was never published"
    job = await store.jobs.get_job(BIZ, "lost")
    assert job is not None and job.state == JobState.DISPATCHED
    assert h.daemon.metrics.registry.get_sample_value("timer_seconds_restored_total") == 1
