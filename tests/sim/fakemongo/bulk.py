"""Bulk writes as PyMongo sends them: each request turned into its wire statement
(by the request's own `_add_to_bulk`), statements grouped into commands, and a
command's statements applied with write errors collected per statement."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from bson import ObjectId

from tests.sim.fakemongo.engine import CollectionData, Engine, Writes
from tests.sim.fakemongo.update import UpdateFailure
from tests.sim.fakemongo.values import Doc, normalised

KINDS = ("insert", "update", "delete")


@dataclass(frozen=True, slots=True)
class Statement:
    kind: str  # insert | update | delete
    command: (
        Doc  # the wire statement: {"document"} | {"q", "u", "multi", "upsert"} | {"q", "limit"}
    )
    index: int  # its place in the caller's list


class _Recorder:
    """Stands in for PyMongo's bulk object: collects what each request adds."""

    def __init__(self, new_id: Callable[[], ObjectId]) -> None:
        self.new_id = new_id
        self.statements: list[tuple[str, Doc]] = []

    def add_insert(self, document: Doc) -> None:
        if "_id" not in document:
            document["_id"] = self.new_id()
        self.statements.append(("insert", {"document": document}))

    def add_update(
        self,
        selector: Doc,
        update: Any,
        multi: bool,
        upsert: bool | None = None,
        collation: Any = None,
        array_filters: Any = None,
        hint: Any = None,
        sort: Any = None,
    ) -> None:
        command: Doc = {"q": selector, "u": update, "multi": multi}
        if upsert is not None:
            command["upsert"] = upsert
        if array_filters is not None:
            command["arrayFilters"] = array_filters
        if sort is not None:
            command["sort"] = sort
        if collation is not None:
            raise NotImplementedError("fake MongoDB: collations")
        self.statements.append(("update", command))

    def add_replace(
        self,
        selector: Doc,
        replacement: Doc,
        upsert: bool | None = None,
        collation: Any = None,
        hint: Any = None,
        sort: Any = None,
    ) -> None:
        command: Doc = {"q": selector, "u": replacement, "multi": False, "replace": True}
        if upsert is not None:
            command["upsert"] = upsert
        if sort is not None:
            command["sort"] = sort
        self.statements.append(("update", command))

    def add_delete(
        self, selector: Doc, limit: int, collation: Any = None, hint: Any = None
    ) -> None:
        self.statements.append(("delete", {"q": selector, "limit": limit}))


def statements_of(requests: Sequence[Any], new_id: Callable[[], ObjectId]) -> list[Statement]:
    if not requests:
        raise ValueError("requests cannot be empty")  # PyMongo's InvalidOperation
    recorder = _Recorder(new_id)
    for request in requests:
        request._add_to_bulk(recorder)
    return [
        Statement(kind, normalised(command), i)
        for i, (kind, command) in enumerate(recorder.statements)
    ]


def runs_of(statements: list[Statement], ordered: bool) -> Iterator[list[Statement]]:
    if not ordered:
        for kind in KINDS:
            of_kind = [s for s in statements if s.kind == kind]
            if of_kind:
                yield of_kind
        return
    run: list[Statement] = []
    for statement in statements:
        if run and run[-1].kind != statement.kind:
            yield run
            run = []
        run.append(statement)
    if run:
        yield run


def run_bulk(
    engine: Engine,
    coll: CollectionData,
    run: list[Statement],
    ordered: bool,
    w: Writes,
    full: Doc,
) -> bool:
    """Apply one command's statements, counting into `full` (PyMongo's bulk result);
    True when an ordered bulk stops at an error."""
    for s in run:
        c = s.command
        try:
            if s.kind == "insert":
                engine.insert(coll, c["document"], w)
                full["nInserted"] += 1
            elif s.kind == "delete":
                full["nRemoved"] += len(
                    engine.delete_matching(coll, c["q"], w, multi=c["limit"] == 0)
                )
            else:
                n, modified, upserted_id, _, _ = engine.update(
                    coll,
                    c["q"],
                    c["u"],
                    w,
                    multi=c["multi"],
                    upsert=bool(c.get("upsert")),
                    replacement=bool(c.get("replace")),
                    sort=c.get("sort"),
                    array_filters=c.get("arrayFilters"),
                )
                full["nMatched"] += n
                full["nModified"] += modified
                if upserted_id is not None:
                    full["nUpserted"] += 1
                    full["upserted"].append({"index": s.index, "_id": upserted_id})
        except UpdateFailure as exc:
            from tests.sim.fakemongo.errors import write_error

            error = write_error(exc, s.index)
            op = (
                c["document"]
                if s.kind == "insert"
                else {k: v for k, v in c.items() if k != "replace"}
            )
            error["op"] = op
            full["writeErrors"].append(error)
            if ordered:
                return True
    return False
