"""mongod's background reaper of abandoned transactions, for SecantusDB, which lacks one.

mongod aborts a transaction idle past `transactionLifetimeLimitSeconds` (60 s) on its own.
SecantusDB 0.7 only reaps when another transaction command arrives, and a plain write
that conflicts with an abandoned transaction retries without limit: after a process dies
in the middle of a move (timer_service/store/mongo/moves.py), writes to the moved jobs
would wait for ever, not 60 s (tests/integration/test_store_abandoned_transaction.py).
Fault tests run this beside their store so that it behaves as mongod would: a transaction
every few seconds makes SecantusDB reap what is past its lifetime.
"""

from __future__ import annotations

import logging
import threading
from types import TracebackType
from typing import Any, Self

from pymongo import MongoClient
from pymongo.errors import PyMongoError

EVERY_S = 5.0
DB_NAME = "timer_test_reaper"

log = logging.getLogger(__name__)


class TransactionReaper:
    def __init__(self, url: str, every_s: float = EVERY_S) -> None:
        self._client: MongoClient[dict[str, Any]] = MongoClient(
            url, serverSelectionTimeoutMS=2000, socketTimeoutMS=5000
        )
        self._every_s = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="txn-reaper", daemon=True)
        self.pokes = 0

    def _run(self) -> None:
        noop = self._client[DB_NAME]["noop"]
        while not self._stop.wait(self._every_s):
            try:
                with self._client.start_session() as session:
                    session.start_transaction()
                    noop.find_one({}, session=session)  # the first statement starts it
                    session.abort_transaction()
                self.pokes += 1
            except PyMongoError as exc:  # the store may be down on purpose: try again later
                log.debug("transaction reaper poke failed: %r", exc)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(10)
        self._client.close()
