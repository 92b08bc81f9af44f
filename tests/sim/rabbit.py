"""RabbitMQ as the daemon and the broker use it, at the queue port.

One `Rabbit` server holds per biz type a durable queue with single-active-consumer;
each simulated process talks to it through its own `RabbitConnection` (a
`DispatchQueue`). What is modelled: a publish is confirmed once the message is in
its queue; the first consumer of a queue receives, each delivery in its own task,
at most `prefetch` unacked; the next consumer takes over when it is cancelled or its
channel closes; a closed channel's unacked messages go back to the front of the
queue, marked redelivered; a connection can be lost (its consumers gone, publishes
refused) and comes back as `connect_robust` does, its consumers re-registered last.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from timer_service.dispatch import Claimed
from timer_service.queue.base import Handler, decode, encode

log = logging.getLogger(__name__)


@dataclass
class _Queue:
    ready: deque[tuple[bytes, bool]] = field(default_factory=deque)
    consumers: list[SimConsumer] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def wake(self) -> None:
        self.changed.set()


class Rabbit:
    def __init__(self, on_event: Callable[[str], None] = lambda _: None) -> None:
        self.queues: dict[str, _Queue] = {}
        self.on_event = on_event

    def queue(self, biz_type: str) -> _Queue:
        if biz_type not in self.queues:
            self.queues[biz_type] = _Queue()
        return self.queues[biz_type]

    def connection(self, name: str) -> RabbitConnection:
        return RabbitConnection(self, name)


class SimDelivery:
    def __init__(self, consumer: SimConsumer, body: bytes, redelivered: bool) -> None:
        self._consumer = consumer
        self._channel = consumer.channel  # a message is tied to the channel that delivered it
        self._body = body
        self.job = decode(body)
        self.redelivered = redelivered
        self.settled = False

    @property
    def live(self) -> bool:
        """As the consuming process sees it: a channel the server closed looks open until
        the process has run since (a frozen one learns it only after it resumes)."""
        consumer = self._consumer
        return not self.settled and consumer.seen_open and self._channel == consumer.channel

    def _server_live(self) -> bool:
        return not self.settled and self._consumer.open and self._channel == self._consumer.channel

    async def ack(self) -> None:
        self._settle()

    async def requeue(self) -> None:
        if self._settle():
            self._consumer.queue.ready.appendleft((self._body, True))
            self._consumer.queue.wake()

    async def drop(self) -> None:
        self._settle()

    def _settle(self) -> bool:
        if not self._server_live():  # a settle on a closed channel changes nothing
            return False
        self.settled = True
        self._consumer.unacked.pop(self, None)
        self._consumer.queue.wake()
        return True


class SimConsumer:
    def __init__(
        self, conn: RabbitConnection, biz_type: str, handler: Handler, prefetch: int
    ) -> None:
        self.conn = conn
        self.biz_type = biz_type
        self.queue = conn.rabbit.queue(biz_type)
        self.handler = handler
        self.prefetch = prefetch
        self.unacked: dict[SimDelivery, None] = {}
        self.channel = 0
        self.open = False
        self.cancelled = False
        self._handling: set[asyncio.Task[None]] = set()  # held: a task is weakly referenced
        # The consuming process's: a restore (run by the world) pumps in its name.
        self._context = contextvars.copy_context()
        self._pump: asyncio.Task[None] | None = None
        self.reopen()

    def reopen(self) -> None:
        """On a new channel (a robust connection's restore): the same consumer object,
        as aio-pika restores it, so that cancelling it later still stops it."""
        self.channel += 1
        self.open = True
        self.seen_open = True
        self.queue.consumers.append(self)
        self.queue.wake()
        loop = asyncio.get_running_loop()
        name = f"rabbit-{self.conn.name}-{self.biz_type}"
        self._pump = loop.create_task(self._run(), name=name, context=self._context)

    async def cancel(self) -> None:
        self.cancelled = True
        self.close()
        self.seen_open = False  # the process closed it: it knows at once
        self.conn.consumers.pop(self, None)

    def close(self) -> None:
        """The channel closes: unacked messages back to the front, in delivery order."""
        if not self.open:
            return
        self.open = False
        # The process learns of it when it next runs: a callback in its name.
        channel = self.channel
        asyncio.get_running_loop().call_soon(self._notice_closed, channel, context=self._context)
        if self._pump is not None:
            self._pump.cancel()
        for body in reversed([d._body for d in self.unacked]):
            self.queue.ready.appendleft((body, True))
        if self.unacked:
            self.conn.rabbit.on_event(
                f"requeue {self.biz_type} {len(self.unacked)} {self.conn.name}"
            )
        self.unacked.clear()
        if self in self.queue.consumers:
            self.queue.consumers.remove(self)
        self.queue.wake()

    def _notice_closed(self, channel: int) -> None:
        if channel == self.channel and not self.open:
            self.seen_open = False

    async def _run(self) -> None:
        queue = self.queue
        while True:
            active = queue.consumers and queue.consumers[0] is self
            if active and queue.ready and len(self.unacked) < self.prefetch:
                body, redelivered = queue.ready.popleft()
                delivery = SimDelivery(self, body, redelivered)
                self.unacked[delivery] = None
                handling = asyncio.create_task(self._handle(delivery))
                self._handling.add(handling)
                handling.add_done_callback(self._handling.discard)
                await asyncio.sleep(0)
                continue
            queue.changed.clear()
            await queue.changed.wait()

    async def _handle(self, delivery: SimDelivery) -> None:
        try:
            await self.handler(delivery)
        except Exception:  # as aio-pika: logged, the message stays unacked
            log.exception("consumer handler failed")


class RabbitConnection:
    durable = True

    def __init__(self, rabbit: Rabbit, name: str) -> None:
        self.rabbit = rabbit
        self.name = name
        self.connected = False
        self.consumers: dict[SimConsumer, None] = {}  # ordered: a set's order is an address's
        self._lost: list[SimConsumer] = []

    async def connect(self) -> None:
        self.connected = True

    async def close(self) -> None:
        self.connected = False
        for consumer in list(self.consumers):
            consumer.close()
        self.consumers.clear()

    def drop(self) -> None:
        """The process died: its channels close with it."""
        self.connected = False
        for consumer in list(self.consumers):
            consumer.close()
        self.consumers.clear()

    def lose(self) -> None:
        """The connection drops silently; `restore` brings it back with its consumers."""
        self._lost = [c for c in self.consumers if c.open]
        self.drop()

    def restore(self) -> None:
        self.connected = True
        for consumer in self._lost:
            if not consumer.cancelled:
                self.consumers[consumer] = None
                consumer.reopen()
        self._lost = []

    async def ping(self) -> None:
        self._check()

    async def ensure_biz(self, biz_type: str) -> None:
        self._check()
        self.rabbit.queue(biz_type)

    async def publish(self, jobs: Sequence[Claimed]) -> None:
        self._check()
        for job in jobs:
            queue = self.rabbit.queue(job.biz_type)
            queue.ready.append((encode(job), False))
            queue.wake()
        await asyncio.sleep(0)  # the confirm is a round trip
        self._check()

    async def consume(self, biz_type: str, handler: Handler, prefetch: int) -> SimConsumer:
        self._check()
        return self._add(biz_type, handler, prefetch)

    async def queue_depth(self, biz_type: str) -> int | None:
        self._check()
        queue = self.rabbit.queues.get(biz_type)
        return None if queue is None else len(queue.ready)

    def _add(self, biz_type: str, handler: Handler, prefetch: int) -> SimConsumer:
        consumer = SimConsumer(self, biz_type, handler, prefetch)
        self.consumers[consumer] = None
        return consumer

    def _check(self) -> None:
        if not self.connected:
            raise ConnectionError(f"AMQP connection of {self.name} is closed")
