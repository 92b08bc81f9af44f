"""MongoDB store (PyMongo's native asyncio API): one client, one `Layout`, a port
per caller role. The layout is described in `timer_service.store.mongo.layout`."""

from __future__ import annotations

import contextlib
import time
from typing import Any
from urllib.parse import parse_qs, urlsplit

from pymongo import ASCENDING, AsyncMongoClient, WriteConcern
from pymongo.errors import OperationFailure

from timer_service.errors import StoreUnavailable
from timer_service.store.mongo.audit import MongoAudit
from timer_service.store.mongo.biz_types import MongoBizTypes
from timer_service.store.mongo.brokers import MongoBrokers
from timer_service.store.mongo.calendar import MongoCalendar
from timer_service.store.mongo.console import MongoConsole
from timer_service.store.mongo.counts import MongoCounts
from timer_service.store.mongo.errors import UNAVAILABLE, translated
from timer_service.store.mongo.jobs import MongoJobs
from timer_service.store.mongo.layout import Doc, Layout
from timer_service.store.mongo.leases import MongoLeases
from timer_service.store.mongo.outcomes import MongoOutcomes
from timer_service.store.mongo.pointers import MongoPointers
from timer_service.store.mongo.reconcile import MongoReconcile
from timer_service.store.mongo.rounds import MongoRounds
from timer_service.store.mongo.scan import MongoScan
from timer_service.store.mongo.schedules import MongoSchedules
from timer_service.store.mongo.schema import ensure_schema
from timer_service.store.mongo.scope import Scope
from timer_service.store.mongo.sweep import MongoSweep
from timer_service.store.mongo.tokens import MongoTokens
from timer_service.store.mongo.upgrade import upgrade_from_moves


def durable_writes(url: str) -> dict[str, Any]:
    """The write concern of what the API acknowledges (a 201, a 200 cancel): on a
    majority of the replica set and in its journal, so it survives a crash (a PSA
    replica set's default is w:1, and a store that syncs only on request lost 8 of
    200 acknowledged jobs to a kill -9). A URL that says otherwise (``w=``,
    ``journal=``) is the operator's choice."""
    given = {key.lower() for key in parse_qs(urlsplit(url).query)}
    defaults: dict[str, Any] = {}
    if "w" not in given:
        defaults["w"] = "majority"
    if "journal" not in given:
        defaults["journal"] = True
    return defaults


def hot_path_writes(url: str) -> dict[str, Any]:
    """The daemon's and broker's writes (claims, send marks, outcomes): on a majority,
    without waiting for a journal flush per write. What a crash of the store loses
    of them is redone, not lost: a claim or an outcome not kept leaves the job
    dispatched, and the reconciler sends it again (a duplicate across a crash, as
    the contract allows). On MongoDB, w:majority waits for the journal anyway
    (writeConcernMajorityJournalDefault); on a single-node store, a journal flush
    per hot-path write made callbacks ~800 ms late."""
    return (
        {"w": "majority"} if "w" not in {k.lower() for k in parse_qs(urlsplit(url).query)} else {}
    )


# The leases, pointers and brokers ports' own pool: a renew, a pointer save or a
# heartbeat at a time per process, and one spare; one connection kept open so a renew
# never waits for a handshake. See `MongoStore`.
LEASE_POOL_SIZE = 2


def lease_client(url: str) -> AsyncMongoClient[Doc]:
    return AsyncMongoClient(
        url,
        tz_aware=True,
        serverSelectionTimeoutMS=5000,
        socketTimeoutMS=60_000,
        maxPoolSize=LEASE_POOL_SIZE,
        minPoolSize=1,
        appname="timer-leases",
        **hot_path_writes(url),
    )


class MongoStore:
    """The leases, pointers and brokers ports (the daemon's leases and pointers, the
    brokers' heartbeats) have a
    client and connection pool of its own: a lease renew never waits for a connection
    behind claims, loads or a burst of creates, nor on a connection whose reply is
    slow. A slow store then slows the bulk work, not the heartbeat that keeps a leader
    leading (docs/architecture.md, "Overload")."""

    def __init__(
        self,
        url: str,
        db_name: str,
        *,
        buckets: int = 60,
        retention_ms: int = 30 * 86_400_000,
        partitions: int = 1,
        client: AsyncMongoClient[Doc] | None = None,
        leases_client: AsyncMongoClient[Doc] | None = None,
    ) -> None:
        self.buckets = buckets
        self.retention_ms = retention_ms
        self._client: AsyncMongoClient[Doc] = client or AsyncMongoClient(
            # No store call may wait forever: a reply that never comes turns into an
            # error the caller retries (the default is to wait without limit).
            url,
            tz_aware=True,
            serverSelectionTimeoutMS=5000,
            socketTimeoutMS=60_000,
            **hot_path_writes(url),
        )
        self._leases_client: AsyncMongoClient[Doc] = leases_client or lease_client(url)
        self.partitions = partitions
        self.layout = Layout(self._client, db_name, buckets, retention_ms, partitions=partitions)
        # The API's ports write with the acknowledged-means-durable concern.
        durable = durable_writes(url)
        concern = WriteConcern(w=durable.get("w"), j=durable.get("journal"))
        acknowledged = Layout(
            self._client, db_name, buckets, retention_ms, concern, partitions=partitions
        )
        self.biz_types = translated(MongoBizTypes(acknowledged))
        self.jobs = translated(MongoJobs(acknowledged))
        self.calendar = translated(MongoCalendar(acknowledged))
        self.console = translated(MongoConsole(acknowledged, self.jobs.read_jobs))
        self.audit = translated(MongoAudit(acknowledged))
        self.tokens = translated(MongoTokens(acknowledged))
        scope = Scope(partitions)  # this process's partitions: `ScanPort.own`
        self.scan = translated(MongoScan(self.layout, scope))
        self.rounds = translated(MongoRounds(self.layout, scope))
        self.reconcile = translated(MongoReconcile(self.layout, scope))
        self.sweep = translated(MongoSweep(self.layout, scope))
        self.counts = translated(MongoCounts(self.layout, scope))
        leases_layout = Layout(
            self._leases_client, db_name, buckets, retention_ms, partitions=partitions
        )
        self.leases = translated(MongoLeases(leases_layout))
        self.pointers = translated(MongoPointers(leases_layout))
        self.brokers = translated(MongoBrokers(leases_layout))
        self.outcomes = translated(MongoOutcomes(self.layout))
        # Beside the jobs, in the same database (the write concern of the daemon's).
        self.schedules = translated(MongoSchedules(self.layout.db))

    @property
    def database(self) -> Any:
        """The database handle, for adapters that keep their own collections beside it."""
        return self.layout.db

    async def setup(self) -> None:
        """The indexes, created once by whichever process gets there first (see
        `schema`); a later start only reads the schema document."""
        await ensure_schema(self.layout, self._create_indexes)

    async def _create_indexes(self) -> None:
        layout = self.layout
        await layout.locator.create_index("expire_at", expireAfterSeconds=0)
        await layout.locator.create_index([("biz_type", ASCENDING), ("_id", ASCENDING)])
        # The console's label search: labels never change, so the locator (written once
        # per job, never on the hot path) carries them (docs/api.md, "Search").
        await layout.locator.create_index(
            [("biz_type", ASCENDING), ("labels", ASCENDING), ("_id", ASCENDING)]
        )
        await MongoAudit(layout).create_indexes()
        await layout.brokers.create_index("expires_at")
        for coll in layout.buckets:
            # Loads and claims; `_id` last makes a bounded claim one range (schema 4;
            # it replaces (second, state, next_attempt_at), its prefix).
            await coll.create_index(
                [
                    ("second", ASCENDING),
                    ("state", ASCENDING),
                    ("next_attempt_at", ASCENDING),
                    ("_id", ASCENDING),
                ]
            )
            with contextlib.suppress(OperationFailure):
                await coll.drop_index("second_1_state_1_next_attempt_at_1")
            await coll.create_index([("state", ASCENDING), ("claimed_at", ASCENDING)])
            # The overdue-pending sweep: normally an empty range.
            await coll.create_index([("state", ASCENDING), ("next_attempt_at", ASCENDING)])
            # Lists a biz type's jobs in a state in key order; its prefix serves the
            # delete-biz-type check. Replaces (biz_type, state) of releases before.
            await coll.create_index(
                [("biz_type", ASCENDING), ("state", ASCENDING), ("_id", ASCENDING)]
            )
            with contextlib.suppress(OperationFailure):
                await coll.drop_index("biz_type_1_state_1")
            await coll.create_index("expire_at", expireAfterSeconds=0)
            # The console's stats: the jobs attempted in the last minutes (an outcome
            # pushes one entry; a claim leaves it alone).
            await coll.create_index("history.at")
        # What the layout that moved jobs left behind (schema 4 and before).
        await upgrade_from_moves(layout, time.time_ns() // 1_000_000)

    async def close(self) -> None:
        await self._leases_client.close()
        await self._client.close()

    async def ping(self) -> None:
        try:
            await self.layout.db.command("ping")
        except UNAVAILABLE as exc:
            raise StoreUnavailable(f"the store did not answer ({type(exc).__name__})") from exc

    async def drop_database(self) -> None:
        await self._client.drop_database(self.layout.db.name)


__all__ = ["MongoStore"]
