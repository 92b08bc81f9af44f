"""Republishing jobs left `dispatched` with no outcome: what makes delivery at-least-once.

Two kinds of stale jobs, claimed more than `reconcile_after_ms` ago:

- never confirmed by the queue (their claim's round is still open, see
  daemon/rounds.py): a daemon died between claim and publish, or gave up
  publishing. Always republished.
- published, but no outcome yet, and claimed before the oldest claim any live
  broker holds of that biz type (daemon/holders.py): held by nobody, so the
  message is lost. Republished whatever else that broker holds. What is claimed
  later may wait in the queue behind a backlog, a pause or a rate limit, and is
  left alone: another copy would only be dropped later. Never one whose send
  mark a live broker made, whatever its claim: that broker's callback is on its
  way (a heartbeat says what a broker holds only up to a beat late, so a lane that
  took a biz type over a moment ago holds, and marks, what no beat reports yet;
  reclaimed, the job was sent by both it and the taker of the new copy). Should
  that broker die, its sends are the next kind's.
- sent by a broker known dead (its heartbeat lapsed): that callback will not
  finish. Republished at once, not after the timeout: while claims are being
  made, the leader looks again when the next live broker would turn dead.
- with an in-process queue (`dev`), at a takeover: every dispatched job whose
  send has not started. That queue died with the process that held it; a live
  one in this process only ever held this daemon's own publishes.

A reclaim moves the job to a new claim first, so the broker drops the old
message if it ever turns up: at most one callback, except across a crash. It
misses a job whose send mark changed since it was read (a broker took it over).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from daemon.holders import DEAD_AFTER_MS, Holders, judge
from daemon.lease import Lead, Term, narrowed
from daemon.publisher import Publisher
from daemon.rounds import Rounds
from timer_service.clock import Clock
from timer_service.metrics import Metrics
from timer_service.model import Job
from timer_service.store.ports.brokers import BrokersPort
from timer_service.store.ports.reconcile import ReconcilePort

log = logging.getLogger(__name__)


class Reconciler:
    def __init__(
        self,
        reconcile: ReconcilePort,
        brokers: BrokersPort,
        publisher: Publisher,
        lease: Lead,
        clock: Clock,
        metrics: Metrics,
        claims: Rounds,
        reconcile_after_ms: int,
        durable_queue: bool = True,
        page: int = 1000,
        max_pages: int = 10,
    ) -> None:
        self._reconcile = reconcile
        self._brokers = brokers
        self._publisher = publisher
        self._lease = lease
        self._clock = clock
        self._metrics = metrics
        self._claims = claims
        self.reconcile_after_ms = reconcile_after_ms
        self.interval_ms = max(1, reconcile_after_ms // 4)
        self._durable_queue = durable_queue
        self._next_holders_check_ms = 0
        self._page = page
        self._max_pages = max_pages
        self._term: Term | None = None
        self._next_sweep_ms = 0
        self._last_reclaim_ms = 0  # counts as claim activity, as the scanner's claims
        self._owed = False  # the last sweep failed: the next one runs, idle or not

    def next_sweep_ms(self) -> int:
        return min(self._next_sweep_ms, self._next_holders_check_ms)

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
        if narrowed(self._term, term):
            self._term = term  # partitions handed back: not a takeover
        if term != self._term:
            self._term = term
            self._next_sweep_ms = 0
            self._owed = False
        if term is None:
            return 0
        now = self._clock.now_ms()
        quiet_since_ms = now - max(last_claim_ms, self._last_reclaim_ms)
        quiet = quiet_since_ms > self.reconcile_after_ms * 3 // 2 + self.interval_ms
        if now < self._next_sweep_ms:
            if quiet:  # idle: no queries, and no wake-ups for the check below
                self._next_holders_check_ms = self._next_sweep_ms
                return 0
            if now < self._next_holders_check_ms:
                return 0
            # Should the store fail, look again a little later, not at once.
            self._next_holders_check_ms = min(self._next_sweep_ms, now + DEAD_AFTER_MS)
            return await self._resend_for_the_dead(term, await self._holders())
        first = self._next_sweep_ms == 0
        self._next_sweep_ms = now + self.interval_ms
        self._next_holders_check_ms = self._next_sweep_ms
        if not first and quiet and not self._owed:
            return 0
        self._owed = True
        republished = await self.sweep(term, takeover=first)
        self._owed = False
        return republished

    async def sweep(self, term: Term, takeover: bool = False) -> int:
        """Republish dispatched jobs whose message is lost or never went out.

        First the jobs the queue never confirmed, then the callbacks dead brokers had
        started, then the published jobs no live broker holds (daemon/holders.py);
        each query leaves out what would be passed over, so a large held backlog
        never hides an unpublished job behind a full page.

        On takeover, jobs the previous leaders claimed but never saw confirmed (the
        open rounds of older fences) go out at once, not after `reconcile_after_ms`:
        those leaders are gone or fenced off, and claiming the jobs anew makes any
        message they still manage to publish a stale one that the notifier drops."""
        started = self._clock.now_ms()
        holders = await self._holders()
        total = 0
        if takeover and not self._durable_queue:
            total += await self._republish(
                term,
                lambda old_before: self._reconcile.find_stale_dispatched(
                    started, self._page, unmarked_only=True
                ),
            )
        if takeover:
            total += await self._republish(
                term,
                lambda old_before: self._reconcile.find_unpublished(
                    started, self._page, fence_below=term.fence
                ),
            )
        total += await self._republish(
            term, lambda old_before: self._reconcile.find_unpublished(old_before, self._page)
        )
        if self._lease.current() != term:
            return total
        total += await self._resend_for_the_dead(term, holders)
        total += await self._republish(
            term,
            lambda old_before: self._reconcile.find_stale_dispatched(
                old_before,
                self._page,
                claimed_before_by_biz=holders.oldest_held,
                not_sent_by=holders.live,
            ),
        )
        return total

    async def _holders(self) -> Holders:
        """The brokers' heartbeats, judged; the next look is due when the first live
        broker would turn dead if it beat no more (none live: the next sweep)."""
        holders = judge(await self._brokers.broker_beats(), self._clock.now_ms())
        death_ms = holders.next_death_ms
        self._next_holders_check_ms = (
            self._next_sweep_ms if death_ms is None else min(self._next_sweep_ms, death_ms)
        )
        return holders

    async def _resend_for_the_dead(self, term: Term, holders: Holders) -> int:
        """Republish the callbacks that brokers known dead had started; once none is
        left, forget those brokers."""
        if not holders.dead:
            return 0
        dead = holders.dead
        found = await self._reconcile.find_sent_by(dead, self._page)
        if not found:
            for broker_id in dead:
                await self._brokers.broker_gone(broker_id)
            return 0
        log.warning(
            "resending what dead brokers had started",
            extra={"brokers": sorted(dead), "count": len(found)},
        )
        return await self._republish(
            term, lambda old_before: self._reconcile.find_sent_by(dead, self._page)
        )

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
            claimed = await self._reconcile.reclaim(todo, token, term.fence, now)
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
