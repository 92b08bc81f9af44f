"""The overdue sweep's port (`store.sweep`), on both adapters: every pending job
stays findable by the scanner."""

from __future__ import annotations

from tests.contract.stores import NOW, claim_second, create, drop_entry, new
from timer_service.model import second_of
from timer_service.store.base import Store


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
