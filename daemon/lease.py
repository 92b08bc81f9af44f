"""The leader lease: acquire, renew every ttl/3, step down the moment it is in doubt."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from timer_service.clock import Clock
from timer_service.metrics import Metrics
from timer_service.store.ports.leases import LeasesPort

log = logging.getLogger(__name__)

LEASE_NAME = "daemon-p0"


@dataclass(frozen=True, slots=True)
class Term:
    """One uninterrupted stretch of leadership. A new term means: start from scratch."""

    number: int  # local count of terms, increases on every gain
    fence: int  # the store's fencing token, passed to every state write
    partitions: frozenset[int] = frozenset({0})  # what the scanner works in this term


def narrowed(old: Term | None, new: Term | None) -> bool:
    """`new` only hands partitions of `old` back, under the same fence: no takeover,
    nothing to start again (daemon/partition_lease.py)."""
    return (
        old is not None
        and new is not None
        and new.fence == old.fence
        and new.partitions < old.partitions
    )


class Lead(Protocol):
    """What the scanner, reconciler and sweeper ask of a lease keeper."""

    def current(self) -> Term | None: ...


class LeaseKeeper:
    """Holds the lease for this daemon; `tick()` does whatever is due now.

    Validity is judged locally against the deadline of the last successful
    acquire or renew (counted from when the call was sent), so a daemon that
    cannot reach the store stops claiming when its lease may have lapsed, not
    when it hears that it did. A call is given up once its answer could no longer
    help (a renew at that deadline, an acquire after a TTL), so a reply stuck on a
    slow store never keeps the keeper from trying again.
    """

    def __init__(
        self,
        leases: LeasesPort,
        clock: Clock,
        metrics: Metrics,
        holder: str,
        ttl_ms: int,
        on_change: Callable[[], None] = lambda: None,
        name: str = LEASE_NAME,
    ) -> None:
        self._leases = leases
        self._clock = clock
        self._metrics = metrics
        self.holder = holder
        self.ttl_ms = ttl_ms
        self._on_change = on_change
        self._name = name
        self._term: Term | None = None
        self._terms = 0
        self._valid_until_ms = 0
        self._next_action_ms = 0
        self._renew_every_ms = max(1, ttl_ms // 3)
        metrics.leader(False)

    # -- state seen by the scanner and reconciler ------------------------------
    def current(self) -> Term | None:
        """The term, only while the lease is surely still ours."""
        if self._term is None or self._clock.now_ms() >= self._valid_until_ms:
            return None
        return self._term

    @property
    def is_leader(self) -> bool:
        return self.current() is not None

    @property
    def fence(self) -> int | None:
        term = self.current()
        return term.fence if term else None

    def next_action_ms(self) -> int:
        """When `tick()` has something to do next (renew, retry, or notice expiry)."""
        if self._term is None:
            return self._next_action_ms
        return min(self._next_action_ms, self._valid_until_ms)

    # -- actions ---------------------------------------------------------------------
    async def tick(self) -> None:
        now = self._clock.now_ms()
        if self._term is not None and now >= self._valid_until_ms:
            self._lose("lease deadline passed without a successful renew")
        if now < self._next_action_ms:
            return
        if self._term is None:
            await self._try_acquire(now)
        else:
            await self._renew(now, self._term)

    async def release(self) -> None:
        """Give the lease back at once so a standby takes over without waiting a TTL."""
        term, self._term = self._term, None
        if term is None:
            return
        self._metrics.leader(False)
        self._on_change()
        try:
            await self._leases.release_lease(self._name, self.holder, term.fence)
            log.info("lease released", extra={"fence": term.fence})
        except Exception as exc:  # it then simply expires
            self._metrics.store_error("release_lease")
            log.warning("lease release failed", extra={"error": repr(exc)})

    async def _try_acquire(self, now: int) -> None:
        try:
            token = await self._clock.wait_for(
                self._leases.acquire_lease(self._name, self.holder, self.ttl_ms, now),
                self.ttl_ms / 1000,
            )
        except Exception as exc:  # a standby keeps trying
            self._metrics.store_error("acquire_lease")
            log.warning("lease acquire failed", extra={"error": repr(exc)})
            token = None
        self._next_action_ms = now + self._renew_every_ms
        if token is None:
            return
        self._terms += 1
        self._term = Term(self._terms, token)
        self._valid_until_ms = now + self.ttl_ms
        self._metrics.leader(True)
        log.info("lease acquired", extra={"fence": token, "holder": self.holder})
        self._on_change()

    async def _renew(self, now: int, term: Term) -> None:
        try:
            ok = await self._clock.wait_for(
                self._leases.renew_lease(self._name, self.holder, term.fence, self.ttl_ms, now),
                max(0.001, (self._valid_until_ms - now) / 1000),
            )
        except Exception as exc:  # retry soon; the deadline still guards
            self._metrics.store_error("renew_lease")
            log.warning("lease renew failed", extra={"error": repr(exc)})
            self._next_action_ms = now + max(1, self._renew_every_ms // 4)
            return
        if self._term is not term:  # released or lost while the call was in flight
            return
        if not ok:
            self._lose("lease taken over")
            self._next_action_ms = now + self._renew_every_ms
            return
        self._valid_until_ms = now + self.ttl_ms
        self._next_action_ms = now + self._renew_every_ms

    def _lose(self, why: str) -> None:
        if self._term is None:
            return
        log.warning("stepping down", extra={"reason": why, "fence": self._term.fence})
        self._term = None
        self._metrics.leader(False)
        self._on_change()
