"""The API's jobs port (`store.jobs`), on both adapters: idempotent create, get,
cancel, reschedule, replay, and the trace context a job keeps.

The in-memory store runs everywhere; the MongoDB adapter runs against a real
SecantusDB server (MongoDB wire protocol). Both must give the same answers."""

from __future__ import annotations

import asyncio

import pytest

from tests.contract.stores import NOW, attempt, claim_second, create, drop_entry, list_jobs, new
from timer_service.dispatch import Outcome, OutcomeKind, SendRef
from timer_service.errors import Conflict, NotFound
from timer_service.jobs import CreateStatus
from timer_service.model import JobState, encode_payload, second_of
from timer_service.store.base import Store
from timer_service.tracecontext import TraceContext

TRACE = TraceContext("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "vendor=abc")
BARE = TraceContext("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00")


async def dead_job(store: Store, job_id: str) -> None:
    await create(store, new(job_id))
    [c] = await claim_second(store, second_of(NOW + 5000))
    ref = SendRef(c.biz_type, c.job_id, c.second, c.claim, bucket=c.bucket)
    gone = Outcome(ref, OutcomeKind.DEAD, attempt(1, status=400))
    await store.outcomes.record_outcomes([gone], NOW + 5000)


async def test_create_then_same_then_changed(store: Store) -> None:
    [first] = await create(store, new("a", payload={"x": 1}))
    assert first.status == CreateStatus.CREATED
    assert first.job.state == JobState.PENDING and first.job.next_attempt_at == NOW + 5000
    [again] = await create(store, new("a", payload={"x": 1}))
    assert again.status == CreateStatus.EXISTS and again.job.created_at == first.job.created_at
    [changed] = await create(store, new("a", payload={"x": 2}))
    assert changed.status == CreateStatus.CONFLICT
    [moved] = await create(store, new("a", due_at=NOW + 9000, payload={"x": 1}))
    assert moved.status == CreateStatus.CONFLICT
    [delay] = await create(store, new("a", due_at=NOW + 9000, payload={"x": 1}, compare_due=False))
    assert delay.status == CreateStatus.EXISTS


async def test_repeated_identity_within_a_batch(store: Store) -> None:
    results = await create(
        store, new("a", payload=1), new("b"), new("a", payload=1), new("a", payload=2)
    )
    assert [r.status for r in results] == [
        CreateStatus.CREATED,
        CreateStatus.CREATED,
        CreateStatus.EXISTS,
        CreateStatus.CONFLICT,
    ]


async def test_concurrent_creates_leave_one_job(store: Store) -> None:
    results = await asyncio.gather(*(create(store, new("same", payload=7)) for _ in range(50)))
    statuses = [r[0].status for r in results]
    assert statuses.count(CreateStatus.CREATED) == 1, statuses
    assert statuses.count(CreateStatus.EXISTS) == 49, statuses
    jobs, _ = await list_jobs(store, "orders", None, 100, None)
    assert [j.job_id for j in jobs] == ["same"]
    entries = await store.scan.next_seconds(0, 10**12, 10)
    assert [e.second for e in entries] == [second_of(NOW + 5000)]


async def test_concurrent_creates_answer_with_the_stored_job(store: Store) -> None:
    results = await asyncio.gather(*(create(store, new("same", payload=7)) for _ in range(20)))
    stored = await store.jobs.get_job("orders", "same")
    assert stored is not None
    assert {r[0].job.created_at for r in results} == {stored.created_at}


async def test_a_repeated_create_of_a_pending_job_renews_its_entry(store: Store) -> None:
    await create(store, new("a"))
    await drop_entry(store, second_of(NOW + 5000))
    [again] = await create(store, new("a"), now=NOW + 10)
    assert again.status == CreateStatus.EXISTS
    s = second_of(NOW + 5000)
    assert [e.second for e in await store.scan.next_seconds(s, s, 1)] == [s]


async def test_get_unknown_is_none(store: Store) -> None:
    assert await store.jobs.get_job("orders", "nope") is None


async def test_cancel(store: Store) -> None:
    await create(store, new("a"))
    job = await store.jobs.cancel_job("orders", "a", NOW + 1)
    assert job.state == JobState.CANCELLED and job.next_attempt_at is None
    assert (await store.jobs.cancel_job("orders", "a", NOW + 2)).state == JobState.CANCELLED
    with pytest.raises(NotFound):
        await store.jobs.cancel_job("orders", "nope", NOW)
    assert await store.scan.load_second(second_of(NOW + 5000), 1) == []


async def test_reschedule_moves_to_the_new_second(store: Store) -> None:
    await create(store, new("a", due_at=NOW + 5000))
    for target in (NOW + 65_000, NOW + 7_000):  # same bucket (60 s later), then another
        job = await store.jobs.reschedule_job("orders", "a", target, encode_payload("p2"), NOW)
        assert job.due_at == target and job.next_attempt_at == target and job.payload == "p2"
        got = await store.jobs.get_job("orders", "a")
        assert got is not None and got.next_attempt_at == target and got.payload == "p2"
        assert [k for k, _ in await store.scan.load_second(second_of(target), 1)] == ["orders/a"]
    assert await store.scan.load_second(second_of(NOW + 5000), 1) == []
    assert await store.scan.load_second(second_of(NOW + 65_000), 1) == []
    seconds = [e.second for e in await store.scan.next_seconds(0, 10**12, 10)]
    assert second_of(NOW + 7000) in seconds


async def test_reschedule_only_pending(store: Store) -> None:
    await create(store, new("a"))
    await claim_second(store, second_of(NOW + 5000))
    with pytest.raises(Conflict):
        await store.jobs.reschedule_job("orders", "a", NOW + 9000, None, NOW)
    with pytest.raises(NotFound):
        await store.jobs.reschedule_job("orders", "nope", NOW + 9000, None, NOW)


async def test_replay_dead_job(store: Store) -> None:
    await create(store, new("a"))
    [c] = await claim_second(store, second_of(NOW + 5000))
    ref = SendRef(c.biz_type, c.job_id, c.second, c.claim, bucket=c.bucket)
    await store.outcomes.record_outcomes(
        [Outcome(ref, OutcomeKind.DEAD, attempt(1, status=400))], NOW
    )
    with pytest.raises(Conflict):
        await store.jobs.cancel_job("orders", "a", NOW)
    job = await store.jobs.replay_job("orders", "a", NOW + 20_000)
    assert job.state == JobState.PENDING and job.next_attempt_at == NOW + 20_000
    assert job.budget_base == 1 and job.attempts == 1 and len(job.history) == 1
    got = await store.jobs.get_job("orders", "a")
    assert got is not None and got.state == JobState.PENDING
    assert [k for k, _ in await store.scan.load_second(second_of(NOW + 20_000), 1)] == ["orders/a"]
    again = await store.jobs.replay_job("orders", "a", NOW + 21_000)  # a retried replay
    assert again.next_attempt_at == NOW + 20_000, "a retried replay changed the job"


async def test_a_replay_retried_before_its_first_attempt_ends_answers_the_job(
    store: Store,
) -> None:
    await dead_job(store, "a")
    replayed = await store.jobs.replay_job("orders", "a", NOW + 10_000)
    assert replayed.state == JobState.PENDING and replayed.budget_base == 1, replayed
    # The reply was lost; the client asks again.
    again = await store.jobs.replay_job("orders", "a", NOW + 10_500)
    assert again == replayed, f"a retried replay changed the job:\n{again}\n!=\n{replayed}"
    s = second_of(NOW + 10_000)
    [c] = await store.scan.claim_due(s, s * 1000 + 999, "c2", 1, NOW + 10_000)
    claimed = await store.jobs.replay_job("orders", "a", NOW + 10_900)
    assert claimed.state == JobState.DISPATCHED and claimed.claim == c.claim, claimed
    ref = SendRef(c.biz_type, c.job_id, c.second, c.claim, bucket=c.bucket)
    failed = Outcome(ref, OutcomeKind.RETRY, attempt(2, at=NOW + 11_000, status=503), NOW + 70_000)
    await store.outcomes.record_outcomes([failed], NOW + 11_000)
    with pytest.raises(Conflict):  # an attempt since: the replay is long done
        await store.jobs.replay_job("orders", "a", NOW + 12_000)


async def test_a_job_that_was_never_dead_is_not_replayed(store: Store) -> None:
    await create(store, new("a"))
    with pytest.raises(Conflict):
        await store.jobs.replay_job("orders", "a", NOW + 1000)


async def test_a_job_keeps_its_trace_context_from_create_to_send(store: Store) -> None:
    made, *_ = await create(store, new("a", trace=TRACE), new("b", trace=BARE), new("c"))
    assert made.status is CreateStatus.CREATED and made.job.trace == TRACE
    traces = {j: (await store.jobs.get_job("orders", j)).trace for j in "abc"}  # type: ignore[union-attr]
    assert traces == {"a": TRACE, "b": BARE, "c": None}, f"got {traces}"

    claims = {c.job_id: c for c in await claim_second(store, second_of(NOW + 5000))}
    got = {j: c.traceparent for j, c in claims.items()}
    assert got == {"a": TRACE.traceparent, "b": BARE.traceparent, "c": None}, f"got {got}"
    refs = [
        SendRef(c.biz_type, c.job_id, c.second, c.claim, bucket=c.bucket) for c in claims.values()
    ]
    sending = await store.outcomes.start_sending(refs, "s1", NOW + 5000)
    assert sending["orders/a"].trace == TRACE, f"got {sending['orders/a']}"
    assert sending["orders/c"].trace is None, f"got {sending['orders/c']}"


async def test_the_trace_context_survives_retries_reschedules_and_repeated_creates(
    store: Store,
) -> None:
    await create(store, new("a", trace=TRACE))
    [again] = await create(store, new("a", trace=BARE))
    assert again.status is CreateStatus.EXISTS and again.job.trace == TRACE, "a repeat replaced it"

    [c] = await claim_second(store, second_of(NOW + 5000))
    retry_at = NOW + 30_000  # another second, another bucket
    ref = SendRef(c.biz_type, c.job_id, c.second, c.claim, bucket=c.bucket)
    await store.outcomes.record_outcomes(
        [Outcome(ref, OutcomeKind.RETRY, attempt(1, status=503), retry_at)], NOW + 5000
    )
    job = await store.jobs.get_job("orders", "a")
    assert job is not None and job.next_attempt_at == retry_at and job.trace == TRACE, f"{job}"

    moved = await store.jobs.reschedule_job("orders", "a", NOW + 90_000, encode_payload(1), NOW)
    assert moved.trace == TRACE
    got = await store.jobs.get_job("orders", "a")
    assert got is not None and got.trace == TRACE, f"got {got}"
