"""The partitions this daemon leads: a lease each, shared fairly among live daemons.

Each partition p has a lease (`daemon-p{p}`); each running daemon keeps a
heartbeat lease (`daemon-live/<holder>`) so the others know how many share the
partitions. Every tick (ttl/3) costs one write and one read, whatever P is:

1. renew every held lease and the heartbeat in one write;
2. read the leases table; with n live daemons this one takes at most ⌈P/n⌉;
3. surplus (a newcomer appeared): the scanner stops working it at once, and
   once what was claimed is published (`settle`) its lease is given back;
4. short of its share, it takes free or lapsed partitions: a dead daemon's
   lapse one TTL after its last renew, so they are taken within TTL + ttl/3;
   while another daemon holds more than its share (a handover to this one is
   under way) it looks every ttl/10, so a handed-back partition is worked again
   well within the claim-ahead and no job goes out late.

All leases a daemon holds share one fence, drawn from one counter for the
whole store (`LeasesPort.next_fence`): a gain takes a new fence for all of
them. Fences of one partition still only grow from holder to holder, and one
claim covers every owned partition with one condition (docs/architecture.md,
"Partitions").
"""

from __future__ import annotations

import logging
import zlib
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable

from daemon.lease import Term
from timer_service.clock import Clock
from timer_service.dispatch import LeaseState
from timer_service.metrics import Metrics
from timer_service.partitions import (
    DAEMON_BEAT_PREFIX,
    DAEMON_LEASE_PREFIX,
    fair_share,
    lease_name,
)
from timer_service.store.ports.leases import LeasesPort

log = logging.getLogger(__name__)

TABLE_PREFIX = "daemon-"  # partition leases and heartbeats alike
HANDOVER_POLL_DIVISOR = 10  # while another daemon holds more than its share: ttl / 10


async def _nothing_to_settle() -> None:
    return None


class PartitionLeases:
    """The daemon's leases: `current()` (the `Lead` the scanner asks), `tick()`,
    `release()`; one lease per owned partition, one fence for all of them."""

    def __init__(
        self,
        leases: LeasesPort,
        clock: Clock,
        metrics: Metrics,
        holder: str,
        ttl_ms: int,
        partitions: int,
        on_change: Callable[[], None] = lambda: None,
        settle: Callable[[], Awaitable[None]] = _nothing_to_settle,
    ) -> None:
        self._leases = leases
        self._clock = clock
        self._metrics = metrics
        self.holder = holder
        self.ttl_ms = ttl_ms
        self.partitions = partitions
        self._on_change = on_change
        self._settle = settle
        self._beat = f"{DAEMON_BEAT_PREFIX}{holder}"
        self._fence = 0  # of every lease held; 0: none taken yet
        self._held: set[int] = set()
        self._leaving: set[int] = set()
        self._term: Term | None = None
        self._terms = 0
        self._valid_until_ms = 0
        self._next_action_ms = 0
        self._renew_every_ms = max(1, ttl_ms // 3)
        self._closing = False  # released: nothing is renewed or taken any more
        metrics.leader(False)
        metrics.partitions_owned(0)

    # -- state seen by the scanner and reconciler ------------------------------
    def current(self) -> Term | None:
        """The term, only while its leases are surely still ours."""
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

    @property
    def owned(self) -> frozenset[int]:
        term = self.current()
        return term.partitions if term else frozenset()

    def next_action_ms(self) -> int:
        if self._term is None:
            return self._next_action_ms
        return min(self._next_action_ms, self._valid_until_ms)

    # -- actions ---------------------------------------------------------------------
    async def tick(self) -> None:
        if self._closing:
            return
        now = self._clock.now_ms()
        if self._held and now >= self._valid_until_ms:
            self._lose(set(self._held), "lease deadline passed without a successful renew")
        if now < self._next_action_ms:
            return
        self._next_action_ms = now + self._renew_every_ms
        try:
            await self._clock.wait_for(self._round(now), self.ttl_ms / 1000)
        except Exception as exc:  # retry soon; the deadline still guards
            self._metrics.store_error("renew_lease")
            log.warning("partition leases tick failed", extra={"error": repr(exc)})
            self._next_action_ms = now + max(1, self._renew_every_ms // 4)

    async def release(self) -> None:
        """Give every lease back at once so the others take over without waiting a TTL;
        take none from now on. A gain under way (its task not yet stopped, or its write
        applied after the task was cancelled) gives back what it got (`_gain`), and the
        table is read once more for any row still in this daemon's name."""
        self._closing = True
        held, fence = sorted(self._held), self._fence
        self._held.clear()
        self._leaving.clear()
        self._set_term()
        try:
            await self._leases.release_leases(
                [*map(lease_name, held), self._beat], self.holder, fence
            )
            log.info("partition leases released", extra={"partitions": held, "fence": fence})
            now = self._clock.now_ms()
            left: dict[int, list[str]] = {}
            for t in await self._leases.list_leases(TABLE_PREFIX):
                if t.holder == self.holder and t.expires_at > now:
                    left.setdefault(t.token, []).append(t.name)
            for token, names in left.items():
                await self._leases.release_leases(names, self.holder, token)
                log.info("leases left by a late gain released", extra={"leases": names})
        except Exception as exc:  # they then simply expire
            self._metrics.store_error("release_lease")
            log.warning("lease release failed", extra={"error": repr(exc)})

    # -- one tick ----------------------------------------------------------------------
    async def _round(self, now: int) -> None:
        await self._renew(now)
        if self._leaving:  # a hand-back that failed last time
            await self._hand_back()
        table = await self._leases.list_leases(TABLE_PREFIX)
        live = {t.name for t in table if t.name.startswith(DAEMON_BEAT_PREFIX)}
        live_now = {t.name for t in table if t.name in live and t.expires_at >= now}
        share = fair_share(self.partitions, len(live_now | {self._beat}))
        if len(self._held) > share:
            self._mark_leaving(len(self._held) - share)
            await self._hand_back()
            return
        wanted = share - len(self._held)
        if wanted <= 0:
            return
        leases = {t.name: t for t in table if t.name.startswith(DAEMON_LEASE_PREFIX)}
        free = [
            p
            for p in self._preference()
            if p not in self._held
            and (lease_name(p) not in leases or leases[lease_name(p)].expires_at < now)
        ]
        if free:
            top = max([self._fence, *(t.token for t in table)])
            await self._gain(free[:wanted], top, now)
        if len(self._held) < share and self._someone_over(leases.values(), share, now):
            # A handover to this daemon is under way: look again soon, so that the
            # partitions given back are worked again well within the claim-ahead.
            self._next_action_ms = now + max(1, self.ttl_ms // HANDOVER_POLL_DIVISOR)

    def _someone_over(self, leases: Iterable[LeaseState], share: int, now: int) -> bool:
        held = Counter(t.holder for t in leases if t.expires_at >= now and t.holder != self.holder)
        return any(count > share for count in held.values())

    async def _renew(self, now: int) -> None:
        names = [*map(lease_name, sorted(self._held)), self._beat]
        fence, ttl = self._fence, self.ttl_ms
        if not self._held:
            # Holding nothing: the heartbeat alone says this daemon is alive.
            await self._leases.acquire_leases([self._beat], self.holder, fence, ttl, now)
            return
        still = set(await self._leases.renew_leases(names, self.holder, fence, ttl, now))
        lost = {p for p in self._held if lease_name(p) not in still}
        if lost:
            self._lose(lost, "partition lease taken over")
        if self._held:
            self._valid_until_ms = now + self.ttl_ms

    async def _hand_back(self) -> None:
        """Release what is leaving, once what was claimed in it is published."""
        leaving = sorted(self._leaving)
        await self._settle()
        await self._leases.release_leases(list(map(lease_name, leaving)), self.holder, self._fence)
        self._held -= set(leaving)
        self._leaving.clear()
        log.info("partitions handed back", extra={"partitions": leaving})
        self._set_term()

    def _mark_leaving(self, count: int) -> None:
        surplus = sorted(self._held - self._leaving, reverse=True)[:count]
        self._leaving.update(surplus)
        log.info("partitions to hand back", extra={"partitions": sorted(surplus)})
        self._set_term()

    async def _gain(self, partitions: list[int], top_fence: int, now: int) -> None:
        """Take these partitions, and everything held, under a new fence."""
        # What was claimed under the old fence goes out first: the new term's takeover
        # sweep would otherwise claim it anew (no second callback, but a wasted send).
        await self._settle()
        fence = await self._leases.next_fence(top_fence)
        wanted = sorted(self._held | set(partitions))
        names = [*map(lease_name, wanted), self._beat]
        got = set(await self._leases.acquire_leases(names, self.holder, fence, self.ttl_ms, now))
        if self._closing:  # released meanwhile: what this got goes straight back
            await self._leases.release_leases(sorted(got), self.holder, fence)
            return
        self._fence = fence
        self._held = {p for p in wanted if lease_name(p) in got}
        self._leaving &= self._held
        self._valid_until_ms = now + self.ttl_ms
        gained = sorted(self._held & set(partitions))
        if gained:
            log.info(
                "partitions acquired",
                extra={"partitions": gained, "fence": fence, "holder": self.holder},
            )
        self._set_term()

    def _preference(self) -> list[int]:
        """Partitions in an order of this daemon's own, so that two daemons starting at
        once mostly reach for different ones."""
        start = zlib.crc32(self.holder.encode()) % self.partitions
        return [(start + i) % self.partitions for i in range(self.partitions)]

    def _lose(self, lost: set[int], why: str) -> None:
        log.warning("stepping down", extra={"reason": why, "partitions": sorted(lost)})
        self._held -= lost
        self._leaving -= lost
        self._set_term()

    def _set_term(self) -> None:
        active = frozenset(self._held - self._leaving)
        old = self._term
        if not active:
            self._term = None
        elif old is None or old.fence != self._fence or old.partitions != active:
            self._terms += 1
            self._term = Term(self._terms, self._fence, active)
        self._metrics.leader(self._term is not None)
        self._metrics.partitions_owned(len(active))
        if self._term != old:
            self._on_change()
