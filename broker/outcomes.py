"""Outcomes, batched: persist many in one `record_outcomes`, then ack their messages.

A message is acked only after its outcome is stored. If the store stays down,
the write is retried for as long as it takes (logged at each bound), and the
messages stay unacked meanwhile: handing them back would send their callbacks a
second time, which the contract allows only when a process or connection dies
with the callback in flight (then the queue hands them back by itself).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

from broker.fate import Fate, after_outcome, carry_out
from broker.storecalls import retried
from timer_service.clock import Clock
from timer_service.constants import TASK_STOP_TIMEOUT_S
from timer_service.dispatch import Outcome
from timer_service.metrics import Metrics
from timer_service.queue.base import Delivery
from timer_service.runtime import cancel_and_wait
from timer_service.store.ports.outcomes import OutcomesPort

log = logging.getLogger(__name__)

# A batch is written once it holds FLUSH_BATCH outcomes, or this long after its first:
# a steady flow then costs a write per FLUSH_BATCH jobs or per FLUSH_AFTER_S, not one per
# job or two (2 ms gathered a job or two at 500 jobs/s). The price: a job's outcome is
# visible, and its message acked, up to this much later (and a broker killed meanwhile
# has that much more to be sent again).
FLUSH_AFTER_S = 0.05
FLUSH_BATCH = 64
MAX_BATCH = 500
MAX_FLUSHES = 4  # batches being written at once: a slow store still gets a pipeline
# ... but only for a herd: a trickle (fewer outcomes waiting than this) waits for the
# write in flight and goes in the next, larger batch. Each flush costs the store the
# same few commands whatever its size, and near the store's capacity a write per
# callback of a slow biz type (one outcome per token) took the others' share.
MIN_OVERLAPPING_BATCH = 32
GIVE_UP_AFTER_S = 20.0  # how long one round of retries lasts before it is logged


@dataclass(slots=True)
class Pending:
    outcome: Outcome
    deliveries: list[Delivery]  # the job's message (and any duplicates of it)
    settled: Callable[[], None]  # told once the message is acked or handed back


class OutcomeWriter:
    def __init__(
        self,
        outcomes: OutcomesPort,
        metrics: Metrics,
        clock: Clock,
        give_up_after_s: float = GIVE_UP_AFTER_S,
    ) -> None:
        self._outcomes_port = outcomes
        self._metrics = metrics
        self._clock = clock
        self._give_up_after_s = give_up_after_s
        self._queue: list[Pending] = []
        self._first_at = 0.0  # when the first outcome now queued came
        self._arrived = asyncio.Event()  # an outcome came, or a flush ended
        self._task: asyncio.Task[None] | None = None
        self._acks: set[asyncio.Task[None]] = set()
        self._flushes: set[asyncio.Task[None]] = set()
        self._slots = asyncio.Semaphore(MAX_FLUSHES)
        self._idle = asyncio.Event()
        self._idle.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="broker-outcomes")

    def submit(self, pending: Pending) -> None:
        if not self._queue:
            self._first_at = self._clock.monotonic_s()
        self._queue.append(pending)
        self._idle.clear()
        # Only at the sizes the loop waits for (the first, an overlapping batch, a full
        # one): waking it for every outcome of a steady flow cost a wake-up each.
        if len(self._queue) in (1, MIN_OVERLAPPING_BATCH, FLUSH_BATCH):
            self._arrived.set()

    async def drained(self) -> None:
        """Return once every submitted outcome is persisted and acked (or handed back)."""
        await self._idle.wait()

    async def stop(self) -> None:
        """Abandon unpersisted outcomes (their messages stay unacked for the queue to
        take back); finish acks already under way."""
        tasks = [t for t in (self._task,) if t is not None] + list(self._flushes)
        await cancel_and_wait(tasks, TASK_STOP_TIMEOUT_S, "outcomes", self._clock)
        self._task = None
        if self._acks:
            with contextlib.suppress(TimeoutError):
                await self._clock.wait_for(asyncio.wait(list(self._acks)), TASK_STOP_TIMEOUT_S)

    async def _run(self) -> None:
        while True:
            if not self._queue:
                self._arrived.clear()
                self._update_idle()
                await self._arrived.wait()
                continue
            await self._gather()
            while self._flushes and len(self._queue) < MIN_OVERLAPPING_BATCH:
                self._arrived.clear()
                await self._arrived.wait()
            await self._slots.acquire()
            batch, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
            self._first_at = self._clock.monotonic_s()  # for what is left, if any
            task = asyncio.create_task(self._flush(batch))
            self._flushes.add(task)
            task.add_done_callback(self._flushed)

    async def _gather(self) -> None:
        """Wait until the batch is full enough, or FLUSH_AFTER_S after its first
        outcome came."""
        deadline = self._first_at + FLUSH_AFTER_S
        while len(self._queue) < FLUSH_BATCH:
            left = deadline - self._clock.monotonic_s()
            if left <= 0:
                return
            self._arrived.clear()
            with contextlib.suppress(TimeoutError):
                await self._clock.wait_for(self._arrived.wait(), left)

    def _flushed(self, task: asyncio.Task[None]) -> None:
        self._flushes.discard(task)
        self._slots.release()
        self._arrived.set()
        self._update_idle()

    def _update_idle(self) -> None:
        if not self._queue and not self._acks and not self._flushes:
            self._idle.set()

    async def _flush(self, batch: list[Pending]) -> None:
        outcomes = [p.outcome for p in batch]
        while True:
            try:
                await retried(
                    "record_outcomes",
                    lambda: self._outcomes_port.record_outcomes(outcomes, self._clock.now_ms()),
                    self._metrics,
                    self._clock,
                    self._give_up_after_s,
                )
                break
            except Exception as exc:  # the store is still away: keep the messages, go on
                log.error(
                    "outcomes not persisted yet; still trying",
                    extra={"count": len(batch), "error": repr(exc)},
                )
        self._settle(batch, after_outcome())

    def _settle(self, batch: list[Pending], fate: Fate) -> None:
        task = asyncio.create_task(self._settle_all(batch, fate))
        self._acks.add(task)

        def done(t: asyncio.Task[None]) -> None:
            self._acks.discard(t)
            self._update_idle()

        task.add_done_callback(done)

    async def _settle_all(self, batch: list[Pending], fate: Fate) -> None:
        for pending in batch:
            await carry_out(fate, pending.deliveries, self._metrics)
            pending.settled()
