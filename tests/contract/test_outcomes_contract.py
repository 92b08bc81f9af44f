"""The broker's outcomes port (`store.outcomes`), on both adapters: the send mark
before a callback (a cancel after it is refused, a retried mark answers what the
first marked) and what each attempt came to (outcomes belong to their claim)."""

from __future__ import annotations

import pytest

from tests.contract.stores import NOW, attempt, claim_second, create, drop_entry, new
from timer_service.dispatch import Claimed, Outcome, OutcomeKind, SendRef
from timer_service.errors import CallbackInFlight
from timer_service.jobs import CARRIED_PAYLOAD_CHARS
from timer_service.model import JobState, second_of
from timer_service.queue.base import decode, encode
from timer_service.store.base import Store
from timer_service.tracecontext import TraceContext


def refs_of_messages(c: Claimed) -> SendRef:
    """The broker's reference to a job, from its message as the queue carries it."""
    m = decode(encode(c))
    return SendRef(
        m.biz_type, m.job_id, m.second, m.claim, bucket=m.bucket, due_at=m.due_at, job=m.job
    )


async def test_cancel_dispatched_then_the_send_mark_drops_it(store: Store) -> None:
    await create(store, new("a"))
    [c] = await claim_second(store, second_of(NOW + 5000))
    ref = SendRef(c.biz_type, c.job_id, c.second, c.claim, bucket=c.bucket)
    await store.jobs.cancel_job("orders", "a", NOW)
    assert await store.outcomes.start_sending([ref], "t1", NOW + 1) == {}


async def test_a_retried_send_mark_returns_what_the_first_try_marked(store: Store) -> None:
    await create(store, new("a"), new("b"))
    claimed = await claim_second(store, second_of(NOW + 5000))
    refs = [SendRef(c.biz_type, c.job_id, c.second, c.claim, bucket=c.bucket) for c in claimed]
    first = await store.outcomes.start_sending(refs, "t1", NOW + 1)
    assert set(first) == {"orders/a", "orders/b"}
    again = await store.outcomes.start_sending(refs, "t1", NOW + 2)  # its reply was lost
    assert set(again) == {"orders/a", "orders/b"}, f"a retry with the same token got {again}"
    assert await store.outcomes.start_sending(refs, "t2", NOW + 3) == {}  # another sender


async def test_a_lone_job_s_retried_send_mark_returns_it(store: Store) -> None:
    # One job is marked by another path on MongoDB (a find-and-modify): same answers.
    await create(store, new("a"))
    [c] = await claim_second(store, second_of(NOW + 5000))
    ref = SendRef(c.biz_type, c.job_id, c.second, c.claim, bucket=c.bucket)
    assert set(await store.outcomes.start_sending([ref], "t1", NOW + 1)) == {"orders/a"}
    assert set(await store.outcomes.start_sending([ref], "t1", NOW + 2)) == {"orders/a"}
    assert await store.outcomes.start_sending([ref], "t2", NOW + 3) == {}


async def test_a_send_mark_retried_with_its_token_returns_the_jobs_it_marked(
    store: Store,
) -> None:
    await create(store, new("a"), new("b"))
    claimed = await claim_second(store, second_of(NOW + 5000))
    refs = [SendRef(c.biz_type, c.job_id, c.second, c.claim, bucket=c.bucket) for c in claimed]
    first = await store.outcomes.start_sending(refs, "send-1", NOW + 5000)
    assert sorted(first) == ["orders/a", "orders/b"], first
    # The reply was lost: the broker asks again with the same token.
    again = await store.outcomes.start_sending(refs, "send-1", NOW + 5003)
    assert sorted(again) == ["orders/a", "orders/b"], f"a retried mark lost its jobs: {again}"
    assert all(job.sending == "send-1" for job in again.values()), again
    other = await store.outcomes.start_sending(refs, "send-2", NOW + 5004)
    assert other == {}, f"another token must still find the callbacks started: {other}"


async def test_a_mark_of_messages_that_carry_their_jobs_answers_the_jobs_as_stored(
    store: Store,
) -> None:
    # The message carries the job as claimed; where the mark took every job of a
    # claim, the store answers those jobs with the mark applied, not read back. They
    # must be what a read would give (but the history, which no message carries).
    trace = TraceContext("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "k=v")
    labels = (("order", "42"), ("region", "eu"))
    await create(store, new("a", payload={"x": [1, "é"]}, labels=labels, trace=trace), new("b"))
    await create(store, new("c", payload="retried"))
    claimed = await claim_second(store, second_of(NOW + 5000))
    refs = [refs_of_messages(c) for c in claimed]
    # "c" has a failed attempt behind it: attempts, last error and history set.
    [c_ref] = [r for r in refs if r.job_id == "c"]
    assert set(await store.outcomes.start_sending([c_ref], "t0", NOW + 1)) == {"orders/c"}
    retry = Outcome(c_ref, OutcomeKind.RETRY, attempt(1, status=503), NOW + 5600)
    await store.outcomes.record_outcomes([retry], NOW + 2)
    claimed = await store.scan.claim_due(second_of(NOW + 5000), NOW + 6000, "c2", 1, NOW + 3)
    refs = [r for r in refs if r.job_id != "c"] + [refs_of_messages(c) for c in claimed]

    marked = await store.outcomes.start_sending(refs, "t1", NOW + 10)
    assert set(marked) == {"orders/a", "orders/b", "orders/c"}
    for key, job in marked.items():
        stored = await store.jobs.get_job(*key.split("/"))
        assert stored is not None
        assert job.evolve(history=()) == stored.evolve(history=()), key
    assert marked["orders/c"].attempts == 1 and marked["orders/c"].last_error


async def test_a_mark_of_carried_jobs_leaves_out_one_cancelled_after_its_claim(
    store: Store,
) -> None:
    await create(store, new("a"), new("b"), new("c"))
    claimed = await claim_second(store, second_of(NOW + 5000))
    await store.jobs.cancel_job("orders", "b", NOW + 1)
    marked = await store.outcomes.start_sending(
        [refs_of_messages(c) for c in claimed], "t1", NOW + 2
    )
    assert set(marked) == {"orders/a", "orders/c"}


async def test_a_job_with_a_large_payload_is_read_back_by_its_mark(store: Store) -> None:
    large = "x" * (CARRIED_PAYLOAD_CHARS + 1)
    await create(store, new("big", payload=large), new("small"))
    claimed = await claim_second(store, second_of(NOW + 5000))
    refs = {r.job_id: r for r in (refs_of_messages(c) for c in claimed)}
    assert refs["big"].job is None  # the small one's, on MongoDB (tests/integration)
    marked = await store.outcomes.start_sending(list(refs.values()), "t1", NOW + 2)
    assert marked["orders/big"].payload == large


async def test_a_started_callback_cannot_be_cancelled_and_a_duplicate_is_not_sent(
    store: Store,
) -> None:
    await create(store, new("a"), new("b"))
    claimed = await claim_second(store, second_of(NOW + 5000))
    refs = [SendRef(c.biz_type, c.job_id, c.second, c.claim, bucket=c.bucket) for c in claimed]
    await store.jobs.cancel_job("orders", "b", NOW + 4990)  # before its callback starts
    started = await store.outcomes.start_sending(refs, "send-1", NOW + 5000)
    assert sorted(started) == ["orders/a"], "a cancelled job must not be sent"
    with pytest.raises(CallbackInFlight):
        await store.jobs.cancel_job("orders", "a", NOW + 5001)
    again = await store.outcomes.start_sending(refs, "send-2", NOW + 5002)
    assert again == {}, "a second message of the same claim must not be sent too"
    [a] = [r for r in refs if r.job_id == "a"]
    await store.outcomes.record_outcomes(
        [Outcome(a, OutcomeKind.RETRY, attempt(1, status=503), NOW + 65_000)], NOW + 5010
    )
    retried = await store.jobs.cancel_job("orders", "a", NOW + 5020)
    assert retried.state == JobState.CANCELLED, "a retried job is cancellable again"


async def test_outcomes_delivered_retry_dead(store: Store) -> None:
    s = second_of(NOW + 5000)
    await create(store, new("ok"), new("retry"), new("dead"))
    claimed = {c.job_id: c for c in await claim_second(store, s)}
    ref = {
        k: SendRef(c.biz_type, c.job_id, c.second, c.claim, bucket=c.bucket)
        for k, c in claimed.items()
    }
    sent = await store.outcomes.start_sending(list(ref.values()), "t", NOW + 5001)
    assert set(sent) == {"orders/ok", "orders/retry", "orders/dead"}
    retry_at = NOW + 30_000
    await store.outcomes.record_outcomes(
        [
            Outcome(ref["ok"], OutcomeKind.DELIVERED, attempt(1)),
            Outcome(ref["retry"], OutcomeKind.RETRY, attempt(1, status=503), retry_at),
            Outcome(ref["dead"], OutcomeKind.DEAD, attempt(1, status=400)),
        ],
        NOW + 5010,
    )
    ok = await store.jobs.get_job("orders", "ok")
    assert ok is not None and ok.state == JobState.DELIVERED and ok.attempts == 1
    assert ok.delivered_at == NOW + 5010 and ok.next_attempt_at is None
    assert ok.history[0].status_code == 200
    dead = await store.jobs.get_job("orders", "dead")
    assert dead is not None and dead.state == JobState.DEAD and dead.last_error == "HTTP 400"
    retry = await store.jobs.get_job("orders", "retry")
    assert retry is not None and retry.state == JobState.PENDING
    assert retry.next_attempt_at == retry_at and retry.attempts == 1 and retry.due_at == NOW + 5000
    assert retry.last_error == "HTTP 503"
    assert [k for k, _ in await store.scan.load_second(second_of(retry_at), 1)] == ["orders/retry"]
    [again] = await claim_second(store, second_of(retry_at), "c2")
    assert again.attempt == 2 and again.due_at == NOW + 5000


async def test_outcome_for_a_cancelled_job_keeps_it_cancelled(store: Store) -> None:
    await create(store, new("a"), new("b"))
    claimed = {c.job_id: c for c in await claim_second(store, second_of(NOW + 5000))}
    await store.jobs.cancel_job("orders", "a", NOW)
    await store.jobs.cancel_job("orders", "b", NOW)
    refs = {
        k: SendRef(c.biz_type, c.job_id, c.second, c.claim, bucket=c.bucket)
        for k, c in claimed.items()
    }
    await store.outcomes.record_outcomes(
        [
            Outcome(refs["a"], OutcomeKind.DELIVERED, attempt(1)),
            Outcome(refs["b"], OutcomeKind.RETRY, attempt(1, status=500), NOW + 90_000),
        ],
        NOW,
    )
    for name in "ab":
        job = await store.jobs.get_job("orders", name)
        assert job is not None and job.state == JobState.CANCELLED and job.attempts == 1


async def test_a_burst_of_retries_is_written_in_place_and_skips_a_job_cancelled_meanwhile(
    store: Store,
) -> None:
    # 240 jobs in two seconds, retried into two other seconds: four move groups, one of
    # them over the chunk size; one job is cancelled after its callback went out.
    firsts = [NOW + 5000, NOW + 6000]
    await create(store, *(new(f"r{i:03}", due_at=firsts[i % 2]) for i in range(240)))
    claimed = [c for first in firsts for c in await claim_second(store, second_of(first), "c1")]
    assert len(claimed) == 240
    await store.jobs.cancel_job("orders", "r007", NOW)
    retry_at = {0: NOW + 41_000, 1: NOW + 43_000}
    await store.outcomes.record_outcomes(
        [
            Outcome(
                SendRef(c.biz_type, c.job_id, c.second, c.claim, bucket=c.bucket),
                OutcomeKind.RETRY,
                attempt(1, status=503),
                retry_at[int(c.job_id[1:]) % 3 % 2],
            )
            for c in claimed
        ],
        NOW + 6010,
    )
    cancelled = await store.jobs.get_job("orders", "r007")
    assert cancelled is not None and cancelled.state == JobState.CANCELLED
    assert cancelled.attempts == 1
    loaded = {
        k for at in retry_at.values() for k, _ in await store.scan.load_second(second_of(at), 1)
    }
    expected = {f"orders/r{i:03}" for i in range(240) if i != 7}
    assert loaded == expected
    for i in (0, 1, 2, 239):
        job = await store.jobs.get_job("orders", f"r{i:03}")
        assert job is not None and job.state == JobState.PENDING and job.attempts == 1
        assert job.next_attempt_at == retry_at[i % 3 % 2]
    for first in firsts:
        assert await store.scan.load_second(second_of(first), 1) == []


async def test_a_retry_into_the_same_bucket_is_indexed(store: Store) -> None:
    await create(store, new("a"))
    [c] = await claim_second(store, second_of(NOW + 5000))
    await drop_entry(store, second_of(NOW + 5000))
    retry_at = NOW + 65_000  # 60 s later: the same bucket of 60
    ref = SendRef(c.biz_type, c.job_id, c.second, c.claim, bucket=c.bucket)
    failed = Outcome(ref, OutcomeKind.RETRY, attempt(1, status=503), retry_at)
    await store.outcomes.record_outcomes([failed], NOW + 5000)
    entries = await store.scan.next_seconds(second_of(retry_at), second_of(retry_at), 1)
    assert [e.second for e in entries] == [second_of(retry_at)], "the retry's second is unindexed"
    loaded = await store.scan.load_second(second_of(retry_at), 1)
    assert [k for k, _ in loaded] == ["orders/a"]


async def test_an_outcome_for_another_claim_changes_nothing(store: Store) -> None:
    await create(store, new("a"))
    [c] = await claim_second(store, second_of(NOW + 5000))
    stale = SendRef(c.biz_type, c.job_id, c.second, "some-older-claim")
    await store.outcomes.record_outcomes(
        [Outcome(stale, OutcomeKind.DEAD, attempt(1, status=400))], NOW + 5000
    )
    job = await store.jobs.get_job("orders", "a")
    assert job is not None and job.state == JobState.DISPATCHED and job.attempts == 0, job
