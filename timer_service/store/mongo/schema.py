"""Creating the collections' indexes once, by one process, with a bounded wait.

Several processes (api, daemon, broker, replicas of each) start against one
database. Each creating every index at once is wasted work at best, and has
deadlocked a MongoDB-protocol server here. So the first process to take the
setup lock creates the indexes and then writes the schema document; every
other process waits for that document (bounded), and a later start that finds
it at the current version touches no index at all. The schema document also
fixes the storage layout (the bucket count and the partition count): a process
configured otherwise refuses to start instead of reading jobs from the wrong
buckets or scanning the wrong partitions.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable

from pymongo.errors import DuplicateKeyError

from timer_service.errors import LayoutMismatch
from timer_service.store.mongo.layout import Collection, Layout

log = logging.getLogger(__name__)

SCHEMA_ID = "schema"
LOCK_ID = "setup-lock"
# 2: (state, next_attempt_at) per bucket, for the overdue sweep; 3: the console's
# (locator labels, bucket history.at, the audit log); 4: `_id` appended to the
# buckets' (second, state, next_attempt_at), for bounded claims; 5: jobs never move
# (store/mongo/upgrade.py: move marks taken off, second copies of a job cancelled)
SCHEMA_VERSION = 5
LOCK_TTL_MS = 120_000  # a setup that took longer died: another process may take over
POLL_S = 0.25


async def ensure_schema(
    layout: Layout,
    create_indexes: Callable[[], Awaitable[None]],
    wait_s: float = 180.0,
) -> None:
    """Return once the database holds the current schema, creating it if this process
    gets the lock; raise LayoutMismatch or TimeoutError."""
    meta = layout.db["meta"]
    holder = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    deadline = time.monotonic() + wait_s
    while True:
        schema = await meta.find_one({"_id": SCHEMA_ID})
        if schema is not None and schema.get("version", 0) >= SCHEMA_VERSION:
            check_layout(schema, layout.buckets_n, layout.partitions)
            return
        if await _take_lock(meta, holder):
            try:
                log.info("creating indexes", extra={"version": SCHEMA_VERSION})
                await create_indexes()
                await meta.update_one(
                    {"_id": SCHEMA_ID},
                    {
                        "$set": {"version": SCHEMA_VERSION, "buckets": layout.buckets_n},
                        # A store set up before partitions existed keeps P = 1 (its
                        # schema document has none: `stored_partitions`).
                        "$setOnInsert": {
                            "created_at_ms": _now_ms(),
                            "partitions": layout.partitions,
                        },
                    },
                    upsert=True,
                )
            finally:
                with contextlib.suppress(Exception):
                    await meta.delete_one({"_id": LOCK_ID, "holder": holder})
            continue  # read back what was written, and check it
        if time.monotonic() > deadline:
            raise TimeoutError(f"the store's schema was not ready within {wait_s:.0f} s")
        await asyncio.sleep(POLL_S)


def check_layout(schema: dict[str, object], buckets: int, partitions: int) -> None:
    """Raise LayoutMismatch unless this process's layout is the store's."""
    stored_buckets = schema.get("buckets", buckets)
    if stored_buckets != buckets:
        raise LayoutMismatch(
            f"the store was initialised with TIMER_BUCKETS={stored_buckets}; this process "
            f"has {buckets}. The bucket count is fixed once jobs are stored: "
            f"start it with TIMER_BUCKETS={stored_buckets}."
        )
    stored = stored_partitions(schema)
    if stored != partitions:
        raise LayoutMismatch(
            f"the store was initialised with TIMER_PARTITIONS={stored}; this process has "
            f"TIMER_PARTITIONS={partitions}. The partition count is fixed when the "
            f"store is first initialised: start it with TIMER_PARTITIONS={stored}."
        )


def stored_partitions(schema: dict[str, object]) -> int:
    """The store's partition count; one for a store set up before partitions existed
    (its jobs have no partition field, which reads as partition 0)."""
    value = schema.get("partitions", 1)
    return value if isinstance(value, int) else 1


async def _take_lock(meta: Collection, holder: str) -> bool:
    now = _now_ms()
    lock = {"_id": LOCK_ID, "holder": holder, "expires_at": now + LOCK_TTL_MS}
    try:
        await meta.insert_one(lock)
        return True
    except DuplicateKeyError:
        pass
    taken = await meta.find_one_and_update(
        {"_id": LOCK_ID, "expires_at": {"$lt": now}},
        {"$set": {"holder": holder, "expires_at": now + LOCK_TTL_MS}},
    )
    return taken is not None


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
