"""Daemons sharing P partitions, driven by hand: FakeClock + one MemoryStore's data,
each daemon with its own adapter (as each process has), no sleeping."""

from __future__ import annotations

import io
from contextlib import redirect_stderr

import pytest

from tests.unit.daemon_harness import BIZ, Harness, create, run_until
from timer_service.clock import FakeClock
from timer_service.errors import LayoutMismatch
from timer_service.model import second_of
from timer_service.partitions import (
    fair_share,
    lease_name,
    partition_of,
    partition_of_slot,
    second_of_slot,
    slot,
)
from timer_service.runtime import LAYOUT_MISMATCH_EXIT, run_until_signal
from timer_service.store.memory import MemoryStore
from timer_service.store.mongo.schema import check_layout
from timer_service.store.recording import recording

P = 8
TTL_MS = 3000


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore(buckets=60, partitions=P)


def daemon(store: MemoryStore, clock: FakeClock) -> Harness:
    return Harness(store.sibling(), clock, partitions=P, lease_ttl_ms=TTL_MS)


def owned(*harnesses: Harness) -> list[int]:
    return [len(h.daemon.partitions_owned) for h in harnesses]


def gauge(h: Harness, name: str) -> float | None:
    return h.daemon.metrics.registry.get_sample_value(name)


# -- pure parts ------------------------------------------------------------------------


def test_partition_is_a_stable_hash_of_the_identity() -> None:
    # crc32("orders/o-1") = 0xA2AA4EAE: the same in every process and every version.
    assert partition_of("orders/o-1", 8) == 0xA2AA4EAE % 8 == 6
    assert partition_of("orders/o-1", 1) == 0
    spread = {partition_of(f"orders/o-{i}", P) for i in range(200)}
    assert spread == set(range(P)), f"200 keys should reach all {P} partitions, got {spread}"


def test_slot_keeps_partition_zero_as_the_plain_second() -> None:
    assert slot(0, 1_767_225_600) == 1_767_225_600
    at = slot(5, 1_767_225_600)
    assert (partition_of_slot(at), second_of_slot(at)) == (5, 1_767_225_600)
    assert slot(1, 0) > slot(0, 2**40), "a partition's seconds stay together"


def test_fair_share_is_the_ceiling() -> None:
    assert [fair_share(8, n) for n in (1, 2, 3, 4, 5, 9)] == [8, 4, 3, 2, 2, 1]


# -- assignment ------------------------------------------------------------------------


async def test_a_single_daemon_owns_every_partition_and_fires_them_all(
    store: MemoryStore, clock: FakeClock
) -> None:
    h = daemon(store, clock)
    start = clock.now_ms()
    due = {f"j{i}": start + 2000 + i * 37 for i in range(80)}
    await create(store, start, *due.items())
    await run_until(start + 8000, h)
    assert owned(h) == [P]
    assert gauge(h, "timer_daemon_partitions_owned") == P
    assert gauge(h, "timer_daemon_leader") == 1
    for job_id, due_at in due.items():
        times = h.queue.times(job_id)
        assert len(times) == 1 and times[0] <= due_at, f"{job_id}: {times} (due {due_at})"


async def test_two_daemons_split_the_partitions_and_each_job_goes_out_once(
    store: MemoryStore, clock: FakeClock
) -> None:
    a, b = daemon(store, clock), daemon(store, clock)
    start = clock.now_ms()
    await run_until(start + 2 * TTL_MS, a, b, max_step_ms=200)
    assert owned(a, b) == [4, 4], f"expected a 4/4 split, got {owned(a, b)}"
    assert not a.daemon.partitions_owned & b.daemon.partitions_owned
    assert a.daemon.fence != b.daemon.fence

    now = clock.now_ms()
    due = {f"j{i}": now + 1500 + i * 50 for i in range(100)}
    await create(store, now, *due.items())
    await run_until(now + 10_000, a, b, max_step_ms=200)
    for job_id in due:
        times = a.queue.times(job_id) + b.queue.times(job_id)
        assert len(times) == 1, f"{job_id}: expected one publish, got {times}"
    assert a.queue.at and b.queue.at, "both daemons should have fired their share"
    for h in (a, b):
        for _, job in h.queue.at:
            part = partition_of(f"{BIZ}/{job.job_id}", P)
            assert part in h.daemon.partitions_owned, f"{job.job_id} (p{part}) by a non-owner"


async def test_a_newcomer_takes_its_share_from_the_others_with_no_job_lost(
    store: MemoryStore, clock: FakeClock
) -> None:
    a, b = daemon(store, clock), daemon(store, clock)
    start = clock.now_ms()
    await run_until(start + 2 * TTL_MS, a, b, max_step_ms=200)
    now = clock.now_ms()
    due = {f"j{i}": now + 500 + i * 100 for i in range(150)}  # across the whole handover
    await create(store, now, *due.items())
    c = daemon(store, clock)
    await run_until(now + 16_000, a, b, c, max_step_ms=100)
    shares = owned(a, b, c)
    assert sum(shares) == P and max(shares) <= fair_share(P, 3), f"got {shares}"
    assert min(shares) >= 2, f"the newcomer should own its share, got {shares}"
    for job_id, due_at in due.items():
        times = a.queue.times(job_id) + b.queue.times(job_id) + c.queue.times(job_id)
        assert times, f"{job_id} was never published"
        assert min(times) <= due_at, f"{job_id}: first publish {min(times)} after due {due_at}"


async def test_a_handover_republishes_nothing_the_old_owner_published(
    store: MemoryStore, clock: FakeClock
) -> None:
    # The newcomer republishes at once the open claim rounds of the partitions it takes
    # (a previous owner's claims never confirmed). The old owner closes its confirmed
    # rounds before it hands a lease back, so that none of them looks unconfirmed.
    a, b = daemon(store, clock), daemon(store, clock)
    start = clock.now_ms()
    await run_until(start + 2 * TTL_MS, a, b, max_step_ms=200)
    now = clock.now_ms()
    due = {f"j{i}": now + 500 + i * 50 for i in range(300)}  # across the whole handover
    await create(store, now, *due.items())
    c = daemon(store, clock)
    await run_until(now + 20_000, a, b, c, max_step_ms=100)
    assert min(owned(a, b, c)) >= 2, owned(a, b, c)
    twice = {
        job_id: times
        for job_id in due
        if len(times := a.queue.times(job_id) + b.queue.times(job_id) + c.queue.times(job_id)) != 1
    }
    assert not twice, f"published other than once: {twice}"


async def test_a_dead_daemons_partitions_are_taken_within_two_ttls(
    store: MemoryStore, clock: FakeClock
) -> None:
    a, b = daemon(store, clock), daemon(store, clock)
    start = clock.now_ms()
    await run_until(start + 2 * TTL_MS, a, b, max_step_ms=200)
    assert owned(a, b) == [4, 4]
    died = clock.now_ms()
    due = {f"j{i}": died + 500 + i * 100 for i in range(80)}
    await create(store, died, *due.items())
    # A stops (kill -9: no release); only B runs on.
    await run_until(died + 2 * TTL_MS, b, max_step_ms=100)
    assert owned(b) == [P], f"B should own all {P} within 2 x TTL, owns {owned(b)}"
    await run_until(died + 20_000, b, max_step_ms=200)
    for job_id in due:
        assert a.queue.times(job_id) + b.queue.times(job_id), f"{job_id} lost"


async def test_surplus_is_handed_back_only_after_its_claims_are_published(
    store: MemoryStore, clock: FakeClock
) -> None:
    a = daemon(store, clock)
    start = clock.now_ms()
    await run_until(start + TTL_MS, a)
    assert owned(a) == [P]
    published: list[int] = []
    drained = a.daemon.publisher.drain

    async def recording_drain(timeout_s: float | None = None) -> bool:
        published.append(len(a.queue.at))
        return await drained(timeout_s)

    a.daemon.publisher.drain = recording_drain  # type: ignore[method-assign]
    b = daemon(store, clock)
    await run_until(clock.now_ms() + 3 * TTL_MS, a, b, max_step_ms=200)
    assert owned(a, b) == [4, 4]
    assert published, "A must drain its publisher before giving leases back"


# -- fencing per partition ---------------------------------------------------------------


async def test_a_partition_taken_over_is_fenced_off_from_its_old_holder(
    store: MemoryStore, clock: FakeClock
) -> None:
    a = daemon(store, clock)
    start = clock.now_ms()
    await run_until(start + TTL_MS, a)
    old_fence = a.daemon.fence
    assert old_fence is not None
    # Someone else takes partition 3 with a higher fence (A's renewal of it then fails).
    newer = await store.leases.next_fence(old_fence)
    store.state.leases[lease_name(3)].expires_at = 0
    taken = await store.leases.acquire_leases(
        [lease_name(3)], "intruder", newer, 60_000, clock.now_ms()
    )
    assert taken == [lease_name(3)]
    now = clock.now_ms()
    ids = [f"j{i}" for i in range(200)]
    in_3 = [j for j in ids if partition_of(f"{BIZ}/{j}", P) == 3]
    await create(store, now, *((j, now + 2000) for j in ids))
    await run_until(now + 6000, a, max_step_ms=200)
    assert 3 not in a.daemon.partitions_owned
    for job_id in in_3:
        assert a.queue.times(job_id) == [], f"{job_id} of partition 3 published by A"
    others = [j for j in ids if j not in in_3]
    assert all(a.queue.times(j) for j in others), "A's other partitions must go on"
    # What the new holder claims, a claim or reclaim under A's lower fence never takes.
    job = await store.jobs.get_job(BIZ, in_3[0])
    assert job is not None and job.next_attempt_at is not None
    second, now = second_of(job.next_attempt_at), clock.now_ms()
    fresh, stale = store.sibling(), store.sibling()
    fresh.scan.own([3])
    stale.scan.own([3])
    won = await fresh.scan.claim_due(second, now + 5000, "c-new", newer, now)
    assert in_3[0] in {c.job_id for c in won}
    claimed = await store.jobs.get_job(BIZ, in_3[0])
    assert claimed is not None
    assert await stale.reconcile.reclaim([claimed], "c-old", old_fence, now) == [], (
        "a lower fence must not take a job a higher fence claimed"
    )


# -- the partition count is fixed ----------------------------------------------------------


def test_another_partition_count_is_refused_naming_both() -> None:
    with pytest.raises(LayoutMismatch) as refused:
        check_layout({"buckets": 60, "partitions": 8}, buckets=60, partitions=4)
    message = str(refused.value)
    assert "TIMER_PARTITIONS=8" in message and "TIMER_PARTITIONS=4" in message, message
    with pytest.raises(LayoutMismatch, match="TIMER_PARTITIONS=1"):
        check_layout({"buckets": 60}, buckets=60, partitions=8)  # set up before partitions
    check_layout({"buckets": 60}, buckets=60, partitions=1)


def test_a_layout_mismatch_exits_non_zero_with_one_line() -> None:
    async def refuses(_: object) -> None:
        raise LayoutMismatch("the store was initialised with TIMER_PARTITIONS=8; this has 4")

    err = io.StringIO()
    with redirect_stderr(err):
        code = run_until_signal(refuses)
    assert code == LAYOUT_MISMATCH_EXIT != 0
    lines = err.getvalue().splitlines()
    assert len(lines) == 1 and "TIMER_PARTITIONS=8" in lines[0], lines


# -- cost ------------------------------------------------------------------------------------


async def idle_calls(partitions: int, daemons: int) -> dict[str, int]:
    """Store calls of `daemons` idle daemons over a minute, with 2,000 jobs parked a year
    ahead and the partitions settled among them."""
    clock = FakeClock(1_767_225_600_000)
    data = MemoryStore(buckets=60, partitions=partitions)
    start = clock.now_ms()
    year_ms = 365 * 86_400_000
    await create(data, start, *((f"p{i}", start + year_ms + i * 10) for i in range(2000)))
    stores = [recording(data.sibling()) for _ in range(daemons)]
    hs = [Harness(s, clock, partitions=partitions, lease_ttl_ms=TTL_MS) for s in stores]  # type: ignore[arg-type]
    await run_until(start + 5 * TTL_MS, *hs, max_step_ms=200)
    assert sum(owned(*hs)) == partitions
    before = [dict(s.ops) for s in stores]
    await run_until(start + 5 * TTL_MS + 60_000, *hs, max_step_ms=60_000)
    calls: dict[str, int] = {}
    for s, b in zip(stores, before, strict=True):
        for name, count in s.ops.items():
            if name != "own" and count > b.get(name, 0):
                calls[name] = calls.get(name, 0) + count - b.get(name, 0)
    return calls


@pytest.mark.parametrize("daemons", [1, 2])
async def test_idle_store_load_does_not_grow_with_the_partitions(daemons: int) -> None:
    # As many partitions as daemons (each daemon works) against P = 8: the same load.
    one, eight = await idle_calls(daemons, daemons), await idle_calls(P, daemons)
    print(f"\nidle store calls in 60 s, {daemons} daemon(s): P={daemons} {one}; P={P} {eight}")
    assert eight.get("load_second", 0) == 0 and eight.get("claim_due", 0) == 0, eight
    # Per tick (ttl / 3) one renew and one table read per daemon, whatever P is.
    ticks = daemons * 60_000 // (TTL_MS // 3) + 2 * daemons
    assert eight.get("renew_leases", 0) <= ticks and eight.get("list_leases", 0) <= ticks, eight
    assert sum(eight.values()) <= sum(one.values()) * 1.2 + 5, (
        f"idle calls at P={P}: {sum(eight.values())}, at P={daemons}: {sum(one.values())}"
    )
