"""Finding pending jobs that no entry of the seconds index points at.

A job is written first and its second's entry renewed after; a process that
dies (or a write that fails) in between leaves a pending job the scanner will
never read. So, right after taking the lease and then every `interval_ms`
while leading, the sweeper asks the store for pending jobs overdue by more
than `margin_ms` (normally none: the scanner claims jobs up to 2 s before they
are due), renews their seconds' entries, and nudges the scanner, which loads
them at once. Seconds the scanner holds or will still visit in its catch-up
are left to it.

Every `keep_interval_ms` it also asks the store to keep the identity records of
jobs that live far past their fire time (a biz type paused for days) from
expiring before them (`SweepPort.keep_identities`; normally none).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from daemon.lease import Lead, Term, narrowed
from timer_service.clock import Clock
from timer_service.metrics import Metrics
from timer_service.store.ports.sweep import SweepPort

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_MS = 60_000
DEFAULT_MARGIN_MS = 10_000
DEFAULT_KEEP_INTERVAL_MS = 3_600_000
PAGE = 1000


class OverdueSweeper:
    def __init__(
        self,
        sweep: SweepPort,
        lease: Lead,
        clock: Clock,
        metrics: Metrics,
        *,
        scanner_has: Callable[[int], bool],
        nudge: Callable[[int], None],
        interval_ms: int = DEFAULT_INTERVAL_MS,
        margin_ms: int = DEFAULT_MARGIN_MS,
        keep_interval_ms: int = DEFAULT_KEEP_INTERVAL_MS,
    ) -> None:
        self._sweep = sweep
        self._lease = lease
        self._clock = clock
        self._metrics = metrics
        self._scanner_has = scanner_has
        self._nudge = nudge
        self.interval_ms = interval_ms
        self.margin_ms = margin_ms
        self.keep_interval_ms = keep_interval_ms
        self._term: Term | None = None
        self._next_ms = 0
        self._next_keep_ms = 0

    def next_sweep_ms(self) -> int:
        return self._next_ms

    async def maybe_run(self) -> int:
        """Sweep if one is due (always once per new term); the seconds restored."""
        term = self._lease.current()
        if narrowed(self._term, term):
            self._term = term  # partitions handed back: not a takeover
        if term != self._term:
            self._term, self._next_ms = term, 0
        now = self._clock.now_ms()
        if term is None or now < self._next_ms:
            return 0
        self._next_ms = now + self.interval_ms
        if now >= self._next_keep_ms:
            self._next_keep_ms = now + self.keep_interval_ms
            kept = await self._sweep.keep_identities(now, PAGE)
            if kept:
                log.info("identities of long-waiting jobs kept", extra={"jobs": kept})
        return await self.sweep()

    async def sweep(self) -> int:
        overdue = await self._sweep.find_overdue_pending(
            self._clock.now_ms() - self.margin_ms, PAGE
        )
        orphaned = [second for second in overdue if not self._scanner_has(second)]
        if not orphaned:
            return 0
        await self._sweep.restore_seconds(orphaned)
        log.warning(
            "pending jobs without an index entry: entries restored",
            extra={"seconds": len(orphaned), "first_second": orphaned[0]},
        )
        self._metrics.seconds_restored(len(orphaned))
        for second in orphaned:
            self._nudge(second)
        return len(orphaned)
