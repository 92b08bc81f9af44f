"""The real `MongoStore` over the fake driver: what the contract suite calls
"mongo-fake", and what the simulation builds its store from."""

from __future__ import annotations

import random
from typing import Any

from tests.sim.fakemongo import FakeMongo
from timer_service.store.mongo import MongoStore

FAKE_URL = "mongodb://fake-mongo/"


def fake_mongo_store(
    db_name: str = "timer", server: FakeMongo | None = None, **options: Any
) -> MongoStore:
    """A `MongoStore` whose clients (the main one and the leases') talk to `server`
    (a new one if not given: its unsorted results shuffled by a fixed seed, since
    MongoDB promises no order without a sort), as `MongoStore` builds them: tz-aware."""
    server = server or FakeMongo(shuffle=random.Random(0))
    return MongoStore(
        FAKE_URL,
        db_name,
        client=server.client(tz_aware=True),  # type: ignore[arg-type]
        leases_client=server.client(tz_aware=True),  # type: ignore[arg-type]
        **options,
    )
