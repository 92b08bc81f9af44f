"""Which grant a presented bearer token carries, answered from memory.

The bootstrap tokens (TIMER_API_TOKEN, TIMER_API_TOKENS) are admins fixed at start; the
access tokens of `/v1/tokens` are read from the store into a table by the SHA-256 of
their secret, refreshed when it is `REFRESH_S` old (or, for a token it does not hold, at
most once per `MISS_REFRESH_S`, so a token just created works within a second on every
replica). A deleted token is therefore refused everywhere within `REFRESH_S` plus one
store read, well inside the 5 s the contract allows. Ages are measured on the injected
clock's monotonic time.

Constant time: the table is keyed by the hash of the presented secret, so the lookup's
timing depends only on that hash, which tells an attacker nothing about any stored
secret; a hit is then confirmed with `hmac.compare_digest`.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Mapping

from timer_service.access import Grant, Role, hash_token
from timer_service.clock import Clock
from timer_service.errors import StoreUnavailable
from timer_service.store.ports.tokens import TokensPort

log = logging.getLogger(__name__)

REFRESH_S = 2.0
MISS_REFRESH_S = 1.0
# A table this old is not trusted: a revocation could be older than the contract's 5 s.
STALE_LIMIT_S = 4.0


class TokenTable:
    def __init__(self, port: TokensPort, clock: Clock, bootstrap: Mapping[str, str]) -> None:
        self._port = port
        self._clock = clock
        self._bootstrap = {
            hash_token(t): (hash_token(t), Grant(n, Role.ADMIN)) for n, t in bootstrap.items()
        }
        self._stored: dict[str, tuple[str, Grant]] = {}
        self._loaded_at: float | None = None
        self._next_try = 0.0  # after a failed read: no other before this (monotonic s)
        self._lock = asyncio.Lock()

    @property
    def enabled(self) -> bool:
        """Whether the API asks for tokens at all (a bootstrap token is configured)."""
        return bool(self._bootstrap)

    async def grant(self, presented: str | None) -> Grant | None:
        """The grant of the token presented, or None for no token or an unknown one.
        Raises StoreUnavailable when the table is too old to trust and cannot be read."""
        if presented is None:
            return None
        digest = hash_token(presented)
        if (found := _confirmed(self._bootstrap, digest)) is not None:
            return found
        now = self._clock.monotonic_s()
        age = None if self._loaded_at is None else now - self._loaded_at
        if (
            age is None
            or age >= REFRESH_S
            or (digest not in self._stored and age >= MISS_REFRESH_S)
        ):
            await self._refresh()
        return _confirmed(self._stored, digest)

    def invalidate(self) -> None:
        """Read the table again at the next request (this replica changed it)."""
        self._loaded_at = None

    async def _refresh(self) -> None:
        async with self._lock:  # one read at a time; the others use its result
            started = self._clock.monotonic_s()
            if self._loaded_at is not None and started - self._loaded_at < MISS_REFRESH_S:
                return
            if started < self._next_try:  # the store failed a moment ago: not every request
                self._refuse_if_stale(started)
                return
            try:
                tokens = await self._port.list_tokens()
            except StoreUnavailable:
                self._next_try = started + MISS_REFRESH_S
                self._refuse_if_stale(started)
                log.warning("token table not refreshed: the store did not answer")
                return
            self._stored = {t.token_hash: (t.token_hash, t.grant) for t in tokens}
            self._loaded_at = started

    def _refuse_if_stale(self, now: float) -> None:
        if self._loaded_at is None or now - self._loaded_at >= STALE_LIMIT_S:
            raise StoreUnavailable("the token table is too old to trust and cannot be read")


def _confirmed(table: Mapping[str, tuple[str, Grant]], digest: str) -> Grant | None:
    entry = table.get(digest)
    if entry is None:
        return None
    stored, grant = entry
    return grant if hmac.compare_digest(stored, digest) else None
