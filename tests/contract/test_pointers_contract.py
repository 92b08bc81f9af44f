"""The daemon's time pointers (`store.pointers`), on both adapters."""

from __future__ import annotations

from timer_service.store.base import Store


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


async def test_pointer_is_fenced(store: Store) -> None:
    pointers, p0 = store.pointers, ["p0"]
    assert await pointers.load_pointers(p0) == {}
    assert await pointers.save_pointers(p0, 100, 2) is True
    assert await pointers.save_pointers(p0, 90, 1) is False
    assert await pointers.load_pointers(p0) == {"p0": 100}
    assert await pointers.save_pointers(p0, 101, 3) is True
    assert await pointers.load_pointers(p0) == {"p0": 101}
