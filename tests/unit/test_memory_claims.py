"""The in-memory store claims a herd's second in bounded steps, as MongoDB's claim index
does: a claim of K jobs looks at about K jobs, not at the whole second.

The herd bench found the opposite: every claim of 1,000 from a 100,000-job second
checked all 100,000 (and sorted them), 47 % of the process's CPU while the herd drained,
and the daemon's claims of another biz type's seconds waited up to 12 s behind it."""

from __future__ import annotations

import pytest

from timer_service import jobs as machine
from timer_service.jobs import NewJob
from timer_service.model import JobState
from timer_service.store.memory import MemoryStore

SECOND = 1_000_000  # a due second far from now: nothing here depends on the clock
NOW = SECOND * 1000 - 60_000
FENCE = 1


async def herd(store: MemoryStore, size: int) -> None:
    jobs = [NewJob("herd", f"h{i:05}", SECOND * 1000 + i % 1000, "null") for i in range(size)]
    await store.jobs.create_jobs(jobs, NOW)


async def test_a_claim_of_k_jobs_from_a_big_second_looks_at_about_k(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = MemoryStore(buckets=60)
    await herd(store, 20_000)
    looked = 0
    real = machine.claimable

    def counting(*args: object) -> bool:
        nonlocal looked
        looked += 1
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(machine, "claimable", counting)
    upto = SECOND * 1000 + 999
    taken = 0
    for step in range(5):
        claimed = await store.scan.claim_due(SECOND, upto, f"c{step}", FENCE, NOW, limit=100)
        taken += len(claimed)
    assert taken == 500
    assert looked <= 500, f"5 claims of 100 looked at {looked} jobs (the second holds 20,000)"


async def test_claims_take_the_earliest_due_first_and_each_job_once() -> None:
    store = MemoryStore(buckets=60)
    await herd(store, 3_000)
    seen: list[tuple[int, str]] = []
    upto = SECOND * 1000 + 499  # half of the second is due
    while claimed := await store.scan.claim_due(SECOND, upto, "c", FENCE, NOW, limit=400):
        seen.extend((c.next_attempt_at, c.job_id) for c in claimed)
    assert len(seen) == len({job_id for _, job_id in seen}) == 1_500
    assert seen == sorted(seen), "a later claim took an earlier-due job than one before it"
    assert max(due for due, _ in seen) <= upto
    left = await store.scan.load_second(SECOND, FENCE)
    assert len(left) == 1_500, "the jobs not yet due are no longer loadable"
    assert all(due > upto for _, due in left)


async def test_a_job_leaves_its_old_second_s_pending_jobs_when_rescheduled_or_cancelled() -> None:
    store = MemoryStore(buckets=60)
    due = SECOND * 1000 + 10
    await store.jobs.create_jobs(
        [NewJob("b", "moved", due, "null"), NewJob("b", "gone", due, "null")], NOW
    )
    await store.jobs.reschedule_job("b", "moved", due + 5_000, None, NOW)
    gone = await store.jobs.cancel_job("b", "gone", NOW)
    assert gone is not None and gone.state == JobState.CANCELLED
    assert await store.scan.load_second(SECOND, FENCE) == []
    assert await store.scan.claim_due(SECOND, due + 1000, "c", FENCE, NOW) == []
    assert [(k, d) for k, d in await store.scan.load_second(SECOND + 5, FENCE)] == [
        ("b/moved", due + 5_000)
    ]
    claimed = await store.scan.claim_due(SECOND + 5, due + 6_000, "c", FENCE, NOW)
    assert [c.job_id for c in claimed] == ["moved"]
