"""The fake and a MongoDB-protocol server answer alike: the same documents, the same
queries, updates and aggregations, on the fake and on SecantusDB, compared."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pymongo import AsyncMongoClient, ReturnDocument, UpdateOne
from pymongo.errors import BulkWriteError, DuplicateKeyError, WriteError

from tests.sim.fakemongo import FakeMongo
from tests.support import SecantusServer, unique_name

pytestmark = pytest.mark.integration

WHEN = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
DOCS: list[dict[str, Any]] = [
    {"_id": "a", "n": 5, "s": "x", "tags": ["k:1", "x:2"], "h": [{"at": 10}, {"at": 30}]},
    {"_id": "b", "n": 7.5, "s": None, "tags": ["k:1"], "h": [{"at": 20}], "d": WHEN},
    {"_id": "c", "n": "5", "labels": {"k": "1"}, "h": [], "f": True},
    {"_id": "d", "sending": "b1/x", "move_until": 100},
    {"_id": "e", "n": 0, "move_until": None, "sub": {"a": 1, "b": 2}},
]
QUERIES: list[dict[str, Any]] = [
    {},
    {"n": None},
    {"n": {"$ne": None}},
    {"n": {"$gte": 5}},
    {"n": {"$lt": "6"}},
    {"n": {"$in": [None, 5]}},
    {"n": {"$nin": [None, 5]}},
    {"n": {"$exists": False}},
    {"f": 1},
    {"move_until": {"$not": {"$gt": 50}}},
    {"sending": None},
    {"sending": {"$in": [None, "b1/x"]}},
    {"sending": {"$regex": "^(?:b1|b2)/"}},
    {"tags": "k:1"},
    {"tags": {"$all": ["k:1", "x:2"]}},
    {"labels.k": "1"},
    {"h.at": {"$gte": 25}},
    {"h.at": {"$ne": 20}},
    {"$or": [{"_id": "c"}, {"h.at": 10}]},
    {"_id": {"$gte": "b", "$lt": "d"}},
    {"_id": {"$in": ["e", "a"]}, "n": {"$lte": 5}},
    {"d": {"$lt": WHEN + dt.timedelta(seconds=1)}},
    {"sub": {"a": 1, "b": 2}},
    {"sub": {"b": 2, "a": 1}},  # field order counts
]
UPDATES: list[tuple[dict[str, Any], Any]] = [
    ({"_id": "a"}, {"$set": {"z.y": 1}, "$inc": {"n": 2}, "$unset": {"s": ""}}),
    ({"_id": "b"}, {"$push": {"h": {"at": 40}}, "$max": {"n": 7}, "$min": {"q": 3}}),
    ({"_id": "b"}, {"$push": {"h": {"$each": [{"at": 50}, {"at": 60}], "$slice": -2}}}),
    ({"_id": "c"}, {"$push": {"r": {"$each": [{"at": 1}], "$slice": -3}}}),  # a new array
    ({"_id": "e"}, {"$set": {"n": 0}}),  # matched, not modified
    ({"_id": "new", "kind": "k", "n": {"$lte": 3}}, {"$setOnInsert": {"c": 1}}),
    ({"_id": "d", "move_until": {"$gt": 500}}, {"$set": {"x": 1}}),  # a duplicate upsert
    ({"_id": "c"}, {"$set": {"x": 1}, "$unset": {"x": ""}}),  # conflicting paths
    ({"_id": "c"}, {"$inc": {"n": 1}}),  # $inc of a string
]


@pytest.fixture
async def both(secantus: SecantusServer) -> AsyncIterator[list[Any]]:
    real: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(secantus.url, tz_aware=True)
    name = unique_name("fake_vs")
    colls = [FakeMongo().client()["db"]["c"], real[name]["c"]]
    for coll in colls:
        await coll.insert_many([dict(d) for d in DOCS])
    try:
        yield colls
    finally:
        await real.drop_database(name)
        await real.close()


async def answers(coll: Any, query: dict[str, Any]) -> list[Any]:
    return [d["_id"] for d in await coll.find(query).sort("_id", 1).to_list(None)]


async def test_queries_match_the_same_documents(both: list[Any]) -> None:
    fake, real = both
    differ = [
        (q, fake_ids, real_ids)
        for q in QUERIES
        if (fake_ids := await answers(fake, q)) != (real_ids := await answers(real, q))
    ]
    assert not differ, "query, fake, SecantusDB:\n" + "\n".join(map(repr, differ))


async def outcome(coll: Any, query: dict[str, Any], update: Any) -> Any:
    try:
        result = await coll.update_one(query, update, upsert=True)
    except (DuplicateKeyError, WriteError) as exc:
        return (type(exc).__name__, exc.code)
    return (result.matched_count, result.modified_count, result.upserted_id)


async def test_updates_answer_and_leave_the_same_documents(both: list[Any]) -> None:
    fake, real = both
    for query, update in UPDATES:
        said = [await outcome(fake, query, update), await outcome(real, query, update)]
        assert said[0] == said[1], (query, update, said)
    docs = [await c.find({}).sort("_id", 1).to_list(None) for c in both]
    assert docs[0] == docs[1]


async def test_pipeline_updates_groups_and_bulk_errors_agree(both: list[Any]) -> None:
    pipeline = [{"$set": {"held": {"$literal": [{"b": "x"}]}, "v": {"$add": ["$n", 1]}}}]
    after = [
        await c.find_one_and_update(
            {"_id": "a"}, pipeline, return_document=ReturnDocument.AFTER, projection={"h": 0}
        )
        for c in both
    ]
    assert after[0] == after[1]
    group = [{"$group": {"_id": {"t": {"$ifNull": ["$s", "none"]}}, "n": {"$sum": 1}}}]
    rows = [
        sorted(await (await c.aggregate(group)).to_list(None), key=lambda r: str(r["_id"]))
        for c in both
    ]
    assert rows[0] == rows[1]
    errors = []
    for c in both:
        with pytest.raises(BulkWriteError) as caught:
            await c.bulk_write(
                [
                    UpdateOne({"_id": "q", "n": {"$lte": 1}}, {"$set": {"m": 1}}, upsert=True),
                    UpdateOne({"_id": "a", "n": {"$lte": 1}}, {"$set": {"m": 1}}, upsert=True),
                ],
                ordered=False,
            )
        details = caught.value.details
        errors.append(
            (
                [(e["index"], e["code"], e.get("keyValue")) for e in details["writeErrors"]],
                details["nUpserted"],
                details["upserted"],
            )
        )
    assert errors[0] == errors[1]
