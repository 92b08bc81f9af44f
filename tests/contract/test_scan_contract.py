"""The scan loop's port (`store.scan`), on both adapters: the seconds index and its
conditional release (no ABA, a deposed daemon's release misses), claims at the
due moment, the watch, and the partitions a daemon owns."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tests.contract.stores import NOW, STORES, claim_second, create, new
from tests.sim.fake_store import fake_mongo_store
from tests.support import unique_name
from timer_service.dispatch import SecondEntry
from timer_service.model import JobState, second_of
from timer_service.partitions import partition_of
from timer_service.store.base import Store
from timer_service.store.memory import MemoryStore
from timer_service.store.mongo import MongoStore

P = 4


@pytest.fixture(params=STORES)
async def partitioned(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    if request.param == "memory":
        yield MemoryStore(buckets=60, partitions=P)
        return
    if request.param == "mongo-fake":
        mongo = fake_mongo_store(buckets=60, partitions=P)
    else:
        server = request.getfixturevalue("secantus")
        mongo = MongoStore(server.url, unique_name("partitions"), buckets=60, partitions=P)
    await mongo.setup()
    try:
        yield mongo
    finally:
        await mongo.drop_database()
        await mongo.close()


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


async def test_the_daemon_ports_see_only_the_owned_partitions(partitioned: Store) -> None:
    due = NOW + 5000
    ids = [f"j{i}" for i in range(24)]
    await create(partitioned, *(new(j, due) for j in ids))
    by_part = {p: sorted(j for j in ids if partition_of(f"orders/{j}", P) == p) for p in range(P)}
    assert all(by_part.values()), f"24 jobs should reach all {P} partitions: {by_part}"
    second = second_of(due)
    scan = partitioned.scan

    (everything,) = await scan.next_seconds(second, second, 10)
    assert everything.second == second and len(everything.partition_versions()) == P

    scan.own([1, 2])
    (mine,) = await scan.next_seconds(second, second, 10)
    assert [p for p, _ in mine.partition_versions()] == [1, 2]
    loaded = sorted(k.split("/")[1] for k, _ in await scan.load_second(second, 1))
    assert loaded == sorted(by_part[1] + by_part[2])
    claimed = await scan.claim_due(second, due, "c1", 1, NOW)
    assert sorted(c.job_id for c in claimed) == loaded
    assert await scan.release_second(mine, 1) is True
    assert await scan.next_seconds(second, second, 10) == []

    scan.own(None)
    (rest,) = await scan.next_seconds(second, second, 10)
    assert [p for p, _ in rest.partition_versions()] == [0, 3]
    overdue = await partitioned.sweep.find_overdue_pending(due + 1, 100)
    assert overdue == [second]
    scan.own([1])
    assert await partitioned.sweep.find_overdue_pending(due + 1, 100) == []
    stale = await partitioned.reconcile.find_stale_dispatched(NOW + 1, 100)
    assert sorted(j.job_id for j in stale) == by_part[1]


async def test_a_release_misses_when_any_owned_partition_was_written_since(
    partitioned: Store,
) -> None:
    due = NOW + 5000
    second = second_of(due)
    await create(partitioned, *(new(f"j{i}", due) for i in range(24)))
    (entry,) = await partitioned.scan.next_seconds(second, second, 10)
    later = next(f"k{i}" for i in range(100) if partition_of(f"orders/k{i}", P) == 2)
    await create(partitioned, new(later, due))
    assert await partitioned.scan.release_second(entry, 1) is False
    (left,) = await partitioned.scan.next_seconds(second, second, 10)
    assert [p for p, _ in left.partition_versions()] == [2], "only the bumped entry stays"
