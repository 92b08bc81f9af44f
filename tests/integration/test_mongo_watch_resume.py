"""The change stream of the seconds index resumes where it stopped: what was written
while it was down is still reported (before, it was lost until the next safety poll)."""

from __future__ import annotations

import asyncio

import pytest

from tests.contract.stores import NOW, new
from tests.support import SecantusServer, unique_name
from timer_service.model import second_of
from timer_service.store.mongo import MongoStore

pytestmark = pytest.mark.integration


async def next_seconds_seen(store: MongoStore, n: int) -> list[int]:
    seen: list[int] = []
    stop = asyncio.Event()

    async def watch() -> None:
        async for second in store.scan.watch_seconds(stop):
            seen.append(second)
            if len(seen) == n:
                stop.set()

    await asyncio.wait_for(watch(), 20)
    return seen


async def test_a_new_watch_resumes_after_the_last_event(secantus: SecantusServer) -> None:
    db = unique_name("watch")
    daemon_side = MongoStore(secantus.url, db, buckets=60)
    api_side = MongoStore(secantus.url, db, buckets=60)
    await daemon_side.setup()
    try:
        watching = asyncio.create_task(next_seconds_seen(daemon_side, 1))
        await asyncio.sleep(0.5)  # the stream is open
        await api_side.jobs.create_jobs([new("a", due_at=NOW + 5000)], NOW)
        assert await watching == [second_of(NOW + 5000)]
        # The stream is down (an error, a reconnect) while two more seconds get jobs.
        await api_side.jobs.create_jobs(
            [new("b", due_at=NOW + 7000), new("c", due_at=NOW + 9000)], NOW
        )
        later = await next_seconds_seen(daemon_side, 2)
        assert sorted(later) == [second_of(NOW + 7000), second_of(NOW + 9000)], later
    finally:
        await daemon_side.drop_database()
        await daemon_side.close()
        await api_side.close()
