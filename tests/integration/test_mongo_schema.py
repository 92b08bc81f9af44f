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


async def test_a_schema_3_store_gets_the_bounded_claim_index(secantus: SecantusServer) -> None:
    """Schema 4 appends `_id` to the buckets' claim index: a store set up by schema 3 is
    upgraded at the next start, the old index dropped (not kept beside the new one)."""
    db = unique_name("schema")
    store = MongoStore(secantus.url, db, buckets=2)
    try:
        await store.setup()
        for bucket in store.layout.buckets:  # as schema 3 left it
            await bucket.drop_index("second_1_state_1_next_attempt_at_1__id_1")
            await bucket.create_index([("second", 1), ("state", 1), ("next_attempt_at", 1)])
        await store.layout.db["meta"].update_one({"_id": "schema"}, {"$set": {"version": 3}})
        again = MongoStore(secantus.url, db, buckets=2)
        await again.setup()
        await again.close()
        for bucket in store.layout.buckets:
            names = [ix["name"] async for ix in await bucket.list_indexes()]
            assert "second_1_state_1_next_attempt_at_1__id_1" in names, names
            assert "second_1_state_1_next_attempt_at_1" not in names, names
        schema = await store.layout.db["meta"].find_one({"_id": "schema"})
        assert schema is not None and schema["version"] == SCHEMA_VERSION >= 4
    finally:
        await store.close()
