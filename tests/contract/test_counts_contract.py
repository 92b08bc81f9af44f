"""The job count sample (`store.counts`), on both adapters."""

from __future__ import annotations

from tests.contract.stores import NOW, attempt, claim_second, create, new
from timer_service.dispatch import Outcome, OutcomeKind, SendRef
from timer_service.jobs import NewJob
from timer_service.model import JobState, encode_payload, second_of
from timer_service.store.base import Store


async def test_count_jobs_per_biz_type_and_state(store: Store) -> None:
    s = second_of(NOW + 5000)
    await create(store, new("ok"), new("dead"), new("held"), new("later", due_at=NOW + 60_000))
    await create(store, NewJob("billing", "b1", NOW + 90_000, encode_payload(None)))
    await create(store, new("gone", due_at=NOW + 70_000))
    await store.jobs.cancel_job("orders", "gone", NOW)
    claimed = {c.job_id: c for c in await claim_second(store, s)}
    ref = {
        k: SendRef(c.biz_type, c.job_id, c.second, c.claim, bucket=c.bucket)
        for k, c in claimed.items()
    }
    await store.outcomes.record_outcomes(
        [
            Outcome(ref["ok"], OutcomeKind.DELIVERED, attempt(1)),
            Outcome(ref["dead"], OutcomeKind.DEAD, attempt(1, status=400)),
        ],
        NOW + 5010,
    )
    open_states = [JobState.PENDING, JobState.DISPATCHED, JobState.DEAD]
    assert await store.counts.count_jobs(open_states) == {
        ("orders", JobState.PENDING): 1,
        ("orders", JobState.DISPATCHED): 1,
        ("orders", JobState.DEAD): 1,
        ("billing", JobState.PENDING): 1,
    }
    assert await store.counts.count_jobs([JobState.CANCELLED]) == {
        ("orders", JobState.CANCELLED): 1
    }
