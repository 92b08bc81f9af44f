"""The daemon's partition leases (`store.leases`), on both adapters."""

from __future__ import annotations

from tests.contract.stores import NOW
from timer_service.store.base import Store


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
