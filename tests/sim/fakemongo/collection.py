"""A collection of the fake, with the methods the adapter calls, answering with
PyMongo's own result and error types; each method is one command (a bulk: one per
run of statements of one kind, as PyMongo splits it)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from pymongo import ReturnDocument
from pymongo.errors import BulkWriteError, OperationFailure
from pymongo.operations import IndexModel
from pymongo.results import (
    BulkWriteResult,
    DeleteResult,
    InsertManyResult,
    InsertOneResult,
    UpdateResult,
)
from pymongo.write_concern import WriteConcern

from tests.sim.fakemongo.bulk import Statement, run_bulk, runs_of, statements_of
from tests.sim.fakemongo.cursors import FakeChangeStream, FakeCommandCursor, FakeCursor
from tests.sim.fakemongo.engine import CollectionData, DuplicateKey, IndexSpec, Writes, index_name
from tests.sim.fakemongo.errors import command_error, single_write
from tests.sim.fakemongo.query import project, sort_spec
from tests.sim.fakemongo.session import FakeSession
from tests.sim.fakemongo.update import UpdateFailure
from tests.sim.fakemongo.values import Doc, as_reply, normalised, now_date

if TYPE_CHECKING:
    from tests.sim.fakemongo.client import FakeDatabase

T = TypeVar("T")


class FakeCollection:
    def __init__(self, database: FakeDatabase, name: str, write_concern: WriteConcern) -> None:
        self.database = database
        self.name = name
        self.full_name = f"{database.name}.{name}"
        self.write_concern = write_concern
        self.server = database.client.server
        self.engine = self.server.engine
        self._options = database.client.codec_options

    def with_options(
        self, *, write_concern: WriteConcern | None = None, **options: Any
    ) -> FakeCollection:
        return FakeCollection(self.database, self.name, write_concern or self.write_concern)

    # -- plumbing --------------------------------------------------------------------------
    def data(self, create: bool = False) -> CollectionData | None:
        return self.engine.collection(self.database.name, self.name, create)

    def reply(self, doc: Doc) -> Doc:
        return as_reply(doc, self._options)

    def server_now(self) -> dt.datetime:
        return now_date(self.server.clock.now_ms())

    async def run(
        self,
        name: str,
        args: dict[str, Any],
        apply: Callable[[Writes], T],
        session: FakeSession | None = None,
    ) -> T:
        self.database.client.check_open()
        return await self.server.run(name, self.database.name, self.name, args, apply, session)

    @property
    def _acknowledged(self) -> bool:
        return self.write_concern.acknowledged

    # -- reads -----------------------------------------------------------------------------
    def find(self, *args: Any, **kwargs: Any) -> FakeCursor:
        return FakeCursor(self, *args, **kwargs)

    async def find_one(self, filter: Any = None, *args: Any, **kwargs: Any) -> Doc | None:
        if filter is not None and not isinstance(filter, Mapping):
            filter = {"_id": filter}
        docs = await self.find(filter, *args, **kwargs).limit(-1).to_list(1)
        return docs[0] if docs else None

    async def count_documents(
        self, filter: Doc, session: FakeSession | None = None, **kwargs: Any
    ) -> int:
        query = normalised(filter)
        skip, limit = kwargs.pop("skip", 0), kwargs.pop("limit", 0)
        if kwargs:
            raise NotImplementedError(f"fake MongoDB: count_documents options {sorted(kwargs)}")

        def count(_: Writes) -> int:
            n = len(self.engine.select(self.data(), query)) - skip
            return max(0, min(n, limit) if limit else n)

        return await self.run("count_documents", {"filter": query}, count, session)

    async def estimated_document_count(self, **kwargs: Any) -> int:
        return await self.run("count", {}, lambda _: len(d.docs) if (d := self.data()) else 0)

    async def aggregate(
        self, pipeline: Sequence[Doc], session: FakeSession | None = None, **kwargs: Any
    ) -> FakeCommandCursor:
        cursor = FakeCommandCursor(self, session, int(kwargs.pop("batchSize", 0)))
        await cursor._run(normalised(list(pipeline)))
        return cursor

    async def watch(
        self,
        pipeline: Sequence[Doc] | None = None,
        full_document: str | None = None,
        resume_after: Any = None,
        max_await_time_ms: int | None = None,
        batch_size: int | None = None,
        collation: Any = None,
        start_at_operation_time: Any = None,
        session: FakeSession | None = None,
        start_after: Any = None,
        **kwargs: Any,
    ) -> FakeChangeStream:
        if start_at_operation_time is not None or collation is not None:
            raise NotImplementedError("fake MongoDB: watch from an operation time, collations")
        stream = FakeChangeStream(
            self, normalised(list(pipeline or [])), full_document, max_await_time_ms, session
        )
        await stream._open(resume_after if resume_after is not None else start_after)
        return stream

    # -- single writes -----------------------------------------------------------------------
    async def insert_one(
        self, document: Doc, session: FakeSession | None = None, **kw: Any
    ) -> InsertOneResult:
        if "_id" not in document:
            document["_id"] = self.engine.new_id()  # as PyMongo, in the caller's dict
        doc = normalised(document)

        def insert(w: Writes) -> Any:
            single_write(lambda: self.engine.insert(self._coll(), doc, w), {"insert": doc})
            return doc["_id"]

        await self.run("insert_one", {"document": doc}, insert, session)
        return InsertOneResult(document["_id"], self._acknowledged)

    async def insert_many(
        self,
        documents: Sequence[Doc],
        ordered: bool = True,
        session: FakeSession | None = None,
        **kw: Any,
    ) -> InsertManyResult:
        for document in documents:
            if "_id" not in document:
                document["_id"] = self.engine.new_id()
        ops = [Statement("insert", {"document": normalised(d)}, i) for i, d in enumerate(documents)]
        await self._bulk("insert_many", ops, ordered, session)
        return InsertManyResult([d["_id"] for d in documents], self._acknowledged)

    async def update_one(
        self, filter: Doc, update: Any, upsert: bool = False, **kw: Any
    ) -> UpdateResult:
        return await self._update("update_one", filter, update, upsert, multi=False, **kw)

    async def update_many(
        self, filter: Doc, update: Any, upsert: bool = False, **kw: Any
    ) -> UpdateResult:
        return await self._update("update_many", filter, update, upsert, multi=True, **kw)

    async def replace_one(
        self, filter: Doc, replacement: Doc, upsert: bool = False, **kw: Any
    ) -> UpdateResult:
        return await self._update(
            "replace_one", filter, replacement, upsert, multi=False, replacement=True, **kw
        )

    async def _update(
        self,
        name: str,
        filter: Doc,
        update: Any,
        upsert: bool,
        *,
        multi: bool,
        replacement: bool = False,
        session: FakeSession | None = None,
        array_filters: Any = None,
        sort: Any = None,
        **kw: Any,
    ) -> UpdateResult:
        _no_options(kw)
        query, change = normalised(filter), normalised(update)
        args = {"filter": query, "update": change, "upsert": upsert}

        def apply(w: Writes) -> Doc:
            coll = self._coll()
            n, modified, upserted_id, _, _ = single_write(
                lambda: self.engine.update(
                    coll,
                    query,
                    change,
                    w,
                    multi=multi,
                    upsert=upsert,
                    replacement=replacement,
                    sort=sort,
                    array_filters=array_filters,
                ),
                {"q": query, "u": change, "multi": multi, "upsert": upsert},
            )
            raw: Doc = {
                "n": n + (1 if upserted_id is not None else 0),
                "nModified": modified,
                "ok": 1.0,
            }
            if upserted_id is not None:
                raw["upserted"] = upserted_id
            return raw

        raw = await self.run(name, args, apply, session)
        return UpdateResult(raw, self._acknowledged)

    async def delete_one(
        self, filter: Doc, session: FakeSession | None = None, **kw: Any
    ) -> DeleteResult:
        return await self._delete("delete_one", filter, False, session, kw)

    async def delete_many(
        self, filter: Doc, session: FakeSession | None = None, **kw: Any
    ) -> DeleteResult:
        return await self._delete("delete_many", filter, True, session, kw)

    async def _delete(
        self, name: str, filter: Doc, multi: bool, session: FakeSession | None, kw: dict[str, Any]
    ) -> DeleteResult:
        _no_options(kw)
        query = normalised(filter)

        def apply(w: Writes) -> Doc:
            return {
                "n": len(self.engine.delete_matching(self.data(), query, w, multi=multi)),
                "ok": 1.0,
            }

        return DeleteResult(
            await self.run(name, {"filter": query}, apply, session), self._acknowledged
        )

    # -- find and modify -------------------------------------------------------------------
    async def find_one_and_update(
        self,
        filter: Doc,
        update: Any,
        projection: Any = None,
        sort: Any = None,
        upsert: bool = False,
        return_document: bool = ReturnDocument.BEFORE,
        array_filters: Any = None,
        session: FakeSession | None = None,
        **kw: Any,
    ) -> Doc | None:
        return await self._find_and_modify(
            "find_one_and_update",
            filter,
            update,
            projection,
            sort,
            upsert,
            return_document,
            session,
            kw,
            replacement=False,
            array_filters=array_filters,
        )

    async def find_one_and_replace(
        self,
        filter: Doc,
        replacement: Doc,
        projection: Any = None,
        sort: Any = None,
        upsert: bool = False,
        return_document: bool = ReturnDocument.BEFORE,
        session: FakeSession | None = None,
        **kw: Any,
    ) -> Doc | None:
        return await self._find_and_modify(
            "find_one_and_replace",
            filter,
            replacement,
            projection,
            sort,
            upsert,
            return_document,
            session,
            kw,
            replacement=True,
        )

    async def find_one_and_delete(
        self,
        filter: Doc,
        projection: Any = None,
        sort: Any = None,
        session: FakeSession | None = None,
        **kw: Any,
    ) -> Doc | None:
        _no_options(kw)
        query = normalised(filter)

        def apply(w: Writes) -> Doc | None:
            gone = self.engine.delete_matching(self.data(), query, w, multi=False, sort=sort)
            return self.reply(project(gone[0], projection)) if gone else None

        return await self.run("find_one_and_delete", {"filter": query}, apply, session)

    async def _find_and_modify(
        self,
        name: str,
        filter: Doc,
        update: Any,
        projection: Any,
        sort: Any,
        upsert: bool,
        return_document: bool,
        session: FakeSession | None,
        kw: dict[str, Any],
        *,
        replacement: bool,
        array_filters: Any = None,
    ) -> Doc | None:
        _no_options(kw)
        query, change = normalised(filter), normalised(update)
        sort = None if sort is None else sort_spec(sort)

        def apply(w: Writes) -> Doc | None:
            try:
                _, _, _, before, after = self.engine.update(
                    self._coll(),
                    query,
                    change,
                    w,
                    upsert=upsert,
                    replacement=replacement,
                    sort=sort,
                    array_filters=array_filters,
                )
            except UpdateFailure as exc:
                raise command_error(exc) from None
            doc = after if return_document == ReturnDocument.AFTER else before
            return None if doc is None else self.reply(project(doc, projection))

        return await self.run(
            name, {"filter": query, "update": change, "upsert": upsert}, apply, session
        )

    # -- bulk --------------------------------------------------------------------------------
    async def bulk_write(
        self,
        requests: Sequence[Any],
        ordered: bool = True,
        session: FakeSession | None = None,
        **kw: Any,
    ) -> BulkWriteResult:
        _no_options(kw)
        result = await self._bulk(
            "bulk_write", statements_of(requests, self.engine.new_id), ordered, session
        )
        return BulkWriteResult(result, self._acknowledged)

    async def _bulk(
        self, name: str, statements: list[Statement], ordered: bool, session: FakeSession | None
    ) -> Doc:
        """PyMongo's split of a bulk into commands: runs of one kind (insert, update,
        delete), consecutive when ordered, grouped by kind when not; one command each."""
        full: Doc = {
            "writeErrors": [],
            "writeConcernErrors": [],
            "nInserted": 0,
            "nUpserted": 0,
            "nMatched": 0,
            "nModified": 0,
            "nRemoved": 0,
            "upserted": [],
        }
        for run in runs_of(statements, ordered):
            args = {"kind": run[0].kind, "statements": [s.command for s in run], "ordered": ordered}

            def apply(w: Writes, run: list[Statement] = run) -> bool:
                return run_bulk(self.engine, self._coll(), run, ordered, w, full)

            stop = await self.run(name, args, apply, session)
            if stop:
                break
        if full["writeErrors"]:
            full["writeErrors"].sort(key=lambda e: e["index"])
            raise BulkWriteError(full)
        return full

    # -- indexes and the collection itself -------------------------------------------------------
    async def create_index(
        self, keys: Any, session: FakeSession | None = None, **kwargs: Any
    ) -> str:
        (name,) = await self.create_indexes([IndexModel(keys, **kwargs)], session=session)
        return name

    async def create_indexes(
        self, indexes: Sequence[IndexModel], session: FakeSession | None = None, **kw: Any
    ) -> list[str]:
        specs = [_index_spec(model.document) for model in indexes]

        def create(_: Writes) -> list[str]:
            coll = self._coll()
            try:
                return [self.engine.create_index(coll, spec) for spec in specs]
            except DuplicateKey as exc:
                raise command_error(exc) from None

        return await self.run(
            "create_indexes", {"indexes": [s.name for s in specs]}, create, session
        )

    async def drop_index(
        self, index_or_name: Any, session: FakeSession | None = None, **kw: Any
    ) -> None:
        name = (
            index_or_name
            if isinstance(index_or_name, str)
            else index_name(sort_spec(index_or_name))
        )

        def drop(_: Writes) -> None:
            coll = self.data()
            if coll is None or name not in coll.indexes or name == "_id_":
                raise OperationFailure(f"index not found with name [{name}]", 27)
            del coll.indexes[name]

        await self.run("drop_index", {"name": name}, drop, session)

    async def index_information(self, session: FakeSession | None = None) -> Doc:
        def info(_: Writes) -> Doc:
            coll = self.data()
            out: Doc = {}
            for spec in coll.indexes.values() if coll else ():
                entry: Doc = {"key": list(spec.keys), "v": 2}
                if spec.unique and spec.name != "_id_":
                    entry["unique"] = True
                if spec.expire_after_s is not None:
                    entry["expireAfterSeconds"] = spec.expire_after_s
                out[spec.name] = entry
            return out

        return await self.run("list_indexes", {}, info, session)

    async def drop(self, session: FakeSession | None = None, **kw: Any) -> None:
        def drop(_: Writes) -> None:
            self.engine.dbs.get(self.database.name, {}).pop(self.name, None)

        await self.run("drop", {}, drop, session)

    def _coll(self) -> CollectionData:
        coll = self.data(create=True)
        assert coll is not None
        return coll


def _no_options(kw: dict[str, Any]) -> None:
    unknown = set(kw) - {"hint", "comment", "bypass_document_validation", "let", "collation"}
    if unknown or kw.get("collation") is not None or kw.get("let") is not None:
        raise NotImplementedError(f"fake MongoDB: write options {sorted(kw)}")


def _index_spec(document: Mapping[str, Any]) -> IndexSpec:
    keys = list(document["key"].items())
    known = {"key", "name", "unique", "sparse", "expireAfterSeconds", "background"}
    if set(document) - known:
        raise NotImplementedError(f"fake MongoDB: index options {sorted(set(document) - known)}")
    return IndexSpec(
        name=document.get("name") or index_name(keys),
        keys=keys,
        unique=bool(document.get("unique", False)),
        sparse=bool(document.get("sparse", False)),
        expire_after_s=document.get("expireAfterSeconds"),
    )


__all__ = ["FakeCollection"]
