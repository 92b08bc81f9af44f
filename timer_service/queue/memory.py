"""In-process dispatch queue for `timer-service dev` and unit tests.

Same delivery semantics as the RabbitMQ adapter within one process: per biz
type FIFO, one consumer, manual ack, requeue on reject or cancel.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Sequence

from timer_service.dispatch import Claimed
from timer_service.queue.base import Handler, decode, encode


class MemoryDelivery:
    def __init__(self, queue: MemoryQueue, biz_type: str, body: bytes, redelivered: bool) -> None:
        self._queue = queue
        self._biz_type = biz_type
        self._body = body
        self.job = decode(body)
        self.redelivered = redelivered
        self.settled = False

    async def ack(self) -> None:
        self._settle()

    async def requeue(self) -> None:
        if self._settle():
            self._queue._put(self._biz_type, self._body, redelivered=True, front=True)

    async def drop(self) -> None:
        self._settle()

    def _settle(self) -> bool:
        if self.settled:
            return False
        self.settled = True
        self._queue._unacked[self._biz_type].discard(self)
        self._queue._slots[self._biz_type].release()
        return True


class MemoryConsumer:
    def __init__(self, queue: MemoryQueue, biz_type: str, task: asyncio.Task[None]) -> None:
        self._queue = queue
        self._biz_type = biz_type
        self._task = task

    async def cancel(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        for delivery in list(self._queue._unacked[self._biz_type]):
            await delivery.requeue()


class MemoryQueue:
    def __init__(self) -> None:
        self._ready: dict[str, asyncio.Queue[tuple[bytes, bool]]] = defaultdict(asyncio.Queue)
        self._unacked: dict[str, set[MemoryDelivery]] = defaultdict(set)
        self._slots: dict[str, asyncio.Semaphore] = {}
        self.published: list[Claimed] = []  # what was asked of it, for tests
        self.record = False

    async def connect(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def ping(self) -> None:
        return None

    async def ensure_biz(self, biz_type: str) -> None:
        self._ready[biz_type]

    async def publish(self, jobs: Sequence[Claimed]) -> None:
        for job in jobs:
            if self.record:
                self.published.append(job)
            self._put(job.biz_type, encode(job), redelivered=False)

    async def consume(self, biz_type: str, handler: Handler, prefetch: int) -> MemoryConsumer:
        self._slots[biz_type] = asyncio.Semaphore(prefetch)
        task = asyncio.create_task(self._pump(biz_type, handler), name=f"mq-consume-{biz_type}")
        return MemoryConsumer(self, biz_type, task)

    async def queue_depth(self, biz_type: str) -> int | None:
        return self._ready[biz_type].qsize()

    def _put(self, biz_type: str, body: bytes, *, redelivered: bool, front: bool = False) -> None:
        q = self._ready[biz_type]
        if front:
            # asyncio.Queue has no appendleft; its deque is the documented-enough internal.
            q._queue.appendleft((body, redelivered))  # type: ignore[attr-defined]
            q._unfinished_tasks += 1  # type: ignore[attr-defined]
            q._wakeup_next(q._getters)  # type: ignore[attr-defined]
        else:
            q.put_nowait((body, redelivered))

    async def _pump(self, biz_type: str, handler: Handler) -> None:
        q = self._ready[biz_type]
        slots = self._slots[biz_type]
        while True:
            await slots.acquire()
            body, redelivered = await q.get()
            delivery = MemoryDelivery(self, biz_type, body, redelivered)
            self._unacked[biz_type].add(delivery)
            await handler(delivery)
