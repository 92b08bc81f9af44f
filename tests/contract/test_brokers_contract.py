"""Broker membership (`store.brokers`), on both adapters: heartbeats with what each
broker holds, judged by the store's clock."""

from __future__ import annotations

from tests.contract.stores import NOW
from timer_service.clock import FakeClock
from timer_service.dispatch import HeldBiz
from timer_service.model import BizType
from timer_service.store.base import Store
from timer_service.store.memory import MemoryStore


async def test_heartbeats_say_what_each_broker_holds_and_consumes(store: Store) -> None:
    held = [HeldBiz("orders.eu", 3, NOW - 500), HeldBiz("coupons", 1, NOW - 9)]
    store_ms = await store.brokers.broker_heartbeat(
        "b1", held, NOW, 6000, consuming=["orders.eu", "coupons"]
    )
    await store.brokers.broker_heartbeat("b2", [], NOW, -1)  # lapsed as it lands
    # The memory store has no clock of its own and answers the caller's; a real store
    # answers its own, which is the machine's here.
    assert isinstance(store_ms, int) and store_ms > 0, store_ms
    beats = sorted(await store.brokers.broker_beats(), key=lambda b: b.broker_id)
    said = [(b.broker_id, b.held, b.consuming) for b in beats]
    expected = [
        ("b1", (HeldBiz("coupons", 1, NOW - 9), held[0]), ("coupons", "orders.eu")),
        ("b2", (), ()),
    ]
    assert said == expected, f"expected {expected}, got {said}"
    b1, b2 = beats
    # Alive for its time to live from the moment the store applied it, on that clock.
    assert b1.expires_at == store_ms + 6000, (b1, store_ms)
    assert 0 < b1.left_ms(NOW) <= 6000, b1
    assert b2.left_ms(NOW) < 0, b2
    await store.brokers.broker_gone("b1")
    assert [b.broker_id for b in await store.brokers.broker_beats()] == ["b2"]


async def test_a_beat_is_judged_by_the_store_clock_not_the_callers(store: Store) -> None:
    """A beat stamped on the store's clock, and read with it: however far behind the
    broker's clock and whoever reads it, a beat just applied has its whole life left
    (the memory store, with no clock of its own, goes by the callers')."""
    if isinstance(store, MemoryStore):
        store = MemoryStore(buckets=60, clock=FakeClock(NOW))
    behind = NOW - 60_000  # the broker's clock, or a beat that waited a minute
    await store.brokers.broker_heartbeat("b1", [], behind, 6000)
    (beat,) = await store.brokers.broker_beats()
    assert beat.read_at is not None, beat
    assert 0 < beat.left_ms(behind) <= 6000, beat
    # A reader whose clock is a minute ahead of the store's judges it alive all the same.
    assert 0 < beat.left_ms(NOW + 60_000) <= 6000, beat


async def test_a_bucket_is_taken_as_it_was_left(store: Store) -> None:
    """A biz type's token bucket (broker/lane.py): never taken; taken and not left (its
    taker may still be sending); left with its tokens, on the store's clock; a leave by
    a taker whose bucket was taken since leaves it not left (it may have sent after)."""
    assert await store.brokers.take_bucket("nobody", "b1/1", NOW) is None, "no such biz type"
    await store.biz_types.put_biz_type(BizType("orders", "http://x.example/cb"))
    first = await store.brokers.take_bucket("orders", "b1/1", NOW)
    assert first is not None and not first.was_taken, first
    again = await store.brokers.take_bucket("orders", "b2/1", NOW)
    assert again is not None and again.was_taken and again.left_at is None, again
    await store.brokers.leave_bucket("orders", "b1/1", 9.0, NOW)  # b2/1 took it since
    await store.brokers.leave_bucket("orders", "b2/1", 2.5, NOW)
    taken = await store.brokers.take_bucket("orders", "b1/2", NOW)
    assert taken is not None and taken.was_taken, taken
    assert taken.left_tokens == 2.5 and taken.left_at is not None, taken
    assert 0 <= taken.at_ms - taken.left_at < 60_000, taken
    await store.brokers.leave_bucket("orders", "b1/2", None, NOW)  # unlimited then
    last = await store.brokers.take_bucket("orders", "b2/2", NOW)
    assert last is not None and last.left_at is not None and last.left_tokens is None, last
    await store.brokers.leave_bucket("orders", "b2/2", 1.0, NOW)
    await store.brokers.leave_bucket("orders", "b1/2", 3.0, NOW)  # stale: it may have sent
    after_stale = await store.brokers.take_bucket("orders", "b2/3", NOW)
    assert after_stale is not None and after_stale.was_taken, after_stale
    assert after_stale.left_at is None, f"a stale leave leaves it not left: {after_stale}"
    (biz,) = await store.biz_types.list_biz_types()
    assert biz == await store.biz_types.get_biz_type("orders"), "the config reads as it was"
    assert await store.biz_types.delete_biz_type("orders")
    await store.biz_types.put_biz_type(BizType("orders", "http://x.example/cb"))
    anew = await store.brokers.take_bucket("orders", "b1/3", NOW)
    assert anew is not None and not anew.was_taken, f"deleted with its biz type: {anew}"
