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
    assert guard.send_clock_ms(5000, 1.0) == 5000, "nothing learnt yet: the host's clock"
    # Answered at monotonic 1.040 s (host wall 1040); the store read 900 during the
    # round trip: from then on the store shows at least 900 + the monotonic time since.
    guard.observe(1.040, 900)
    assert guard.store_floor_ms(2.0) == 1860
    assert guard.lead_ms(2000, 2.0) == 140 and guard.send_clock_ms(2000, 2.0) == 1860
    guard.observe(3.010, 2880)  # a quicker round trip: a tighter bound
    assert guard.lead_ms(4000, 4.0) == 130
    guard.observe(5.400, 4900)  # one slow round trip does not delay every send
    assert guard.lead_ms(6000, 6.0) == 130
    for answered in range(7000, 7000 + SAMPLES_KEPT * 2000, 2000):
        guard.observe(answered / 1000, answered - 400)  # the host ran 270 ms further ahead
    assert guard.lead_ms(20_000, 20.0) == 400, "the older, higher bounds should be gone"
    for answered in range(20_000, 20_000 + SAMPLES_KEPT * 2000, 2000):
        guard.observe(answered / 1000, answered + 3500)  # the store is ahead: the host rules
    assert guard.lead_ms(40_000, 40.0) == 0 and guard.send_clock_ms(40_000, 40.0) == 40_000


def test_no_step_of_the_host_wall_clock_makes_a_send_early() -> None:
    """Issue 30, break 6 (simulation seed 8 with host clock steps): the bound was kept
    as the host's lead on its wall clock, so a 2 s step forward sent callbacks up to
    1.5 s early until older samples were gone. On the monotonic clock, a wall-clock
    step, forward or back, never lets the send clock pass the store's."""
    guard = SkewGuard()
    store_ms = 1_000_000  # the store's clock; the host's wall clock agrees at first
    offset_ms = 0  # the host's wall clock minus the store's
    for beat in range(40):
        mono_s = beat * 2.0
        if beat == 10:
            offset_ms += 2000  # stepped forward
        elif beat == 25:
            offset_ms -= 5000  # stepped back, now 3 s behind
        # Each beat: a round trip of 30 ms, the store read in its middle.
        guard.observe(mono_s + 0.030, store_ms + round(mono_s * 1000) + 15)
        for later_ms in (30, 500, 1000, 1999):
            at_s = mono_s + later_ms / 1000
            true_store_ms = store_ms + round(at_s * 1000)
            host_ms = true_store_ms + offset_ms
            send_ms = guard.send_clock_ms(host_ms, at_s)
            assert send_ms <= true_store_ms, f"beat {beat}: {send_ms - true_store_ms} ms early"
            assert send_ms <= host_ms, "never early by the host's own clock either"
            if offset_ms >= 0:  # ahead, or agreeing: sends by the store's bound, on time
                assert true_store_ms - send_ms <= 15, f"beat {beat}: late by the bound's slack"
            else:  # behind: sends by its own clock, late by its lag
                assert send_ms == host_ms


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
    clock = world.clock
    assert world.broker.skew.lead_ms(clock.now_ms(), clock.monotonic_s()) == SKEW_MS
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
    clock = world.clock
    assert world.broker.skew.lead_ms(clock.now_ms(), clock.monotonic_s()) == 0
