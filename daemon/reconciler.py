"""Republishing jobs left `dispatched` with no outcome: what makes delivery at-least-once.

Two kinds of stale jobs, claimed more than `reconcile_after_ms` ago:

- never confirmed by the queue (their claim's round is still open, see
  daemon/rounds.py): a daemon died between claim and publish, or gave up
  publishing. Always republished.
- published, but no outcome yet: republished only when no live broker says
  it holds messages of that biz type. A held biz type (backlog, pause, rate
  limit) has its message safe in the queue; another copy would only pile up
  stale duplicates for the broker to drop.

A reclaim moves the job to a new claim first, so the broker drops the old
message if it ever turns up: at most one callback, except across a crash.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from daemon.lease import LeaseKeeper, Term
from daemon.publisher import Publisher
from daemon.rounds import Rounds
from timer_service.clock import Clock
from timer_service.metrics import Metrics
from timer_service.model import Job
from timer_service.store.ports.dispatch import DispatchPort
from timer_service.store.ports.leases import LeasesPort

log = logging.getLogger(__name__)


class Reconciler:
    def __init__(
        self,
        dispatch: DispatchPort,
        leases: LeasesPort,
        publisher: Publisher,
        lease: LeaseKeeper,
        clock: Clock,
        metrics: Metrics,
        claims: Rounds,
        reconcile_after_ms: int,
        page: int = 1000,
        max_pages: int = 10,
    ) -> None:
        self._dispatch = dispatch
        self._leases = leases
        self._publisher = publisher
        self._lease = lease
        self._clock = clock
        self._metrics = metrics
        self._claims = claims
        self.reconcile_after_ms = reconcile_after_ms
        self.interval_ms = max(1, reconcile_after_ms // 4)
        self._page = page
        self._max_pages = max_pages
        self._term: Term | None = None
        self._next_sweep_ms = 0
        self._last_reclaim_ms = 0  # counts as claim activity, as the scanner's claims
        self._owed = False  # the last sweep failed: the next one runs, idle or not

    def next_sweep_ms(self) -> int:
        return self._next_sweep_ms

    async def maybe_run(self, last_claim_ms: int) -> int:
        """Sweep if one is due; the number of jobs republished.

        Always once per new term. After that every interval, but only while
        claims were attempted lately (`last_claim_ms`: the scanner's last claim
        call, this reconciler's last reclaim call): a job claimed at T is stale at
        T + after, so sweeping until the last attempt + after + a margin sees every
        one of them stale at least once, and an idle daemon makes no queries.
        Attempts count, not claims seen: a call whose reply was lost has claimed
        all the same, and nobody else knows. A sweep that failed is owed: the
        next interval sweeps whatever the time since the last attempt.
        """
        term = self._lease.current()
        if term != self._term:
            self._term = term
            self._next_sweep_ms = 0
            self._owed = False
        if term is None:
            return 0
        now = self._clock.now_ms()
        if now < self._next_sweep_ms:
            return 0
        first = self._next_sweep_ms == 0
        self._next_sweep_ms = now + self.interval_ms
        quiet_since_ms = now - max(last_claim_ms, self._last_reclaim_ms)
        quiet = quiet_since_ms > self.reconcile_after_ms * 3 // 2 + self.interval_ms
        if not first and quiet and not self._owed:
            return 0
        self._owed = True
        republished = await self.sweep(term, takeover=first)
        self._owed = False
        return republished

    async def sweep(self, term: Term, takeover: bool = False) -> int:
        """Republish dispatched jobs whose message is lost or never went out.

        First the jobs the queue never confirmed, then the published ones of biz types
        no live broker holds; each query leaves out what would be passed over, so a
        large held backlog never hides an unpublished job behind a full page.

        On takeover, jobs the previous leaders claimed but never saw confirmed (the
        open rounds of older fences) go out at once, not after `reconcile_after_ms`:
        those leaders are gone or fenced off, and claiming the jobs anew makes any
        message they still manage to publish a stale one that the notifier drops."""
        started = self._clock.now_ms()
        total = 0
        if takeover:
            total += await self._republish(
                term,
                lambda old_before: self._dispatch.find_unpublished(
                    started, self._page, fence_below=term.fence
                ),
            )
        total += await self._republish(
            term, lambda old_before: self._dispatch.find_unpublished(old_before, self._page)
        )
        if self._lease.current() != term:
            return total
        held = await self._leases.held_biz_types(self._clock.now_ms())
        total += await self._republish(
            term,
            lambda old_before: self._dispatch.find_stale_dispatched(
                old_before, self._page, skip_biz_types=held
            ),
        )
        return total

    async def _republish(self, term: Term, find: Callable[[int], Awaitable[list[Job]]]) -> int:
        """Page through stale dispatched jobs (`find(old_before)`), reclaim and publish
        them; the count."""
        total = 0
        for _ in range(self._max_pages):
            now = self._clock.now_ms()
            todo = await find(now - self.reconcile_after_ms)
            if not todo or self._lease.current() != term:
                break
            self._last_reclaim_ms = now  # before the call: a lost reply has reclaimed too
            token = await self._claims.take(term.fence)
            claimed = await self._dispatch.reclaim(todo, token, term.fence, now)
            if claimed:
                for job in claimed:
                    log.info(
                        "republishing stale dispatched job",
                        extra={"biz_type": job.biz_type, "job_id": job.job_id},
                    )
                if not await self._publisher.publish(
                    claimed, lambda: self._lease.current() == term
                ):
                    break
                for job in claimed:
                    self._metrics.job_reconciled(job.biz_type)
                total += len(claimed)
            if len(todo) < self._page or not claimed:
                break
        return total
