"""The lane: a send that fails in any way, and messages whose channel closed or that
were redelivered."""

from __future__ import annotations

from typing import Any

from broker.callback import CallbackRequest, Response
from broker.pacing import CHECK_AHEAD_MS
from tests.unit.test_broker_lane import (
    OUTCOME_WAIT_MS,
    FakeDelivery,
    claimed_jobs,
    make_lane,
    parts,
    settle,
)
from timer_service.clock import FakeClock
from timer_service.dispatch import SendRef
from timer_service.model import JobState

__all__ = ["parts"]  # the fixture


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
    await fake_clock.run_for(OUTCOME_WAIT_MS)
    assert exploding.calls == 1
    after = await store.jobs.get_job("orders", job.job_id)
    assert after is not None and after.state == JobState.PENDING, f"stuck: {after}"
    assert after.attempts == 1 and "ValueError" in (after.last_error or ""), after
    assert delivery.fates == ["ack"], f"the message was not settled: {delivery.fates}"
    early = metrics.registry.get_sample_value("timer_callbacks_early_total", {"biz_type": "orders"})
    assert early in (None, 0.0), "a callback went out early"
    await lane.close()


async def test_a_message_whose_channel_closed_is_not_sent(
    parts: Any, fake_clock: FakeClock
) -> None:
    store, sender, *_ = parts
    due = fake_clock.now_ms() + 1000
    (job,) = await claimed_jobs(store, fake_clock, 1, due)
    lane = make_lane(parts, fake_clock)
    delivery = FakeDelivery(job)
    lane.offer(delivery)
    lane._step()
    fake_clock.advance(1000 - CHECK_AHEAD_MS)
    lane._step()
    await settle()  # marked as being sent
    delivery.channel_open = False  # the connection dropped: the queue has it back
    fake_clock.advance(CHECK_AHEAD_MS)
    lane._step()
    await settle()
    assert sender.sent == [], "a message another broker now holds was sent here too"
    await lane.close()


async def test_a_redelivered_message_takes_over_a_send_its_dead_broker_started(
    parts: Any, fake_clock: FakeClock
) -> None:
    store, sender, *_ = parts
    due = fake_clock.now_ms() + 1000
    (job,) = await claimed_jobs(store, fake_clock, 1, due)
    ref = SendRef(job.biz_type, job.job_id, job.second, job.claim, bucket=job.bucket)
    assert await store.outcomes.start_sending([ref], "dead-broker", fake_clock.now_ms())
    lane = make_lane(parts, fake_clock)
    redelivered = FakeDelivery(job)
    redelivered.redelivered = True
    lane.offer(redelivered)
    lane._step()
    fake_clock.advance(1000)
    lane._step()
    await settle()
    lane._step()
    await settle()
    assert len(sender.sent) == 1, "the job was left to a broker that is gone"
    await lane.close()
