"""A stalled broker sends nothing it no longer owns (issue 30, break 9): its lease from
the store heartbeat runs out on its monotonic clock while it is frozen, its term is
then over for good, and its send marks carry an ownership epoch that a new owner's
supersedes (broker/term.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from broker.lane import Lane
from broker.marks import MarkWriter
from broker.outcomes import OutcomeWriter
from broker.term import SEND_MARGIN_S, Lease, Stream
from tests.unit.broker_harness import World, started
from tests.unit.test_broker_lane import (
    FakeDelivery,
    FakeSender,
    claimed_jobs,
    drive_by_hand,
    settle,
)
from timer_service.clock import FakeClock
from timer_service.errors import StoreUnavailable
from timer_service.metrics import Metrics
from timer_service.model import BizType, JobState
from timer_service.store.memory.brokers import MemoryBrokers
from timer_service.store.memory.outcomes import MemoryOutcomes

TTL_S = 6.0


@pytest.fixture
async def parts(memory_store: Any, fake_clock: FakeClock) -> Any:
    sender = FakeSender()
    sender.clock = fake_clock
    metrics = Metrics()
    outcomes = OutcomeWriter(memory_store.outcomes, metrics, fake_clock)
    outcomes.start()
    yield memory_store, sender, outcomes, metrics
    await outcomes.stop()


def test_a_term_lasts_from_the_beat_s_sending_to_its_ttl_less_the_margin() -> None:
    clock = FakeClock()
    lease = Lease(clock, TTL_S)
    term = lease.term
    assert not term.valid() and not term.lapsed(), "no lease before the first beat"
    sent_at = clock.monotonic_s()
    clock.advance(300)  # the beat's round trip
    assert lease.landed(sent_at) is False, "the first beat continues the first term"
    assert term.valid()
    clock.advance(round((TTL_S - SEND_MARGIN_S) * 1000) - 300 - 1)
    assert term.valid()
    clock.advance(1)
    assert not term.valid() and not term.lapsed(), "no sending within the margin"
    clock.advance(round(SEND_MARGIN_S * 1000))
    assert term.lapsed()


def test_a_beat_after_a_lapse_starts_a_new_term_and_the_old_never_sends_again() -> None:
    clock = FakeClock()
    lease = Lease(clock, TTL_S)
    lease.landed(clock.monotonic_s())
    old = lease.term
    clock.advance(30_000)  # frozen 30 s
    assert old.lapsed()
    assert lease.landed(clock.monotonic_s()) is True
    assert lease.term is not old and lease.term.number == old.number + 1
    assert lease.term.valid() and not old.valid() and old.over


def lane_under(parts: Any, clock: FakeClock, lease: Lease, epochs: list[int]) -> Lane:
    store, sender, outcomes, metrics = parts

    async def own() -> int:
        epoch = await store.brokers.own_biz_type("orders", "b1")
        epochs.append(epoch)
        return epoch

    return Lane(
        BizType("orders", "http://127.0.0.1:1/cb"),
        marks=MarkWriter(store.outcomes, metrics, clock, "b1"),
        sender=sender,
        outcomes=outcomes,
        metrics=metrics,
        clock=clock,
        stream=Stream(lease.term, own),
    )


async def test_a_lane_frozen_past_its_lease_sends_nothing_it_had_marked(
    parts: Any, fake_clock: FakeClock
) -> None:
    """Marked, then frozen 30 s (the monotonic clock goes on): on resume nothing goes
    out, even once a heartbeat has landed again (a new term; the broker cancels the old
    lane's consumer, which hands the message back: test_a_broker_lets_go_...)."""
    store, sender, *_ = parts
    lease = Lease(fake_clock, TTL_S)
    lease.landed(fake_clock.monotonic_s())
    due = fake_clock.now_ms() + 1000
    (job,) = await claimed_jobs(store, fake_clock, 1, due)
    epochs: list[int] = []
    lane = lane_under(parts, fake_clock, lease, epochs)
    delivery = FakeDelivery(job)
    lane.offer(delivery)
    await drive_by_hand(lane, fake_clock, 990)  # marked, waiting for its moment
    assert store.ops["start_sending"] == 1 and epochs == [1], (store.ops, epochs)
    assert sender.sent == []
    fake_clock.advance(30_000)  # SIGSTOP ... SIGCONT
    lease.landed(fake_clock.monotonic_s())  # the first heartbeat after the resume
    await drive_by_hand(lane, fake_clock, 100)
    assert sender.sent == [], "a lane of a lapsed term sent what it had marked"
    assert lane.stuck_s() == 0.0, "not stuck: out of its term"
    assert delivery.fates == [], "held until the consumer is cancelled"
    await lane.close()


async def test_a_lane_whose_mark_is_fenced_hands_the_messages_back(
    parts: Any, fake_clock: FakeClock
) -> None:
    """Another broker took the stream's epoch after this lane's: its mark is refused,
    nothing is marked nor sent, the message goes back to the queue, and the lane takes
    a new epoch for its next mark (its channel may be live again)."""
    store, sender, *_ = parts
    lease = Lease(fake_clock, 3600.0)
    lease.landed(fake_clock.monotonic_s())
    due = fake_clock.now_ms() + 1000
    (job,) = await claimed_jobs(store, fake_clock, 1, due)
    epochs: list[int] = []
    lane = lane_under(parts, fake_clock, lease, epochs)
    assert lane.stream is not None
    await lane.stream.epoch()  # taken, then another broker takes the next
    await store.brokers.own_biz_type("orders", "b2")  # the new owner's
    delivery = FakeDelivery(job)
    lane.offer(delivery)
    await drive_by_hand(lane, fake_clock, 1100)
    await settle()
    assert sender.sent == [] and delivery.fates == ["requeue"], (sender.sent, delivery.fates)
    current = await store.jobs.get_job("orders", job.job_id)
    assert current.state is JobState.DISPATCHED and current.sending is None, current
    assert await lane.stream.epoch() == 3, "the next mark takes a new epoch"
    await lane.close()


async def test_a_broker_cut_off_from_the_store_lets_go_and_comes_back(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its heartbeats fail past the TTL (the store cut off): it cancels its consumers
    (RabbitMQ's single active consumer moves on) and /healthz says why; once a beat
    lands again it consumes under a new term."""
    await world.put_biz("orders")
    await started(world)
    assert world.broker.biz_types == ["orders"] and world.broker.health() is None
    beat = MemoryBrokers.broker_heartbeat

    async def cut_off(*_: Any, **__: Any) -> int:
        raise StoreUnavailable("cut off")

    monkeypatch.setattr(MemoryBrokers, "broker_heartbeat", cut_off)
    assert await world.clock.run_until(lambda: not world.broker.biz_types, 8_000), (
        "still consuming with its lease lapsed"
    )
    assert world.broker._consumers == {}, "its consumers not cancelled"
    health = world.broker.health()
    assert health is not None and "lapsed" in health, health
    monkeypatch.setattr(MemoryBrokers, "broker_heartbeat", beat)
    assert await world.clock.run_until(lambda: world.broker.biz_types == ["orders"], 5_000)
    assert world.broker.health() is None
    assert world.broker._lease.term.number == 2


async def test_a_lane_whose_marks_never_come_back_is_stuck(
    parts: Any, fake_clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A due message it could send (tokens, slots), nothing sent nor settled: stuck for
    as long (the broker's /healthz fails past a minute). Not stuck before its moment."""
    store, *_ = parts
    due = fake_clock.now_ms() + 1000
    (job,) = await claimed_jobs(store, fake_clock, 1, due)
    never = asyncio.Event()

    async def hangs(*_: Any, **__: Any) -> dict[str, Any]:
        await never.wait()
        return {}

    monkeypatch.setattr(MemoryOutcomes, "start_sending", hangs)
    lease = Lease(fake_clock, 3600.0)
    lease.landed(fake_clock.monotonic_s())
    lane = lane_under(parts, fake_clock, lease, [])
    lane.offer(FakeDelivery(job))
    await drive_by_hand(lane, fake_clock, 900)
    assert lane.stuck_s() == 0.0, "not due yet"
    await drive_by_hand(lane, fake_clock, 70_000, step_ms=1000)
    assert lane.stuck_s() > 60.0, lane.stuck_s()
    await lane.close()
