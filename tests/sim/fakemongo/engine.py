"""The fake server's data: databases of collections of documents, their indexes
(unique ones enforced, TTL ones recorded), and every write as a primitive that
keeps the indexes, records how to undo it (inside a transaction) and what change
event it makes. Synchronous: one statement runs whole, between two awaits of the
command runner (`server.py`)."""

from __future__ import annotations

import datetime as dt
import itertools
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from bson import ObjectId

from tests.sim.fakemongo.expressions import Context
from tests.sim.fakemongo.query import is_operator_doc, matches, sort_spec, sorted_docs
from tests.sim.fakemongo.update import (
    UpdateFailure,
    apply_update,
    check_replacement,
    check_update,
    upserted,
)
from tests.sim.fakemongo.values import MISSING, Doc, equal, get_path, hashable, sort_key

DUPLICATE_KEY = 11000


class DuplicateKey(UpdateFailure):
    def __init__(self, coll: CollectionData, index: IndexSpec, doc: Doc) -> None:
        value = {path: _index_value(doc, path) for path, _ in index.keys}
        shown = ", ".join(f"{k}: {_shell(v)}" for k, v in value.items())
        super().__init__(
            DUPLICATE_KEY,
            f"E11000 duplicate key error collection: {coll.db}.{coll.name} "
            f"index: {index.name} dup key: {{ {shown} }}",
        )
        self.key_pattern = dict(index.keys)
        self.key_value = value


def _shell(value: Any) -> str:
    return f'"{value}"' if isinstance(value, str) else repr(value)


def _index_value(doc: Doc, path: str) -> Any:
    value = get_path(doc, path)
    return None if value is MISSING else value


@dataclass
class IndexSpec:
    name: str
    keys: list[tuple[str, Any]]
    unique: bool = False
    sparse: bool = False
    expire_after_s: float | None = None
    entries: dict[Any, Any] = field(default_factory=dict)  # unique: index key -> doc key

    def key_of(self, doc: Doc) -> Any | None:
        """The unique index's key of `doc`; None when a sparse index leaves it out."""
        values = [get_path(doc, path) for path, _ in self.keys]
        if self.sparse and all(v is MISSING for v in values):
            return None
        if any(isinstance(v, list) for v in values):
            raise NotImplementedError("fake MongoDB: a unique index over an array field")
        return tuple(hashable(None if v is MISSING else v) for v in values)

    def same_options(self, other: IndexSpec) -> bool:
        return (self.keys, self.unique, self.sparse, self.expire_after_s) == (
            other.keys,
            other.unique,
            other.sparse,
            other.expire_after_s,
        )


def index_name(keys: list[tuple[str, Any]]) -> str:
    return "_".join(f"{path}_{direction}" for path, direction in keys)


@dataclass
class CollectionData:
    db: str
    name: str
    docs: dict[Any, Doc] = field(default_factory=dict)
    indexes: dict[str, IndexSpec] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.indexes["_id_"] = IndexSpec("_id_", [("_id", 1)], unique=True)


Undo = Callable[[], None]


@dataclass
class Writes:
    """Where a command's writes leave their trace: undo steps (in a transaction)
    and change events (published at once, or at commit)."""

    undo: list[Undo] | None
    events: list[Doc]
    now: dt.datetime


class Engine:
    def __init__(self, shuffle: random.Random | None = None) -> None:
        self.dbs: dict[str, dict[str, CollectionData]] = {}
        self._ids = itertools.count(1)
        # MongoDB promises no order without a sort (an index scan gives the index's,
        # a collection scan the records'): given a seeded Random, the documents a
        # query matches come in a shuffled order, so code that leans on one shows.
        self._shuffle = shuffle

    def new_id(self) -> ObjectId:
        """Deterministic ObjectIds for upserted and inserted documents without one."""
        return ObjectId(next(self._ids).to_bytes(12, "big"))

    def collection(self, db: str, name: str, create: bool = False) -> CollectionData | None:
        colls = self.dbs.get(db)
        if colls is None or name not in colls:
            if not create:
                return None
            colls = self.dbs.setdefault(db, {})
            colls[name] = CollectionData(db, name)
        return colls[name]

    # -- reads ---------------------------------------------------------------------------
    def select(self, coll: CollectionData | None, query: Doc) -> list[Doc]:
        """The stored documents `query` matches (not copies), in natural order (or
        shuffled), or in `_id` order when the query names `_id`s (by its index)."""
        if coll is None:
            return []
        wanted = query.get("_id", MISSING)
        if wanted is not MISSING and not is_operator_doc(wanted):
            found = coll.docs.get(hashable(wanted))
            return [found] if found is not None and matches(found, query) else []
        if is_operator_doc(wanted) and set(wanted) == {"$in"}:
            keys = {hashable(v) for v in wanted["$in"]}
            docs = [coll.docs[k] for k in keys if k in coll.docs]
            docs.sort(key=lambda d: sort_key(d["_id"]))
            return [d for d in docs if matches(d, query)]
        matched = [d for d in coll.docs.values() if matches(d, query)]
        if self._shuffle is not None:
            self._shuffle.shuffle(matched)
        return matched

    # -- write primitives ----------------------------------------------------------------
    def _check_unique(self, coll: CollectionData, doc: Doc, replacing: Any = MISSING) -> None:
        for index in coll.indexes.values():
            if not index.unique or index.name == "_id_":
                continue
            key = index.key_of(doc)
            holder = index.entries.get(key, MISSING) if key is not None else MISSING
            if holder is not MISSING and (replacing is MISSING or holder != replacing):
                raise DuplicateKey(coll, index, doc)

    def _index(self, coll: CollectionData, doc: Doc, add: bool) -> None:
        for index in coll.indexes.values():
            if index.unique and index.name != "_id_":
                key = index.key_of(doc)
                if key is None:
                    continue
                if add:
                    index.entries[key] = hashable(doc["_id"])
                else:
                    index.entries.pop(key, None)

    def _put(self, coll: CollectionData, doc: Doc) -> None:
        key = hashable(doc["_id"])
        old = coll.docs.get(key)
        if old is not None:
            self._index(coll, old, add=False)
        coll.docs[key] = doc
        self._index(coll, doc, add=True)

    def _remove(self, coll: CollectionData, key: Any) -> None:
        old = coll.docs.pop(key)
        self._index(coll, old, add=False)

    def insert(self, coll: CollectionData, doc: Doc, w: Writes) -> None:
        key = hashable(doc["_id"])
        if key in coll.docs:
            raise DuplicateKey(coll, coll.indexes["_id_"], doc)
        self._check_unique(coll, doc)
        self._put(coll, doc)
        if w.undo is not None:
            w.undo.append(lambda: self._remove(coll, key))
        w.events.append(_event(coll, "insert", doc, w.now, full=doc))

    def replace(self, coll: CollectionData, old: Doc, new: Doc, w: Writes, op: str) -> None:
        key = hashable(old["_id"])
        self._check_unique(coll, new, replacing=key)
        self._put(coll, new)
        if w.undo is not None:
            w.undo.append(lambda: self._put(coll, old))
        if op == "replace":
            w.events.append(_event(coll, "replace", new, w.now, full=new))
        else:
            w.events.append(_event(coll, "update", new, w.now, description=_diff(old, new)))

    def delete(self, coll: CollectionData, doc: Doc, w: Writes) -> None:
        key = hashable(doc["_id"])
        self._remove(coll, key)
        if w.undo is not None:
            w.undo.append(lambda: self._put(coll, doc))
        w.events.append(_event(coll, "delete", doc, w.now))

    # -- statements ----------------------------------------------------------------------
    def update(
        self,
        coll: CollectionData,
        query: Doc,
        update: Any,
        w: Writes,
        *,
        multi: bool = False,
        upsert: bool = False,
        replacement: bool = False,
        sort: Any = None,
        array_filters: Any = None,
    ) -> tuple[int, int, Any, Doc | None, Doc | None]:
        """One update statement: (matched, modified, upserted _id, the last document
        before, after)."""
        if array_filters:
            raise NotImplementedError("fake MongoDB: arrayFilters")
        if replacement:
            check_replacement(update)
        else:
            check_update(update)
        ctx = Context(w.now)
        found = self.select(coll, query)
        if sort:
            found = sorted_docs(found, sort_spec(sort))
        if not multi:
            found = found[:1]
        if not found:
            if not upsert:
                return 0, 0, None, None, None
            doc = upserted(query, update, ctx, self.new_id(), replacement=replacement)
            self.insert(coll, doc, w)
            return 0, 0, doc["_id"], None, doc
        modified = 0
        before = after = None
        for old in found:
            if replacement:
                new = {"_id": old["_id"], **{k: v for k, v in update.items() if k != "_id"}}
                if "_id" in update and not equal(update["_id"], old["_id"]):
                    raise UpdateFailure(66, "the _id field cannot be changed by a replacement")
            else:
                new = apply_update(old, update, ctx, inserting=False)
            before, after = old, new
            if equal(new, old):
                continue
            self.replace(coll, old, new, w, "replace" if replacement else "update")
            modified += 1
        return len(found), modified, None, before, after

    def delete_matching(
        self, coll: CollectionData | None, query: Doc, w: Writes, *, multi: bool, sort: Any = None
    ) -> list[Doc]:
        found = self.select(coll, query)
        if sort:
            found = sorted_docs(found, sort_spec(sort))
        if not multi:
            found = found[:1]
        assert coll is not None or not found
        for doc in found:
            self.delete(coll, doc, w)  # type: ignore[arg-type]
        return found

    def create_index(self, coll: CollectionData, spec: IndexSpec) -> str:
        from pymongo.errors import OperationFailure

        existing = coll.indexes.get(spec.name)
        if existing is not None:
            if existing.same_options(spec):
                return spec.name
            raise OperationFailure(
                f"An existing index has the same name as the requested index: {spec.name}", 86
            )
        for other in coll.indexes.values():
            if other.keys == spec.keys and not other.same_options(spec):
                raise OperationFailure(
                    f"Index already exists with a different name: {other.name}", 85
                )
        if spec.unique:
            for doc in coll.docs.values():
                key = spec.key_of(doc)
                if key is None:
                    continue
                if key in spec.entries:
                    raise DuplicateKey(coll, spec, doc)
                spec.entries[key] = hashable(doc["_id"])
        coll.indexes[spec.name] = spec
        return spec.name

    def expired(self, coll: CollectionData, now: dt.datetime) -> Iterator[Doc]:
        """The documents a TTL pass removes now (dates only, as MongoDB: a number in
        a TTL field never expires)."""
        for index in coll.indexes.values():
            if index.expire_after_s is None or len(index.keys) != 1:
                continue
            path = index.keys[0][0]
            limit = now - dt.timedelta(seconds=index.expire_after_s)
            for doc in list(coll.docs.values()):
                value = get_path(doc, path)
                dates = [v for v in (value if isinstance(value, list) else [value])]
                dates = [v for v in dates if isinstance(v, dt.datetime)]
                if dates and min(dates) <= limit:
                    yield doc


def _event(
    coll: CollectionData,
    op: str,
    doc: Doc,
    now: dt.datetime,
    *,
    full: Doc | None = None,
    description: Doc | None = None,
) -> Doc:
    event: Doc = {
        "operationType": op,
        "wallTime": now,
        "ns": {"db": coll.db, "coll": coll.name},
        "documentKey": {"_id": doc["_id"]},
    }
    if full is not None:
        event["fullDocument"] = full
    if description is not None:
        event["updateDescription"] = description
    return event


def _diff(old: Doc, new: Doc, prefix: str = "") -> Doc:
    """What changed, as a change event's `updateDescription` (nested documents by
    dotted path, arrays whole)."""
    updated: Doc = {}
    removed: list[str] = []
    for key, value in new.items():
        path = prefix + key
        before = old.get(key, MISSING)
        if before is not MISSING and equal(before, value):
            continue
        if isinstance(value, dict) and isinstance(before, dict):
            inner = _diff(before, value, path + ".")
            updated.update(inner["updatedFields"])
            removed.extend(inner["removedFields"])
        else:
            updated[path] = value
    removed.extend(prefix + key for key in old if key not in new)
    return {"updatedFields": updated, "removedFields": removed, "truncatedArrays": []}
