"""What each attempt's endpoint answered, on both adapters: written with the outcome
(no store call of its own), read back on the job's attempt it belongs to, and only
the job's last RESPONSES_KEPT answers kept (the rule is `jobs.with_answers_kept`;
MongoDB keeps them with a `$push` `$slice` in the outcome's own update)."""

from __future__ import annotations

from tests.contract.stores import NOW, claim_second, create, new
from timer_service.dispatch import Outcome, OutcomeKind, SendRef
from timer_service.model import Attempt, JobState, second_of
from timer_service.responses import RESPONSES_KEPT, AttemptResponse
from timer_service.search import JobFilter
from timer_service.store.base import Store


def answer(n: int) -> AttemptResponse:
    return AttemptResponse(
        (("Content-Type", "text/plain"), ("X-Request-Id", f"req-{n}")),
        f"attempt {n}: db down é",
        truncated=n % 2 == 0,
    )


def failed(n: int, at: int) -> Attempt:
    if n % 5 == 0:  # every fifth attempt timed out: no answer
        return Attempt(n, at, None, "timeout", 10_000)
    return Attempt(n, at, 503, "HTTP 503", 4, answer(n))


async def fail_then_deliver(store: Store, failures: int) -> None:
    """Claims job "a" again and again; each attempt fails until the last delivers."""
    due = NOW + 5000
    for n in range(1, failures + 2):
        [c] = await claim_second(store, second_of(due), claim=f"c{n}")
        ref = SendRef(c.biz_type, c.job_id, c.second, c.claim, bucket=c.bucket)
        assert set(await store.outcomes.start_sending([ref], f"t{n}", due)) == {"orders/a"}
        if n <= failures:
            retry_at = due + 10
            outcome = Outcome(ref, OutcomeKind.RETRY, failed(n, due), retry_at)
            due = retry_at
        else:
            done = Attempt(n, due, 200, None, 2, AttemptResponse(body="ok"))
            outcome = Outcome(ref, OutcomeKind.DELIVERED, done)
        await store.outcomes.record_outcomes([outcome], due)


async def test_each_attempt_s_answer_is_on_its_attempt(store: Store) -> None:
    await create(store, new("a"))
    await fail_then_deliver(store, 3)
    job = await store.jobs.get_job("orders", "a")
    assert job is not None and job.state == JobState.DELIVERED, job
    assert [(a.attempt, a.response) for a in job.history] == [
        (1, answer(1)),
        (2, answer(2)),
        (3, answer(3)),
        (4, AttemptResponse(body="ok")),
    ]


async def test_only_the_last_answers_are_kept(store: Store) -> None:
    await create(store, new("a"))
    await fail_then_deliver(store, 14)  # 15 attempts; 5 and 10 timed out
    job = await store.jobs.get_job("orders", "a")
    assert job is not None and job.state == JobState.DELIVERED, job
    assert [a.attempt for a in job.history] == list(range(1, 16)), "the history is whole"
    kept = [a.attempt for a in job.history if a.response is not None]
    # 13 answers (1-15 but the timed-out 5 and 10): the last RESPONSES_KEPT of them.
    assert RESPONSES_KEPT == 10
    assert kept == [4, 6, 7, 8, 9, 11, 12, 13, 14, 15], kept
    assert job.history[3].response == answer(4)
    assert job.history[14].response == AttemptResponse(body="ok")


async def test_an_answer_after_a_cancel_is_kept_once(store: Store) -> None:
    await create(store, new("a"))
    [a] = await claim_second(store, second_of(NOW + 5000))
    ref = SendRef(a.biz_type, a.job_id, a.second, a.claim, bucket=a.bucket)
    await store.jobs.cancel_job("orders", "a", NOW + 4990)
    outcome = Outcome(ref, OutcomeKind.RETRY, failed(1, NOW + 5000), NOW + 6000)
    for _ in range(2):  # the broker's write, retried after a lost reply
        await store.outcomes.record_outcomes([outcome], NOW + 5010)
    job = await store.jobs.get_job("orders", "a")
    assert job is not None and job.state == JobState.CANCELLED, job
    assert [(h.attempt, h.response) for h in job.history] == [(1, answer(1))]


async def test_a_retry_s_claim_carries_no_answers(store: Store) -> None:
    # A claim's read-back is what the message carries: the answers stay in the store.
    await create(store, new("a"))
    [c] = await claim_second(store, second_of(NOW + 5000))
    ref = SendRef(c.biz_type, c.job_id, c.second, c.claim, bucket=c.bucket)
    assert set(await store.outcomes.start_sending([ref], "t1", NOW + 5000)) == {"orders/a"}
    outcome = Outcome(ref, OutcomeKind.RETRY, failed(1, NOW + 5000), NOW + 5010)
    await store.outcomes.record_outcomes([outcome], NOW + 5005)
    [again] = await claim_second(store, second_of(NOW + 5010), claim="c2")
    assert again.job is None or again.job.history == (), again.job
    job = await store.jobs.get_job("orders", "a")
    assert job is not None and job.history[0].response == answer(1), job.history


async def test_a_listing_carries_no_answers(store: Store) -> None:
    # Both ways a search reads: through the locator (no state) and through the
    # buckets' (biz_type, state, _id) index (a state given).
    await create(store, new("a"))
    await fail_then_deliver(store, 2)
    for states in (None, frozenset({JobState.DELIVERED})):
        where = JobFilter(biz_type="orders", states=states)
        [job], _ = await store.console.search_jobs(where, 10, None)
        assert [a.attempt for a in job.history] == [1, 2, 3], job.history
        assert all(a.response is None for a in job.history), (states, job.history)
    stored = await store.jobs.get_job("orders", "a")
    assert stored is not None and stored.history[0].response == answer(1), "still stored"
