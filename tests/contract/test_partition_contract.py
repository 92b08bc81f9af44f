"""The partition parts of the store ports, against both adapters: the daemon's lease
set under one fence, per-partition pointers, and dispatch scoped to owned partitions."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.contract.stores import NOW, create, new
from tests.support import unique_name
from timer_service.model import second_of
from timer_service.partitions import partition_of
from timer_service.store.base import Store
from timer_service.store.memory import MemoryStore
from timer_service.store.mongo import MongoStore

P = 4


@pytest.fixture(params=["memory", pytest.param("mongo", marks=pytest.mark.integration)])
async def partitioned(request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    if request.param == "memory":
        yield MemoryStore(buckets=60, partitions=P)
        return
    server = request.getfixturevalue("secantus")
    mongo = MongoStore(server.url, unique_name("partitions"), buckets=60, partitions=P)
    await mongo.setup()
    try:
        yield mongo
    finally:
        await mongo.drop_database()
        await mongo.close()


# -- leases -------------------------------------------------------------------------------


async def test_fences_only_grow_and_start_above_what_is_asked(store: Store) -> None:
    first = await store.leases.next_fence(0)
    second = await store.leases.next_fence(0)
    assert second > first >= 1
    assert await store.leases.next_fence(100) > 100
    assert await store.leases.next_fence(5) > 101


async def test_a_lease_set_is_taken_renewed_and_released_under_one_fence(store: Store) -> None:
    names = ["daemon-p0", "daemon-p1", "daemon-p2"]
    assert await store.leases.acquire_leases(names[:2], "d1", 5, 1000, NOW) == names[:2]
    # Held and live: not another's, whatever its fence.
    assert await store.leases.acquire_leases(names, "d2", 6, 1000, NOW + 10) == names[2:]
    assert await store.leases.renew_leases(names, "d1", 5, 1000, NOW + 500) == names[:2]
    assert await store.leases.renew_leases(names[:2], "d1", 4, 1000, NOW + 500) == []
    # The holder re-fences its own; a lower fence never takes a lease back.
    assert await store.leases.acquire_leases(names[:2], "d1", 7, 1000, NOW + 600) == names[:2]
    assert await store.leases.acquire_leases(names[2:], "d1", 3, 1000, NOW + 5000) == []
    listed = await store.leases.list_leases("daemon-p")
    assert [(s.name, s.holder, s.token) for s in listed] == [
        ("daemon-p0", "d1", 7),
        ("daemon-p1", "d1", 7),
        ("daemon-p2", "d2", 6),
    ]
    assert listed[0].expires_at == NOW + 1600
    await store.leases.release_leases(names[:1], "d1", 7)
    # Released: free at once, for a higher fence.
    assert await store.leases.acquire_leases(names[:1], "d2", 8, 1000, NOW + 700) == names[:1]
    # Lapsed: taken.
    assert await store.leases.acquire_leases(names[1:2], "d2", 8, 1000, NOW + 1601) == names[1:2]
    assert await store.leases.renew_leases(names[1:2], "d1", 7, 1000, NOW + 1602) == []
    assert await store.leases.list_leases("nothing-") == []


async def test_pointers_of_several_partitions_are_saved_at_once_and_fenced(
    store: Store,
) -> None:
    assert await store.pointers.load_pointers(["p0", "p1"]) == {}
    assert await store.pointers.save_pointers(["p0", "p1"], 100, 5) is True
    assert await store.pointers.load_pointers(["p0", "p1", "p2"]) == {"p0": 100, "p1": 100}
    assert await store.pointers.save_pointers(["p1", "p2"], 90, 4) is False
    assert (await store.pointers.load_pointers(["p1"]))["p1"] == 100
    assert await store.pointers.save_pointers(["p1", "p2"], 110, 6) is True
    assert await store.pointers.load_pointers(["p0", "p1", "p2"]) == {
        "p0": 100,
        "p1": 110,
        "p2": 110,
    }


# -- the daemon's ports scoped to partitions ------------------------------------------------


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
