"""Cursors over the fake: a find's and an aggregation's (first batch with the
command, the rest by `getMore`, each a command of its own, in batches as MongoDB
sizes them), and a change stream.

A find evaluates its whole result when its first command applies; later batches
hand out that result. (MongoDB's later batches may see writes made meanwhile, a
document moved within the index twice or not at all: not modelled.)"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pymongo.errors import InvalidOperation

from tests.sim.fakemongo.expressions import Context, run_pipeline
from tests.sim.fakemongo.query import project, sort_spec, sorted_docs
from tests.sim.fakemongo.server import token_position
from tests.sim.fakemongo.values import Doc, hashable, normalised

if TYPE_CHECKING:
    from tests.sim.fakemongo.client import FakeCollection
    from tests.sim.fakemongo.session import FakeSession

FIRST_BATCH = 101  # documents in a cursor's first reply unless told otherwise
AWAIT_MS = 1000  # a change stream's getMore waits this long for an event by default


class _Batches:
    """A command's result handed out in batches: the first with the command, the
    rest by `getMore`; a batch filled to its size leaves the cursor open, so the
    next read is a `getMore` even if it finds nothing (as on MongoDB)."""

    def __init__(self, coll: FakeCollection, session: FakeSession | None) -> None:
        self._coll = coll
        self._session = session
        self._buffer: deque[Doc] = deque()
        self._rest: list[Doc] | None = None  # None: the first command not sent yet
        self._open = True
        self._batch = 0
        self.single_batch = False
        self._limited = False  # the server stops at the limit: no getMore past it

    async def _first(
        self, name: str, args: dict[str, Any], result: Callable[[], list[Doc]]
    ) -> None:
        docs = await self._coll.run(name, args, lambda _: result(), self._session)
        self._rest = docs
        self._take(self._batch or FIRST_BATCH)

    def _take(self, size: int) -> None:
        assert self._rest is not None
        batch, self._rest = (self._rest[:size], self._rest[size:]) if size else (self._rest, [])
        self._buffer.extend(batch)
        self._open = (
            not self.single_batch
            and bool(size)
            and len(batch) == size
            and (bool(self._rest) or not self._limited)
        )

    async def _more(self) -> bool:
        """Fetch the next batch; False when the cursor is exhausted."""
        if self._buffer:
            return True
        if not self._open:
            return False
        await self._coll.run("getMore", {"batchSize": self._batch}, lambda _: None, self._session)
        self._take(self._batch)
        return bool(self._buffer)

    async def _start(self) -> None:
        raise NotImplementedError

    async def next(self) -> Doc:
        if self._rest is None:
            await self._start()
        if not await self._more():
            raise StopAsyncIteration
        return self._buffer.popleft()

    def __aiter__(self) -> _Batches:
        return self

    async def __anext__(self) -> Doc:
        return await self.next()

    async def to_list(self, length: int | None = None) -> list[Doc]:
        out: list[Doc] = []
        while length is None or len(out) < length:
            try:
                out.append(await self.next())
            except StopAsyncIteration:
                break
        return out

    @property
    def alive(self) -> bool:
        return self._rest is None or bool(self._buffer) or self._open

    async def close(self) -> None:
        self._open = False
        self._buffer.clear()


class FakeCursor(_Batches):
    def __init__(
        self,
        coll: FakeCollection,
        filter: Doc | None = None,
        projection: Any = None,
        *,
        sort: Any = None,
        limit: int = 0,
        skip: int = 0,
        batch_size: int = 0,
        session: FakeSession | None = None,
        **options: Any,
    ) -> None:
        super().__init__(coll, session)
        unknown = set(options) - {"hint", "max_time_ms", "comment", "allow_disk_use"}
        if unknown:
            raise NotImplementedError(f"fake MongoDB: find options {sorted(unknown)}")
        self._filter = normalised(filter or {})
        self._projection = projection
        self._sort: list[tuple[str, int]] | None = None if sort is None else sort_spec(sort)
        self._limit = limit
        self._skip = skip
        self._batch = batch_size

    def _check_unstarted(self) -> None:
        if self._rest is not None:
            raise InvalidOperation("cannot set options after executing query")

    def sort(self, key: Any, direction: Any = None) -> FakeCursor:
        self._check_unstarted()
        self._sort = sort_spec(key, direction)
        return self

    def limit(self, limit: int) -> FakeCursor:
        self._check_unstarted()
        self._limit = limit
        return self

    def skip(self, skip: int) -> FakeCursor:
        self._check_unstarted()
        self._skip = skip
        return self

    def batch_size(self, batch_size: int) -> FakeCursor:
        self._check_unstarted()
        self._batch = batch_size
        return self

    async def _start(self) -> None:
        limit = self._limit
        self._limited = bool(limit)
        if limit < 0:
            self.single_batch = True
            limit = -limit
        if limit and (not self._batch or self._batch > limit):
            self._batch = limit
            self.single_batch = True
        args = {
            "filter": self._filter,
            "projection": self._projection,
            "sort": self._sort,
            "limit": self._limit,
            "skip": self._skip,
            "batchSize": self._batch,
        }
        coll = self._coll

        def result() -> list[Doc]:
            docs = coll.engine.select(coll.data(), self._filter)
            if self._sort:
                docs = sorted_docs(docs, self._sort)
            docs = docs[self._skip :]
            if limit:
                docs = docs[:limit]
            return [coll.reply(project(d, self._projection)) for d in docs]

        await self._first("find", args, result)


class FakeCommandCursor(_Batches):
    """An aggregation's cursor (created by `FakeCollection.aggregate`)."""

    def __init__(self, coll: FakeCollection, session: FakeSession | None, batch_size: int) -> None:
        super().__init__(coll, session)
        self._batch = batch_size

    async def _run(self, pipeline: list[Doc]) -> None:
        coll = self._coll

        def result() -> list[Doc]:
            docs = coll.engine.select(coll.data(), {})
            ctx = Context(coll.server_now())
            return [coll.reply(d) for d in run_pipeline(docs, pipeline, ctx)]

        await self._first("aggregate", {"pipeline": pipeline}, result)

    async def _start(self) -> None:
        raise AssertionError("an aggregation runs when it is created")

    async def try_next(self) -> Doc | None:
        try:
            return await self.next()
        except StopAsyncIteration:
            return None


class FakeChangeStream:
    """A collection's change stream: events after where it opened (or after
    `resume_after`), through the stream's pipeline; one `getMore` per empty buffer,
    waiting up to `max_await_time_ms` on the fake's clock for an event."""

    def __init__(
        self,
        coll: FakeCollection,
        pipeline: list[Doc],
        full_document: str | None,
        max_await_time_ms: int | None,
        session: FakeSession | None,
    ) -> None:
        if full_document not in (None, "default", "updateLookup"):
            raise NotImplementedError(f"fake MongoDB: full_document={full_document!r}")
        self._coll = coll
        self._pipeline = pipeline
        self._lookup = full_document == "updateLookup"
        self._await_s = (max_await_time_ms or AWAIT_MS) / 1000
        self._session = session
        self._position = 0
        self._buffer: deque[tuple[int, Doc]] = deque()
        self._token: Any = None
        self._alive = True

    async def _open(self, resume_after: Any) -> None:
        server = self._coll.server

        def open_at(_: Any) -> int:
            return server.event_position if resume_after is None else token_position(resume_after)

        args = {"pipeline": self._pipeline, "resume_after": resume_after}
        self._position = await self._coll.run("watch", args, open_at, self._session)
        server.events_after(self._position)  # a token too old fails here, as on MongoDB
        self._token = resume_after

    def _collect(self) -> None:
        coll = self._coll
        found = coll.server.events_after(self._position)
        ctx = Context(coll.server_now())
        for seq, event in found:
            self._position = seq
            ns = event["ns"]
            if ns["db"] != coll.database.name or ns["coll"] != coll.name:
                continue
            if self._lookup and event["operationType"] == "update":
                data = coll.data()
                current = data.docs.get(hashable(event["documentKey"]["_id"])) if data else None
                event = {**event, "fullDocument": current}
            if self._pipeline and not run_pipeline([event], self._pipeline, ctx):
                continue
            self._buffer.append((seq, coll.reply(event)))

    async def try_next(self) -> Doc | None:
        if not self._alive:
            raise InvalidOperation("cannot call try_next on a closed change stream")
        if not self._buffer:
            await self._coll.run(
                "getMore", {"change_stream": True}, lambda _: self._collect(), self._session
            )
            if not self._buffer:
                await self._coll.server.wait_for_event(self._await_s)
                self._collect()
        if not self._buffer:
            self._token = {"_data": f"FAKE{self._position:016X}"}
            return None
        _, event = self._buffer.popleft()
        self._token = event["_id"]
        return event

    async def next(self) -> Doc:
        while True:
            event = await self.try_next()
            if event is not None:
                return event

    def __aiter__(self) -> FakeChangeStream:
        return self

    async def __anext__(self) -> Doc:
        return await self.next()

    @property
    def resume_token(self) -> Any:
        return self._token

    @property
    def alive(self) -> bool:
        return self._alive

    async def close(self) -> None:
        self._alive = False

    async def __aenter__(self) -> FakeChangeStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
