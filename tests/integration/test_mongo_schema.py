"""Indexes are created once, by one process, however many start together; a process
configured with another layout refuses to start."""

from __future__ import annotations

import asyncio

import pytest

from tests.support import SecantusServer, unique_name
from timer_service.errors import LayoutMismatch
from timer_service.store.mongo import MongoStore
from timer_service.store.mongo.schema import SCHEMA_VERSION

pytestmark = pytest.mark.integration


async def test_concurrent_starts_create_the_indexes_once(secantus: SecantusServer) -> None:
    db = unique_name("schema")
    stores = [MongoStore(secantus.url, db, buckets=60) for _ in range(4)]
    created = []
    for i, store in enumerate(stores):
        real = store._create_indexes

        async def counted(real=real, i=i) -> None:  # type: ignore[no-untyped-def]
            created.append(i)
            await real()

        store._create_indexes = counted  # type: ignore[method-assign]
    try:
        await asyncio.wait_for(asyncio.gather(*(s.setup() for s in stores)), 120)
        assert len(created) == 1, f"expected one process to create the indexes, got {created}"
        schema = await stores[0].layout.db["meta"].find_one({"_id": "schema"})
        assert schema is not None and schema["version"] == SCHEMA_VERSION, schema
        names = [ix["name"] async for ix in await stores[0].layout.buckets[0].list_indexes()]
        assert "state_1_next_attempt_at_1" in names, names
        again = MongoStore(secantus.url, db, buckets=60)
        again._create_indexes = None  # type: ignore[assignment,method-assign]
        await again.setup()  # reads the schema document only
        await again.close()
    finally:
        await stores[0].drop_database()
        for store in stores:
            await store.close()


async def test_another_bucket_count_is_refused(secantus: SecantusServer) -> None:
    db = unique_name("schema")
    first = MongoStore(secantus.url, db, buckets=60)
    await first.setup()
    other = MongoStore(secantus.url, db, buckets=30)
    try:
        with pytest.raises(LayoutMismatch, match="TIMER_BUCKETS=60"):
            await other.setup()
    finally:
        await first.drop_database()
        await first.close()
        await other.close()
