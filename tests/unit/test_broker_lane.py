"""A lane driven by a FakeClock: held until the moment, marked just before, limits obeyed."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from broker.callback import CallbackRequest, Response
from broker.lane import MARK_SPAN_MS, Lane
from broker.marks import GIVE_UP_AFTER_S as CHECK_GIVE_UP_AFTER_S
from broker.marks import MarkWriter
from broker.outcomes import FLUSH_AFTER_S, OutcomeWriter
from broker.pacing import CHECK_AHEAD_MS
from timer_service.clock import FakeClock
from timer_service.dispatch import Claimed, SendRef
from timer_service.errors import CallbackInFlight
from timer_service.jobs import NewJob
from timer_service.metrics import Metrics
from timer_service.model import BizType, JobState, second_of


class FakeSender:
    def __init__(self) -> None:
        self.sent: list[tuple[int, CallbackRequest]] = []
        self.clock: FakeClock | None = None
        self.gate: asyncio.Event | None = None

    async def post(self, url: str, request: CallbackRequest, timeout_s: float) -> Response:
        assert self.clock is not None
        self.sent.append((self.clock.now_ms(), request))
        if self.gate is not None:
            await self.gate.wait()
        return Response(200)


class FakeDelivery:
    def __init__(self, job: Claimed) -> None:
        self.job = job
        self.redelivered = False
        self.fates: list[str] = []
        self.channel_open = True

    @property
    def live(self) -> bool:
        return self.channel_open and not self.fates

    async def ack(self) -> None:
        self.fates.append("ack")

    async def requeue(self) -> None:
        self.fates.append("requeue")

    async def drop(self) -> None:
        self.fates.append("drop")


# Long enough for the outcome writer's batch to be written.
OUTCOME_WAIT_MS = round(FLUSH_AFTER_S * 1000) + 10


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


@pytest.fixture
async def parts(memory_store: Any, fake_clock: FakeClock) -> Any:
    sender = FakeSender()
    sender.clock = fake_clock
    metrics = Metrics()
    outcomes = OutcomeWriter(memory_store.outcomes, metrics, fake_clock)
    outcomes.start()
    yield memory_store, sender, outcomes, metrics
    await outcomes.stop()


async def claimed_jobs(store: Any, clock: FakeClock, count: int, due: int) -> list[Claimed]:
    await store.jobs.create_jobs(
        [NewJob("orders", f"j{i}", due, "{}") for i in range(count)], clock.now_ms()
    )
    return list(await store.scan.claim_due(second_of(due), due, "c1", 1, clock.now_ms()))


async def drive_by_hand(lane: Lane, clock: FakeClock, ms: int, step_ms: int = 10) -> None:
    """Step the lane (not started) through `ms` of fake time, `step_ms` at a time."""
    for _ in range(ms // step_ms):
        lane._step()
        await settle()
        lane._step()
        await settle()
        clock.advance(step_ms)


def make_lane(parts: Any, clock: FakeClock, handover: bool = False, **config: Any) -> Lane:
    store, sender, outcomes, metrics = parts
    biz = BizType("orders", "http://127.0.0.1:1/cb", **config)
    return Lane(
        biz,
        marks=MarkWriter(store.outcomes, metrics, clock, "broker"),
        sender=sender,
        outcomes=outcomes,
        metrics=metrics,
        clock=clock,
        handover=handover,
    )


async def test_holds_until_the_exact_millisecond(parts: Any, fake_clock: FakeClock) -> None:
    store, sender, *_ = parts
    due = fake_clock.now_ms() + 1000
    (job,) = await claimed_jobs(store, fake_clock, 1, due)
    lane = make_lane(parts, fake_clock)
    delivery = FakeDelivery(job)
    lane.offer(delivery)

    # Marked on the lanes' shared beat before the look-ahead reaches it.
    beat_ms = 1000 - CHECK_AHEAD_MS - (due - CHECK_AHEAD_MS) % MARK_SPAN_MS
    delay = lane._step()
    assert delay == pytest.approx(beat_ms / 1000), f"got {delay}"
    assert store.ops["start_sending"] == 0, "checked too early"

    fake_clock.advance(beat_ms)
    lane._step()
    await settle()
    assert store.ops["start_sending"] == 1, "expected one batched check at the beat"
    delay = lane._step()
    assert delay == pytest.approx((1000 - beat_ms) / 1000), f"got {delay}"

    fake_clock.advance(1000 - beat_ms - 1)
    assert lane._step() == pytest.approx(0.001)
    assert sender.sent == [], "sent before next_attempt_at"

    fake_clock.advance(1)
    lane._step()
    await settle()
    assert [at for at, _ in sender.sent] == [due], f"expected one send at {due}, got {sender.sent}"
    await settle()
    await fake_clock.run_for(OUTCOME_WAIT_MS)
    done = await store.jobs.get_job("orders", "j0")
    assert done.state is JobState.DELIVERED and done.history[0].at == due, f"got {done}"
    assert delivery.fates == ["ack"], f"expected the message acked once, got {delivery.fates}"
    await lane.close()


async def test_the_running_lane_waits_on_its_clock(parts: Any, fake_clock: FakeClock) -> None:
    store, sender, *_ = parts
    due = fake_clock.now_ms() + 1500
    (job,) = await claimed_jobs(store, fake_clock, 1, due)
    lane = make_lane(parts, fake_clock)
    lane.start()
    lane.offer(FakeDelivery(job))
    assert await fake_clock.run_until(lambda: bool(sender.sent), 5000), "never sent"
    assert [at for at, _ in sender.sent] == [due], f"expected one send at {due}, got {sender.sent}"
    assert store.ops["start_sending"] == 1
    await lane.close()


async def test_a_check_failing_past_its_bound_hands_the_messages_back(
    parts: Any, fake_clock: FakeClock
) -> None:
    store, sender, _, metrics = parts

    async def down(*_: object) -> None:
        raise ConnectionError("store away")

    jobs = await claimed_jobs(store, fake_clock, 2, fake_clock.now_ms())
    store.outcomes.start_sending = down
    lane = make_lane(parts, fake_clock)
    lane.start()
    deliveries = [FakeDelivery(job) for job in jobs]
    for delivery in deliveries:
        lane.offer(delivery)
    started = fake_clock.monotonic_s()
    assert await fake_clock.run_until(lambda: all(d.fates for d in deliveries), 30_000)
    waited = fake_clock.monotonic_s() - started
    assert CHECK_GIVE_UP_AFTER_S <= waited < CHECK_GIVE_UP_AFTER_S + 2.5, f"gave up after {waited}s"
    assert [d.fates for d in deliveries] == [["requeue"], ["requeue"]]
    assert sender.sent == [] and not lane.holding
    errors = metrics.registry.get_sample_value(
        "timer_store_errors_total", {"operation": "start_sending"}
    )
    assert errors and errors > 3, f"expected the retries counted, got {errors}"
    await lane.close()


async def test_checks_are_batched(parts: Any, fake_clock: FakeClock) -> None:
    store, sender, *_ = parts
    due = fake_clock.now_ms() + 50
    jobs = await claimed_jobs(store, fake_clock, 100, due)
    lane = make_lane(parts, fake_clock, max_concurrency=100)
    for job in jobs:
        lane.offer(FakeDelivery(job))
    lane._step()
    await settle()
    fake_clock.advance(50)
    lane._step()
    await settle()
    assert len(sender.sent) == 100, f"expected 100 sends, got {len(sender.sent)}"
    assert store.ops["start_sending"] == 1, f"expected 1 check, got {store.ops['start_sending']}"
    await lane.close()


async def test_token_bucket_paces_sends(parts: Any, fake_clock: FakeClock) -> None:
    store, sender, _, metrics = parts
    start = fake_clock.now_ms()
    jobs = await claimed_jobs(store, fake_clock, 10, start)
    lane = make_lane(parts, fake_clock, rate_limit_per_s=10, burst=3)
    for job in jobs:
        lane.offer(FakeDelivery(job))
    for _ in range(200):  # drive the lane by hand, 10 ms at a time, for 2 s
        lane._step()
        await settle()
        lane._step()
        await settle()
        fake_clock.advance(10)
    times = [at - start for at, _ in sender.sent]
    assert times[:3] == [0, 0, 0], f"expected the burst of 3 at once, got {times}"
    assert times[3:] == [100 * i for i in range(1, 8)], f"expected one per 100 ms, got {times}"
    assert metrics.registry.get_sample_value("timer_rate_limited_total", {"biz_type": "orders"})
    await lane.close()


async def test_a_rate_limited_backlog_is_marked_in_batches_not_per_token(
    parts: Any, fake_clock: FakeClock
) -> None:
    """60 jobs due at once, 10/s: a mark per token would cost the store 60 marks over 6 s,
    near its capacity as much load as the sends of another biz type. Once the lane has to
    mark, it marks for the longest window (half a second of tokens), still on time."""
    store, sender, *_ = parts
    start = fake_clock.now_ms()
    jobs = await claimed_jobs(store, fake_clock, 60, start)
    lane = make_lane(parts, fake_clock, rate_limit_per_s=10, burst=1)
    for job in jobs:
        lane.offer(FakeDelivery(job))
    await drive_by_hand(lane, fake_clock, 6000)
    times = [at - start for at, _ in sender.sent]
    assert times == [100 * i for i in range(60)], f"expected one per 100 ms, got {times}"
    marks = store.ops["start_sending"]
    assert marks <= 60 // 4, f"expected batched marks (about one per 500 ms), got {marks}"
    await lane.close()


async def test_fired_at_is_when_the_token_was_taken_not_when_the_task_ran(
    parts: Any, fake_clock: FakeClock
) -> None:
    store, sender, *_ = parts
    due = fake_clock.now_ms()
    (job,) = await claimed_jobs(store, fake_clock, 1, due)
    lane = make_lane(parts, fake_clock, rate_limit_per_s=4, burst=2)
    lane.offer(FakeDelivery(job))
    lane._step()
    await settle()  # the send mark
    lane._step()  # takes the token, starts the send task
    fake_clock.advance(7)  # the loop was busy before the task ran
    await settle()
    (sent_at, request), *_ = sender.sent
    fired_at = json.loads(request.body)["fired_at"]
    assert (fired_at, sent_at) == (due, due + 7), f"expected fired_at {due}, got {fired_at}"
    await lane.close()


async def test_in_flight_cap_and_pause(parts: Any, fake_clock: FakeClock) -> None:
    store, sender, *_ = parts
    sender.gate = asyncio.Event()
    jobs = await claimed_jobs(store, fake_clock, 5, fake_clock.now_ms())
    lane = make_lane(parts, fake_clock, max_concurrency=2, paused=True)
    for job in jobs:
        lane.offer(FakeDelivery(job))
    for _ in range(3):
        lane._step()
        await settle()
    assert sender.sent == [], "paused lane sent"
    assert lane.holding
    lane.configure(BizType("orders", "http://127.0.0.1:1/cb", max_concurrency=2))
    for _ in range(3):
        lane._step()
        await settle()
    assert len(sender.sent) == 2, f"expected 2 in flight, got {len(sender.sent)}"
    sender.gate.set()
    for _ in range(10):
        lane._step()
        await settle()
    assert len(sender.sent) == 5
    await lane.close()


# -- truthful cancel: the send is marked in the store before it goes out -----------------


async def test_a_cancel_before_the_mark_wins_and_nothing_is_sent(
    parts: Any, fake_clock: FakeClock
) -> None:
    store, sender, *_ = parts
    due = fake_clock.now_ms() + 1000
    (job,) = await claimed_jobs(store, fake_clock, 1, due)
    lane = make_lane(parts, fake_clock)
    delivery = FakeDelivery(job)
    lane.offer(delivery)
    lane._step()
    cancelled = await store.jobs.cancel_job("orders", "j0", fake_clock.now_ms())
    assert cancelled.state is JobState.CANCELLED
    fake_clock.advance(1000)
    for _ in range(3):
        lane._step()
        await settle()
    assert sender.sent == [], "a job cancelled with 200 was called back"
    assert delivery.fates == ["ack"], f"expected the message acked unsent, got {delivery.fates}"
    assert not lane.holding
    await lane.close()


async def test_a_cancel_after_the_mark_answers_in_flight_and_the_callback_goes_out(
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
    lane._step()  # marks the send, CHECK_AHEAD_MS before the moment
    await settle()
    assert store.ops["start_sending"] == 1
    with pytest.raises(CallbackInFlight):
        await store.jobs.cancel_job("orders", "j0", fake_clock.now_ms())
    fake_clock.advance(CHECK_AHEAD_MS)
    lane._step()
    await settle()
    assert [at for at, _ in sender.sent] == [due], f"expected the marked send at {due}"
    await fake_clock.run_for(OUTCOME_WAIT_MS)
    done = await store.jobs.get_job("orders", "j0")
    assert done.state is JobState.DELIVERED, f"got {done.state}"
    await lane.close()


async def test_a_mark_retried_after_a_lost_reply_still_sends_once(
    parts: Any, fake_clock: FakeClock
) -> None:
    store, sender, *_ = parts
    due = fake_clock.now_ms()
    (job,) = await claimed_jobs(store, fake_clock, 1, due)
    real = store.outcomes.start_sending
    calls = 0

    async def reply_lost_once(*args: Any) -> Any:
        nonlocal calls
        calls += 1
        result = await real(*args)
        if calls == 1:
            raise ConnectionError("reply lost")
        return result

    store.outcomes.start_sending = reply_lost_once
    lane = make_lane(parts, fake_clock)
    lane.start()
    delivery = FakeDelivery(job)
    lane.offer(delivery)
    assert await fake_clock.run_until(lambda: bool(sender.sent), 5000), "never sent"
    await fake_clock.run_for(100)
    assert calls == 2 and len(sender.sent) == 1, f"{calls} marks, {len(sender.sent)} sends"
    assert delivery.fates == ["ack"]
    await lane.close()


async def test_a_redelivered_message_takes_over_a_send_its_dead_holder_marked(
    parts: Any, fake_clock: FakeClock
) -> None:
    store, sender, *_ = parts
    due = fake_clock.now_ms()
    (job,) = await claimed_jobs(store, fake_clock, 1, due)
    ref = SendRef(job.biz_type, job.job_id, job.second, job.claim, bucket=job.bucket)
    assert await store.outcomes.start_sending([ref], "dead-broker", due)  # then it died
    lane = make_lane(parts, fake_clock)
    lane.start()
    redelivered = FakeDelivery(job)
    redelivered.redelivered = True
    lane.offer(redelivered)
    assert await fake_clock.run_until(lambda: bool(sender.sent), 5000), "the job was never sent"
    await fake_clock.run_for(100)
    done = await store.jobs.get_job("orders", "j0")
    assert done.state is JobState.DELIVERED
    await lane.close()


async def test_a_plain_duplicate_of_a_marked_send_is_dropped(
    parts: Any, fake_clock: FakeClock
) -> None:
    store, sender, *_ = parts
    due = fake_clock.now_ms()
    (job,) = await claimed_jobs(store, fake_clock, 1, due)
    ref = SendRef(job.biz_type, job.job_id, job.second, job.claim, bucket=job.bucket)
    assert await store.outcomes.start_sending([ref], "other-broker", due)  # alive, sending
    lane = make_lane(parts, fake_clock)
    lane.start()
    duplicate = FakeDelivery(job)
    lane.offer(duplicate)
    assert await fake_clock.run_until(lambda: bool(duplicate.fates), 5000)
    assert duplicate.fates == ["ack"] and sender.sent == [], "a duplicate was called back"
    await lane.close()


async def test_messages_arriving_during_a_mark_are_marked_after_it(
    parts: Any, fake_clock: FakeClock
) -> None:
    """The mark that ends wakes the lane for what came meanwhile: a lane woken before
    the ended mark left its bookkeeping waited for ever (found with two brokers and a
    kill -9: the new owner's first batch was 3 messages, the other 37 never went out)."""
    store, sender, *_ = parts
    due = fake_clock.now_ms()
    jobs = await claimed_jobs(store, fake_clock, 40, due)
    for job in jobs[:3]:  # done with already: their messages are acked, nothing sent
        await store.jobs.cancel_job("orders", job.job_id, due)
    lane = make_lane(parts, fake_clock, max_concurrency=8)
    lane.start()
    for job in jobs[:3]:
        lane.offer(FakeDelivery(job))
    await asyncio.sleep(0)  # the first mark is on its way with those 3 messages
    for job in jobs[3:]:
        lane.offer(FakeDelivery(job))
    assert await fake_clock.run_until(lambda: len(sender.sent) == 37, 10_000), (
        f"expected 37 sends, got {len(sender.sent)}"
    )
    await lane.close()


async def test_a_slow_store_does_not_cap_a_fast_biz_type(parts: Any, fake_clock: FakeClock) -> None:
    """Each mark takes 300 ms; callbacks answer at once; 200 jobs due per second. The
    lane marks what is due within its look-ahead in one write, not two in-flight caps'
    worth: capped at 2 x max_concurrency per mark, it went out at 32 per 300 ms (~107/s)
    and fell further behind every second (seen on SecantusDB: 100 jobs/s, p50 1 s late)."""
    store, sender, *_ = parts
    start = fake_clock.now_ms() + 1000
    jobs = []
    for s in range(4):  # 4 seconds of 200 jobs, 5 ms apart
        due = start + 1000 * s
        await store.jobs.create_jobs(
            [NewJob("orders", f"s{s}j{i}", due + 5 * i, "{}") for i in range(200)],
            fake_clock.now_ms(),
        )
        jobs += await store.scan.claim_due(second_of(due), due + 999, f"c{s}", 1, due)
    mark = store.outcomes.start_sending

    async def slow_mark(*args: Any) -> Any:
        await fake_clock.sleep(0.3)
        return await mark(*args)

    store.outcomes.start_sending = slow_mark
    lane = make_lane(parts, fake_clock, max_concurrency=16)
    lane.start()
    for job in jobs:
        lane.offer(FakeDelivery(job))
    assert await fake_clock.run_until(lambda: len(sender.sent) == 800, 20_000), (
        f"expected 800 sends, got {len(sender.sent)}"
    )
    due_of = {j.job_id: j.next_attempt_at for j in jobs}
    late = {
        json.loads(r.body)["job_id"]: at - due_of[json.loads(r.body)["job_id"]]
        for at, r in sender.sent
    }
    assert min(late.values()) >= 0, "sent early"
    # The first marks learn how slow the store is (and go out up to two answers late);
    # from then on a send is late by at most about one answer.
    first = max(late.values())
    settled = sorted(v for k, v in late.items() if not k.startswith("s0"))
    assert first <= 700, f"the first second went out up to {first} ms late"
    assert settled[-1] <= 400, f"sends late: p50 {settled[300]} ms, max {settled[-1]} ms"
    await lane.close()
