"""Faults at any command: an error before it applies, the reply lost after it
applied, a delay on the fake's clock, a stall until released; and every command
an await point where other callers' commands come in between."""

from __future__ import annotations

import asyncio
import random

import pytest
from pymongo import InsertOne, UpdateOne
from pymongo.errors import AutoReconnect, NetworkTimeout, NotPrimaryError, PyMongoError

from tests.sim.fakemongo import (
    Command,
    Delay,
    Fail,
    FakeMongo,
    FaultPlan,
    LoseReply,
    SeededFaults,
    Stall,
    not_primary,
)
from tests.sim.fakemongo.collection import FakeCollection
from tests.sim.fakemongo.session import FakeSession
from timer_service.clock import FakeClock

NOW = 1_767_225_600_000


@pytest.fixture
def plan() -> FaultPlan:
    return FaultPlan()


@pytest.fixture
def server(plan: FaultPlan) -> FakeMongo:
    return FakeMongo(FakeClock(NOW), faults=plan)


@pytest.fixture
def coll(server: FakeMongo) -> FakeCollection:
    return server.client()["db"]["c"]


async def test_an_error_before_a_command_applies_nothing(
    plan: FaultPlan, coll: FakeCollection
) -> None:
    plan.add(Fail(not_primary), name="update_many")
    with pytest.raises(NotPrimaryError):
        await coll.update_many({}, {"$set": {"v": 1}}, upsert=True)
    assert await coll.find_one({}) is None
    await coll.update_many({}, {"$set": {"v": 1}}, upsert=True)  # the rule was for once
    assert await coll.count_documents({"v": 1}) == 1


async def test_a_lost_reply_leaves_the_write_applied(plan: FaultPlan, coll: FakeCollection) -> None:
    await coll.insert_many([{"_id": i, "state": "pending"} for i in range(3)])
    plan.add(LoseReply(), name="update_many")
    with pytest.raises(NetworkTimeout):
        await coll.update_many({"state": "pending"}, {"$set": {"state": "dispatched"}})
    # Visible to everyone afterwards: the claim applied though its caller never heard.
    assert await coll.count_documents({"state": "dispatched"}) == 3


async def test_a_lost_bulk_reply_after_some_of_its_commands(
    server: FakeMongo, plan: FaultPlan, coll: FakeCollection
) -> None:
    """An ordered bulk of an update then an insert is two commands: the first can
    apply and the second fail."""
    plan.add(Fail(), name="bulk_write", when=lambda c: c.args["kind"] == "insert")
    with pytest.raises(AutoReconnect):
        await coll.bulk_write(
            [UpdateOne({"_id": 1}, {"$set": {"a": 1}}, upsert=True), InsertOne({"_id": 2})]
        )
    assert [d["_id"] for d in await coll.find({}).to_list(None)] == [1]


async def test_a_delay_waits_on_the_fakes_clock(
    server: FakeMongo, plan: FaultPlan, coll: FakeCollection
) -> None:
    clock = server.clock
    assert isinstance(clock, FakeClock)
    plan.add(Delay(2.5), name="insert_one")
    task = asyncio.create_task(coll.insert_one({"_id": 1}))
    await clock.run_for(2_000)
    assert not task.done() and await coll.find_one({"_id": 1}) is None
    await clock.run_for(600)
    assert task.done() and await coll.find_one({"_id": 1}) == {"_id": 1}


async def test_a_stall_holds_its_command_while_others_go_on(
    plan: FaultPlan, coll: FakeCollection
) -> None:
    stall = Stall()
    plan.add(stall, name="update_one")
    held = asyncio.create_task(coll.update_one({"_id": 1}, {"$set": {"v": "late"}}, upsert=True))
    await stall.reached.wait()
    await coll.insert_one({"_id": 2})  # the server still serves others
    assert not held.done() and await coll.find_one({"_id": 1}) is None
    stall.release()
    await held
    assert await coll.find_one({"_id": 1}) == {"_id": 1, "v": "late"}


async def test_other_callers_commands_come_between_two_of_one_sequence(
    server: FakeMongo, coll: FakeCollection
) -> None:
    """Read-then-write by two callers at once: each command yields before it applies,
    so the second caller's read lands between the first caller's read and write."""
    await coll.insert_one({"_id": "n", "v": 0})

    async def increment() -> None:
        doc = await coll.find_one({"_id": "n"})
        assert doc is not None
        await coll.update_one({"_id": "n"}, {"$set": {"v": doc["v"] + 1}})

    await asyncio.gather(increment(), increment())
    asked = [(c.name, c.collection) for c in server.log][1:]
    assert asked == [("find", "c"), ("find", "c"), ("update_one", "c"), ("update_one", "c")]
    assert (await coll.find_one({"_id": "n"}) or {})["v"] == 1  # a lost update, as on MongoDB


async def test_the_plan_sees_every_command_with_its_arguments(
    server: FakeMongo, coll: FakeCollection
) -> None:
    seen: list[Command] = []
    server.faults = lambda command: seen.append(command)  # type: ignore[func-returns-value]
    await coll.insert_many([{"_id": i} for i in range(3)])
    await coll.find({"_id": {"$gte": 1}}).batch_size(1).to_list(None)
    async with coll.database.client.start_session() as session:

        async def write(s: FakeSession) -> None:
            await coll.delete_one({"_id": 0}, session=s)

        await session.with_transaction(write)
    assert [c.name for c in seen] == [
        "insert_many",
        "find",
        "getMore",
        "getMore",
        "delete_one",
        "commitTransaction",
    ]
    assert seen[1].args["filter"] == {"_id": {"$gte": 1}}
    assert seen[4].in_transaction and not seen[1].in_transaction


async def test_a_transaction_retries_after_a_transient_error_and_commits_once(
    plan: FaultPlan, coll: FakeCollection
) -> None:
    await coll.insert_many([{"_id": 1}, {"_id": 2}])
    plan.add(Fail(), name="insert_one", when=lambda c: c.in_transaction)
    plan.add(LoseReply(), name="commitTransaction")
    runs = 0

    async def move(session: FakeSession) -> None:
        nonlocal runs
        runs += 1
        await coll.delete_one({"_id": 1}, session=session)
        await coll.insert_one({"_id": 3}, session=session)

    async with coll.database.client.start_session() as session:
        await session.with_transaction(move)
    assert runs == 2  # the first attempt was aborted (undone) and run again
    assert sorted(d["_id"] for d in await coll.find({}).to_list(None)) == [2, 3]


async def test_a_command_reads_as_one_line_of_a_trace(server: FakeMongo) -> None:
    coll = server.client()["timer"]["jobs_b5"]
    await coll.update_many({"state": "pending"}, {"$set": {"state": "dispatched"}})
    line = server.log[-1].brief(60)
    assert line.startswith("#1 update_many timer.jobs_b5 {'filter'"), line
    assert len(line) == 60 and line.endswith("…")


async def test_seeded_faults_repeat_exactly_for_one_seed() -> None:
    async def run(seed: int) -> list[str]:
        faults = SeededFaults(random.Random(seed), 0.2, 0.2, 0.2, names="update_one")
        clock = FakeClock(NOW)
        server = FakeMongo(clock, faults=faults)
        coll = server.client()["db"]["c"]
        said = []
        for i in range(30):
            try:
                await clock.drive(coll.update_one({"_id": i}, {"$set": {"v": i}}, upsert=True))
                said.append("ok")
            except PyMongoError as exc:
                said.append(type(exc).__name__)
        stored = sorted(d["_id"] for d in await coll.find({}).to_list(None))
        return [*said, str(stored)]

    first = await run(7)
    assert first == await run(7)
    assert first != await run(8)
    assert {"ok", "AutoReconnect", "NetworkTimeout", "NotPrimaryError"} <= set(first[:-1])
