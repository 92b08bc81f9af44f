"""No message is held unacked longer than `TIMER_BROKER_MAX_HOLD_MS` (issue 14, item 3):
RabbitMQ closes a channel that holds a delivery past its consumer_timeout and
redelivers everything on it. A paused (or backlogged, or slowly rate-limited) biz
type hands its held messages back in time, and each job is still called back once."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest

from broker.app import Broker
from tests.unit.broker_harness import DaemonStandIn, Receiver, create, wait_for_states
from timer_service.clock import FakeClock
from timer_service.metrics import Metrics
from timer_service.model import BizType, JobState
from timer_service.queue.base import Delivery, Handler
from timer_service.queue.memory import MemoryQueue
from timer_service.settings import Settings

MAX_HOLD_MS = 60_000


class WatchedQueue(MemoryQueue):
    """Remembers when each delivery was handed to the broker."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.clock = clock
        self.handed: list[tuple[int, Delivery]] = []

    async def consume(self, biz_type: str, handler: Handler, prefetch: int) -> Any:
        async def watched(delivery: Delivery) -> None:
            self.handed.append((self.clock.now_ms(), delivery))
            await handler(delivery)

        return await super().consume(biz_type, watched, prefetch)

    def oldest_unsettled_ms(self) -> int:
        now = self.clock.now_ms()
        return max((now - at for at, d in self.handed if d.live), default=0)


@pytest.fixture
async def parts(memory_store: Any) -> AsyncIterator[tuple[Any, WatchedQueue, Broker, Receiver]]:
    clock = FakeClock(max_step_ms=10)
    queue = WatchedQueue(clock)
    receiver = Receiver(clock=clock)
    await receiver.start()
    settings = Settings(shutdown_grace_s=3, broker_max_hold_ms=MAX_HOLD_MS)  # type: ignore[call-arg]
    broker = Broker(settings, memory_store, queue, Metrics(), clock, broker_id="b1")
    yield memory_store, queue, broker, receiver
    await clock.drive(broker.stop())
    await receiver.stop()


async def test_a_paused_biz_type_never_holds_a_message_past_the_bound(parts: Any) -> None:
    store, queue, broker, receiver = parts
    clock: FakeClock = queue.clock
    biz = BizType("orders", receiver.url("orders"), paused=True)
    await store.biz_types.put_biz_type(biz)
    await broker.start()
    due = clock.now_ms() + 500
    jobs = await create(store, "orders", ["a", "b", "c"], due, created_at=clock.now_ms())
    daemon = DaemonStandIn(store, queue, clock=clock)
    daemon.watch([due])
    assert await daemon.dispatch_once() == 3

    oldest_ms = 0
    for _ in range(10 * 60):  # ten minutes paused, looked at every second
        await clock.run_for(1000)
        oldest_ms = max(oldest_ms, queue.oldest_unsettled_ms())
    print(f"longest held {oldest_ms} ms (bound {MAX_HOLD_MS} ms), {len(queue.handed)} deliveries")
    assert oldest_ms <= MAX_HOLD_MS + 1000, f"held {oldest_ms} ms, bound {MAX_HOLD_MS} ms"
    assert len(queue.handed) >= 3 * 9, "the held messages were not handed back and forth"
    assert receiver.received == [], "a paused biz type was called back"

    await store.biz_types.put_biz_type(replace(biz, paused=False))
    await wait_for_states(store, jobs, {JobState.DELIVERED}, 10, clock)
    await clock.run_for(2000)
    calls = sorted(r.json["job_id"] for r in receiver.received)
    assert calls == ["a", "b", "c"], f"expected each job called back once, got {calls}"
