"""Sessions and transactions, as `AsyncClientSession` offers them: `start_transaction`,
`commit_transaction`, `abort_transaction` and `with_transaction` (retrying on the
labels PyMongo retries on, for up to 120 s of the fake's clock). The isolation is
the server's (`server.py`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from pymongo.errors import ConnectionFailure, InvalidOperation, OperationFailure, PyMongoError

if TYPE_CHECKING:
    from tests.sim.fakemongo.client import FakeClient

T = TypeVar("T")

WITH_TRANSACTION_RETRY_S = 120.0  # PyMongo's with_transaction time limit


class FakeSession:
    def __init__(self, client: FakeClient) -> None:
        self.client = client
        self._server = client.server
        self.in_transaction = False
        self.txn_aborted_by_server = False
        self._committed = False
        self.has_ended = False

    async def __aenter__(self) -> FakeSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.end_session()

    async def end_session(self) -> None:
        if self.in_transaction:
            await self.abort_transaction()
        self.has_ended = True

    async def start_transaction(self, *args: Any, **kwargs: Any) -> None:
        if self.in_transaction:
            raise InvalidOperation("Transaction already in progress")
        self.in_transaction = True
        self.txn_aborted_by_server = False
        self._committed = False

    async def commit_transaction(self) -> None:
        if not self.in_transaction and not self._committed:
            raise InvalidOperation("No transaction started")
        server = self._server

        def commit(_: Any) -> None:
            if self._committed:
                return  # a retried commit of a committed transaction: ok
            if self.txn_aborted_by_server:
                error = OperationFailure("Transaction has been aborted.", 251)
                error._add_error_label("TransientTransactionError")
                raise error
            if server.transaction_of(self) is not None:
                server.end_transaction(commit=True)
            self._committed = True

        try:
            await server.run("commitTransaction", "admin", None, {}, commit, self, control=True)
        except OperationFailure:
            self.in_transaction = False
            raise
        self.in_transaction = False

    async def abort_transaction(self) -> None:
        if not self.in_transaction:
            raise InvalidOperation("No transaction started")
        server = self._server

        def abort(_: Any) -> None:
            if server.transaction_of(self) is not None:
                server.end_transaction(commit=False)

        try:
            await server.run("abortTransaction", "admin", None, {}, abort, self, control=True)
        except PyMongoError:
            # PyMongo ignores abort errors; the server ends the transaction at its
            # lifetime limit then (a transaction left open by a dead process).
            pass
        finally:
            self.in_transaction = False

    async def with_transaction(
        self, callback: Callable[[FakeSession], Awaitable[T]], *args: Any, **kwargs: Any
    ) -> T:
        clock = self._server.clock
        start = clock.monotonic_s()

        def in_time() -> bool:
            return clock.monotonic_s() - start < WITH_TRANSACTION_RETRY_S

        while True:
            await self.start_transaction()
            try:
                result = await callback(self)
            except BaseException as exc:
                if self.in_transaction:
                    await self.abort_transaction()
                if _labelled(exc, "TransientTransactionError") and in_time():
                    continue
                raise
            if not self.in_transaction:
                return result  # the callback ended the transaction itself
            while True:
                try:
                    await self.commit_transaction()
                except PyMongoError as exc:
                    if _labelled(exc, "UnknownTransactionCommitResult") and in_time():
                        self.in_transaction = True
                        continue
                    if _labelled(exc, "TransientTransactionError") and in_time():
                        break
                    raise
                return result


def _labelled(exc: BaseException, label: str) -> bool:
    return isinstance(exc, PyMongoError) and exc.has_error_label(label)


__all__ = ["ConnectionFailure", "FakeSession"]
