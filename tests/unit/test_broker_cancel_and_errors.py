"""The lane and a cancel racing its callback, and a send that fails in any way."""

from __future__ import annotations

from typing import Any

import pytest

from broker.callback import CallbackRequest, Response
from broker.lane import CHECK_AHEAD_MS
from tests.unit.test_broker_lane import (
    FakeDelivery,
    claimed_jobs,
    make_lane,
    parts,
    settle,
)
from timer_service.clock import FakeClock
from timer_service.errors import CallbackInFlight
from timer_service.model import JobState

__all__ = ["parts"]  # the fixture


async def test_a_cancel_before_the_send_starts_wins_and_one_after_is_in_flight(
    parts: Any, fake_clock: FakeClock
) -> None:
    store, sender, *_ = parts
    due = fake_clock.now_ms() + 1000
    first, second = await claimed_jobs(store, fake_clock, 2, due)
    lane = make_lane(parts, fake_clock)
    lane.offer(FakeDelivery(first))
    lane.offer(FakeDelivery(second))
    lane._step()
    # A cancel in the last instant before the lane commits to the send: 200, never sent.
    fake_clock.advance(1000 - CHECK_AHEAD_MS - 1)
    await store.jobs.cancel_job("orders", first.job_id, fake_clock.now_ms())
    fake_clock.advance(1)
    lane._step()
    await settle()
    # Committed: the other job's cancel is refused as in flight, and it goes out.
    with pytest.raises(CallbackInFlight):
        await store.jobs.cancel_job("orders", second.job_id, fake_clock.now_ms())
    fake_clock.advance(CHECK_AHEAD_MS)
    lane._step()
    await settle()
    sent = [r.body for _, r in sender.sent]
    assert len(sent) == 1 and second.job_id.encode() in sent[0], f"sent {sent}"
    cancelled = await store.jobs.get_job("orders", first.job_id)
    assert cancelled is not None and cancelled.state == JobState.CANCELLED
    await lane.close()


class ExplodingSender:
    """A send that fails in a way no HTTP client names (an encoding error, a bug)."""

    def __init__(self) -> None:
        self.calls = 0

    async def post(self, url: str, request: CallbackRequest, timeout_s: float) -> Response:
        self.calls += 1
        raise ValueError("label empty or too long")


async def test_any_send_failure_is_a_failed_attempt_and_the_message_is_settled(
    parts: Any, fake_clock: FakeClock
) -> None:
    store, _, outcomes, metrics = parts
    exploding = ExplodingSender()
    due = fake_clock.now_ms() + 1000
    (job,) = await claimed_jobs(store, fake_clock, 1, due)
    lane = make_lane((store, exploding, outcomes, metrics), fake_clock)
    delivery = FakeDelivery(job)
    lane.offer(delivery)
    lane._step()
    fake_clock.advance(1000)
    lane._step()
    await settle()
    lane._step()
    await settle()
    await fake_clock.run_for(10)
    assert exploding.calls == 1
    after = await store.jobs.get_job("orders", job.job_id)
    assert after is not None and after.state == JobState.PENDING, f"stuck: {after}"
    assert after.attempts == 1 and "ValueError" in (after.last_error or ""), after
    assert delivery.fates == ["ack"], f"the message was not settled: {delivery.fates}"
    early = metrics.registry.get_sample_value("timer_callbacks_early_total", {"biz_type": "orders"})
    assert early in (None, 0.0), "a callback went out early"
    await lane.close()
