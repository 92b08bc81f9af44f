"""A 201 survives a kill -9 of the store: acknowledged writes are journaled."""

from __future__ import annotations

import pytest
from pymongo import ReadPreference

from tests.support import SecantusServer, unique_name
from timer_service.jobs import NewJob
from timer_service.model import BizType
from timer_service.store.mongo import MongoStore, durable_writes

pytestmark = pytest.mark.integration

NOW = 1_767_225_600_000
JOBS = 200


def test_writes_are_durable_unless_the_url_says_otherwise() -> None:
    assert durable_writes("mongodb://h/") == {"w": "majority", "journal": True}
    assert durable_writes("mongodb://h/?w=1&journal=false") == {}


async def test_reads_go_to_the_primary_whatever_the_url_says() -> None:
    """A claim's read-back and a create's read of its job must see the writes before
    them: a secondary may not have them yet."""
    store = MongoStore("mongodb://127.0.0.1:1/?readPreference=secondaryPreferred", "db")
    try:
        layout = store.layout
        for coll in (layout.locator, layout.seconds, layout.buckets[0], layout.leases):
            assert coll.read_preference == ReadPreference.PRIMARY, (coll.name, coll.read_preference)
    finally:
        await store.close()


@pytest.mark.parametrize("run", range(3))
async def test_acknowledged_creates_survive_a_kill_of_the_store(run: int) -> None:
    server = SecantusServer()
    server.start()
    db = unique_name("durable")
    try:
        store = MongoStore(server.url, db, buckets=60)
        await store.setup()
        await store.biz_types.put_biz_type(BizType("orders", "http://127.0.0.1:1/cb"))
        for i in range(JOBS):  # one acknowledged create after another, as clients do
            await store.jobs.create_jobs([NewJob("orders", f"j{i}", NOW + 60_000, "null")], NOW)
        server.stop(kill=True)
        await store.close()
        server.start()
        store = MongoStore(server.url, db, buckets=60)
        missing = [i for i in range(JOBS) if await store.jobs.get_job("orders", f"j{i}") is None]
        biz = await store.biz_types.get_biz_type("orders")
        await store.close()
        assert missing == [], f"run {run}: {len(missing)} of {JOBS} acknowledged jobs lost"
        assert biz is not None, f"run {run}: an acknowledged biz type was lost"
    finally:
        server.cleanup()
