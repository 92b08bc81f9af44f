"""The daemon: lease, scan loop, watch and reconciler as tasks (the process around it is
`timer_service.processes`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid

from daemon.lease import Term
from daemon.partition_lease import PartitionLeases
from daemon.ports import DaemonPorts
from daemon.publisher import ClaimTokens, Publisher
from daemon.reconciler import Reconciler
from daemon.rounds import Rounds
from daemon.scanner import ScanConfig, Scanner
from daemon.schedule_hook import ScheduleHook
from daemon.sweeper import OverdueSweeper
from timer_service.clock import Clock
from timer_service.constants import TASK_STOP_TIMEOUT_S
from timer_service.metrics import Metrics
from timer_service.model import JobState
from timer_service.queue.base import DispatchQueue
from timer_service.runtime import cancel_and_wait, raise_if_cancelling
from timer_service.settings import Settings
from timer_service.tracing import NO_TRACING, Tracing

log = logging.getLogger(__name__)

ERROR_BACKOFF_S = (0.1, 0.2, 0.5, 1.0, 2.0)
WATCH_RETRY_MAX_S = 30.0
SCHEDULE_REPAIR_EVERY_MS = 300_000
SCANNER_FIRST_WAIT_MS = 50
SAMPLED_STATES = (JobState.PENDING, JobState.DISPATCHED, JobState.DEAD)


def default_holder_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class Daemon:
    def __init__(
        self,
        settings: Settings,
        store: DaemonPorts,
        queue: DispatchQueue,
        metrics: Metrics,
        clock: Clock,
        holder_id: str | None = None,
        scan_config: ScanConfig | None = None,
        schedule_hook: ScheduleHook | None = None,
        tracing: Tracing = NO_TRACING,
    ) -> None:
        self.settings = settings
        self.store = store
        self.queue = queue
        self.metrics = metrics
        self.clock = clock
        self.holder_id = holder_id or default_holder_id()
        self.claims = claims = Rounds(
            store.rounds,
            ClaimTokens(self.holder_id),
            clock,
            metrics,
            max_spare_age_ms=settings.reconcile_after_ms // 2,
        )
        self.publisher = Publisher(
            queue, metrics, clock, settings.publish_batch, claims.confirmed, tracing=tracing
        )
        self.lease = PartitionLeases(
            store.leases,
            clock,
            metrics,
            self.holder_id,
            settings.lease_ttl_ms,
            settings.partitions,
            self._lease_changed,
            settle=self._settle,
        )
        self.schedule_hook = schedule_hook
        self.publisher.on_published = schedule_hook
        self._schedules_repaired_ms: int | None = None
        self.scanner = Scanner(
            scan_config or ScanConfig.from_settings(settings),
            store.scan,
            store.pointers,
            self.publisher,
            self.lease,
            clock,
            metrics,
            claims,
        )
        self.reconciler = Reconciler(
            store.reconcile,
            store.brokers,
            self.publisher,
            self.lease,
            clock,
            metrics,
            claims,
            settings.reconcile_after_ms,
            durable_queue=queue.durable,
        )
        self.sweeper = OverdueSweeper(
            store.sweep,
            self.lease,
            clock,
            metrics,
            scanner_has=self.scanner.has,
            nudge=self.scanner.nudge,
        )
        self._lease_event = asyncio.Event()
        self._watch_wakeup = asyncio.Event()
        self._stop_watch = asyncio.Event()
        self._stats_wakeup = asyncio.Event()
        self._watch_task: asyncio.Task[None] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._stopped = False
        self._waiting_since: tuple[Term, int] | None = None  # see `_scanner_first`

    # -- for the API in dev mode, and tests ------------------------------------------
    def nudge(self, second: int) -> None:
        self.scanner.nudge(second)

    @property
    def is_leader(self) -> bool:
        return self.lease.is_leader

    @property
    def fence(self) -> int | None:
        return self.lease.fence

    @property
    def partitions_owned(self) -> frozenset[int]:
        return self.lease.owned

    @property
    def leads_partition_zero(self) -> bool:
        """Store-wide chores (the job count sample, schedule repair) are done once, by
        whichever daemon holds partition 0."""
        return 0 in self.lease.owned

    async def step(self) -> None:
        """One round of everything, no waiting: what the tests drive with a FakeClock."""
        await self.lease.tick()
        await self.scanner.run_once()
        await self.publisher.drain()
        await self.reconciler.maybe_run(self.scanner.last_claim_ms)
        await self.sweeper.maybe_run()

    # -- lifecycle -----------------------------------------------------------------------
    async def start(self) -> None:
        await self._ensure_topology()
        self._watch_task = asyncio.create_task(self._watch_loop(), name="daemon-watch")
        self._tasks = [
            asyncio.create_task(self._lease_loop(), name="daemon-lease"),
            asyncio.create_task(self._scan_loop(), name="daemon-scan"),
            self._watch_task,
            asyncio.create_task(self._reconcile_loop(), name="daemon-reconcile"),
        ]
        if self.settings.stats_interval_s > 0:
            self._tasks.append(asyncio.create_task(self._stats_loop(), name="daemon-stats"))

    async def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        # The watch ends by itself between two getMores; then cancel the rest.
        self._stop_watch.set()
        self._watch_wakeup.set()
        if self._watch_task is not None:
            with contextlib.suppress(TimeoutError):
                await self.clock.wait_for(asyncio.wait([self._watch_task]), TASK_STOP_TIMEOUT_S)
        await cancel_and_wait(self._tasks, TASK_STOP_TIMEOUT_S, "daemon", self.clock)
        self._tasks = []
        # Publish what was claimed before handing the lease over (bounded by the grace).
        await self.publisher.close(self.settings.shutdown_grace_s)
        await self.claims.stop()
        if self.schedule_hook is not None:
            await self.schedule_hook.drain()
        await self.lease.release()

    async def _settle(self) -> None:
        """Before a partition's lease is handed back or re-fenced: publish what was
        claimed (bounded: the lease must still be renewed in time) and close the rounds
        confirmed, which the next holder would otherwise take for claims never
        published and republish at once."""
        await self.publisher.drain(self.settings.lease_ttl_ms / 3000)
        await self.claims.close_now()

    def _lease_changed(self) -> None:
        term = self.lease.current()
        # Every later dispatch call (scan, claims, sweeps, the watch) covers exactly
        # the partitions this term works.
        self.store.scan.own(None if term is None else term.partitions)
        self.scanner.wake.set()
        self._lease_event.set()
        self._watch_wakeup.set()
        self._stats_wakeup.set()
        if not self.leads_partition_zero:
            self.metrics.jobs_by_state({})

    async def sample_job_counts(self) -> None:
        """Export how many jobs each biz type has pending, dispatched and dead (0 for
        none), while leading. One read of every open job: hence an interval."""
        counts: dict[tuple[str, str], int] = {
            (biz.biz_type, state): 0
            for biz in await self.store.biz_types.list_biz_types()
            for state in SAMPLED_STATES
        }
        for key, count in (await self.store.counts.count_jobs(SAMPLED_STATES)).items():
            counts[key] = count
        if self.leads_partition_zero:
            self.metrics.jobs_by_state(counts)

    async def _stats_loop(self) -> None:
        interval_ms = int(self.settings.stats_interval_s * 1000)
        while True:
            if self.leads_partition_zero:
                try:
                    await self.sample_job_counts()
                except Exception as exc:  # the next interval tries again
                    self.metrics.store_error("count_jobs")
                    log.warning("job count sample failed", extra={"error": repr(exc)})
            await self._sleep_until(self.clock.now_ms() + interval_ms, self._stats_wakeup)

    async def _ensure_topology(self) -> None:
        try:
            for biz in await self.store.biz_types.list_biz_types():
                await self.queue.ensure_biz(biz.biz_type)
        except Exception as exc:  # publish declares what is missing anyway
            log.warning("could not declare queues at start", extra={"error": repr(exc)})

    # -- loops -------------------------------------------------------------------------------
    async def _lease_loop(self) -> None:
        # The flag ends the loop even if a driver call swallows the cancellation: a
        # loop left running past `stop` took partitions another daemon had just been
        # given back, and held them until they lapsed.
        while not self._stopped:
            try:
                await self.lease.tick()
            except Exception:  # the keeper handles store errors; stay alive
                log.exception("lease tick failed")
            await self._sleep_until(self.lease.next_action_ms(), self._lease_event)

    async def _scan_loop(self) -> None:
        failures = 0
        while True:
            try:
                wake_ms = await self.scanner.run_once()
                failures = 0
            except Exception as exc:  # store hiccup: back off and go on
                self.metrics.store_error("scan")
                log.warning("scan iteration failed", extra={"error": repr(exc)})
                await self.clock.sleep(ERROR_BACKOFF_S[min(failures, len(ERROR_BACKOFF_S) - 1)])
                failures += 1
                continue
            await self._sleep_until(wake_ms, self.scanner.wake)

    async def _watch_loop(self) -> None:
        """Feed change-stream events to the scanner; on error the scanner's safety poll
        covers the gap while the watch is retried with backoff."""
        delay_s = 0.5
        while not self._stop_watch.is_set():
            if not self.lease.is_leader:
                # A standby keeps no change stream open (each costs the store work on
                # every write); taking the lease loads everything anyway.
                self._watch_wakeup.clear()
                await self._watch_wakeup.wait()
                continue
            try:
                async for second in self.store.scan.watch_seconds(self._stop_watch):
                    self.scanner.nudge(second)
                    delay_s = 0.5
                    if not self.lease.is_leader:
                        break
                continue
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # fall back to polling, retry later
                log.warning(
                    "watch failed; safety poll only until it is back",
                    extra={"error": repr(exc), "retry_in_s": delay_s},
                )
            await self.clock.sleep(delay_s)
            delay_s = min(WATCH_RETRY_MAX_S, delay_s * 2)

    async def _reconcile_loop(self) -> None:
        while True:
            if self._scanner_first(self.lease.current()):
                wake_ms = self.clock.now_ms() + SCANNER_FIRST_WAIT_MS
                await self._sleep_until(wake_ms, self._lease_event)
                continue
            try:
                await self.reconciler.maybe_run(self.scanner.last_claim_ms)
            except Exception as exc:  # next interval tries again
                self.metrics.store_error("reconcile")
                log.warning("reconcile failed", extra={"error": repr(exc)})
            try:
                await self.sweeper.maybe_run()
            except Exception as exc:  # next interval tries again
                self.metrics.store_error("overdue_sweep")
                log.warning("overdue sweep failed", extra={"error": repr(exc)})
            await self._repair_schedules()
            wake_ms = min(self.reconciler.next_sweep_ms(), self.sweeper.next_sweep_ms())
            if not self.lease.is_leader:
                wake_ms = self.clock.now_ms() + self.settings.lease_ttl_ms
            await self._sleep_until(wake_ms, self._lease_event)

    def _scanner_first(self, term: Term | None) -> bool:
        """A new term: the scanner loads the window and claims what is due first; the
        takeover sweeps (every bucket read) would slow those loads on the store and make
        the jobs of the partitions just taken late. Bounded by a TTL: a scanner that
        keeps failing must not hold the reconciler up."""
        if term is None or self.scanner.settled_term == term:
            return False
        now = self.clock.now_ms()
        if self._waiting_since is None or self._waiting_since[0] != term:
            self._waiting_since = (term, now)
        return now - self._waiting_since[1] < self.settings.lease_ttl_ms

    async def _repair_schedules(self) -> None:
        """Right after taking the lease, then every few minutes while leading: mend
        schedules whose advance was lost (a crash between dispatch and advance)."""
        if self.schedule_hook is None:
            return
        if not self.leads_partition_zero:
            self._schedules_repaired_ms = None
            return
        now = self.clock.now_ms()
        last = self._schedules_repaired_ms
        if last is None or now - last >= SCHEDULE_REPAIR_EVERY_MS:
            self._schedules_repaired_ms = now
            await self.schedule_hook.repair()

    async def _sleep_until(self, wake_ms: int, event: asyncio.Event) -> None:
        raise_if_cancelling()  # a store call may have dropped the shutdown's cancel
        delay_s = (wake_ms - self.clock.now_ms()) / 1000
        if delay_s > 0:
            # On the clock, a timeout around the wait (not asyncio.wait_for: see
            # runtime.wait_event); a FakeClock's sleepers wake as it moves.
            with contextlib.suppress(TimeoutError):
                await self.clock.wait_for(event.wait(), delay_s)
        else:
            await asyncio.sleep(0)  # always yield: a loop that is due again must not starve others
        event.clear()
