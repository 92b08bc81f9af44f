"""An in-memory fake of the async PyMongo API subset the MongoDB adapter uses, with
a fault at any command (tests/sim/README.md).

    server = FakeMongo(clock, faults=plan)
    store = fake_mongo_store("db", server)  # tests/sim/fake_store.py
"""

from tests.sim.fakemongo.client import FakeClient, FakeCollection, FakeDatabase
from tests.sim.fakemongo.faults import (
    Command,
    Delay,
    Fail,
    FaultPlan,
    LoseReply,
    SeededFaults,
    Stall,
    connection_lost,
    network_timeout,
    not_primary,
)
from tests.sim.fakemongo.server import FakeMongo
from tests.sim.fakemongo.session import FakeSession

__all__ = [
    "Command",
    "Delay",
    "Fail",
    "FakeClient",
    "FakeCollection",
    "FakeDatabase",
    "FakeMongo",
    "FakeSession",
    "FaultPlan",
    "LoseReply",
    "SeededFaults",
    "Stall",
    "connection_lost",
    "network_timeout",
    "not_primary",
]
