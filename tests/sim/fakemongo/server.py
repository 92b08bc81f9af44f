"""The fake MongoDB server: runs each command as one atomic step between awaits,
consults the fault plan first, logs what was asked, and keeps the change events.

Isolation (docs: tests/sim/README.md): a command's statements apply at once, with
nothing else in between. A transaction takes the server-wide transaction lock at
its first command and holds it until it commits or aborts (or outlives
`TRANSACTION_LIFETIME_S` on the fake's clock, when the next command that waits for
it aborts it, as mongod's `transactionLifetimeLimitSeconds` does): every other
command waits meanwhile. Its writes apply at once with an undo step each; an abort
undoes them, a commit publishes their change events. That is serializable, which
is stronger than MongoDB's snapshot isolation (no write conflicts to retry, no
reads of a snapshot older than a concurrent commit).
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from bson.codec_options import CodecOptions
from bson.timestamp import Timestamp
from pymongo.errors import ConnectionFailure, OperationFailure, PyMongoError

from tests.sim.fakemongo.engine import Engine, Undo, Writes
from tests.sim.fakemongo.faults import Command, Delay, Fail, Fault, Faults, LoseReply, Stall
from tests.sim.fakemongo.values import Doc, now_date
from timer_service.clock import Clock, SystemClock

if TYPE_CHECKING:
    from tests.sim.fakemongo.session import FakeSession

T = TypeVar("T")

TRANSACTION_LIFETIME_S = 60.0  # mongod's transactionLifetimeLimitSeconds
TTL_PASS_S = 60.0  # mongod's ttlMonitorSleepSecs
EVENT_HISTORY = 100_000  # change events kept for resuming (the oplog's window)
NO_SUCH_TRANSACTION = 251
CHANGE_STREAM_HISTORY_LOST = 286


@dataclass
class Transaction:
    session: FakeSession
    started_ms: int
    undo: list[Undo] = field(default_factory=list)
    events: list[Doc] = field(default_factory=list)


class FakeMongo:
    """One server (a replica set's primary, as the adapter sees it). `faults` is
    consulted before every command (`faults.py`); `log` keeps every command asked,
    in the order asked; `shuffle` (a seeded Random) shuffles what unsorted queries
    match (`Engine.select`)."""

    def __init__(
        self,
        clock: Clock | None = None,
        faults: Faults | None = None,
        *,
        keep_log: int | None = 100_000,
        shuffle: random.Random | None = None,
    ) -> None:
        self.clock: Clock = clock or SystemClock()
        self.faults = faults
        self.engine = Engine(shuffle)
        self.log: deque[Command] = deque(maxlen=keep_log)
        self._seq = itertools.count(1)
        self._txn: Transaction | None = None
        self._txn_over = asyncio.Event()
        self._events: deque[tuple[int, Doc]] = deque(maxlen=EVENT_HISTORY)
        self._event_seq = 0
        self._new_event = asyncio.Event()
        self._next_ttl_ms = self.clock.now_ms() + int(TTL_PASS_S * 1000)

    def client(self, *, tz_aware: bool = True, **options: Any) -> Any:
        """A client of this server (`AsyncMongoClient`'s subset the adapter uses)."""
        from tests.sim.fakemongo.client import FakeClient

        return FakeClient(self, tz_aware=tz_aware, **options)

    # -- running commands ----------------------------------------------------------------
    async def run(
        self,
        name: str,
        database: str,
        collection: str | None,
        args: dict[str, Any],
        apply: Callable[[Writes], T],
        session: FakeSession | None = None,
        *,
        control: bool = False,
    ) -> T:
        """Run one command: `apply` is its whole effect, called once, atomically.
        `control` (commit, abort) neither starts a transaction nor waits for one."""
        in_txn = session is not None and session.in_transaction
        command = Command(next(self._seq), database, collection, name, args, in_txn)
        self.log.append(command)
        lose: BaseException | None = None
        await asyncio.sleep(0)  # on its way: others' commands may go first
        for fault in _faults_of(self.faults(command) if self.faults else None):
            if isinstance(fault, Delay):
                await self.clock.sleep(fault.seconds)
            elif isinstance(fault, Stall):
                await fault.wait()
            elif isinstance(fault, Fail):
                raise _labelled(fault.make(), session, name)
            elif isinstance(fault, LoseReply):
                lose = fault.make()
        txn = self.transaction_of(session) if control and session else None
        if not control:
            txn = await self._admit(session)
        self._expire_ttl()
        writes = Writes(
            txn.undo if txn else None,
            txn.events if txn else [],
            now_date(self.clock.now_ms()),
        )
        try:
            result = apply(writes)
        finally:
            if txn is None:
                self._publish(writes.events)
        await asyncio.sleep(0)  # the reply on its way back
        if lose is not None:
            raise _labelled(lose, session, name)
        return result

    async def _admit(self, session: FakeSession | None) -> Transaction | None:
        """Wait until no other session's transaction holds the lock; start this
        session's transaction if it is in one. Returns the transaction it is in."""
        while True:
            txn = self._txn
            if txn is None:
                if session is None or not session.in_transaction:
                    return None
                if session.txn_aborted_by_server:
                    raise _no_such_transaction()
                self._txn = Transaction(session, self.clock.now_ms())
                return self._txn
            if session is not None and txn.session is session:
                return txn
            if session is not None and session.in_transaction and session.txn_aborted_by_server:
                raise _no_such_transaction()
            left_s = txn.started_ms / 1000 + TRANSACTION_LIFETIME_S - self.clock.now_ms() / 1000
            if left_s <= 0:
                txn.session.txn_aborted_by_server = True
                self.end_transaction(commit=False)
                continue
            over = self._txn_over
            try:
                await self.clock.wait_for(over.wait(), left_s)
            except TimeoutError:
                pass

    def transaction_of(self, session: FakeSession) -> Transaction | None:
        txn = self._txn
        return txn if txn is not None and txn.session is session else None

    def end_transaction(self, *, commit: bool) -> None:
        txn = self._txn
        assert txn is not None
        self._txn = None
        if commit:
            self._publish(txn.events)
        else:
            for undo in reversed(txn.undo):
                undo()
        self._txn_over.set()
        self._txn_over = asyncio.Event()

    # -- TTL -----------------------------------------------------------------------------
    def _expire_ttl(self) -> None:
        now_ms = self.clock.now_ms()
        if now_ms < self._next_ttl_ms or self._txn is not None:
            return
        self.expire_now()

    def expire_now(self) -> int:
        """One TTL monitor pass now (the fake runs one every `TTL_PASS_S` of its
        clock, at the first command after it is due); the documents removed."""
        now_ms = self.clock.now_ms()
        self._next_ttl_ms = now_ms + int(TTL_PASS_S * 1000)
        writes = Writes(None, [], now_date(now_ms))
        removed = 0
        for colls in self.engine.dbs.values():
            for coll in colls.values():
                for doc in list(self.engine.expired(coll, writes.now)):
                    self.engine.delete(coll, doc, writes)
                    removed += 1
        self._publish(writes.events)
        return removed

    # -- change events -------------------------------------------------------------------
    def _publish(self, events: Sequence[Doc]) -> None:
        if not events:
            return
        for event in events:
            self._event_seq += 1
            seq = self._event_seq
            wall = event["wallTime"]
            event = {
                "_id": resume_token(seq),
                **event,
                "clusterTime": Timestamp(int(wall.timestamp()), seq % 2**32),
            }
            self._events.append((seq, event))
        self._new_event.set()
        self._new_event = asyncio.Event()

    @property
    def event_position(self) -> int:
        return self._event_seq

    def events_after(self, position: int) -> list[tuple[int, Doc]]:
        oldest = self._events[0][0] if self._events else self._event_seq + 1
        if position + 1 < oldest and position < self._event_seq:
            raise OperationFailure(
                "Resume of change stream was not possible, as the resume point may no longer "
                "be in the oplog.",
                CHANGE_STREAM_HISTORY_LOST,
            )
        if position >= self._event_seq:
            return []
        skip = position + 1 - oldest
        return list(itertools.islice(self._events, max(skip, 0), None))

    async def wait_for_event(self, timeout_s: float) -> None:
        try:
            await self.clock.wait_for(self._new_event.wait(), timeout_s)
        except TimeoutError:
            pass


def resume_token(seq: int) -> Doc:
    return {"_data": f"FAKE{seq:016X}"}


def token_position(token: Any) -> int:
    data = token.get("_data") if isinstance(token, dict) else None
    if not isinstance(data, str) or not data.startswith("FAKE"):
        raise OperationFailure(f"invalid resume token: {token!r}", 260)
    return int(data[4:], 16)


def _faults_of(answer: Fault | Sequence[Fault] | None) -> Sequence[Fault]:
    if answer is None:
        return ()
    if isinstance(answer, Fail | LoseReply | Delay | Stall):
        return (answer,)
    return answer


def _labelled(error: BaseException, session: FakeSession | None, name: str) -> BaseException:
    """A network error inside a transaction carries the label PyMongo gives it."""
    if isinstance(error, ConnectionFailure) and session is not None and session.in_transaction:
        label = (
            "UnknownTransactionCommitResult"
            if name == "commitTransaction"
            else "TransientTransactionError"
        )
        error._add_error_label(label)
    return error


def _no_such_transaction() -> PyMongoError:
    error = OperationFailure("Transaction has been aborted (lifetime limit).", NO_SUCH_TRANSACTION)
    error._add_error_label("TransientTransactionError")
    return error


def codec_options(tz_aware: bool) -> CodecOptions[Any]:
    return CodecOptions(tz_aware=tz_aware)
