"""The store's part of the guarantees under partial failure, on both adapters:
every pending job stays findable by the scanner, the seconds index has no ABA,
a deposed daemon's release misses, outcomes belong to their claim."""

from __future__ import annotations

import asyncio

import pytest

from tests.contract.stores import NOW, attempt, claim_second, create, new
from timer_service.dispatch import Outcome, OutcomeKind, SecondEntry, SendRef
from timer_service.errors import CallbackInFlight, Conflict
from timer_service.jobs import CreateStatus
from timer_service.model import JobState, second_of
from timer_service.store.base import Store


async def drop_entry(store: Store, second: int) -> None:
    """What a crash between a job's write and its entry's renewal leaves behind."""
    [entry] = await store.scan.next_seconds(second, second, 1)
    assert await store.scan.release_second(entry, 1) is True
    assert await store.scan.next_seconds(second, second, 1) == []


async def test_a_retry_into_the_same_bucket_is_indexed(store: Store) -> None:
    await create(store, new("a"))
    [c] = await claim_second(store, second_of(NOW + 5000))
    await drop_entry(store, second_of(NOW + 5000))
    retry_at = NOW + 65_000  # 60 s later: the same bucket of 60
    ref = SendRef(c.biz_type, c.job_id, c.second, c.claim)
    failed = Outcome(ref, OutcomeKind.RETRY, attempt(1, status=503), retry_at)
    await store.outcomes.record_outcomes([failed], NOW + 5000)
    entries = await store.scan.next_seconds(second_of(retry_at), second_of(retry_at), 1)
    assert [e.second for e in entries] == [second_of(retry_at)], "the retry's second is unindexed"
    loaded = await store.scan.load_second(second_of(retry_at), 1)
    assert [k for k, _ in loaded] == ["orders/a"]


async def test_a_repeated_create_of_a_pending_job_renews_its_entry(store: Store) -> None:
    await create(store, new("a"))
    await drop_entry(store, second_of(NOW + 5000))
    [again] = await create(store, new("a"), now=NOW + 10)
    assert again.status == CreateStatus.EXISTS
    s = second_of(NOW + 5000)
    assert [e.second for e in await store.scan.next_seconds(s, s, 1)] == [s]


async def test_overdue_pending_jobs_are_found_and_their_entries_restored(store: Store) -> None:
    await create(store, new("late", due_at=NOW - 30_000), new("fine", due_at=NOW + 60_000))
    s = second_of(NOW - 30_000)
    await drop_entry(store, s)
    assert await store.sweep.find_overdue_pending(NOW - 10_000, 100) == [s]
    assert await store.sweep.find_overdue_pending(NOW - 40_000, 100) == []
    await store.sweep.restore_seconds([s])
    assert [e.second for e in await store.scan.next_seconds(s, s, 1)] == [s]
    await claim_second(store, s)
    assert await store.sweep.find_overdue_pending(NOW, 100) == [], "claimed is not pending"


async def test_a_release_with_a_version_from_before_a_recreation_misses(store: Store) -> None:
    s = second_of(NOW + 5000)
    await create(store, new("a"))
    [old] = await store.scan.next_seconds(s, s, 1)
    await claim_second(store, s)
    assert await store.scan.release_second(old, 1) is True
    await create(store, new("b"))  # the second's entry is created again
    [fresh] = await store.scan.next_seconds(s, s, 1)
    assert fresh.version != old.version, "a re-created entry reused an old version"
    assert await store.scan.release_second(old, 1) is False, "a late release dropped it"
    assert [e.second for e in await store.scan.next_seconds(s, s, 1)] == [s]


async def test_a_release_below_the_fence_that_loaded_the_second_misses(store: Store) -> None:
    s = second_of(NOW + 5000)
    await create(store, new("a"))
    [entry] = await store.scan.next_seconds(s, s, 1)
    await store.scan.load_second(s, 1)
    await store.scan.load_second(s, 2)  # a newer leader took the second on
    assert await store.scan.release_second(entry, 1) is False
    assert await store.scan.release_second(SecondEntry(s, entry.version), 2) is True


async def test_an_outcome_for_another_claim_changes_nothing(store: Store) -> None:
    await create(store, new("a"))
    [c] = await claim_second(store, second_of(NOW + 5000))
    stale = SendRef(c.biz_type, c.job_id, c.second, "some-older-claim")
    await store.outcomes.record_outcomes(
        [Outcome(stale, OutcomeKind.DEAD, attempt(1, status=400))], NOW + 5000
    )
    job = await store.jobs.get_job("orders", "a")
    assert job is not None and job.state == JobState.DISPATCHED and job.attempts == 0, job


async def test_a_started_callback_cannot_be_cancelled_and_a_duplicate_is_not_sent(
    store: Store,
) -> None:
    await create(store, new("a"), new("b"))
    claimed = await claim_second(store, second_of(NOW + 5000))
    refs = [SendRef(c.biz_type, c.job_id, c.second, c.claim) for c in claimed]
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


async def test_a_daemon_s_fence_stamp_is_not_reported_as_a_write(store: Store) -> None:
    await create(store, new("a", due_at=NOW + 5000))
    seen: list[int] = []

    async def watch() -> None:
        async for s in store.scan.watch_seconds():
            seen.append(s)
            return

    task = asyncio.create_task(watch())
    await asyncio.sleep(0.3)
    await store.scan.load_second(second_of(NOW + 5000), 1)  # stamps the entry
    await create(store, new("b", due_at=NOW + 9000))
    await asyncio.wait_for(task, 10)
    assert seen == [second_of(NOW + 9000)], f"the daemon would be nudged by its own load: {seen}"


async def test_a_send_mark_retried_with_its_token_returns_the_jobs_it_marked(
    store: Store,
) -> None:
    await create(store, new("a"), new("b"))
    claimed = await claim_second(store, second_of(NOW + 5000))
    refs = [SendRef(c.biz_type, c.job_id, c.second, c.claim) for c in claimed]
    first = await store.outcomes.start_sending(refs, "send-1", NOW + 5000)
    assert sorted(first) == ["orders/a", "orders/b"], first
    # The reply was lost: the broker asks again with the same token.
    again = await store.outcomes.start_sending(refs, "send-1", NOW + 5003)
    assert sorted(again) == ["orders/a", "orders/b"], f"a retried mark lost its jobs: {again}"
    assert all(job.sending == "send-1" for job in again.values()), again
    other = await store.outcomes.start_sending(refs, "send-2", NOW + 5004)
    assert other == {}, f"another token must still find the callbacks started: {other}"


async def dead_job(store: Store, job_id: str) -> None:
    await create(store, new(job_id))
    [c] = await claim_second(store, second_of(NOW + 5000))
    ref = SendRef(c.biz_type, c.job_id, c.second, c.claim)
    gone = Outcome(ref, OutcomeKind.DEAD, attempt(1, status=400))
    await store.outcomes.record_outcomes([gone], NOW + 5000)


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
    ref = SendRef(c.biz_type, c.job_id, c.second, c.claim)
    failed = Outcome(ref, OutcomeKind.RETRY, attempt(2, at=NOW + 11_000, status=503), NOW + 70_000)
    await store.outcomes.record_outcomes([failed], NOW + 11_000)
    with pytest.raises(Conflict):  # an attempt since: the replay is long done
        await store.jobs.replay_job("orders", "a", NOW + 12_000)


async def test_a_job_that_was_never_dead_is_not_replayed(store: Store) -> None:
    await create(store, new("a"))
    with pytest.raises(Conflict):
        await store.jobs.replay_job("orders", "a", NOW + 1000)
