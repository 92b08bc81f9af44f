"""Upgrading a store written by the layout that moved jobs (schema 4 and before).

Until schema 5, a job whose next fire second fell in another bucket was moved
there in a multi-document transaction, after a mark (`move`, `move_until`) on
its old document. Jobs now never move (store/mongo/layout.py). What the old
code can have left, and what becomes of it:

- Entries of the seconds index without a ``buckets`` list: their jobs were all
  in the bucket of their second, which is what such an entry reads as
  (`Layout.buckets_of_entry`), and a write that names another bucket gives the
  entry its list first (`Layout.bump`). Nothing to rewrite, and a store of any
  size upgrades at once.
- Locators without a ``bucket``: the old code rewrote a locator's ``second`` in
  the same transaction as the move, so its bucket is the job's, for good now
  (`Layout.home_of`).
- A move's mark on a document whose transaction never committed (the mover
  died): the document is where its locator says; the mark is taken off here.
- A transaction still open at the upgrade: the store ends it (mongod after
  ``transactionLifetimeLimitSeconds``); a write to its documents waits until
  then, and finds them where they were.
- A second document for one identity, in another bucket than its locator names:
  left by a client's retried create that read the locator across a move (issue
  30, break 1). Nobody can cancel or find it, and it would call back a second
  time. It is cancelled here, its `last_error` saying why.

Every process of the old code must be stopped before one of this code starts:
the old code reads no schema version, and would move jobs out of their homes.
"""

from __future__ import annotations

import logging

from timer_service.model import JobState
from timer_service.store.mongo.layout import Doc, Layout

log = logging.getLogger(__name__)

MOVE_MARK_FIELDS = ("move", "move_until")
ORPHAN_ERROR = "a second copy of this job, left by a create during a move: cancelled"
_PAGE = 1000


async def upgrade_from_moves(layout: Layout, now_ms: int) -> int:
    """Take off move marks and cancel the second copies of jobs; returns how many
    copies were cancelled. Idempotent: a second run finds nothing."""
    orphans = 0
    live = {"state": {"$in": [JobState.PENDING.value, JobState.DISPATCHED.value]}}
    for n, bucket in enumerate(layout.buckets):
        await bucket.update_many(
            {"move_until": {"$exists": True}},
            {"$unset": dict.fromkeys(MOVE_MARK_FIELDS, "")},
        )
        page: list[str] = []
        async for doc in bucket.find(live, {"_id": 1}).batch_size(_PAGE):
            page.append(doc["_id"])
            if len(page) == _PAGE:
                orphans += await _cancel_copies(layout, n, page, now_ms)
                page = []
        orphans += await _cancel_copies(layout, n, page, now_ms)
    if orphans:
        log.warning("cancelled second copies of jobs", extra={"jobs": orphans})
    return orphans


async def _cancel_copies(layout: Layout, n: int, keys: list[str], now_ms: int) -> int:
    if not keys:
        return 0
    locators: list[Doc] = await layout.locator.find(
        {"_id": {"$in": keys}}, {"bucket": 1, "second": 1}
    ).to_list(None)
    copies = [loc["_id"] for loc in locators if layout.home_of(loc) != n]
    if not copies:
        return 0
    result = await layout.buckets[n].update_many(
        {
            "_id": {"$in": copies},
            "state": {"$in": [JobState.PENDING.value, JobState.DISPATCHED.value]},
        },
        {
            "$set": {
                "state": JobState.CANCELLED.value,
                "last_error": ORPHAN_ERROR,
                "updated_at": now_ms,
                "sending": None,
                "expire_at": layout.expire_at(now_ms),
            }
        },
    )
    return int(result.modified_count)
