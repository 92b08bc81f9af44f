"""MongoDB only: a store written by the layout that moved jobs (schema 4) is
upgraded at start (store/mongo/upgrade.py) and its jobs fire from where they are."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.contract.stores import NOW, attempt, claim_second, new
from tests.support import SecantusServer, unique_name
from timer_service.dispatch import Outcome, OutcomeKind, SendRef
from timer_service.model import JobState, second_of
from timer_service.store.mongo import MongoStore
from timer_service.store.mongo.schema import SCHEMA_ID, SCHEMA_VERSION
from timer_service.store.mongo.upgrade import ORPHAN_ERROR

pytestmark = pytest.mark.integration

FIRST = second_of(NOW + 5000)
LATER = second_of(NOW + 7000)  # another bucket than FIRST's (60 buckets)


@pytest.fixture
async def old(secantus: SecantusServer) -> AsyncIterator[MongoStore]:
    """A store as schema 4 left it: entries without bucket lists, locators without a
    bucket, a job moved (in the bucket of its new second, its locator's second
    rewritten), a move's mark left on a document, and a second copy of a job."""
    mongo = MongoStore(secantus.url, unique_name("upgrade"), buckets=60)
    await mongo.setup()
    layout = mongo.layout
    await mongo.jobs.create_jobs([new("a"), new("b", due_at=NOW + 7000), new("moved")], NOW)
    # "moved": rescheduled by the old code to LATER, so moved into LATER's bucket.
    doc = await layout.bucket(FIRST).find_one_and_delete({"_id": "orders/moved"})
    assert doc is not None
    doc.update(second=LATER, due_at=NOW + 7000, next_attempt_at=NOW + 7000)
    await layout.bucket(LATER).insert_one(doc)
    await layout.locator.update_one({"_id": "orders/moved"}, {"$set": {"second": LATER}})
    # A mark left by a mover that died before its transaction committed.
    await layout.bucket(LATER).update_one(
        {"_id": "orders/b"}, {"$set": {"move": "t", "move_until": NOW + 10**12}}
    )
    # A second copy of "a" in LATER's bucket, as break 1 left them.
    copy = await layout.bucket(FIRST).find_one({"_id": "orders/a"})
    assert copy is not None
    copy.update(second=LATER, next_attempt_at=NOW + 7000)
    await layout.bucket(LATER).insert_one(copy)
    await layout.seconds.update_many({}, {"$unset": {"buckets": ""}})
    await layout.locator.update_many({}, {"$unset": {"bucket": ""}})
    await layout.db["meta"].update_one({"_id": SCHEMA_ID}, {"$set": {"version": 4}})
    await mongo.close()
    upgraded = MongoStore(secantus.url, layout.db.name, buckets=60)
    await upgraded.setup()
    yield upgraded
    await upgraded.drop_database()
    await upgraded.close()


async def test_the_upgrade_cancels_second_copies_and_takes_marks_off(old: MongoStore) -> None:
    schema = await old.layout.db["meta"].find_one({"_id": SCHEMA_ID})
    assert schema is not None and schema["version"] == SCHEMA_VERSION, schema
    copy = await old.layout.bucket(LATER).find_one({"_id": "orders/a"})
    assert copy is not None and copy["state"] == "cancelled", copy
    assert copy["last_error"] == ORPHAN_ERROR, copy
    home = await old.layout.bucket(FIRST).find_one({"_id": "orders/a"})
    assert home is not None and home["state"] == "pending", home
    marked = await old.layout.bucket(LATER).find_one({"move_until": {"$exists": True}})
    assert marked is None, marked


async def test_old_jobs_fire_from_where_the_old_layout_left_them(old: MongoStore) -> None:
    assert [c.job_id for c in await claim_second(old, FIRST)] == ["a"]
    later = await claim_second(old, LATER, "c2")
    assert sorted(c.job_id for c in later) == ["b", "moved"], later
    assert {c.bucket for c in later} == {LATER % 60}, later
    moved = await old.jobs.get_job("orders", "moved")
    assert moved is not None and moved.state == JobState.DISPATCHED, moved


async def test_a_retry_into_an_old_entry_keeps_the_entry_s_own_bucket(old: MongoStore) -> None:
    """LATER's entry has no list (its jobs are in LATER's bucket); a retry from FIRST's
    bucket into LATER must not leave it naming FIRST's bucket alone."""
    [a] = await claim_second(old, FIRST)
    ref = SendRef(a.biz_type, a.job_id, a.second, a.claim, bucket=a.bucket, due_at=a.due_at)
    retry = Outcome(ref, OutcomeKind.RETRY, attempt(1, status=503), NOW + 7000)
    await old.outcomes.record_outcomes([retry], NOW + 5000)
    [entry] = await old.layout.seconds.find({"_id": LATER}).to_list(None)
    assert sorted(entry["buckets"]) == sorted({FIRST % 60, LATER % 60}), entry
    later = await claim_second(old, LATER, "c2")
    assert sorted(c.job_id for c in later) == ["a", "b", "moved"], later
    cancelled = await old.jobs.cancel_job("orders", "moved", NOW + 8000)
    assert cancelled.state == JobState.CANCELLED, "the moved job was not found by identity"
