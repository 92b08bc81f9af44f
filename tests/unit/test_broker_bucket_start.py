"""A lane's token bucket starts from its biz type's bucket as the last lane to send for
it left it (issue 30, break 3; simulation seed 1018 with bursts): a restarted broker,
or a stopped or crashed owner's successor, spends no second burst on top of the
first. broker.ratelimit.start_tokens, and lanes over the memory store."""

from __future__ import annotations

from typing import Any

from broker.lane import Lane
from broker.marks import MarkWriter
from broker.outcomes import OutcomeWriter
from broker.ratelimit import start_tokens
from broker.skew import SkewGuard
from tests.unit.test_broker_lane import (
    FakeDelivery,
    FakeSender,
    claimed_jobs,
    drive_by_hand,
    parts,
    settle,
)
from tests.unit.test_broker_skew import StoreClock
from timer_service.clock import FakeClock
from timer_service.dispatch import BucketTaken
from timer_service.jobs import NewJob
from timer_service.metrics import Metrics
from timer_service.model import BizType, second_of
from timer_service.store.memory import MemoryStore

__all__ = ["parts"]  # the fixture

ORDERS = BizType("orders", "http://127.0.0.1:1/cb", rate_limit_per_s=1.0, burst=3)


def test_the_start_is_the_bucket_as_left_refilled_since() -> None:
    never = BucketTaken(at_ms=50_000, was_taken=False)
    assert start_tokens(never, 1.0, 3) == 3, "nothing ever sent: the contract's full bucket"
    left = BucketTaken(at_ms=50_000, was_taken=True, left_at=49_000, left_tokens=0.5)
    assert start_tokens(left, 1.0, 3) == 1.5, "half a token left, and a second's refill"
    owed = BucketTaken(at_ms=50_000, was_taken=True, left_at=49_000, left_tokens=-2.0)
    assert start_tokens(owed, 1.0, 3) == -1.0, "a debt left is a debt taken"
    long_ago = BucketTaken(at_ms=50_000, was_taken=True, left_at=1_000, left_tokens=0.0)
    assert start_tokens(long_ago, 1.0, 3) == 3, "refilled no further than the burst"
    crashed = BucketTaken(at_ms=50_000, was_taken=True)
    assert start_tokens(crashed, 1.0, 3) == 0, "never let go: it may have just spent it all"
    unlimited = BucketTaken(at_ms=50_000, was_taken=True, left_at=49_000, left_tokens=None)
    assert start_tokens(unlimited, 1.0, 3) == 3, "left while unlimited: as a new bucket"


def bucket_lane(parts: Any, clock: FakeClock, broker_id: str) -> Lane:
    store, sender, outcomes, metrics = parts
    return Lane(
        ORDERS,
        marks=MarkWriter(store.outcomes, metrics, clock, broker_id),
        sender=sender,
        outcomes=outcomes,
        metrics=metrics,
        clock=clock,
        broker_id=broker_id,
        buckets=store.brokers,
    )


async def sends_after(lane: Lane, parts: Any, clock: FakeClock, count: int) -> list[int]:
    """Offer `count` fresh (never delivered) messages of jobs due now, drive the lane
    2.6 s; when each went out, from now."""
    store, sender, *_ = parts
    now = clock.now_ms()
    before = len(sender.sent)
    tag = f"n{now}-"
    await store.jobs.create_jobs(
        [NewJob("orders", f"{tag}{i}", now, "{}") for i in range(count)], now
    )
    for job in await store.scan.claim_due(second_of(now), now, tag, 1, now):
        if job.job_id.startswith(tag):
            lane.offer(FakeDelivery(job))
    await settle()  # the bucket's take: the store answers at once
    await drive_by_hand(lane, clock, 2600)
    return [at - now for at, _ in sender.sent[before:]]


async def test_a_stopped_owners_successor_goes_on_from_the_bucket_it_left(
    parts: Any, fake_clock: FakeClock
) -> None:
    """Rate 1/s, burst 3. The first lane ever spends its whole burst, and lets go 0.5 s
    later (a graceful stop: its bucket left with half a token). Its successor (another
    broker, or the restarted one) gets fresh messages at once: before the fix it had a
    full bucket of its own and sent 3 more at once, 6 in 0.5 s against 3 + 0.5."""
    store = parts[0]
    await store.biz_types.put_biz_type(ORDERS)
    first = bucket_lane(parts, fake_clock, "broker-1")
    jobs = await claimed_jobs(store, fake_clock, 3, fake_clock.now_ms())
    for job in jobs:
        first.offer(FakeDelivery(job))
    await settle()
    await drive_by_hand(first, fake_clock, 500)
    sent = parts[1].sent
    assert len(sent) == 3 and len({at for at, _ in sent}) == 1, "a whole burst, at once"
    first.stop_sending()
    assert await first.drain(1.0)
    await first.close()

    successor = bucket_lane(parts, fake_clock, "broker-2")
    times = await sends_after(successor, parts, fake_clock, 3)
    # Half a token left: the next at 0.5 s, then one a second.
    assert times == [500, 1500, 2500], f"expected one a second from 0.5 s, got {times}"
    await successor.close()


async def test_a_crashed_owners_successor_starts_empty(parts: Any, fake_clock: FakeClock) -> None:
    """An owner that never let go (killed) may have spent its burst just before: the
    successor starts with no token."""
    store = parts[0]
    await store.biz_types.put_biz_type(ORDERS)
    crashed = bucket_lane(parts, fake_clock, "broker-1")
    for job in await claimed_jobs(store, fake_clock, 3, fake_clock.now_ms()):
        crashed.offer(FakeDelivery(job))
    await settle()
    await drive_by_hand(crashed, fake_clock, 500)
    await crashed.close()  # no drain: it died
    successor = bucket_lane(parts, fake_clock, "broker-2")
    times = await sends_after(successor, parts, fake_clock, 3)
    assert times == [1000, 2000], f"expected one a second from empty, got {times}"
    await successor.close()


async def test_a_biz_type_never_sent_for_starts_full(parts: Any, fake_clock: FakeClock) -> None:
    store = parts[0]
    await store.biz_types.put_biz_type(ORDERS)
    lane = bucket_lane(parts, fake_clock, "broker-1")
    times = await sends_after(lane, parts, fake_clock, 4)
    assert times == [0, 0, 0, 1000], f"expected the burst, then one a second, got {times}"
    await lane.close()


async def test_the_take_teaches_the_lane_the_stores_clock(fake_clock: FakeClock) -> None:
    """The take is a round trip that reads the store's clock, before the lane marks or
    sends anything: a lane never sends by its host's clock alone, even when its broker's
    first heartbeat failed (broker/skew.py). Here the host is 3 s ahead of the store."""
    store = MemoryStore(buckets=60, clock=StoreClock(fake_clock, -3000))
    await store.setup()
    await store.biz_types.put_biz_type(ORDERS)
    skew = SkewGuard()
    metrics = Metrics()
    outcomes = OutcomeWriter(store.outcomes, metrics, fake_clock)
    lane = Lane(
        ORDERS,
        marks=MarkWriter(store.outcomes, metrics, fake_clock, "broker-1"),
        sender=FakeSender(),
        outcomes=outcomes,
        metrics=metrics,
        clock=fake_clock,
        skew=skew,
        buckets=store.brokers,
    )
    for job in await claimed_jobs(store, fake_clock, 1, fake_clock.now_ms() + 60_000):
        lane.offer(FakeDelivery(job))
    await settle()
    assert skew.lead_ms(fake_clock.now_ms(), fake_clock.monotonic_s()) == 3000
    await lane.close()
    await store.close()
