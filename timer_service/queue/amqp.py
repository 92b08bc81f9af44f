"""RabbitMQ dispatch queue (aio-pika, robust connection, publisher confirms)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from urllib.parse import parse_qs, urlsplit

import aio_pika
from aio_pika.abc import (
    AbstractIncomingMessage,
    AbstractQueue,
    AbstractRobustChannel,
    AbstractRobustConnection,
    AbstractRobustExchange,
)
from aio_pika.exceptions import ChannelInvalidStateError
from aiormq.abc import AbstractChannel

from timer_service.dispatch import Claimed
from timer_service.queue.amqp_acks import ChannelAcks
from timer_service.queue.base import Handler, decode, encode

log = logging.getLogger(__name__)


def queue_name(prefix: str, biz_type: str) -> str:
    return f"{prefix}.biz.{biz_type}"


def exchange_name(prefix: str) -> str:
    return f"{prefix}.dispatch"


QUEUE_ARGUMENTS = {"x-queue-type": "quorum", "x-single-active-consumer": True}
RECONNECT_INTERVAL_S = 1.0
# AMQP heartbeat asked for unless the URL says (aio-pika's default is 60 s). RabbitMQ
# closes a connection silent for about two of them, which is what moves a frozen
# broker's streams (single active consumer) to the other broker: within ~10 s, not
# after a minute (issue 30, break 9; docs/operations.md, "Failover").
HEARTBEAT_S = 3


class AmqpDelivery:
    def __init__(self, message: AbstractIncomingMessage, acks: ChannelAcks, tag: int) -> None:
        self._message = message
        self._acks = acks
        self._tag = tag
        self.job = decode(message.body)
        self.redelivered = bool(message.redelivered)
        self._settled = False

    @property
    def live(self) -> bool:
        if self._settled:
            return False
        try:
            channel = self._message.channel  # raises once the channel is gone
        except ChannelInvalidStateError:
            return False
        return not channel.is_closed

    async def ack(self) -> None:
        # Sent with the channel's other acks of this loop turn (timer_service/queue/
        # amqp_acks.py); the frame is queued on the next turn, without a wait here.
        if not self._settled:
            self._settled = True
            self._acks.ack(self._tag)

    async def requeue(self) -> None:
        await self._settle(partial(self._message.nack, requeue=True))

    async def drop(self) -> None:
        await self._settle(partial(self._message.reject, requeue=False))

    async def _settle(self, settle: Callable[[], Awaitable[None]]) -> None:
        # A fate is decided once, as in the in-process queue: a second settle is a
        # no-op, not an error. Once the channel is closed (consumer cancelled,
        # connection lost) the server has already taken the message back, so a late
        # settle has nothing left to decide either.
        if self._settled:
            return
        self._settled = True
        with contextlib.suppress(ChannelInvalidStateError):
            await settle()
        # Only now may a `multiple=True` ack reach past it: its frame is written.
        self._acks.settled(self._tag)


class AmqpConsumer:
    def __init__(self, channel: AbstractRobustChannel, queue: AbstractQueue) -> None:
        self._channel = channel
        self._queue = queue
        self.tag: str | None = None
        self._acks: ChannelAcks | None = None
        self._cancelled = False

    def acks_for(self, channel: AbstractChannel) -> ChannelAcks:
        """The acks of the channel a message came on."""
        if self._acks is None or self._acks.channel is not channel:
            # A robust channel reopened after a reconnect is a new channel: its delivery
            # tags start again from 1, and the old one's messages went back to the queue.
            self._acks = ChannelAcks(channel)
        return self._acks

    async def flush_acks(self) -> None:
        if self._acks is not None:
            await self._acks.flush()

    async def cancel(self) -> None:
        if self._cancelled:
            return
        self._cancelled = True
        try:
            await self.flush_acks()
            if not self._channel.is_closed and self.tag is not None:
                await self._queue.cancel(self.tag)
        finally:
            # Closing the channel hands every unacked message back to the queue (and
            # keeps a robust channel from restoring the consumer after a reconnect).
            await self._channel.close()


class AmqpQueue:
    durable = True

    def __init__(self, url: str, prefix: str = "timer") -> None:
        self._url = url
        self._prefix = prefix
        self._connection: AbstractRobustConnection | None = None
        self._publish_channel: AbstractRobustChannel | None = None
        self._exchange: AbstractRobustExchange | None = None
        self._declared: set[str] = set()
        self._declare_lock = asyncio.Lock()
        # One confirm channel per biz type: a channel writes and confirms in order,
        # so on a shared one a herd of one biz type would hold back every other's
        # publishes and confirms behind it.
        self._biz_exchanges: dict[str, AbstractRobustExchange] = {}
        self._consumers: weakref.WeakSet[AmqpConsumer] = weakref.WeakSet()

    async def connect(self) -> None:
        # aio-pika waits 5 s between reconnect attempts by default; a RabbitMQ restart
        # then costs up to 5 s of dispatch on top of the outage (measured: back at
        # +6.0 s, reconnected at +10.0 s). A URL's own `reconnect_interval` wins.
        query = parse_qs(urlsplit(self._url).query)
        interval = None if "reconnect_interval" in query else RECONNECT_INTERVAL_S
        heartbeat = None if "heartbeat" in query else HEARTBEAT_S
        self._connection = await aio_pika.connect_robust(
            self._url,
            client_properties={
                "connection_name": "timer-service",
            },
            reconnect_interval=interval,
            heartbeat=heartbeat,
        )
        self._publish_channel = await self._connection.channel(publisher_confirms=True)  # type: ignore[assignment]
        assert self._publish_channel is not None
        self._exchange = await self._publish_channel.declare_exchange(  # type: ignore[assignment]
            exchange_name(self._prefix), aio_pika.ExchangeType.DIRECT, durable=True
        )

    async def close(self) -> None:
        for consumer in list(self._consumers):
            with contextlib.suppress(Exception):  # acks lost with the connection come back
                await consumer.flush_acks()
        if self._connection is not None:
            await self._connection.close()
            self._connection = None
        # Channels die with their connection; a later connect() starts afresh.
        self._publish_channel = None
        self._exchange = None
        self._biz_exchanges.clear()
        self._declared.clear()

    def _connected(self) -> AbstractRobustConnection:
        if self._connection is None:
            raise ConnectionError("RabbitMQ queue is closed")
        return self._connection

    async def ping(self) -> None:
        if self._connection is None or self._connection.is_closed:
            raise ConnectionError("RabbitMQ connection is closed")
        if self._publish_channel is None or self._publish_channel.is_closed:
            raise ConnectionError("RabbitMQ channel is closed")

    async def ensure_biz(self, biz_type: str) -> None:
        if biz_type in self._declared:
            return
        async with self._declare_lock:
            if biz_type in self._declared:
                return
            channel, exchange = self._publish_channel, self._exchange
            if channel is None or exchange is None:
                raise ConnectionError("RabbitMQ queue is closed")
            queue = await channel.declare_queue(
                queue_name(self._prefix, biz_type), durable=True, arguments=QUEUE_ARGUMENTS
            )
            await queue.bind(exchange, routing_key=biz_type)
            self._declared.add(biz_type)

    async def _exchange_for(self, biz_type: str) -> AbstractRobustExchange:
        exchange = self._biz_exchanges.get(biz_type)
        if exchange is None:
            await self.ensure_biz(biz_type)
            channel = await self._connected().channel(publisher_confirms=True)
            exchange = await channel.get_exchange(exchange_name(self._prefix), ensure=False)  # type: ignore[assignment]
            assert exchange is not None
            self._biz_exchanges[biz_type] = exchange
        return exchange

    async def publish(self, jobs: Sequence[Claimed]) -> None:
        self._connected()
        exchanges = {b: await self._exchange_for(b) for b in {job.biz_type for job in jobs}}
        # Pipelined confirms: every publish is in flight at once, then all are awaited.
        results = await asyncio.gather(
            *(
                exchanges[job.biz_type].publish(
                    aio_pika.Message(
                        encode(job),
                        delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                        content_type="application/json",
                    ),
                    routing_key=job.biz_type,
                    mandatory=True,
                )
                for job in jobs
            ),
            return_exceptions=True,
        )
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            raise ConnectionError(f"{len(failures)} of {len(jobs)} publishes not confirmed") from (
                failures[0]
            )

    async def consume(self, biz_type: str, handler: Handler, prefetch: int) -> AmqpConsumer:
        await self.ensure_biz(biz_type)
        channel: AbstractRobustChannel = await self._connected().channel()  # type: ignore[assignment]
        await channel.set_qos(prefetch_count=prefetch)
        queue = await channel.declare_queue(
            queue_name(self._prefix, biz_type), durable=True, arguments=QUEUE_ARGUMENTS
        )

        consumer = AmqpConsumer(channel, queue)
        self._consumers.add(consumer)

        async def on_message(message: AbstractIncomingMessage) -> None:
            try:
                acks = consumer.acks_for(message.channel)
            except ChannelInvalidStateError:
                return  # the channel closed under it: the server has it back
            tag = message.delivery_tag
            assert tag is not None  # a consumed message has one
            acks.delivered(tag)
            try:
                delivery = AmqpDelivery(message, acks, tag)
            except (ValueError, KeyError) as exc:
                log.error("dropping unreadable message", extra={"error": str(exc)})
                await message.reject(requeue=False)
                acks.settled(tag)
                return
            await handler(delivery)

        consumer.tag = await queue.consume(on_message)
        return consumer

    async def queue_depth(self, biz_type: str) -> int | None:
        if self._connection is None:
            return None
        try:
            # A passive declare of a missing queue makes the server close its channel
            # (404): on the shared publish channel that failed every declare and publish
            # until it was restored. A throwaway plain channel takes the hit instead.
            name = queue_name(self._prefix, biz_type)
            async with aio_pika.Channel(self._connection, publisher_confirms=False) as channel:
                queue = await channel.declare_queue(name, passive=True)
                return int(queue.declaration_result.message_count or 0)
        except Exception:
            return None
