"""The load calendar's port (`store.calendar`), on both adapters: the counts of
pending jobs kept beside the index of non-empty seconds, in step with every create,
cancel, reschedule, claim, retry and replay, per biz type and across partitions."""

from __future__ import annotations

from dataclasses import replace

from tests.contract.stores import NOW, attempt, claim_second, create, new
from tests.contract.test_scan_contract import P, partitioned  # noqa: F401 (a fixture)
from timer_service import jobs as machine
from timer_service.dispatch import Claimed, Outcome, OutcomeKind, SendRef
from timer_service.jobs import NewJob
from timer_service.model import encode_payload, second_of
from timer_service.store.base import Store

S = second_of(NOW + 5000)


async def due(store: Store, biz_type: str | None = None, span: int = 100) -> dict[int, int]:
    return await store.calendar.due_by_second(S - 10, S + span, biz_type)


def ref_of(c: Claimed) -> SendRef:
    return SendRef(c.biz_type, c.job_id, c.second, c.claim, bucket=c.bucket)


async def test_creates_count_once_per_job_and_biz_type(store: Store) -> None:
    assert await due(store) == {}
    await create(store, new("a"), new("b"), new("c", due_at=NOW + 8000))
    payments = NewJob("payments", "p", NOW + 5000, encode_payload(None))
    await create(store, payments)
    await create(store, new("a"))  # the same request again: already counted
    assert await due(store) == {S: 3, S + 3: 1}
    assert await due(store, "orders") == {S: 2, S + 3: 1}
    assert await due(store, "payments") == {S: 1}
    assert await due(store, "nobody") == {}
    assert await store.calendar.due_by_second(S + 1, S + 3, None) == {}  # [from, to)


async def test_cancel_and_reschedule_move_the_counts(store: Store) -> None:
    await create(store, new("a"), new("b"))
    await store.jobs.cancel_job("orders", "a", NOW)
    await store.jobs.cancel_job("orders", "a", NOW)  # cancelled already: nothing moves
    assert await due(store) == {S: 1}
    await store.jobs.reschedule_job("orders", "b", NOW + 20_000, None, NOW)
    assert await due(store) == {S + 15: 1}
    assert await due(store, "orders") == {S + 15: 1}


async def test_claim_takes_jobs_out_and_a_retry_puts_them_back(store: Store) -> None:
    await create(store, new("a"), new("b"))
    [a, _] = sorted(await claim_second(store, S), key=lambda c: c.job_id)
    assert await due(store) == {}
    await store.jobs.cancel_job("orders", "b", NOW)  # dispatched: was not counted
    retry = Outcome(ref_of(a), OutcomeKind.RETRY, attempt(1, status=503), NOW + 30_000)
    await store.outcomes.record_outcomes([retry], NOW + 5000)
    await store.outcomes.record_outcomes([retry], NOW + 5100)  # again: a reply was lost
    assert await due(store) == {S + 25: 1}
    assert await due(store, "orders") == {S + 25: 1}


async def test_a_dead_job_replayed_counts_again(store: Store) -> None:
    await create(store, new("a"))
    [c] = await claim_second(store, S)
    dead = Outcome(ref_of(c), OutcomeKind.DEAD, attempt(1, status=400))
    await store.outcomes.record_outcomes([dead], NOW + 5000)
    assert await due(store) == {}
    await store.jobs.replay_job("orders", "a", NOW + 6000)
    assert await due(store) == {second_of(NOW + 6000): 1}


async def test_bulk_changes_move_the_counts(store: Store) -> None:
    await create(store, new("a"), new("b"), new("c"))
    jobs = [await store.jobs.get_job("orders", j) for j in ("a", "b")]
    changes = [(j, machine.cancel(j, NOW)) for j in jobs if j is not None]
    await store.console.apply_changes([(j, c) for j, c in changes if c is not None], NOW)
    assert await due(store) == {S: 1}


async def test_canary_jobs_are_nobody_s_load(store: Store) -> None:
    await create(store, replace(new("c"), biz_type="_canary"), new("a"))
    assert await due(store) == {S: 1}


async def test_counts_sum_the_partitions(partitioned: Store) -> None:  # noqa: F811
    store = partitioned
    ids = [f"j{i}" for i in range(4 * P)]
    await create(store, *(new(i) for i in ids))
    assert await due(store) == {S: 4 * P}
    for job_id in ids[:P]:
        await store.jobs.cancel_job("orders", job_id, NOW)
    assert await due(store, "orders") == {S: 3 * P}


async def test_a_flexible_job_is_indexed_and_counted_at_its_chosen_moment(store: Store) -> None:
    [made] = await create(store, replace(new("f"), window_ms=10_000, fire_at=NOW + 9000))
    assert (made.job.window_ms, made.job.fire_at, made.job.next_attempt_at) == (
        10_000,
        NOW + 9000,
        NOW + 9000,
    )
    assert await due(store) == {S + 4: 1}
    assert [e.second for e in await store.scan.next_seconds(S - 10, S + 100, 10)] == [S + 4]
    [c] = await claim_second(store, S + 4)
    assert (c.due_at, c.next_attempt_at) == (NOW + 5000, NOW + 9000)
    job = await store.jobs.get_job("orders", "f")
    assert job is not None and (job.window_ms, job.fire_at) == (10_000, NOW + 9000)
    [again] = await create(store, replace(new("f"), window_ms=10_000, fire_at=NOW + 5000))
    assert again.status.value == "exists" and again.job.fire_at == NOW + 9000
    [other] = await create(store, replace(new("f"), window_ms=5000))
    assert other.status.value == "conflict"
