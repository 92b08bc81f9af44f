"""The broker process: discovers biz types, runs one lane per biz type it owns,
heartbeats.

The live brokers share the biz types (broker/ownership.py): each consumes the ones
it owns. Each biz type's queue is consumed with single-active-consumer, so while a
handover has two brokers subscribed, the lane of one of them is the only sender
(see broker.lane).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid

from broker.lane import Lane
from broker.marks import BROKER_GATHER_S, MarkWriter
from broker.outcomes import OutcomeWriter
from broker.ownership import plan
from broker.ports import BrokerPorts
from broker.sender import Sender
from broker.skew import SkewGuard
from broker.storecalls import retried
from broker.term import Lease, Stream
from timer_service.callback_targets import TargetPolicy
from timer_service.clock import Clock
from timer_service.constants import TASK_STOP_TIMEOUT_S
from timer_service.metrics import Metrics
from timer_service.model import BizType, is_reserved
from timer_service.queue.base import Consumer, Delivery, DispatchQueue
from timer_service.runtime import cancel_and_wait, raise_if_cancelling
from timer_service.settings import Settings
from timer_service.tracing import NO_TRACING, Tracing

log = logging.getLogger(__name__)

DISCOVER_EVERY_S = 1.0
HEARTBEAT_EVERY_S = 2.0
HEARTBEAT_TTL_MS = int(3 * HEARTBEAT_EVERY_S * 1000)
OWN_GIVE_UP_AFTER_S = 5.0  # taking a biz type's epoch is retried this long
LET_GO_TIMEOUT_S = 5.0  # a lapsed lane's consumer cancel, at most (a dead link hangs)
# /healthz fails when a lane holds a message due, could send it (a token, a slot) and
# has sent or settled nothing for this long, plus its callback timeout.
STUCK_AFTER_S = 60.0


class Broker:
    def __init__(
        self,
        settings: Settings,
        store: BrokerPorts,
        queue: DispatchQueue,
        metrics: Metrics,
        clock: Clock,
        broker_id: str | None = None,
        tracing: Tracing = NO_TRACING,
        sender: Sender | None = None,
        own_sender: Sender | None = None,
    ) -> None:
        self._settings = settings
        self._tracing = tracing
        self._store = store
        self._queue = queue
        self._metrics = metrics
        self._clock = clock
        self.broker_id = broker_id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self._sender = sender or Sender(clock, settings.callback_target_policy())
        # The service's own callbacks (the canary's, to TIMER_CANARY_URL: an address the
        # operator set, put by the service itself) pass the default policy only, so that
        # a TIMER_CALLBACK_DENY_CIDRS of the cluster's ranges keeps the canary alive.
        self._own_sender = own_sender or Sender(clock, TargetPolicy())
        self._outcomes = OutcomeWriter(store.outcomes, metrics, clock)
        self._marks = MarkWriter(
            store.outcomes, metrics, clock, self.broker_id, gather_s=BROKER_GATHER_S
        )
        self.skew = SkewGuard()
        # The lease the store heartbeat gives, on this host's monotonic clock: lanes
        # send only within it, and are let go of once it lapses (broker/term.py).
        self._lease = Lease(clock, HEARTBEAT_TTL_MS / 1000)
        self._lanes: dict[str, Lane] = {}
        self._leaving: dict[Lane, None] = {}  # let go of, still draining (`_remove_lane`)
        self._consumers: dict[str, Consumer] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._beating: asyncio.Task[None] | None = None  # until the very end of `stop`
        self._removals: set[asyncio.Task[None]] = set()
        self._started = False
        self._stopped = False

    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        await self._sender.start()
        await self._own_sender.start()
        self._outcomes.start()
        # The first heartbeat before any lane: a mark this broker makes must name a
        # broker the daemon knows of, and the skew guard wants the store's clock.
        with contextlib.suppress(Exception):
            await self._heartbeat()
        with contextlib.suppress(Exception):
            await self._discover()  # first pass now; failures are retried by the loop
        self._tasks = [
            asyncio.create_task(self._every(DISCOVER_EVERY_S, self._discover), name="discover"),
        ]
        self._beating = asyncio.create_task(
            self._every(HEARTBEAT_EVERY_S, self._heartbeat, paced=True), name="heartbeat"
        )
        self._tasks.append(asyncio.create_task(self._watch_lease(), name="lease"))
        log.info("broker started", extra={"broker_id": self.broker_id})

    async def stop(self) -> None:
        """Finish callbacks in flight and persist their outcomes within the grace period;
        everything not yet sent goes back to the queue. The heartbeat goes on until
        then: a broker that stopped beating first looked dead to the leader while it
        still finished its callbacks, and the leader would resend them."""
        if self._stopped or not self._started:
            self._stopped = True
            return
        self._stopped = True
        deadline = self._clock.monotonic_s() + self._settings.shutdown_grace_s
        await cancel_and_wait(self._tasks, TASK_STOP_TIMEOUT_S, "broker", self._clock)
        if self._removals:
            with contextlib.suppress(TimeoutError):
                await self._clock.wait_for(asyncio.wait(list(self._removals)), TASK_STOP_TIMEOUT_S)
        lanes = list(self._lanes.values())
        for lane in lanes:
            lane.stop_sending()
        for lane in lanes:
            await lane.drain(deadline - self._clock.monotonic_s())
        with contextlib.suppress(TimeoutError):
            await self._clock.wait_for(
                self._outcomes.drained(), max(0.0, deadline - self._clock.monotonic_s())
            )
        # Cancelling a consumer hands its unacked (held, unsent) messages back to the
        # queue; only now, so that outcomes of finished callbacks could still be acked.
        for biz_type in list(self._consumers):
            await self._stop_consumer(biz_type)
        await self._outcomes.stop()
        for lane in lanes:
            await lane.close()
        await self._marks.stop()
        self._lanes.clear()
        await self._sender.close()
        await self._own_sender.close()
        if self._beating is not None:
            await cancel_and_wait([self._beating], TASK_STOP_TIMEOUT_S, "broker", self._clock)
        with contextlib.suppress(Exception):
            await self._store.brokers.broker_gone(self.broker_id)
        log.info("broker stopped", extra={"broker_id": self.broker_id})

    @property
    def biz_types(self) -> list[str]:
        return sorted(self._lanes)

    @property
    def letting_go(self) -> list[str]:
        """The biz types being let go of: draining, their consumers not yet cancelled."""
        return sorted(lane.biz.biz_type for lane in self._leaving)

    # -- discovery -------------------------------------------------------------------
    async def _discover(self) -> None:
        """Consume the biz types this broker owns among the live brokers, apply config
        changes, and let go of a biz type once its new owner consumes it, or once it
        is deleted (broker/ownership.py)."""
        if not self._lease.term.valid():
            return  # no lease: nothing to consume until a heartbeat lands
        current = {biz.biz_type: biz for biz in await self._store.biz_types.list_biz_types()}
        now = self._clock.now_ms()
        live = {
            beat.broker_id: beat.consuming
            for beat in await self._store.brokers.broker_beats()
            if beat.left_ms(now) > 0
        }
        todo = plan(self.broker_id, current, set(self._lanes), live)
        for name in sorted(todo.start):
            taken_from = [
                b for b, consumed in live.items() if b != self.broker_id and name in consumed
            ]
            try:
                await self._add_lane(current[name], handover=bool(taken_from))
            except Exception as exc:  # RabbitMQ's: the next round tries again
                self._metrics.queue_error("consume")
                log.warning("consume failed", extra={"biz_type": name, "error": repr(exc)})
        for name, lane in self._lanes.items():
            biz = current.get(name)
            if biz is not None and lane.biz != biz:
                lane.configure(biz)
                log.info("biz type config applied", extra={"biz_type": name})
        for name in sorted((set(self._lanes) - set(current)) | todo.stop):
            # In the background: draining it must not hold up the other biz types.
            lane = self._lanes.pop(name)
            self._leaving[lane] = None  # still in the heartbeat, until it is done
            consumer = self._consumers.pop(name, None)
            task = asyncio.create_task(self._remove_lane(name, lane, consumer))
            self._removals.add(task)
            task.add_done_callback(self._removals.discard)
            reason = "handed over" if name in current else "deleted"
            log.info("letting go of a biz type", extra={"biz_type": name, "reason": reason})

    async def _add_lane(self, biz: BizType, handover: bool = False) -> None:
        lane = Lane(
            biz,
            sender=self._own_sender if is_reserved(biz.biz_type) else self._sender,
            outcomes=self._outcomes,
            metrics=self._metrics,
            clock=self._clock,
            broker_id=self.broker_id,
            skew=self.skew,
            max_hold_ms=self._settings.broker_max_hold_ms,
            tracing=self._tracing,
            handover=handover,
            marks=self._marks,
            stream=Stream(self._lease.term, lambda: self._own(biz.biz_type)),
            buckets=self._store.brokers,
        )
        lane.start()
        self._lanes[biz.biz_type] = lane

        async def handle(delivery: Delivery) -> None:
            lane.offer(delivery)

        try:
            self._consumers[biz.biz_type] = await self._queue.consume(
                biz.biz_type, handle, prefetch=self._settings.broker_prefetch
            )
        except Exception:
            del self._lanes[biz.biz_type]
            await lane.close()
            raise
        log.info("consuming", extra={"biz_type": biz.biz_type})

    async def _remove_lane(self, name: str, lane: Lane, consumer: Consumer | None) -> None:
        """Let go of a biz type (deleted, or handed over): nothing more is sent; the
        callbacks in flight finish (each within its timeout) and their outcomes are
        stored before the consumer is cancelled, which hands what is left, unsent, to
        the next owner. A sent message is never handed back (the next owner would send
        it again, issue 30 break 4): one whose outcome is still not stored by then
        (slow store writes) is acked, its outcome stored later. Until the end the lane
        is in this broker's heartbeat: what it holds is held (daemon/holders.py)."""
        try:
            lane.stop_sending()
            bound_s = self._settings.shutdown_grace_s + lane.biz.timeout_ms / 1000
            await lane.drain(bound_s)
            if not await lane.settle(bound_s):
                log.warning("letting go with outcomes unstored", extra={"biz_type": name})
                await lane.let_go_of_sent()
            await self._cancel(name, consumer)
            await lane.close()
        finally:
            self._leaving.pop(lane, None)
        log.info("stopped consuming", extra={"biz_type": name})

    async def _own(self, biz_type: str) -> int:
        return await retried(
            "own_biz_type",
            lambda: self._store.brokers.own_biz_type(biz_type, self.broker_id),
            self._metrics,
            self._clock,
            OWN_GIVE_UP_AFTER_S,
        )

    # -- the lease ---------------------------------------------------------------------
    async def _watch_lease(self) -> None:
        """End the term when its lease runs out (a store cut off, a heartbeat stuck, or
        the process frozen past it), and let go of its lanes."""
        while True:
            term = self._lease.term
            if term.lapsed() and not term.over:
                log.warning("store heartbeat lapsed: letting go of every biz type")
                self._lease.end()
            self._let_go_lapsed()
            await self._clock.sleep(min(1.0, max(0.05, term.left_s())))

    def _let_go_lapsed(self) -> None:
        """Cancel the consumers of the lanes of a term that is over, so that RabbitMQ's
        single active consumer moves to a live broker: they send nothing more, and
        what they hold unsent goes back to the queue. What they sent is acked first
        (its outcome may still be on its way: a store election lapses the lease while
        the outcome write waits), never handed back to be sent again."""
        for name, lane in list(self._lanes.items()):
            if lane.stream is None or not lane.stream.term.over:
                continue
            del self._lanes[name]
            lane.stop_sending()
            task = asyncio.create_task(self._let_go(name, lane, self._consumers.pop(name, None)))
            self._removals.add(task)
            task.add_done_callback(self._removals.discard)

    async def _let_go(self, name: str, lane: Lane, consumer: Consumer | None) -> None:
        await lane.let_go_of_sent()  # a no-op on a channel closed already
        with contextlib.suppress(TimeoutError):
            await self._clock.wait_for(self._cancel(name, consumer), LET_GO_TIMEOUT_S)
        await lane.close()
        log.info("stopped consuming: lease lapsed", extra={"biz_type": name})

    def health(self) -> str | None:
        """Why this broker is not healthy (None: it is): its store lease lapsed, or a
        lane makes no progress."""
        term = self._lease.term
        if term.lapsed():
            return f"store heartbeat lapsed {-term.left_s():.1f} s ago"
        for name, lane in sorted(self._lanes.items()):
            stuck_s = lane.stuck_s()
            if stuck_s > STUCK_AFTER_S + lane.biz.timeout_ms / 1000:
                return f"biz type {name}: nothing sent nor settled for {stuck_s:.0f} s"
        return None

    async def _stop_consumer(self, name: str) -> None:
        await self._cancel(name, self._consumers.pop(name, None))

    async def _cancel(self, name: str, consumer: Consumer | None) -> None:
        if consumer is not None:
            try:
                await consumer.cancel()
            except Exception as exc:  # a dead channel hands messages back anyway
                self._metrics.queue_error("cancel")
                log.warning("consumer cancel failed", extra={"biz_type": name, "error": repr(exc)})

    # -- heartbeat -------------------------------------------------------------------
    async def _heartbeat(self) -> None:
        """Say what this broker holds (see daemon/holders.py) and learn the store's
        clock from the same round trip (broker/skew.py)."""
        self._metrics.biz_types_consumed(
            {name: lane.biz.paused for name, lane in self._lanes.items()}
        )
        lanes = [*self._lanes.values(), *self._leaving]
        held = [h for lane in lanes if (h := lane.held()) is not None]
        sent_at_s = self._clock.monotonic_s()
        store_ms = await self._store.brokers.broker_heartbeat(
            self.broker_id, held, self._clock.now_ms(), HEARTBEAT_TTL_MS, sorted(self._lanes)
        )
        if self._lease.landed(sent_at_s):
            log.info("store heartbeat back: a new term", extra={"term": self._lease.term.number})
            self._let_go_lapsed()
        mono_s = self._clock.monotonic_s()
        self.skew.observe(mono_s, store_ms)
        self._metrics.clock_lead(self.skew.lead_ms(self._clock.now_ms(), mono_s) / 1000)

    async def _every(self, interval_s: float, job: object, paced: bool = False) -> None:
        """Run `job` over and over, `interval_s` apart; `paced`: from one start to the
        next (a heartbeat that took 3 s is followed by the next at once, not 2 s
        later: beats land in the store as often as it can take them), else from one
        end to the next start."""
        assert callable(job)
        while True:
            started_s = self._clock.monotonic_s()
            try:
                await job()
            except Exception as exc:  # keep going; the next round retries
                self._metrics.store_error(getattr(job, "__name__", "broker").lstrip("_"))
                log.warning(
                    "periodic task failed",
                    extra={"task": getattr(job, "__name__", ""), "error": repr(exc)},
                )
            raise_if_cancelling()  # a store call may have dropped the cancel
            took_s = self._clock.monotonic_s() - started_s if paced else 0.0
            await self._clock.sleep(max(0.0, interval_s - took_s))
