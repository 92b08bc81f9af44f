"""One contract suite for the dispatch-queue port, run against both adapters.

The in-process queue runs everywhere; the RabbitMQ adapter runs against the shared
RabbitMQ on a queue prefix of its own per test, whose exchange and queues are
deleted afterwards. What the daemon (publish) and the broker (consume, settle,
hand over) rely on must hold for both. Every wait is for an awaited delivery,
bounded by WAIT_S; nothing sleeps.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aio_pika
import pytest

from timer_service import jobs
from timer_service.dispatch import Claimed
from timer_service.model import Job, JobState
from timer_service.queue.amqp import AmqpQueue, exchange_name, queue_name
from timer_service.queue.base import Consumer, Delivery, DispatchQueue
from timer_service.queue.memory import MemoryQueue
from timer_service.tracecontext import TraceContext

WAIT_S = 5.0
ORDERS, INVOICES = "orders", "invoices"
SECOND = 1_767_225_600  # 2026-01-01T00:00:00Z


class TrackedAmqpQueue(AmqpQueue):
    """The RabbitMQ adapter, remembering every biz type it declared, for the teardown."""

    def __init__(self, url: str, prefix: str) -> None:
        super().__init__(url, prefix)
        self.biz_types: set[str] = set()

    async def ensure_biz(self, biz_type: str) -> None:
        self.biz_types.add(biz_type)
        await super().ensure_biz(biz_type)


async def drop_topology(url: str, prefix: str, biz_types: set[str]) -> None:
    """By name: listing queues with rabbitmqctl (tests.support) costs a second a test."""
    connection = await aio_pika.connect(url)
    async with connection:
        channel = await connection.channel()
        for biz_type in biz_types:
            await channel.queue_delete(queue_name(prefix, biz_type))
        await channel.exchange_delete(exchange_name(prefix))


@pytest.fixture(params=["memory", pytest.param("amqp", marks=pytest.mark.integration)])
async def queue(request: pytest.FixtureRequest) -> AsyncIterator[DispatchQueue]:
    if request.param == "memory":
        memory = MemoryQueue()
        await memory.connect()
        yield memory
        await memory.close()
        return
    url, prefix = request.getfixturevalue("amqp_url"), request.getfixturevalue("queue_prefix")
    amqp = TrackedAmqpQueue(url, prefix)
    await amqp.connect()
    try:
        yield amqp
    finally:
        await amqp.close()
        await drop_topology(url, prefix, amqp.biz_types)


def job(job_id: str, biz_type: str = ORDERS, attempt: int = 1) -> Claimed:
    due_at = SECOND * 1000 + 250
    return Claimed(biz_type, job_id, SECOND, due_at, due_at + 30, attempt, f"claim-{job_id}")


class Inbox:
    """A handler that keeps every delivery, unsettled, and lets a test await them."""

    def __init__(self) -> None:
        self.deliveries: list[Delivery] = []
        self.consumer: Consumer | None = None
        self._arrived = asyncio.Event()

    async def __call__(self, delivery: Delivery) -> None:
        self.deliveries.append(delivery)
        self._arrived.set()

    @property
    def ids(self) -> list[str]:
        return [d.job.job_id for d in self.deliveries]

    def seen(self) -> list[tuple[str, bool]]:
        return [(d.job.job_id, d.redelivered) for d in self.deliveries]

    async def wait_for(self, count: int, what: str) -> list[Delivery]:
        """The first `count` deliveries; fails with what came if they do not within WAIT_S."""
        try:
            async with asyncio.timeout(WAIT_S):
                while len(self.deliveries) < count:
                    self._arrived.clear()
                    await self._arrived.wait()
        except TimeoutError:
            pytest.fail(f"expected {count} deliveries ({what}) within {WAIT_S}s, got {self.seen()}")
        return self.deliveries[:count]

    async def cancel(self) -> None:
        assert self.consumer is not None
        await self.consumer.cancel()


async def consume(queue: DispatchQueue, biz_type: str = ORDERS, prefetch: int = 100) -> Inbox:
    inbox = Inbox()
    inbox.consumer = await queue.consume(biz_type, inbox, prefetch)
    return inbox


async def wait_until(event: asyncio.Event, what: str) -> None:
    try:
        async with asyncio.timeout(WAIT_S):
            await event.wait()
    except TimeoutError:
        pytest.fail(f"expected {what} within {WAIT_S}s; it did not happen")


async def assert_only_sentinel_left(queue: DispatchQueue, gone: str) -> None:
    """Nothing but a fresh message is delivered: `gone` was settled for good.

    A message the queue still held would be delivered before one published after it.
    """
    inbox = await consume(queue)
    await queue.publish([job("sentinel")])
    await inbox.wait_for(1, "the sentinel")
    assert inbox.ids == ["sentinel"], f"expected {gone!r} gone, only the sentinel; got {inbox.ids}"
    await inbox.deliveries[0].ack()
    await inbox.cancel()


# -- publish and consume -----------------------------------------------------------


async def test_publish_then_consume_returns_every_field(queue: DispatchQueue) -> None:
    sent = Claimed("orders", "ünï-cödé/42", SECOND, 2**53 - 7, 2**53 - 1, 9, "d1.77.12345")
    inbox = await consume(queue)
    await queue.publish([sent])
    [delivery] = await inbox.wait_for(1, "the published job")
    assert delivery.job == sent, f"expected {sent}, got {delivery.job}"
    assert delivery.redelivered is False, "a first delivery is not marked redelivered"
    await delivery.ack()


async def test_a_message_carries_its_job_as_claimed(queue: DispatchQueue) -> None:
    # What the broker's send mark applies its change to instead of reading the job.
    due = SECOND * 1000 + 250
    claimed = Job(
        "orders", "ünï-cödé/42", due, '{"x":[1,"é"],"y":null}', JobState.DISPATCHED, 2,
        due + 30, due - 60_000, due - 5, last_error="HTTP 503", labels=(("k", "v"),),
        claim="d1.77.1", fence=77, claimed_at=due - 1000, budget_base=1,
        trace=TraceContext("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "a=b"),
    )  # fmt: skip
    sent = jobs.claimed(claimed, SECOND, carry=True)
    inbox = await consume(queue)
    await queue.publish([sent])
    [delivery] = await inbox.wait_for(1, "the published job")
    assert delivery.job.job == claimed
    await delivery.ack()


async def test_publish_of_nothing_is_a_no_op(queue: DispatchQueue) -> None:
    await queue.publish([])
    await queue.ensure_biz(ORDERS)
    assert await queue.queue_depth(ORDERS) == 0


async def test_a_consumer_sees_only_its_biz_type(queue: DispatchQueue) -> None:
    orders, invoices = await consume(queue, ORDERS), await consume(queue, INVOICES)
    batch = [job(f"{biz[0]}{i}", biz) for i in range(5) for biz in (ORDERS, INVOICES)]
    await queue.publish(batch)
    await orders.wait_for(5, "the orders")
    await invoices.wait_for(5, "the invoices")
    assert orders.ids == [f"o{i}" for i in range(5)], f"orders consumer got {orders.ids}"
    assert invoices.ids == [f"i{i}" for i in range(5)], f"invoices consumer got {invoices.ids}"
    assert {d.job.biz_type for d in orders.deliveries} == {ORDERS}


async def test_one_batch_arrives_in_publish_order(queue: DispatchQueue) -> None:
    ids = [f"j{i:03}" for i in range(200)]
    inbox = await consume(queue, prefetch=500)
    await queue.publish([job(i) for i in ids])
    await inbox.wait_for(len(ids), "the whole batch")
    assert inbox.ids == ids, f"expected publish order, got {inbox.ids}"


async def test_a_message_published_before_any_consumer_waits_for_one(
    queue: DispatchQueue,
) -> None:
    await queue.publish([job("early"), job("early2")])
    assert await queue.queue_depth(ORDERS) == 2, "expected both waiting in the queue"
    inbox = await consume(queue)
    await inbox.wait_for(2, "the messages published before the consumer")
    assert inbox.ids == ["early", "early2"]


# -- settling ----------------------------------------------------------------------


async def test_ack_removes_the_message_for_good(queue: DispatchQueue) -> None:
    inbox = await consume(queue)
    await queue.publish([job("done")])
    [delivery] = await inbox.wait_for(1, "the job")
    await delivery.ack()
    await queue.close()
    await queue.connect()
    await assert_only_sentinel_left(queue, "done")


async def test_requeue_hands_the_message_back_marked_redelivered(queue: DispatchQueue) -> None:
    inbox = await consume(queue)
    await queue.publish([job("again")])
    [first] = await inbox.wait_for(1, "the job")
    await first.requeue()
    [_, second] = await inbox.wait_for(2, "the requeued job, again")
    assert second.job == first.job, f"expected {first.job} back, got {second.job}"
    assert second.redelivered is True, "a requeued message comes back marked redelivered"
    await second.ack()


async def test_drop_removes_the_message(queue: DispatchQueue) -> None:
    inbox = await consume(queue)
    await queue.publish([job("unreadable")])
    [delivery] = await inbox.wait_for(1, "the job")
    await delivery.drop()
    await inbox.cancel()
    await assert_only_sentinel_left(queue, "unreadable")


async def test_a_fate_is_decided_once(queue: DispatchQueue) -> None:
    inbox = await consume(queue)
    await queue.publish([job("acked")])
    [delivery] = await inbox.wait_for(1, "the job")
    await delivery.ack()
    await delivery.requeue()  # a later settle changes nothing and does not raise
    await delivery.drop()
    await inbox.cancel()
    await assert_only_sentinel_left(queue, "acked")


async def test_prefetch_caps_unsettled_deliveries(queue: DispatchQueue) -> None:
    inbox = await consume(queue, prefetch=2)
    await queue.publish([job(f"j{i}") for i in range(5)])
    await inbox.wait_for(2, "up to the prefetch")
    depth = await queue.queue_depth(ORDERS)
    assert depth == 3, f"expected 3 held back by prefetch 2, got depth {depth}: {inbox.ids}"
    await inbox.deliveries[0].ack()
    await inbox.wait_for(3, "one more after an ack")
    assert inbox.ids == ["j0", "j1", "j2"]
    assert await queue.queue_depth(ORDERS) == 2


async def test_acks_together_pass_over_a_held_and_a_requeued_message(
    queue: DispatchQueue,
) -> None:
    """The RabbitMQ adapter acks a loop turn's acks in one `multiple` frame where it may:
    never over a message still held (here j2) or one requeued (j5)."""
    inbox = await consume(queue)
    await queue.publish([job(f"j{i}") for i in range(8)])
    held = await inbox.wait_for(8, "the jobs")
    await held[5].requeue()
    await inbox.wait_for(9, "j5, requeued")
    for i in (0, 1, 3, 4, 6, 7):
        await held[i].ack()
    await inbox.deliveries[8].requeue()
    await inbox.wait_for(10, "j5, requeued again")
    await inbox.cancel()
    again = await consume(queue)
    await again.wait_for(2, "the held and the requeued job, back")
    assert sorted(again.ids) == ["j2", "j5"], f"expected j2 and j5 back, got {again.seen()}"
    for delivery in again.deliveries:
        await delivery.ack()
    await again.cancel()
    await assert_only_sentinel_left(queue, "every acked job")


# -- giving messages back ----------------------------------------------------------


async def test_cancel_gives_unsettled_messages_back(queue: DispatchQueue) -> None:
    first = await consume(queue)
    await queue.publish([job(f"j{i}") for i in range(3)])
    held = await first.wait_for(3, "the jobs")
    await held[1].ack()
    await first.cancel()
    second = await consume(queue)
    await second.wait_for(2, "the unacked jobs, back")
    assert sorted(second.seen()) == [("j0", True), ("j2", True)], (
        f"expected j0 and j2 redelivered, got {second.seen()}"
    )


async def test_a_delivery_is_live_until_settled_or_its_channel_is_gone(
    queue: DispatchQueue,
) -> None:
    inbox = await consume(queue)
    await queue.publish([job("a"), job("b")])
    a, b = await inbox.wait_for(2, "the jobs")
    assert a.live and b.live, "an unsettled delivery on an open channel is live"
    await a.ack()
    assert not a.live, "a settled delivery is not live"
    await inbox.cancel()
    assert not b.live, "a delivery whose channel closed is not live (the queue has it back)"


async def test_settling_after_cancel_leaves_the_message_queued(queue: DispatchQueue) -> None:
    first = await consume(queue)
    await queue.publish([job("late")])
    [delivery] = await first.wait_for(1, "the job")
    await first.cancel()
    await delivery.ack()  # too late: the queue took it back at cancel; does not raise
    second = await consume(queue)
    [again] = await second.wait_for(1, "the job, back")
    assert (again.job, again.redelivered) == (delivery.job, True), f"got {second.seen()}"


async def test_close_gives_unsettled_messages_back(queue: DispatchQueue) -> None:
    inbox = await consume(queue)
    await queue.publish([job("held")])
    await inbox.wait_for(1, "the job")
    await queue.close()
    await queue.connect()
    after = await consume(queue)
    await after.wait_for(1, "the job, back after reconnect")
    assert after.seen() == [("held", True)], f"expected held redelivered, got {after.seen()}"


async def test_a_failing_handler_holds_back_nothing(queue: DispatchQueue) -> None:
    handled: list[str] = []
    done = asyncio.Event()

    async def handler(delivery: Delivery) -> None:
        if delivery.job.job_id == "boom":
            raise RuntimeError("handler failed")
        handled.append(delivery.job.job_id)
        await delivery.ack()
        done.set()

    consumer = await queue.consume(ORDERS, handler, prefetch=10)
    await queue.publish([job("boom"), job("next")])
    await wait_until(done, "the job after a failed handler, handled")
    assert handled == ["next"], f"expected next handled after a failure, got {handled}"
    await consumer.cancel()
    after = await consume(queue)
    await after.wait_for(1, "the failed job, unacked, back")
    assert after.seen() == [("boom", True)], f"got {after.seen()}"


async def test_a_waiting_handler_holds_back_nothing(queue: DispatchQueue) -> None:
    second_came = asyncio.Event()
    first_finished = asyncio.Event()

    async def handler(delivery: Delivery) -> None:
        if delivery.job.job_id == "first":
            await second_came.wait()
            first_finished.set()
        else:
            second_came.set()
        await delivery.ack()

    consumer = await queue.consume(ORDERS, handler, prefetch=10)
    await queue.publish([job("first"), job("second")])
    await wait_until(first_finished, "the second delivery while the first handler waits")
    await consumer.cancel()


# -- single active consumer --------------------------------------------------------


async def test_one_consumer_at_a_time_and_the_next_takes_over(queue: DispatchQueue) -> None:
    active = await consume(queue, prefetch=1)
    await queue.publish([job("j0")])
    [first] = await active.wait_for(1, "j0, at the first consumer")
    standby = await consume(queue, prefetch=1)  # a second broker starts while the first is busy
    await queue.publish([job("j1")])
    await first.ack()
    await active.wait_for(2, "j1 at the first consumer after its ack, not at the newcomer")
    assert standby.ids == [], f"expected nothing at the standby, got {standby.ids}"
    await active.cancel()
    await standby.wait_for(1, "the unacked j1, handed over")
    await standby.deliveries[0].ack()
    await queue.publish([job("after")])
    await standby.wait_for(2, "a new job, at the new active consumer")
    assert standby.seen() == [("j1", True), ("after", False)], f"got {standby.seen()}"
    assert active.ids == ["j0", "j1"], f"expected nothing more at the cancelled one: {active.ids}"


# -- lifecycle ---------------------------------------------------------------------


async def test_close_is_idempotent_and_a_closed_queue_refuses_work(queue: DispatchQueue) -> None:
    await queue.ping()
    await queue.close()
    await queue.close()
    with pytest.raises(ConnectionError):
        await queue.ping()
    with pytest.raises(ConnectionError):
        await queue.publish([job("lost")])
    with pytest.raises(ConnectionError):
        await queue.consume(ORDERS, Inbox(), 10)
    await queue.connect()
    await queue.ping()
    await queue.publish([job("kept")])
    inbox = await consume(queue)
    await inbox.wait_for(1, "a job published after reconnect")
    assert inbox.ids == ["kept"], f"expected only kept, got {inbox.ids}"


async def test_cancel_is_idempotent_even_after_close(queue: DispatchQueue) -> None:
    inbox = await consume(queue)
    await inbox.cancel()
    await inbox.cancel()
    other = await consume(queue, INVOICES)
    await queue.close()
    await other.cancel()


async def test_ensure_biz_is_idempotent_and_depth_counts_ready(queue: DispatchQueue) -> None:
    await queue.ensure_biz(ORDERS)
    await queue.ensure_biz(ORDERS)
    assert await queue.queue_depth(ORDERS) == 0
    await queue.publish([job("a"), job("b"), job("c", INVOICES)])
    assert await queue.queue_depth(ORDERS) == 2
    assert await queue.queue_depth(INVOICES) == 1


async def test_depth_of_an_undeclared_biz_type_is_unknown_and_harmless(
    queue: DispatchQueue,
) -> None:
    depth = await queue.queue_depth("never")
    assert depth is None, f"expected None (no queue declared), got {depth}"
    # Asking must not break the queue for what comes next.
    await queue.ensure_biz(ORDERS)
    await queue.publish([job("after")])
    assert await queue.queue_depth(ORDERS) == 1
    await queue.ping()
