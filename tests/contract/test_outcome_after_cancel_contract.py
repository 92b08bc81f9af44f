"""An outcome for a job cancelled while its callback was in flight, on both adapters: the
job stays cancelled and keeps the attempt's record, once per attempt however often the
write is retried (the rule is `jobs.outcome_after_cancel`'s; the adapters only apply it)."""

from __future__ import annotations

from tests.contract.stores import NOW, attempt, claim_second, create, new
from timer_service.dispatch import Outcome, OutcomeKind, SendRef
from timer_service.model import JobState, second_of
from timer_service.store.base import Store


async def test_an_outcome_after_a_cancel_is_recorded_once_per_attempt(store: Store) -> None:
    await create(store, new("a"), new("b", due_at=NOW + 5000 + 60_000))  # b: another bucket
    [a] = await claim_second(store, second_of(NOW + 5000))
    ref = SendRef(a.biz_type, a.job_id, a.second, a.claim, bucket=a.bucket)
    await store.jobs.cancel_job("orders", "a", NOW + 4990)

    failed = Outcome(ref, OutcomeKind.RETRY, attempt(1, status=503), NOW + 65_000)
    for _ in range(3):  # the broker's write, retried after lost replies
        await store.outcomes.record_outcomes([failed], NOW + 5010)

    job = await store.jobs.get_job("orders", "a")
    assert job is not None and job.state == JobState.CANCELLED, job
    assert [h.at for h in job.history] == [NOW + 5000], f"recorded once: {job.history}"
    assert (job.attempts, job.last_error, job.next_attempt_at) == (1, "HTTP 503", None), job

    dead = Outcome(ref, OutcomeKind.DEAD, attempt(2, at=NOW + 6000, status=410), None)
    await store.outcomes.record_outcomes([dead, failed], NOW + 6010)
    job = await store.jobs.get_job("orders", "a")
    assert job is not None and job.state == JobState.CANCELLED, job
    assert [h.at for h in job.history] == [NOW + 5000, NOW + 6000], job.history
    assert (job.attempts, job.last_error) == (2, "HTTP 410"), job
    other = await store.jobs.get_job("orders", "b")
    assert other is not None and other.state == JobState.PENDING and other.history == ()
