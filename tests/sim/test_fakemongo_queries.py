"""The fake's query, projection, sort and update semantics: MongoDB's, on the
operators the adapter uses; anything else refused by name."""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

import pytest
from bson import ObjectId
from pymongo import ASCENDING, DESCENDING, ReturnDocument
from pymongo.errors import WriteError

from tests.sim.fakemongo import FakeMongo
from tests.sim.fakemongo.collection import FakeCollection
from timer_service.clock import FakeClock

NOW = 1_767_225_600_000


@pytest.fixture
def coll() -> FakeCollection:
    return FakeMongo(FakeClock(NOW)).client()["db"]["c"]


async def ids(coll: FakeCollection, query: dict[str, Any], **kw: Any) -> list[Any]:
    return [d["_id"] for d in await coll.find(query, **kw).to_list(None)]


async def test_null_matches_missing_and_comparisons_stay_within_a_type(
    coll: FakeCollection,
) -> None:
    await coll.insert_many(
        [
            {"_id": 1, "v": 5},
            {"_id": 2, "v": "5"},
            {"_id": 3},
            {"_id": 4, "v": None},
            {"_id": 5, "v": 7.5},
            {"_id": 6, "v": True},
        ]
    )
    assert await ids(coll, {"v": None}) == [3, 4]
    assert await ids(coll, {"v": {"$ne": None}}) == [1, 2, 5, 6]
    assert await ids(coll, {"v": {"$gte": 5}}) == [1, 5]  # not "5", not True
    assert await ids(coll, {"v": {"$lt": "6"}}) == [2]
    assert await ids(coll, {"v": {"$in": [None, 5]}}) == [1, 3, 4]
    assert await ids(coll, {"v": {"$nin": [None, 5]}}) == [2, 5, 6]
    assert await ids(coll, {"v": {"$exists": False}}) == [3]
    assert await ids(coll, {"v": 1}) == []  # True is not 1 in BSON
    # Missing, or not above: the adapter's "no live move mark".
    assert await ids(coll, {"v": {"$not": {"$gt": 6}}}) == [1, 2, 3, 4, 6]


async def test_arrays_match_by_element_and_dotted_paths_reach_into_them(
    coll: FakeCollection,
) -> None:
    await coll.insert_many(
        [
            {"_id": "a", "labels": ["k:1", "x:2"], "history": [{"at": 10}, {"at": 30}]},
            {"_id": "b", "labels": ["k:1"], "history": [{"at": 20}]},
            {"_id": "c", "labels": {"k": "1"}, "history": []},
        ]
    )
    assert await ids(coll, {"labels": "k:1"}) == ["a", "b"]
    assert await ids(coll, {"labels": {"$all": ["k:1", "x:2"]}}) == ["a"]
    assert await ids(coll, {"labels.k": "1"}) == ["c"]
    assert await ids(coll, {"history.at": {"$gte": 25}}) == ["a"]
    assert await ids(coll, {"history.at": {"$ne": 20}}) == ["a", "c"]
    assert await ids(coll, {"$or": [{"_id": "c"}, {"history.at": 10}]}) == ["a", "c"]
    assert await ids(coll, {"_id": {"$regex": "^(?:a|c)$"}}) == ["a", "c"]


async def test_sort_projection_skip_and_limit(coll: FakeCollection) -> None:
    await coll.insert_many(
        [{"_id": i, "at": at, "big": "x" * 10} for i, at in enumerate([3, None, 1, 2, "s"])]
    )
    found = await coll.find({}, {"at": 1}).sort("at", ASCENDING).to_list(None)
    # Null first, numbers, then strings; an inclusion keeps _id.
    assert found == [
        {"_id": 1, "at": None},
        {"_id": 2, "at": 1},
        {"_id": 3, "at": 2},
        {"_id": 0, "at": 3},
        {"_id": 4, "at": "s"},
    ]
    two = await coll.find({}, {"big": 0}).sort([("at", DESCENDING)]).skip(1).limit(2).to_list(None)
    assert two == [{"_id": 0, "at": 3}, {"_id": 3, "at": 2}]


async def test_update_operators_and_what_counts_as_modified(coll: FakeCollection) -> None:
    await coll.insert_one({"_id": 1, "n": 1, "h": [], "f": 5, "gone": 1})
    result = await coll.update_one(
        {"_id": 1},
        {
            "$set": {"s.deep": "x"},
            "$inc": {"n": 2, "new": 1},
            "$push": {"h": {"at": 1}},
            "$max": {"f": 4},
            "$unset": {"gone": ""},
        },
    )
    assert (result.matched_count, result.modified_count) == (1, 1)
    doc = await coll.find_one({"_id": 1})
    assert doc == {"_id": 1, "n": 3, "h": [{"at": 1}], "f": 5, "new": 1, "s": {"deep": "x"}}
    same = await coll.update_one({"_id": 1}, {"$set": {"n": 3}, "$max": {"f": 1}})
    assert (same.matched_count, same.modified_count) == (1, 0)


async def test_update_errors_are_the_servers(coll: FakeCollection) -> None:
    await coll.insert_one({"_id": 1, "s": "text"})
    with pytest.raises(WriteError) as conflict:
        await coll.update_one({"_id": 1}, {"$set": {"a": 1}, "$unset": {"a": ""}})
    assert conflict.value.code == 40
    with pytest.raises(WriteError) as immutable:
        await coll.update_one({"_id": 1}, {"$set": {"_id": 2}})
    assert immutable.value.code == 66
    with pytest.raises(WriteError) as mismatch:
        await coll.update_one({"_id": 1}, {"$inc": {"s": 1}})
    assert mismatch.value.code == 14


async def test_an_upsert_is_seeded_from_the_equalities_of_its_query(coll: FakeCollection) -> None:
    result = await coll.update_one(
        {"_id": "p", "kind": "x", "fence": {"$lte": 3}},
        {"$set": {"second": 9}, "$setOnInsert": {"created": 1}},
        upsert=True,
    )
    assert result.upserted_id == "p"
    assert await coll.find_one({"_id": "p"}) == {
        "_id": "p",
        "kind": "x",
        "created": 1,
        "second": 9,
    }
    again = await coll.update_one(
        {"_id": "p"}, {"$set": {"second": 10}, "$setOnInsert": {"created": 2}}, upsert=True
    )
    assert (again.upserted_id, (await coll.find_one("p") or {})["created"]) == (None, 1)
    fresh = await coll.update_one({"kind": "y"}, {"$set": {"a": 1}}, upsert=True)
    assert isinstance(fresh.upserted_id, ObjectId)


async def test_a_pipeline_update_reads_the_servers_clock(coll: FakeCollection) -> None:
    doc = await coll.find_one_and_update(
        {"_id": "b1"},
        [
            {
                "$set": {
                    "held": {"$literal": [{"b": "x"}]},
                    "at": "$$NOW",
                    "expires_at": {"$add": [{"$toLong": "$$NOW"}, 6000]},
                }
            }
        ],
        upsert=True,
        return_document=ReturnDocument.AFTER,
    )
    now = dt.datetime.fromtimestamp(NOW / 1000, tz=dt.UTC)
    assert doc == {"_id": "b1", "held": [{"b": "x"}], "at": now, "expires_at": NOW + 6000}
    rows = await (await coll.aggregate([{"$addFields": {"read": "$$NOW"}}])).to_list(None)
    assert rows[0]["read"] == now


async def test_group_counts_by_a_compound_key(coll: FakeCollection) -> None:
    await coll.insert_many(
        [{"b": "x", "s": "p"}, {"b": "x", "s": "p"}, {"b": "y", "s": "d"}, {"b": "x", "s": "d"}]
    )
    cursor = await coll.aggregate(
        [
            {"$match": {"s": {"$in": ["p", "d"]}}},
            {"$group": {"_id": {"b": "$b", "s": "$s"}, "n": {"$sum": 1}}},
        ]
    )
    rows = {(r["_id"]["b"], r["_id"]["s"]): r["n"] async for r in cursor}
    assert rows == {("x", "p"): 2, ("y", "d"): 1, ("x", "d"): 1}


@pytest.mark.parametrize(
    ("query", "update", "named"),
    [
        ({"a": {"$where": "1"}}, None, "$where"),
        ({"$text": {"$search": "x"}}, None, "$text"),
        ({}, {"$rename": {"a": "b"}}, "$rename"),
        ({}, [{"$replaceWith": {"a": 1}}], "$replaceWith"),
    ],
)
async def test_an_unsupported_operator_is_refused_by_name(
    coll: FakeCollection, query: dict[str, Any], update: Any, named: str
) -> None:
    await coll.insert_one({"_id": 1, "a": 1})
    with pytest.raises(NotImplementedError, match=rf"\{named}"):
        if update is None:
            await coll.find(query).to_list(None)
        else:
            await coll.update_many(query, update)


async def test_documents_are_copied_in_and_out(coll: FakeCollection) -> None:
    mine: dict[str, Any] = {"_id": 1, "list": [1], "when": dt.datetime(2026, 1, 1, 0, 0, 0, 123456)}
    await coll.insert_one(mine)
    mine["list"].append(2)
    got = await coll.find_one({"_id": 1})
    assert got is not None and got["list"] == [1]
    got["list"].append(3)
    again = await coll.find_one({"_id": 1})
    assert again is not None and again["list"] == [1]
    # BSON keeps milliseconds, in UTC (the client is tz-aware, as MongoStore's).
    assert again["when"] == dt.datetime(2026, 1, 1, 0, 0, 0, 123000, tzinfo=dt.UTC)


async def test_a_seeded_shuffle_changes_the_order_of_unsorted_results() -> None:
    orders = set()
    for seed in range(5):
        coll = FakeMongo(FakeClock(NOW), shuffle=random.Random(seed)).client()["db"]["c"]
        await coll.insert_many([{"_id": i, "k": 1} for i in range(6)])
        orders.add(tuple(await ids(coll, {"k": 1})))
        assert await ids(coll, {"k": 1}, sort="_id") == list(range(6))
    assert len(orders) > 1, orders
