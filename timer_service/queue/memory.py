"""In-process dispatch queue for `timer-service dev` and unit tests.

Same delivery semantics as the RabbitMQ adapter within one process, held to it by
tests/contract/test_queue_contract.py: per biz type FIFO, single active consumer,
manual ack with a prefetch cap, each delivery handled in its own task (a handler
that awaits or raises holds back nothing), requeue on reject, cancel or close.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Sequence

from timer_service.dispatch import Claimed
from timer_service.queue.base import Handler, decode, encode

log = logging.getLogger(__name__)


class MemoryDelivery:
    def __init__(self, consumer: MemoryConsumer, body: bytes, redelivered: bool) -> None:
        self._consumer = consumer
        self._body = body
        self.job = decode(body)
        self.redelivered = redelivered
        self.settled = False

    @property
    def live(self) -> bool:
        return not self.settled and not self._consumer._cancelled

    async def ack(self) -> None:
        self._settle()

    async def requeue(self) -> None:
        if self._settle():
            self._consumer.queue._put(
                self._consumer.biz_type, self._body, redelivered=True, front=True
            )

    async def drop(self) -> None:
        self._settle()

    def _settle(self) -> bool:
        if self.settled:
            return False
        self.settled = True
        self._consumer._settled(self)
        return True


class MemoryConsumer:
    def __init__(self, queue: MemoryQueue, biz_type: str, handler: Handler, prefetch: int) -> None:
        self.queue = queue
        self.biz_type = biz_type
        self._handler = handler
        self._slots = asyncio.Semaphore(prefetch)
        self._unacked: dict[MemoryDelivery, None] = {}  # in delivery order
        self._handling: set[asyncio.Task[None]] = set()
        self._pump_task: asyncio.Task[None] | None = None
        self._cancelled = False

    def activate(self) -> None:
        self._pump_task = asyncio.create_task(self._pump(), name=f"mq-consume-{self.biz_type}")

    async def cancel(self) -> None:
        if self._cancelled:
            return
        self._cancelled = True
        current = asyncio.current_task()  # a handler may cancel its own consumer
        running = (self._pump_task, *self._handling)
        tasks = [t for t in running if t is not None and t is not current]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        # Back in delivery order, ahead of what was never delivered.
        for delivery in reversed(list(self._unacked)):
            await delivery.requeue()
        self.queue._consumer_gone(self)

    def _settled(self, delivery: MemoryDelivery) -> None:
        del self._unacked[delivery]
        self._slots.release()

    async def _pump(self) -> None:
        ready = self.queue._ready[self.biz_type]
        while True:
            await self._slots.acquire()
            body, redelivered = await ready.get()
            delivery = MemoryDelivery(self, body, redelivered)
            self._unacked[delivery] = None
            task = asyncio.create_task(self._handle(delivery))
            self._handling.add(task)
            task.add_done_callback(self._handling.discard)

    async def _handle(self, delivery: MemoryDelivery) -> None:
        try:
            await self._handler(delivery)
        except Exception:  # as aio-pika: logged, the message stays unacked
            log.exception("consumer handler failed", extra={"biz_type": self.biz_type})


class MemoryQueue:
    durable = False  # gone with the process

    def __init__(self) -> None:
        self._ready: dict[str, asyncio.Queue[tuple[bytes, bool]]] = defaultdict(asyncio.Queue)
        # Per biz type in registration order; the first is the single active one.
        self._consumers: dict[str, list[MemoryConsumer]] = defaultdict(list)
        self._closed = False
        self.published: list[Claimed] = []  # what was asked of it, for tests
        self.record = False

    async def connect(self) -> None:
        self._closed = False

    async def close(self) -> None:
        # As a closed connection: consumers stop and their unacked messages go back.
        self._closed = True
        for consumers in list(self._consumers.values()):
            for consumer in list(consumers):
                await consumer.cancel()

    async def ping(self) -> None:
        self._check_open()

    async def ensure_biz(self, biz_type: str) -> None:
        self._ready[biz_type]

    async def publish(self, jobs: Sequence[Claimed]) -> None:
        self._check_open()
        for job in jobs:
            if self.record:
                self.published.append(job)
            self._put(job.biz_type, encode(job), redelivered=False)

    async def consume(self, biz_type: str, handler: Handler, prefetch: int) -> MemoryConsumer:
        self._check_open()
        consumer = MemoryConsumer(self, biz_type, handler, prefetch)
        consumers = self._consumers[biz_type]
        consumers.append(consumer)
        if len(consumers) == 1:
            consumer.activate()
        return consumer

    async def queue_depth(self, biz_type: str) -> int | None:
        ready = self._ready.get(biz_type)  # no queue was ever declared: unknown, as RabbitMQ
        return None if ready is None else ready.qsize()

    def _check_open(self) -> None:
        if self._closed:
            raise ConnectionError("the in-process queue is closed")

    def _consumer_gone(self, consumer: MemoryConsumer) -> None:
        consumers = self._consumers[consumer.biz_type]
        was_active = consumers[0] is consumer
        consumers.remove(consumer)
        if was_active and consumers:
            consumers[0].activate()

    def _put(self, biz_type: str, body: bytes, *, redelivered: bool, front: bool = False) -> None:
        q = self._ready[biz_type]
        if front:
            # asyncio.Queue has no appendleft; its deque is the documented-enough internal.
            q._queue.appendleft((body, redelivered))  # type: ignore[attr-defined]
            q._unfinished_tasks += 1  # type: ignore[attr-defined]
            q._wakeup_next(q._getters)  # type: ignore[attr-defined]
        else:
            q.put_nowait((body, redelivered))
