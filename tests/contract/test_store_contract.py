"""One contract suite for the job-store port, run against both adapters.

The in-memory store runs everywhere; the MongoDB adapter runs against a real
SecantusDB server (MongoDB wire protocol). Both must give the same answers.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.contract.stores import NOW, attempt, claim_second, create, list_jobs, new
from timer_service.dispatch import Outcome, OutcomeKind, SecondEntry, SendRef
from timer_service.errors import Conflict, NotFound
from timer_service.jobs import CreateStatus, NewJob
from timer_service.model import BizType, Job, JobState, encode_payload, second_of
from timer_service.store.base import Store

# -- biz types ---------------------------------------------------------------------


async def test_biz_type_put_get_list_delete(store: Store) -> None:
    biz = BizType("orders", "http://127.0.0.1:1/cb", created_at=1, updated_at=1)
    assert await store.biz_types.put_biz_type(biz) is True
    assert (
        await store.biz_types.put_biz_type(
            BizType("orders", "http://x/", created_at=9, updated_at=9)
        )
        is False
    )
    got = await store.biz_types.get_biz_type("orders")
    assert got is not None and got.callback_url == "http://x/" and got.created_at == 1
    assert [b.biz_type for b in await store.biz_types.list_biz_types()] == ["orders"]
    assert set(await store.biz_types.get_biz_types(["orders", "nope"])) == {"orders"}
    await create(store, new("a"))
    with pytest.raises(Conflict):
        await store.biz_types.delete_biz_type("orders")
    await store.jobs.cancel_job("orders", "a", NOW)
    assert await store.biz_types.delete_biz_type("orders") is True
    assert await store.biz_types.delete_biz_type("orders") is False


# -- create, idempotency ------------------------------------------------------------


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


async def test_get_unknown_is_none(store: Store) -> None:
    assert await store.jobs.get_job("orders", "nope") is None


# -- cancel, reschedule, replay --------------------------------------------------------


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
    ref = SendRef(c.biz_type, c.job_id, c.second, c.claim)
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


# -- listing -------------------------------------------------------------------------


async def test_list_pages_and_filters(store: Store) -> None:
    await create(store, *(new(f"j{i:03}") for i in range(25)))
    await store.jobs.create_jobs([NewJob("other", "x", NOW, "null")], NOW)
    await store.jobs.cancel_job("orders", "j003", NOW)
    seen, cursor = [], None
    while True:
        page, cursor = await list_jobs(store, "orders", None, 10, cursor)
        seen.extend(j.job_id for j in page)
        if cursor is None:
            break
    assert seen == [f"j{i:03}" for i in range(25)]
    cancelled, cur = await list_jobs(store, "orders", JobState.CANCELLED, 10, None)
    assert [j.job_id for j in cancelled] == ["j003"] and cur is None
    everything, _ = await list_jobs(store, None, None, 1000, None)
    assert len(everything) == 26


async def test_list_by_state_pages_in_key_order_across_buckets(store: Store) -> None:
    # Due times a second apart spread the jobs over buckets; every third is cancelled.
    await create(store, *(new(f"j{i:03}", due_at=NOW + 5000 + i * 1000) for i in range(40)))
    await store.jobs.create_jobs([NewJob("orders2", "j000", NOW + 5000, "null")], NOW)
    for i in range(0, 40, 3):
        await store.jobs.cancel_job("orders", f"j{i:03}", NOW)
    for state, expected in [
        (JobState.CANCELLED, [f"j{i:03}" for i in range(0, 40, 3)]),
        (JobState.PENDING, [f"j{i:03}" for i in range(40) if i % 3]),
    ]:
        seen, cursor = [], None
        while True:
            page, cursor = await list_jobs(store, "orders", state, 4, cursor)
            assert len(page) <= 4
            seen.extend(j.job_id for j in page)
            assert all(j.biz_type == "orders" and j.state == state for j in page)
            if cursor is None:
                break
        assert seen == expected
    pending_everywhere, _ = await list_jobs(store, None, JobState.PENDING, 100, None)
    assert len(pending_everywhere) == 27
    assert pending_everywhere[-1].biz_type == "orders2"


async def test_list_by_state_with_most_jobs_in_one_bucket(store: Store) -> None:
    # 30 jobs due in one second (one bucket) and 10 spread out, interleaved in key
    # order: a page must drain the crowded bucket in several reads without skipping.
    crowded = [new(f"k{i:03}", due_at=NOW + 5000) for i in range(0, 60, 2)]
    spread = [new(f"k{i:03}", due_at=NOW + 7000 + i * 1000) for i in range(1, 20, 2)]
    await create(store, *crowded, *spread)
    await create(store, new("z-delivered-later", due_at=NOW + 5000))
    expected = sorted(j.job_id for j in crowded + spread)
    for limit in (1, 7, 100):
        seen, cursor = [], None
        while True:
            page, cursor = await list_jobs(store, "orders", JobState.PENDING, limit, cursor)
            assert len(page) <= limit
            seen.extend(j.job_id for j in page)
            if cursor is None:
                break
        assert seen == [*expected, "z-delivered-later"], f"limit {limit}"
    none, cursor = await list_jobs(store, "orders", JobState.DEAD, 10, None)
    assert none == [] and cursor is None


# -- the daemon's operations ---------------------------------------------------------


async def test_seconds_index_and_conditional_release(store: Store) -> None:
    s = second_of(NOW + 5000)
    await create(store, new("a", due_at=NOW + 5000), new("b", due_at=NOW + 8000))
    entries = await store.scan.next_seconds(s, s + 10, 10)
    assert [e.second for e in entries] == [s, s + 3]
    assert await store.scan.next_seconds(s + 1, s + 2, 10) == []
    entry = entries[0]
    assert [k for k, _ in await store.scan.load_second(s, 1)] == ["orders/a"]
    await create(store, new("late", due_at=NOW + 5500))  # written after the daemon read v
    assert await store.scan.release_second(entry, 1) is False  # so the delete misses
    [fresh] = await store.scan.next_seconds(s, s, 1)
    assert fresh.version != entry.version
    await claim_second(store, s)
    assert await store.scan.release_second(fresh, 1) is True
    assert [e.second for e in await store.scan.next_seconds(s, s + 10, 10)] == [s + 3]
    assert await store.scan.release_second(SecondEntry(s, "gone"), 1) is True  # already gone


async def test_claim_is_conditional_and_fenced(store: Store) -> None:
    s = second_of(NOW + 5000)
    await create(store, new("a", due_at=NOW + 5100), new("b", due_at=NOW + 5900))
    first = await store.scan.claim_due(s, NOW + 5500, "c1", 2, NOW)
    assert [(c.job_id, c.attempt, c.claim, c.next_attempt_at) for c in first] == [
        ("a", 1, "c1", NOW + 5100)
    ]
    assert await store.scan.claim_due(s, NOW + 5500, "c2", 2, NOW) == []  # nothing pending left
    assert await store.scan.claim_due(s, NOW + 5999, "c3", 1, NOW) != []  # b never claimed: ok
    job = await store.jobs.get_job("orders", "a")
    assert job is not None and job.state == JobState.DISPATCHED and job.fence == 2


async def test_a_bounded_claim_takes_the_earliest_and_leaves_the_rest(store: Store) -> None:
    """A herd is claimed `limit` jobs per round trip, earliest first, ties by key."""
    s = second_of(NOW + 5000)
    same = NOW + 5100  # five jobs due in the same millisecond: the key breaks the tie
    await create(
        store,
        new("late", due_at=NOW + 5900),
        *(new(f"t{i}", due_at=same) for i in (3, 1, 4, 0, 2)),
        new("first", due_at=NOW + 5050),
    )

    async def claim(name: str, limit: int | None) -> list[str]:
        got = await store.scan.claim_due(s, NOW + 5999, name, 1, NOW, limit)
        return sorted(c.job_id for c in got)

    assert await claim("c1", 3) == ["first", "t0", "t1"]
    assert await claim("c2", 3) == ["t2", "t3", "t4"]
    assert await claim("c3", 3) == ["late"]  # fewer than the limit: all that is left
    assert await claim("c4", 3) == []
    job = await store.jobs.get_job("orders", "t3")
    assert job is not None and job.state == JobState.DISPATCHED and job.claim == "c2"


async def test_stale_dispatched_and_reclaim(store: Store) -> None:
    s = second_of(NOW + 5000)
    await create(store, new("a"), new("b"))
    claimed = await store.scan.claim_due(s, NOW + 6000, "c1", 1, NOW)
    stale = await store.reconcile.find_stale_dispatched(NOW + 1, 100)
    assert sorted(j.job_id for j in stale) == ["a", "b"]
    assert await store.reconcile.find_stale_dispatched(NOW, 100) == []
    again = await store.reconcile.reclaim(stale, "c2", 1, NOW + 10)
    assert sorted(c.job_id for c in again) == ["a", "b"] and {c.claim for c in again} == {"c2"}
    assert (
        await store.reconcile.reclaim(stale, "c3", 1, NOW + 20) == []
    )  # old claim no longer matches
    old_refs = [SendRef(c.biz_type, c.job_id, c.second, c.claim) for c in claimed]
    assert await store.outcomes.start_sending(old_refs, "t", NOW + 30) == {}  # stale: dropped


async def test_stale_dispatched_filters_and_orders_by_claim_time(store: Store) -> None:
    s = second_of(NOW + 5000)
    await create(store, new("a"), NewJob("held", "b", NOW + 5000, encode_payload(None)))
    await store.scan.claim_due(s, NOW + 6000, "c1", 1, NOW)
    await create(store, new("c"))
    await store.scan.claim_due(s, NOW + 6000, "c2", 1, NOW + 5)

    def ids(jobs: list[Job]) -> list[str]:
        return [j.job_id for j in jobs]

    found = ids(await store.reconcile.find_stale_dispatched(NOW + 10, 100))
    assert found[-1] == "c" and sorted(found) == ["a", "b", "c"]  # oldest claim first
    held_back = {"held": NOW}  # a live broker holds what of "held" was claimed from NOW on
    skipped = await store.reconcile.find_stale_dispatched(
        NOW + 10, 100, claimed_before_by_biz=held_back
    )
    assert ids(skipped)[-1] == "c" and sorted(ids(skipped)) == ["a", "c"]  # oldest first
    assert ids(
        await store.reconcile.find_stale_dispatched(NOW + 10, 1, claimed_before_by_biz=held_back)
    ) == ["a"]


async def test_watch_yields_bumped_seconds(store: Store) -> None:
    seen: list[int] = []

    async def watch() -> None:
        async for s in store.scan.watch_seconds():
            seen.append(s)
            return

    task = asyncio.create_task(watch())
    await asyncio.sleep(0.3)
    await create(store, new("a", due_at=NOW + 12_000))
    await asyncio.wait_for(task, 10)
    assert seen == [second_of(NOW + 12_000)]


# -- outcomes ------------------------------------------------------------------------


async def test_outcomes_delivered_retry_dead(store: Store) -> None:
    s = second_of(NOW + 5000)
    await create(store, new("ok"), new("retry"), new("dead"))
    claimed = {c.job_id: c for c in await claim_second(store, s)}
    ref = {k: SendRef(c.biz_type, c.job_id, c.second, c.claim) for k, c in claimed.items()}
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


async def test_count_jobs_per_biz_type_and_state(store: Store) -> None:
    s = second_of(NOW + 5000)
    await create(store, new("ok"), new("dead"), new("held"), new("later", due_at=NOW + 60_000))
    await create(store, NewJob("billing", "b1", NOW + 90_000, encode_payload(None)))
    await create(store, new("gone", due_at=NOW + 70_000))
    await store.jobs.cancel_job("orders", "gone", NOW)
    claimed = {c.job_id: c for c in await claim_second(store, s)}
    ref = {k: SendRef(c.biz_type, c.job_id, c.second, c.claim) for k, c in claimed.items()}
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


async def test_outcome_for_a_cancelled_job_keeps_it_cancelled(store: Store) -> None:
    await create(store, new("a"), new("b"))
    claimed = {c.job_id: c for c in await claim_second(store, second_of(NOW + 5000))}
    await store.jobs.cancel_job("orders", "a", NOW)
    await store.jobs.cancel_job("orders", "b", NOW)
    refs = {k: SendRef(c.biz_type, c.job_id, c.second, c.claim) for k, c in claimed.items()}
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


async def test_a_burst_of_retries_moves_in_groups_and_skips_a_job_cancelled_meanwhile(
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
                SendRef(c.biz_type, c.job_id, c.second, c.claim),
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


# -- lease, pointer, brokers ------------------------------------------------------------


async def test_lease_takeover_increases_fence(store: Store) -> None:
    leases, name = store.leases, ["daemon-p0"]
    t1 = await leases.next_fence(0)
    assert await leases.acquire_leases(name, "d1", t1, 1000, NOW) == name
    t_other = await leases.next_fence(t1)
    assert await leases.acquire_leases(name, "d2", t_other, 1000, NOW + 500) == []
    assert await leases.acquire_leases(name, "d1", t1, 1000, NOW + 500) == name
    assert await leases.renew_leases(name, "d1", t1, 1000, NOW + 900) == name
    t2 = await leases.next_fence(t_other)
    assert t2 > t1
    assert await leases.acquire_leases(name, "d2", t2, 1000, NOW + 2000) == name
    assert await leases.renew_leases(name, "d1", t1, 1000, NOW + 2001) == []
    await leases.release_leases(name, "d2", t2)
    t3 = await leases.next_fence(t2)
    assert t3 > t2
    assert await leases.acquire_leases(name, "d1", t3, 1000, NOW + 2002) == name


async def test_pointer_is_fenced(store: Store) -> None:
    pointers, p0 = store.pointers, ["p0"]
    assert await pointers.load_pointers(p0) == {}
    assert await pointers.save_pointers(p0, 100, 2) is True
    assert await pointers.save_pointers(p0, 90, 1) is False
    assert await pointers.load_pointers(p0) == {"p0": 100}
    assert await pointers.save_pointers(p0, 101, 3) is True
    assert await pointers.load_pointers(p0) == {"p0": 101}


async def test_a_foreign_cursor_stays_within_the_biz_type(store: Store) -> None:
    await create(store, new("a"))
    await store.jobs.create_jobs([NewJob("aaa", "x", NOW, "null")], NOW)
    page, _ = await list_jobs(store, "orders", None, 10, "aaa/")
    assert [(j.biz_type, j.job_id) for j in page] == [("orders", "a")]


async def test_concurrent_creates_answer_with_the_stored_job(store: Store) -> None:
    results = await asyncio.gather(*(create(store, new("same", payload=7)) for _ in range(20)))
    stored = await store.jobs.get_job("orders", "same")
    assert stored is not None
    assert {r[0].job.created_at for r in results} == {stored.created_at}
