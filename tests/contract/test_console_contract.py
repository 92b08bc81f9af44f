"""The console's port (`store.console`), on both adapters: search and its pages,
counts, labels, bulk replay and cancel under their guards."""

from __future__ import annotations

from tests.contract.stores import NOW, attempt, claim_second, create, list_jobs, new
from timer_service import jobs as machine
from timer_service.dispatch import Outcome, OutcomeKind, SendRef
from timer_service.jobs import CreateStatus, NewJob
from timer_service.model import Job, JobState, second_of
from timer_service.search import JobFilter
from timer_service.store.base import Store


async def make_dead(store: Store, *job_ids: str, second: int) -> None:
    """Claim `second` and let these jobs of it die (an HTTP 400 at NOW + 5000)."""
    claimed = await claim_second(store, second, claim=f"c{second}")
    outcomes = [
        Outcome(
            SendRef(c.biz_type, c.job_id, c.second, c.claim, bucket=c.bucket),
            OutcomeKind.DEAD,
            attempt(1, at=c.due_at + 7, status=400),
        )
        for c in claimed
        if c.biz_type == "orders" and c.job_id in job_ids
    ]
    await store.outcomes.record_outcomes(outcomes, NOW)


async def mixed_jobs(store: Store) -> None:
    """40 jobs spread over 40 seconds (so over buckets): every 4th dead, labelled by
    tenant (i % 3) and, for the even ones, a region; and 5 of another biz type, due in
    the first second (and so claimed with j00: dispatched)."""
    news = []
    for i in range(40):
        labels = [("tenant", f"t{i % 3}")] + ([("region", "eu")] if i % 2 == 0 else [])
        news.append(new(f"j{i:02d}", due_at=NOW + 1000 * (i + 1), labels=tuple(sorted(labels))))
    news += [
        NewJob("billing", f"j{i:02d}", NOW + 1000, "null", labels=(("tenant", "t0"),))
        for i in range(5)
    ]
    await create(store, *news)
    for i in range(0, 40, 4):
        await make_dead(store, f"j{i:02d}", second=second_of(NOW + 1000 * (i + 1)))


def expected_ids(where: JobFilter, jobs: list[Job]) -> list[str]:
    return [j.key for j in sorted(jobs, key=lambda j: j.key) if where.matches(j)]


async def all_pages(store: Store, where: JobFilter, limit: int) -> list[str]:
    keys: list[str] = []
    cursor = None
    for _ in range(100):
        page, cursor = await store.console.search_jobs(where, limit, cursor)
        assert len(page) <= limit, f"a page of {len(page)} over the limit {limit}"
        keys += [j.key for j in page]
        if cursor is None:
            return keys
    raise AssertionError("the cursor never ended")


FILTERS = [
    JobFilter(),
    JobFilter(biz_type="orders"),
    JobFilter(biz_type="orders", states=frozenset({JobState.DEAD})),
    JobFilter(biz_type="orders", states=frozenset({JobState.PENDING, JobState.DISPATCHED})),
    JobFilter(biz_type="orders", labels=(("tenant", "t1"),)),
    JobFilter(biz_type="orders", labels=(("region", "eu"), ("tenant", "t0"))),
    JobFilter(biz_type="orders", states=frozenset({JobState.DEAD}), labels=(("region", "eu"),)),
    JobFilter(biz_type="orders", job_id_prefix="j1"),
    JobFilter(biz_type="orders", states=frozenset({JobState.DEAD}), job_id_prefix="j2"),
    JobFilter(biz_type="orders", due_after=NOW + 10_000, due_before=NOW + 20_000),
    JobFilter(biz_type="orders", states=frozenset({JobState.PENDING}), due_after=NOW + 30_000),
    JobFilter(labels=(("tenant", "t0"),)),
    JobFilter(states=frozenset({JobState.DEAD})),
    JobFilter(biz_type="nobody"),
]


async def test_labels_round_trip_and_a_repeat_compares_them(store: Store) -> None:
    labels = (("region", "eu-1"), ("tenant", "acme:42"))
    [made] = await create(store, new("a", labels=labels))
    assert made.status == CreateStatus.CREATED and made.job.labels == labels
    got = await store.jobs.get_job("orders", "a")
    assert got is not None and got.labels == labels, f"expected {labels}, got {got}"
    [same] = await create(store, new("a", labels=labels))
    assert same.status == CreateStatus.EXISTS, same
    [other] = await create(store, new("a", labels=(("region", "eu-1"),)))
    assert other.status == CreateStatus.CONFLICT, other
    [plain] = await create(store, new("b"))
    listed, _ = await list_jobs(store, "orders", None, 10, None)
    assert [(j.job_id, j.labels) for j in listed] == [("a", labels), ("b", ())], listed
    assert plain.job.labels == ()


async def test_a_repeat_in_one_batch_compares_labels(store: Store) -> None:
    results = await create(
        store, new("a", labels=(("k", "1"),)), new("a", labels=(("k", "1"),)), new("a")
    )
    got = [r.status for r in results]
    expected = [CreateStatus.CREATED, CreateStatus.EXISTS, CreateStatus.CONFLICT]
    assert got == expected, f"expected {expected}, got {got}"


async def test_search_pages_give_exactly_the_matching_jobs_in_key_order(store: Store) -> None:
    await mixed_jobs(store)
    everything, _ = await list_jobs(store, None, None, 1000, None)
    assert len(everything) == 45
    for where in FILTERS:
        expected = expected_ids(where, everything)
        for limit in (1, 3, 1000):
            got = await all_pages(store, where, limit)
            assert got == expected, f"{where}, limit {limit}: expected {expected}, got {got}"


async def test_count_matching_counts_what_the_filter_selects(store: Store) -> None:
    await mixed_jobs(store)
    everything, _ = await list_jobs(store, None, None, 1000, None)
    for where in [*FILTERS, JobFilter(biz_type="orders", idle=True)]:
        expected = len(expected_ids(where, everything))
        got = await store.console.count_matching(where)
        assert got == expected, f"{where}: expected {expected}, got {got}"


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


async def test_a_foreign_cursor_stays_within_the_biz_type(store: Store) -> None:
    await create(store, new("a"))
    await store.jobs.create_jobs([NewJob("aaa", "x", NOW, "null")], NOW)
    page, _ = await list_jobs(store, "orders", None, 10, "aaa/")
    assert [(j.biz_type, j.job_id) for j in page] == [("orders", "a")]


async def test_apply_changes_replays_and_cancels_under_their_guards(store: Store) -> None:
    await mixed_jobs(store)
    dead, _ = await store.console.search_jobs(
        JobFilter(biz_type="orders", states=frozenset({JobState.DEAD})), 100, None
    )
    assert len(dead) == 10
    later = NOW + 60_000
    replays = [(job, machine.replay(job, later)) for job in dead]
    done = await store.console.apply_changes(replays, later)
    assert sorted(j.key for j in done) == sorted(j.key for j in dead)
    for job in done:
        got = await store.jobs.get_job(job.biz_type, job.job_id)
        assert got is not None and got.state == JobState.PENDING, got
        assert got.next_attempt_at == later and got.attempts == 1 and len(got.history) == 1
    stale = [(job, machine.replay(job, later + 1)) for job in dead]  # read before the first
    again = await store.console.apply_changes(stale, later + 1)
    assert again == [], f"a change decided on a stale read must miss, got {again}"
    # A claim for the replayed jobs' second finds them (they are indexed there).
    claimed = await store.scan.claim_due(second_of(later), later, "again", 2, later)
    assert sorted(f"{c.biz_type}/{c.job_id}" for c in claimed) == sorted(j.key for j in dead)

    pending, _ = await store.console.search_jobs(
        JobFilter(biz_type="orders", states=frozenset({JobState.PENDING})), 100, None
    )
    cancels = [(job, change) for job in pending if (change := machine.cancel(job, later))]
    done = await store.console.apply_changes(cancels, later)
    assert len(done) == len(pending) == 30, (len(done), len(pending))
    assert all(j.state == JobState.CANCELLED for j in done)
    left = await store.console.count_matching(
        JobFilter(biz_type="orders", states=frozenset({JobState.PENDING}))
    )
    assert left == 0, f"expected no pending job left, got {left}"
    billing = await store.console.count_matching(JobFilter(biz_type="billing"))
    assert billing == 5, "another biz type is untouched"


async def test_a_cancel_misses_a_job_whose_callback_started(store: Store) -> None:
    await create(store, new("a"), new("b"))
    claimed = await claim_second(store, second_of(NOW + 5000))
    jobs = {j.job_id: j for j in (await list_jobs(store, "orders", None, 10, None))[0]}
    refs = [
        SendRef(c.biz_type, c.job_id, c.second, c.claim, bucket=c.bucket)
        for c in claimed
        if c.job_id == "a"
    ]
    await store.outcomes.start_sending(refs, "send-1", NOW)
    changes = [(job, machine.cancel(job, NOW)) for job in jobs.values()]  # read before
    done = await store.console.apply_changes([(j, c) for j, c in changes if c], NOW)
    assert [j.job_id for j in done] == ["b"], f"expected only b cancelled, got {done}"
    a = await store.jobs.get_job("orders", "a")
    assert a is not None and a.state == JobState.DISPATCHED, a


async def test_counts_by_state_and_recent_attempts(store: Store) -> None:
    await mixed_jobs(store)
    counts = await store.console.count_by_state("orders")
    expected = {("orders", JobState.PENDING): 30, ("orders", JobState.DEAD): 10}
    assert counts == expected, f"expected {expected}, got {counts}"
    every = await store.console.count_by_state(None)
    assert every == {**expected, ("billing", JobState.DISPATCHED): 5}, every
    recent = await store.console.recent_attempts(NOW + 21_000, "orders")
    got = sorted((r.due_at, r.attempt.at, r.attempt.status_code) for r in recent)
    want = [(NOW + 1000 * (i + 1), NOW + 1000 * (i + 1) + 7, 400) for i in range(20, 40, 4)]
    assert got == want, f"expected {want}, got {got}"
    assert await store.console.recent_attempts(NOW, "billing") == []
