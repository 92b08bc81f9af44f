"""The fake's writes as PyMongo reports them: unique indexes and their errors, bulk
results and how a bulk is split into commands, cursor batches, change streams,
transactions and TTL."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest
from pymongo import DeleteOne, InsertOne, ReplaceOne, UpdateMany, UpdateOne
from pymongo.errors import BulkWriteError, DuplicateKeyError, InvalidOperation, OperationFailure

from tests.sim.fakemongo import FakeMongo
from tests.sim.fakemongo.collection import FakeCollection
from tests.sim.fakemongo.session import FakeSession
from timer_service.clock import FakeClock

NOW = 1_767_225_600_000


@pytest.fixture
def server() -> FakeMongo:
    return FakeMongo(FakeClock(NOW))


@pytest.fixture
def coll(server: FakeMongo) -> FakeCollection:
    return server.client()["db"]["c"]


def names(server: FakeMongo) -> list[str]:
    return [c.name for c in server.log]


async def test_a_duplicate_id_raises_as_pymongo_does(coll: FakeCollection) -> None:
    await coll.insert_one({"_id": "a"})
    with pytest.raises(DuplicateKeyError) as single:
        await coll.insert_one({"_id": "a"})
    assert single.value.code == 11000
    assert single.value.details is not None
    assert single.value.details["keyValue"] == {"_id": "a"}
    assert "index: _id_ dup key" in single.value.details["errmsg"]
    with pytest.raises(BulkWriteError) as bulk:
        await coll.insert_many([{"_id": "b"}, {"_id": "a"}, {"_id": "c"}], ordered=False)
    details = bulk.value.details
    assert [(e["index"], e["code"], e["op"]) for e in details["writeErrors"]] == [
        (1, 11000, {"_id": "a"})
    ]
    assert details["nInserted"] == 2  # unordered: went on past the error
    with pytest.raises(BulkWriteError) as ordered:
        await coll.insert_many([{"_id": "d"}, {"_id": "a"}, {"_id": "e"}])
    assert ordered.value.details["nInserted"] == 1
    assert await coll.count_documents({}) == 4  # a, b, c, d


async def test_unique_indexes_are_enforced_on_every_write(coll: FakeCollection) -> None:
    await coll.create_index("k", unique=True)
    await coll.insert_many([{"_id": 1, "k": "x"}, {"_id": 2, "k": "y"}])
    with pytest.raises(DuplicateKeyError) as update:
        await coll.update_one({"_id": 2}, {"$set": {"k": "x"}})
    assert update.value.details is not None
    assert update.value.details["keyPattern"] == {"k": 1}
    with pytest.raises(DuplicateKeyError):
        await coll.find_one_and_update({"_id": 3}, {"$set": {"k": "y"}}, upsert=True)
    await coll.delete_one({"_id": 1})
    await coll.update_one({"_id": 2}, {"$set": {"k": "x"}})  # free again
    with pytest.raises(DuplicateKeyError):
        await coll.insert_one({"_id": 4, "k": "x"})
    with pytest.raises(BulkWriteError) as nulls:  # both lack the field: null twice
        await coll.insert_many([{"_id": 5}, {"_id": 6}])
    assert nulls.value.details["writeErrors"][0]["keyValue"] == {"k": None}
    with pytest.raises(DuplicateKeyError):  # an index over what is already duplicated
        await coll.create_index("n", unique=True)


async def test_an_upsert_whose_query_misses_an_existing_id_is_a_duplicate(
    coll: FakeCollection,
) -> None:
    """The pointer save's fence: a lower fence's upsert must fail, not overwrite."""
    await coll.update_one({"_id": "p", "fence": {"$lte": 5}}, {"$set": {"fence": 5}}, upsert=True)
    with pytest.raises(DuplicateKeyError):
        await coll.update_one(
            {"_id": "p", "fence": {"$lte": 4}}, {"$set": {"fence": 4}}, upsert=True
        )
    with pytest.raises(BulkWriteError) as bulk:
        await coll.bulk_write(
            [
                UpdateOne({"_id": "q", "fence": {"$lte": 4}}, {"$set": {"f": 4}}, upsert=True),
                UpdateOne({"_id": "p", "fence": {"$lte": 4}}, {"$set": {"f": 4}}, upsert=True),
            ],
            ordered=False,
        )
    assert [e["code"] for e in bulk.value.details["writeErrors"]] == [11000]
    assert bulk.value.details["upserted"] == [{"index": 0, "_id": "q"}]


async def test_bulk_results_count_and_an_unordered_bulk_is_a_command_per_kind(
    server: FakeMongo, coll: FakeCollection
) -> None:
    await coll.insert_many([{"_id": i, "n": 0} for i in range(4)])
    before = len(server.log)
    result = await coll.bulk_write(
        [
            UpdateOne({"_id": 0}, {"$set": {"n": 1}}),
            DeleteOne({"_id": 1}),
            UpdateMany({"_id": {"$in": [2, 3]}}, {"$set": {"n": 1}}),
            InsertOne({"_id": 9}),
            ReplaceOne({"_id": 7}, {"n": 7}, upsert=True),
            UpdateOne({"_id": 0}, {"$set": {"n": 1}}),  # matched, not modified
        ],
        ordered=False,
    )
    assert (result.inserted_count, result.matched_count, result.modified_count) == (1, 4, 3)
    assert (result.deleted_count, result.upserted_count, result.upserted_ids) == (1, 1, {4: 7})
    # PyMongo sends an unordered bulk as one insert, one update, one delete command.
    assert [c.args["kind"] for c in list(server.log)[before:]] == ["insert", "update", "delete"]


async def test_a_cursor_fetches_in_batches_as_mongodb_sizes_them(
    server: FakeMongo, coll: FakeCollection
) -> None:
    await coll.insert_many([{"_id": i} for i in range(250)])
    before = len(server.log)
    assert len(await coll.find({}).to_list(None)) == 250
    assert names(server)[before:] == ["find", "getMore"]  # 101, then the rest
    before = len(server.log)
    assert len(await coll.find({"_id": {"$lt": 10}}).batch_size(10).to_list(None)) == 10
    assert names(server)[before:] == ["find", "getMore"]  # a full batch leaves it open
    before = len(server.log)
    assert len(await coll.find({"_id": {"$lt": 10}}).batch_size(11).to_list(None)) == 10
    assert names(server)[before:] == ["find"]  # one over: the server sees the end
    before = len(server.log)
    assert [d["_id"] async for d in coll.find({}).sort("_id", -1).limit(3)] == [249, 248, 247]
    assert names(server)[before:] == ["find"]


async def test_a_change_stream_reports_writes_and_resumes_after_a_token(
    server: FakeMongo, coll: FakeCollection
) -> None:
    clock = server.clock
    assert isinstance(clock, FakeClock)
    async with await coll.watch(max_await_time_ms=10) as stream:
        await coll.update_one({"_id": 1}, {"$set": {"v": "a"}}, upsert=True)
        await coll.update_one({"_id": 1}, {"$set": {"v": "b", "f": 1}})
        await coll.replace_one({"_id": 1}, {"v": "c"})
        insert = await stream.try_next()
        token = stream.resume_token
        update = await stream.try_next()
        replace = await stream.try_next()
        assert await clock.drive(stream.try_next()) is None  # after its await time
    assert insert is not None and update is not None and replace is not None
    assert (insert["operationType"], insert["fullDocument"]) == ("insert", {"_id": 1, "v": "a"})
    assert update["operationType"] == "update"
    assert update["updateDescription"]["updatedFields"] == {"v": "b", "f": 1}
    assert (replace["operationType"], replace["documentKey"]) == ("replace", {"_id": 1})
    only_v = [{"$match": {"updateDescription.updatedFields.v": {"$exists": True}}}]
    async with await coll.watch(only_v, resume_after=token, max_await_time_ms=10) as resumed:
        event = await resumed.try_next()
        assert event is not None and event["_id"] == update["_id"]
        assert await clock.drive(resumed.try_next()) is None


async def test_a_transaction_applies_whole_or_not_at_all_and_holds_others_off(
    server: FakeMongo, coll: FakeCollection
) -> None:
    await coll.insert_many([{"_id": 1}, {"_id": 2}])
    client = coll.database.client
    other_saw: list[int] = []
    entered = asyncio.Event()

    async def other() -> None:
        await entered.wait()
        other_saw.append(await coll.count_documents({}))

    async def move(session: FakeSession) -> None:
        await coll.delete_one({"_id": 1}, session=session)
        entered.set()
        for _ in range(10):  # the other command waits meanwhile
            await asyncio.sleep(0)
        await coll.insert_one({"_id": 3}, session=session)

    reader = asyncio.create_task(other())
    async with client.start_session() as session:
        await session.with_transaction(move)
    await reader
    assert other_saw == [2]  # after the commit, never in between
    assert sorted(d["_id"] for d in await coll.find({}).to_list(None)) == [2, 3]

    class Changed(Exception):
        pass

    async def fails(session: FakeSession) -> None:
        await coll.delete_many({}, session=session)
        await coll.insert_one({"_id": 4}, session=session)
        raise Changed

    with pytest.raises(Changed):
        async with client.start_session() as session:
            await session.with_transaction(fails)
    assert sorted(d["_id"] for d in await coll.find({}).to_list(None)) == [2, 3]


async def test_an_abandoned_transaction_ends_at_its_lifetime_limit(server: FakeMongo) -> None:
    clock = server.clock
    assert isinstance(clock, FakeClock)
    coll = server.client()["db"]["c"]
    await coll.insert_one({"_id": 1})
    session = coll.database.client.start_session()
    await session.start_transaction()
    await coll.delete_one({"_id": 1}, session=session)  # then the process froze
    waiting = asyncio.create_task(coll.find_one({"_id": 1}))
    await clock.run_for(59_000)
    assert not waiting.done()
    await clock.run_for(1_001)
    assert await waiting == {"_id": 1}  # aborted, undone
    with pytest.raises(OperationFailure) as gone:
        await session.commit_transaction()
    assert gone.value.code == 251 and gone.value.has_error_label("TransientTransactionError")


async def test_ttl_indexes_expire_dates_by_the_fakes_clock(server: FakeMongo) -> None:
    clock = server.clock
    assert isinstance(clock, FakeClock)
    coll = server.client()["db"]["c"]
    await coll.create_index("expire_at", expireAfterSeconds=0)
    soon = dt.datetime.fromtimestamp((NOW + 30_000) / 1000, tz=dt.UTC)
    await coll.insert_many([{"_id": 1, "expire_at": soon}, {"_id": 2, "expire_at": NOW}])
    clock.advance(31_000)
    assert server.expire_now() == 1  # a number in a TTL field never expires
    assert [d["_id"] for d in await coll.find({}).to_list(None)] == [2]


async def test_a_closed_client_refuses_commands_as_pymongo_4_does(server: FakeMongo) -> None:
    client = server.client()
    await client["db"]["c"].insert_one({"_id": 1})
    await client.close()
    with pytest.raises(InvalidOperation):
        await client["db"]["c"].find_one({"_id": 1})
    assert await server.client()["db"]["c"].find_one({"_id": 1}) == {"_id": 1}  # data stays


async def test_add_to_set_and_pull_keep_an_array_as_a_set(coll: FakeCollection) -> None:
    """The seconds index names its buckets with these (store/mongo/layout.py)."""
    await coll.update_one({"_id": "s"}, {"$addToSet": {"b": {"$each": [5, 7]}}}, upsert=True)
    await coll.update_one({"_id": "s"}, {"$addToSet": {"b": {"$each": [7, 9]}}})
    await coll.update_one({"_id": "s"}, {"$addToSet": {"b": 5}})
    assert await coll.find_one({"_id": "s"}) == {"_id": "s", "b": [5, 7, 9]}
    await coll.update_one({"_id": "s"}, {"$pull": {"b": {"$in": [5, 9, 11]}}})
    assert await coll.find_one({"_id": "s"}) == {"_id": "s", "b": [7]}
    await coll.update_one({"_id": "s"}, {"$pull": {"b": 7, "missing": 1}})
    assert await coll.find_one({"_id": "s"}) == {"_id": "s", "b": []}
    with pytest.raises(OperationFailure):
        await coll.update_one({"_id": "s"}, {"$set": {"x": 1}, "$addToSet": {"x": 2}})
