"""What a broker exports for the alerts on consumption (k8s/base/prometheusrule.yaml):
the biz types it consumes, whether each is paused, and the queue calls that failed.
TimerBizTypeUnconsumed fires on a biz type with due jobs that no broker says it
consumes; TimerBrokerStalled skips paused biz types."""

from __future__ import annotations

from typing import Any

from tests.unit.broker_harness import World, started

BEAT_MS = 2_500  # one heartbeat (every 2 s) after the first discovery


async def test_exports_each_biz_type_it_consumes_and_whether_it_is_paused(world: World) -> None:
    await world.put_biz("orders")
    await world.put_biz("coupons", paused=True)
    await started(world)
    await world.clock.run_for(BEAT_MS)
    both = ("orders", "coupons")
    consuming = {b: world.metric("timer_broker_consuming", biz_type=b) for b in both}
    paused = {b: world.metric("timer_biz_type_paused", biz_type=b) for b in both}
    assert consuming == {"orders": 1.0, "coupons": 1.0}, f"consuming: {consuming}"
    assert paused == {"orders": 0.0, "coupons": 1.0}, f"paused: {paused}"

    await world.store.biz_types.delete_biz_type("coupons")
    await world.clock.run_for(2 * BEAT_MS)  # let go of, then the next beat
    labels = {"biz_type": "coupons"}
    assert world.metrics.registry.get_sample_value("timer_broker_consuming", labels) is None


async def test_a_failed_consume_is_a_queue_error_and_does_not_hold_up_the_others(
    world: World,
) -> None:
    await world.put_biz("orders")
    await world.put_biz("refunds")
    consume = world.queue.consume

    async def refuse_refunds(biz_type: str, *args: Any, **kwargs: Any) -> Any:
        if biz_type == "refunds":
            raise ConnectionError("channel closed")
        return await consume(biz_type, *args, **kwargs)

    world.queue.consume = refuse_refunds
    await started(world)
    await world.clock.run_for(BEAT_MS)
    assert world.broker.biz_types == ["orders"], world.broker.biz_types
    assert world.metric("timer_queue_errors_total", operation="consume") >= 1
    assert world.metric("timer_store_errors_total", operation="discover") == 0

    world.queue.consume = consume  # RabbitMQ is back: the next discovery consumes it
    await world.clock.run_for(BEAT_MS)
    assert world.broker.biz_types == ["orders", "refunds"], world.broker.biz_types
