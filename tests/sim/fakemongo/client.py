"""The fake's client and databases, shaped as PyMongo's `AsyncMongoClient` and
`AsyncDatabase` where the adapter uses them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bson.codec_options import CodecOptions
from pymongo.errors import InvalidOperation, OperationFailure
from pymongo.write_concern import WriteConcern

from tests.sim.fakemongo.collection import FakeCollection
from tests.sim.fakemongo.engine import Writes
from tests.sim.fakemongo.server import FakeMongo, codec_options
from tests.sim.fakemongo.session import FakeSession
from tests.sim.fakemongo.values import Doc


class FakeClient:
    def __init__(self, server: FakeMongo, *, tz_aware: bool = True, **options: Any) -> None:
        self.server = server
        self.codec_options: CodecOptions[Any] = codec_options(tz_aware)
        self.options = options
        self.closed = False

    def get_database(
        self, name: str, *, write_concern: WriteConcern | None = None, **options: Any
    ) -> FakeDatabase:
        return FakeDatabase(self, name, write_concern or WriteConcern())

    def __getitem__(self, name: str) -> FakeDatabase:
        return self.get_database(name)

    def start_session(self, **options: Any) -> FakeSession:
        return FakeSession(self)

    async def drop_database(self, name_or_database: str | FakeDatabase) -> None:
        name = name_or_database if isinstance(name_or_database, str) else name_or_database.name

        def drop(w: Writes) -> None:
            self.server.engine.dbs.pop(name, None)

        self.check_open()
        await self.server.run("dropDatabase", name, None, {}, drop)

    async def list_database_names(self) -> list[str]:
        engine = self.server.engine
        self.check_open()
        return await self.server.run(
            "listDatabases", "admin", None, {}, lambda _: sorted(engine.dbs)
        )

    async def close(self) -> None:
        self.closed = True

    def check_open(self) -> None:
        if self.closed:  # PyMongo 4: a closed client is not reopened
            raise InvalidOperation("Cannot use AsyncMongoClient after close")

    async def __aenter__(self) -> FakeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class FakeDatabase:
    def __init__(self, client: FakeClient, name: str, write_concern: WriteConcern) -> None:
        self.client = client
        self.name = name
        self.write_concern = write_concern

    def with_options(
        self, *, write_concern: WriteConcern | None = None, **options: Any
    ) -> FakeDatabase:
        return FakeDatabase(self.client, self.name, write_concern or self.write_concern)

    def get_collection(
        self, name: str, *, write_concern: WriteConcern | None = None, **options: Any
    ) -> FakeCollection:
        return FakeCollection(self, name, write_concern or self.write_concern)

    def __getitem__(self, name: str) -> FakeCollection:
        return self.get_collection(name)

    async def command(self, command: str | Mapping[str, Any], *args: Any, **kwargs: Any) -> Doc:
        name = command if isinstance(command, str) else next(iter(command))
        answers: dict[str, Doc] = {
            "ping": {"ok": 1.0},
            "hello": {"isWritablePrimary": True, "setName": "fake", "ok": 1.0},
            "isMaster": {"ismaster": True, "setName": "fake", "ok": 1.0},
            "buildInfo": {"version": "7.0.0-fake", "ok": 1.0},
        }
        if name not in answers:
            raise NotImplementedError(f"fake MongoDB: command {name!r} is not supported")
        self.client.check_open()
        return await self.client.server.run(
            name, self.name, None, {}, lambda _: dict(answers[name])
        )

    async def list_collection_names(self, *args: Any, **kwargs: Any) -> list[str]:
        engine = self.client.server.engine
        self.client.check_open()
        return await self.client.server.run(
            "listCollections", self.name, None, {}, lambda _: sorted(engine.dbs.get(self.name, {}))
        )

    async def drop_collection(self, name: str, **kwargs: Any) -> None:
        await self[name].drop()

    async def create_collection(self, name: str, **kwargs: Any) -> FakeCollection:
        coll = self[name]

        def create(_: Writes) -> None:
            if coll.data() is not None:
                raise OperationFailure(f"Collection {self.name}.{name} already exists.", 48)
            coll.data(create=True)

        await coll.run("create", {}, create)
        return coll


__all__ = ["FakeClient", "FakeCollection", "FakeDatabase"]
