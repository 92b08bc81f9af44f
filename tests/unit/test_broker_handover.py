"""The rate limit where it is easiest to break: across a handover of a biz type's
stream between brokers (the lane that takes a stream over never adds a fresh burst
to what the old owner spent), and on the send timestamps when the clock they are
stamped by moves."""

from __future__ import annotations

import itertools
import json
from typing import Any

from broker.lane import Lane
from broker.marks import MarkWriter
from broker.skew import SkewGuard
from tests.unit.test_broker_lane import (
    FakeDelivery,
    claimed_jobs,
    drive_by_hand,
    make_lane,
    parts,
)
from timer_service.clock import FakeClock
from timer_service.jobs import NewJob
from timer_service.model import BizType, second_of

__all__ = ["parts"]  # the fixture


async def send_times(
    lane: Lane, parts: Any, clock: FakeClock, jobs: list[Any], since: int, redelivered: bool = False
) -> list[int]:
    """Offer `jobs` to `lane`, drive it for a second; when each went out, from `since`."""
    sender = parts[1]
    for job in jobs:
        delivery = FakeDelivery(job)
        delivery.redelivered = redelivered
        lane.offer(delivery)
    await drive_by_hand(lane, clock, 1000)
    return [at - since for at, _ in sender.sent]


async def test_a_stream_taken_over_goes_on_at_the_rate_without_a_fresh_burst(
    parts: Any, fake_clock: FakeClock
) -> None:
    """Redelivered messages at an idle lane: another holder had them, and may have just
    spent the burst; the contract's bound holds across the handover only if this lane
    starts empty."""
    store = parts[0]
    start = fake_clock.now_ms()
    jobs = await claimed_jobs(store, fake_clock, 5, start)
    lane = make_lane(parts, fake_clock, rate_limit_per_s=10, burst=3)
    times = await send_times(lane, parts, fake_clock, jobs, start, redelivered=True)
    # A burst (3) below empty at 10/s: the first token after 400 ms, then one per 100 ms.
    assert times == [400, 500, 600, 700, 800], f"expected one per 100 ms after 400, got {times}"
    await lane.close()


async def test_a_stream_that_comes_back_to_a_lane_with_stale_messages_starts_empty(
    parts: Any, fake_clock: FakeClock
) -> None:
    """The lane lost its channel while holding messages (they went to another broker,
    which spent its own burst); when the stream comes back, what it still holds is
    stale, so it starts empty all the same (found by the chaos run: 7 sends in 1.24 s
    against a bound of 6.98 after a handover back and forth)."""
    store = parts[0]
    start = fake_clock.now_ms()
    later = await claimed_jobs(store, fake_clock, 1, start + 60_000)
    lane = make_lane(parts, fake_clock, rate_limit_per_s=10, burst=3)
    stale = FakeDelivery(later[0])
    lane.offer(stale)  # held for a minute ahead
    stale.channel_open = False  # its channel closed: the stream went elsewhere
    fake_clock.advance(5_000)  # meanwhile this lane's bucket would have refilled
    now = fake_clock.now_ms()
    await store.jobs.create_jobs([NewJob("orders", f"b{i}", now, "{}") for i in range(5)], now)
    back = await store.scan.claim_due(second_of(now), now, "c2", 1, now)
    times = await send_times(lane, parts, fake_clock, back, now, redelivered=True)
    # A burst (3) below empty at 10/s: the first token after 400 ms, then one per 100 ms.
    assert times == [400, 500, 600, 700, 800], f"expected one per 100 ms after 400, got {times}"
    await lane.close()


async def test_a_lane_made_for_a_handover_starts_its_first_stream_empty(
    parts: Any, fake_clock: FakeClock
) -> None:
    """Make-before-break (broker/ownership.py): the new owner's lane exists while the
    old owner drains and spends, then gets fresh (never delivered) messages. Its bucket
    refilled meanwhile; a full burst on top of the old owner's would break the bound, so
    its first stream starts empty (no debt: the old owner stopped before it cancelled)."""
    store = parts[0]
    lane = make_lane(parts, fake_clock, handover=True, rate_limit_per_s=10, burst=3)
    fake_clock.advance(5_000)  # the old owner drains meanwhile
    now = fake_clock.now_ms()
    jobs = await claimed_jobs(store, fake_clock, 5, now)
    times = await send_times(lane, parts, fake_clock, jobs, now)
    assert times == [100, 200, 300, 400, 500], f"expected one per 100 ms from empty, got {times}"
    await lane.close()


async def test_a_lane_not_made_for_a_handover_starts_with_its_burst(
    parts: Any, fake_clock: FakeClock
) -> None:
    """A new biz type, or one nobody consumed: its first jobs go out at once."""
    store = parts[0]
    lane = make_lane(parts, fake_clock, rate_limit_per_s=10, burst=3)
    fake_clock.advance(5_000)
    now = fake_clock.now_ms()
    jobs = await claimed_jobs(store, fake_clock, 5, now)
    times = await send_times(lane, parts, fake_clock, jobs, now)
    assert times == [0, 0, 0, 100, 200], f"expected the burst then one per 100 ms, got {times}"
    await lane.close()


async def test_the_rate_holds_on_the_send_timestamps_when_the_skew_estimate_moves(
    parts: Any, fake_clock: FakeClock
) -> None:
    """A send is stamped (`fired_at`, the contract's send time) by the skew guard's
    clock, the earlier of this host's and the store's lower bound. When the lead grows (a
    store freeze's slow heartbeats roll the best sample out), that clock steps back;
    a bucket on the monotonic clock then let sends out whose stamps were closer than
    the rate allows (found by the chaos run: 16 sends in 3,497 ms against 15.99)."""
    store, sender, outcomes, metrics = parts
    skew = SkewGuard()
    lane = Lane(
        BizType("orders", "http://127.0.0.1:1/cb", rate_limit_per_s=10, burst=1),
        marks=MarkWriter(store.outcomes, metrics, fake_clock, "broker"),
        sender=sender,
        outcomes=outcomes,
        metrics=metrics,
        clock=fake_clock,
        skew=skew,
    )
    now = fake_clock.now_ms()
    for job in await claimed_jobs(store, fake_clock, 4, now - 1000):
        lane.offer(FakeDelivery(job))
    await drive_by_hand(lane, fake_clock, 100)  # the first send, then 100 ms
    skew.observe(fake_clock.monotonic_s(), fake_clock.now_ms() - 60)  # now 60 ms ahead
    await drive_by_hand(lane, fake_clock, 1000)
    stamps = [json.loads(request.body)["fired_at"] for _, request in sender.sent]
    assert len(stamps) == 4, stamps
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    assert min(gaps) >= 100, f"sends stamped closer than 1 / rate: gaps {gaps}"
    await lane.close()
