"""The skew guard (issue 14, item 6): a broker host whose clock runs ahead of the
store's cannot make a callback early; one that runs behind sends by its own clock."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

from broker.skew import SAMPLES_KEPT, SkewGuard
from tests.unit.broker_harness import World, started, wait_for_states
from timer_service.clock import FakeClock
from timer_service.model import JobState

T = TypeVar("T")
SKEW_MS = 3000


class StoreClock:
    """The store's clock: the broker host's fake clock, offset by `ahead_ms`."""

    def __init__(self, host: FakeClock, ahead_ms: int) -> None:
        self._host = host
        self._ahead_ms = ahead_ms

    def now_ms(self) -> int:
        return self._host.now_ms() + self._ahead_ms

    def monotonic_s(self) -> float:
        return self._host.monotonic_s()

    async def sleep(self, seconds: float) -> None:
        await self._host.sleep(seconds)

    async def wait_for(self, awaitable: Awaitable[T], timeout_s: float | None) -> T:
        return await self._host.wait_for(awaitable, timeout_s)


def test_the_guard_bounds_the_store_clock_from_below() -> None:
    guard = SkewGuard()
    assert guard.send_clock_ms(5000) == 5000, "nothing learnt yet: the host's clock"
    # Answered at 1040 by the host; the store read 900 during the round trip: at 1040
    # the store showed at least 900, so the host may be up to 140 ms ahead.
    guard.observe(1040, 900)
    assert guard.lead_ms() == 140 and guard.send_clock_ms(2000) == 1860
    guard.observe(3010, 2880)  # a quicker round trip: a tighter bound
    assert guard.lead_ms() == 130
    guard.observe(5400, 4900)  # one slow round trip does not delay every send
    assert guard.lead_ms() == 130
    for answered in range(7000, 7000 + SAMPLES_KEPT * 2000, 2000):
        guard.observe(answered, answered - 400)  # the host was stepped 270 ms ahead
    assert guard.lead_ms() == 400, "the older, smaller leads should be gone"
    for answered in range(20_000, 20_000 + SAMPLES_KEPT * 2000, 2000):
        guard.observe(answered, answered + 3500)  # the store is ahead: the host's clock rules
    assert guard.lead_ms() == 0 and guard.send_clock_ms(40_000) == 40_000


async def test_a_fast_broker_clock_cannot_make_a_callback_early(world: World) -> None:
    store_clock = StoreClock(world.clock, -SKEW_MS)  # the broker's clock is 3 s ahead
    world.store.state.clock = store_clock
    await world.put_biz("orders")
    await started(world)
    due = store_clock.now_ms() + 500  # on the service's clock: half a second from now
    jobs = await world.create("orders", ["a", "b", "c"], due)
    world.daemon.watch([due - SKEW_MS, due])
    assert await world.daemon.dispatch_once() == 3
    await wait_for_states(world.store, jobs, {JobState.DELIVERED}, 10, world.clock)

    for r in world.receiver.received:
        # fired_at is stamped on the clock the lane sends by: the store's, as the skew
        # guard knows it (broker/lane.py, `_start_send`), so the service's one clock.
        sent_on_store_clock = r.json["fired_at"]
        print(f"{r.json['job_id']}: sent {sent_on_store_clock - due} ms after due, store clock")
        assert sent_on_store_clock >= due, f"early by {due - sent_on_store_clock} ms"
        assert sent_on_store_clock - due < 100, f"late by {sent_on_store_clock - due} ms"
    assert world.broker.skew.lead_ms() == SKEW_MS
    assert world.metric("timer_broker_clock_lead_seconds") == SKEW_MS / 1000


async def test_a_slow_broker_clock_sends_by_its_own(world: World) -> None:
    world.store.state.clock = StoreClock(world.clock, SKEW_MS)  # the broker's is 3 s behind
    await world.put_biz("orders")
    await started(world)
    due = world.clock.now_ms() + 400
    jobs = await world.create("orders", ["a"], due)
    world.daemon.watch([due])
    assert await world.daemon.dispatch_once() == 1
    await wait_for_states(world.store, jobs, {JobState.DELIVERED}, 10, world.clock)
    (r,) = world.receiver.received
    assert 0 <= r.json["fired_at"] - due < 100, f"expected on time by its clock, got {r.json}"
    assert world.broker.skew.lead_ms() == 0
