"""A paused biz type against RabbitMQ's consumer_timeout (issue 14, item 3), on a
RabbitMQ node of the test's own whose timeout is 5 s (the machine's broker is
never reconfigured). RabbitMQ 3.10 has no per-queue timeout and checks it once a
minute, so each case holds its messages for 75 s: with a hold bound above the
timeout RabbitMQ closes the consumer's channel; with TIMER_BROKER_MAX_HOLD_MS
below it, it never does, and each job is called back once after the pause."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import replace

import pytest

from broker.app import Broker
from tests.rabbitnode import RabbitNode
from tests.support import unique_name
from tests.unit.broker_harness import DaemonStandIn, Receiver, create, now_ms, wait_for_states
from timer_service.clock import SystemClock
from timer_service.metrics import Metrics
from timer_service.model import BizType, JobState
from timer_service.queue.amqp import AmqpQueue
from timer_service.settings import Settings
from timer_service.store.memory import MemoryStore

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

CONSUMER_TIMEOUT_MS = 5000
PAUSED_FOR_S = 75.0  # past RabbitMQ's first check, one minute after the consumer began
TIMED_OUT = "delivery acknowledgement on channel"


@pytest.fixture(scope="module")
def node() -> Iterator[RabbitNode]:
    if not RabbitNode.available():
        pytest.fail("rabbitmq-server is not installed where tests/rabbitnode.py looks")
    node = RabbitNode({"consumer_timeout": str(CONSUMER_TIMEOUT_MS)}).start()
    try:
        yield node
    finally:
        node.stop()


@pytest.mark.parametrize("max_hold_ms", [600_000, 2000])
async def test_a_paused_biz_type_against_the_consumer_timeout(
    node: RabbitNode, max_hold_ms: int
) -> None:
    clock = SystemClock()
    store = MemoryStore()
    queue = AmqpQueue(node.url, prefix=unique_name("ct"))
    await queue.connect()
    receiver = Receiver()
    await receiver.start()
    metrics = Metrics()
    settings = Settings(shutdown_grace_s=3, broker_max_hold_ms=max_hold_ms)  # type: ignore[call-arg]
    broker = Broker(settings, store, queue, metrics, clock, broker_id=unique_name("b"))
    biz = BizType("paused", receiver.url("paused"), paused=True)
    await store.biz_types.put_biz_type(biz)
    await queue.ensure_biz("paused")
    log_before = node.log().count(TIMED_OUT)
    try:
        await broker.start()
        due = now_ms() + 500
        jobs = await create(store, "paused", [f"p{i}" for i in range(5)], due)
        daemon = DaemonStandIn(store, queue, clock=clock)
        daemon.watch([due])
        assert await daemon.dispatch_once() == 5
        await asyncio.sleep(PAUSED_FOR_S)
        timeouts = node.log().count(TIMED_OUT) - log_before
        handed_back = metrics.registry.get_sample_value(
            "timer_messages_handed_back_total", {"biz_type": "paused"}
        )
        print(
            f"\n[consumer timeout {CONSUMER_TIMEOUT_MS} ms, hold bound {max_hold_ms} ms] "
            f"channels closed by RabbitMQ: {timeouts}; messages handed back: {handed_back}"
        )
        if max_hold_ms > CONSUMER_TIMEOUT_MS:
            assert timeouts >= 1, "expected RabbitMQ to close the channel (the setup reproduces)"
            return
        assert timeouts == 0, f"expected no channel closed by RabbitMQ, got {timeouts}"
        assert handed_back and handed_back >= 5 * (PAUSED_FOR_S * 1000 // max_hold_ms - 2)
        await store.biz_types.put_biz_type(replace(biz, paused=False))
        started = time.monotonic()
        await wait_for_states(store, jobs, {JobState.DELIVERED}, 30)
        await asyncio.sleep(1.0)
        calls = sorted(r.json["job_id"] for r in receiver.received)
        print(f"unpaused: all delivered {time.monotonic() - started:.1f} s later; calls {calls}")
        assert calls == [f"p{i}" for i in range(5)], f"expected each job once, got {calls}"
    finally:
        await broker.stop()
        await queue.close()
        await receiver.stop()
