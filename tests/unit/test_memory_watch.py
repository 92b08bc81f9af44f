"""The in-memory store's seconds watch ends when its consumer is cancelled, even
when an event arrives in the same turn of the loop (Python 3.11's
`asyncio.wait_for` returned the event then and swallowed the cancellation: a
daemon's stop waited on a watch that never ended), and at once when `stop` is set."""

from __future__ import annotations

import asyncio

from timer_service.store.memory import MemoryStore

TURNS = 50  # turns of the loop a watch may take to end: no time passes in this file


async def settle() -> None:
    for _ in range(TURNS):
        await asyncio.sleep(0)


async def watching(store: MemoryStore, stop: asyncio.Event | None = None) -> list[int]:
    seen: list[int] = []
    async for second in store.scan.watch_seconds(stop):
        seen.append(second)
    return seen


async def test_a_cancel_that_meets_an_event_ends_the_watch() -> None:
    store = MemoryStore(buckets=60)
    task = asyncio.create_task(watching(store))
    await settle()
    store.state.bump(1000)  # the event and the cancel arrive in one turn
    task.cancel()
    await settle()
    assert task.done(), "the watch swallowed its cancellation and runs on"
    assert task.cancelled(), f"expected the watch cancelled, got {task}"
    assert store.state.watchers == [], "the ended watch is still registered"


async def test_a_set_stop_ends_the_watch_without_waiting() -> None:
    store = MemoryStore(buckets=60)
    stop = asyncio.Event()
    task = asyncio.create_task(watching(store, stop))
    await settle()
    store.state.bump(1000)
    await settle()
    stop.set()
    await settle()
    assert task.done(), "the watch did not end at once when told to stop"
    assert task.result() == [1000], f"expected the one event, got {task.result()}"
    assert store.state.watchers == []


async def test_events_are_reported_in_order_with_none_lost() -> None:
    store = MemoryStore(buckets=60)
    stop = asyncio.Event()
    task = asyncio.create_task(watching(store, stop))
    await settle()
    for second in (5, 3, 9):
        store.state.bump(second)
    await settle()
    store.state.bump(7)
    await settle()
    stop.set()
    await settle()
    assert task.result() == [5, 3, 9, 7], f"expected every event in order, got {task.result()}"
