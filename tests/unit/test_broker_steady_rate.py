"""A biz type's steady flow costs the store a mark and an outcome write per batch of
jobs, not per job (bench/batching_bench.py measures it at 500 jobs/s).

Found with that bench (in-memory store, 1 ms per store call, 500 jobs/s): 0.94 send
marks and 0.53 outcome writes per fired job. The lane marked whatever had entered its
look-ahead since the last mark (at a steady rate, a job or two), and the outcome writer
flushed 2 ms after each write's first outcome."""

from __future__ import annotations

import json
from typing import Any

from broker.lane import MARK_SPAN_MS, Lane
from broker.marks import BROKER_GATHER_S, MarkWriter
from broker.outcomes import FLUSH_AFTER_S, OutcomeWriter, Pending
from broker.pacing import CHECK_AHEAD_MS
from tests.unit.test_broker_lane import FakeDelivery, make_lane, parts
from timer_service.clock import FakeClock
from timer_service.dispatch import Outcome, OutcomeKind, SendRef
from timer_service.jobs import NewJob
from timer_service.metrics import Metrics
from timer_service.model import Attempt, BizType, second_of

__all__ = ["parts"]  # the lane's fixture, used below

RATE_GAP_MS = 2  # 500 jobs/s
STORE_MS = 1  # each store call takes this long (a MongoDB round trip)


def slowed(clock: FakeClock, call: Any, writes: list[int]) -> Any:
    async def slow(*args: Any) -> Any:
        writes.append(len(args[0]))
        await clock.sleep(STORE_MS / 1000)
        return await call(*args)

    return slow


async def test_a_steady_flow_is_marked_a_span_at_a_time(parts: Any, fake_clock: FakeClock) -> None:
    store, sender, *_ = parts
    start = fake_clock.now_ms() + 1000
    count = 1000  # 2 s of jobs, 2 ms apart, offered about a second ahead (the daemon's claim)
    due = {f"j{i}": start + RATE_GAP_MS * i for i in range(count)}
    await store.jobs.create_jobs(
        [NewJob("orders", job_id, at, "{}") for job_id, at in due.items()], fake_clock.now_ms()
    )
    claimed = []
    for s in range(second_of(start), second_of(start + RATE_GAP_MS * count) + 1):
        claimed += await store.scan.claim_due(s, (s + 1) * 1000, f"c{s}", 1, start)
    marks: list[int] = []
    store.outcomes.start_sending = slowed(fake_clock, store.outcomes.start_sending, marks)
    lane = make_lane(parts, fake_clock, max_concurrency=64)
    lane.start()
    for job in claimed:
        lane.offer(FakeDelivery(job))
    assert await fake_clock.run_until(lambda: len(sender.sent) == count, 10_000)
    late = [at - due[json.loads(req.body)["job_id"]] for at, req in sender.sent]
    assert min(late) >= 0, "sent early"
    assert max(late) <= STORE_MS, f"sent up to {max(late)} ms late"
    span_jobs = MARK_SPAN_MS // RATE_GAP_MS
    assert len(marks) <= count // span_jobs + 2, (
        f"{len(marks)} marks for {count} jobs (sizes {marks[:20]}...): expected about one "
        f"per {MARK_SPAN_MS} ms of jobs"
    )
    await lane.close()


async def test_a_mark_reaches_no_further_than_its_span_past_the_look_ahead(
    parts: Any, fake_clock: FakeClock
) -> None:
    """A cancel answers 'in flight' from the mark on: the span is how much earlier than
    the look-ahead that can be, and no more."""
    store, *_ = parts
    start = fake_clock.now_ms() + 1000
    await store.jobs.create_jobs(
        [NewJob("orders", f"j{i}", start + 10 * i, "{}") for i in range(100)],
        fake_clock.now_ms(),
    )
    claimed = await store.scan.claim_due(second_of(start), start + 999, "c", 1, start)
    claimed += await store.scan.claim_due(second_of(start) + 1, start + 1999, "d", 1, start)
    lane = make_lane(parts, fake_clock, max_concurrency=64)
    for job in claimed:
        lane.offer(FakeDelivery(job))
    lane._step()
    fake_clock.advance(1000 - CHECK_AHEAD_MS)
    lane._step()
    reach = start + MARK_SPAN_MS  # the look-ahead from now, then the span
    expected = len([c for c in claimed if c.next_attempt_at <= reach])
    assert lane._checking == expected, f"marked {lane._checking}, expected {expected}"
    await lane.close()


async def test_a_steady_flow_of_outcomes_is_written_a_window_at_a_time(
    memory_store: Any, fake_clock: FakeClock
) -> None:
    writes: list[int] = []
    memory_store.outcomes.record_outcomes = slowed(
        fake_clock, memory_store.outcomes.record_outcomes, writes
    )
    writer = OutcomeWriter(memory_store.outcomes, Metrics(), fake_clock)
    writer.start()
    now = fake_clock.now_ms()
    count = 500  # 1 s of callbacks coming back, 2 ms apart
    await memory_store.jobs.create_jobs(
        [NewJob("orders", f"j{i}", now, "{}") for i in range(count)], now
    )
    claimed = await memory_store.scan.claim_due(second_of(now), now, "c1", 1, now)
    deliveries = [FakeDelivery(c) for c in claimed]
    for c, delivery in zip(claimed, deliveries, strict=True):
        ref = SendRef(c.biz_type, c.job_id, c.second, c.claim, bucket=c.bucket)
        attempt = Attempt(1, fake_clock.now_ms(), 200, None, 3)
        outcome = Outcome(ref, OutcomeKind.DELIVERED, attempt)
        writer.submit(Pending(outcome, [delivery], lambda: None))
        await fake_clock.run_for(RATE_GAP_MS)
    assert await fake_clock.run_until(lambda: all(d.fates for d in deliveries), 1000)
    window_ms = FLUSH_AFTER_S * 1000
    assert len(writes) <= count * RATE_GAP_MS / window_ms + 2, (
        f"{len(writes)} writes for {count} outcomes (sizes {writes[:20]}...): expected about "
        f"one per {window_ms:g} ms"
    )
    assert len(writes) <= count // 20, f"{len(writes)} writes: expected 20 outcomes or more each"

    await writer.stop()


async def test_busy_lanes_mark_on_a_shared_beat_in_one_store_call(
    parts: Any, fake_clock: FakeClock
) -> None:
    """Four biz types at 125 jobs/s each: marked lane by lane, each would be a store call
    about ten times a second (bench/batching_bench.py --biz-types 4: 0.084 marks per
    fired job). On the shared beat, the broker's mark writer makes one call for all."""
    store, sender, outcomes, metrics = parts
    start = fake_clock.now_ms() + 1000
    names, gap_ms, per_lane = ["a", "b", "c", "d"], 8, 250  # 2 s of jobs per lane
    due = {}
    for n, name in enumerate(names):
        await store.biz_types.put_biz_type(BizType(name, "http://127.0.0.1:1/cb"))
        for i in range(per_lane):
            due[f"{name}{i}"] = (name, start + n + gap_ms * i)
    await store.jobs.create_jobs(
        [NewJob(name, job_id, at, "{}") for job_id, (name, at) in due.items()],
        fake_clock.now_ms(),
    )
    claimed = []
    for s in range(second_of(start), second_of(start + gap_ms * per_lane) + 2):
        claimed += await store.scan.claim_due(s, (s + 1) * 1000, f"c{s}", 1, start)
    marks: list[int] = []
    store.outcomes.start_sending = slowed(fake_clock, store.outcomes.start_sending, marks)
    shared = MarkWriter(store.outcomes, metrics, fake_clock, "broker", gather_s=BROKER_GATHER_S)
    lanes = {
        name: Lane(
            BizType(name, "http://127.0.0.1:1/cb", max_concurrency=64),
            sender=sender,
            outcomes=outcomes,
            metrics=metrics,
            clock=fake_clock,
            marks=shared,
        )
        for name in names
    }
    for lane in lanes.values():
        lane.start()
    for job in claimed:
        lanes[job.biz_type].offer(FakeDelivery(job))
    total = len(due)
    assert await fake_clock.run_until(lambda: len(sender.sent) == total, 10_000)
    late = [at - due[json.loads(req.body)["job_id"]][1] for at, req in sender.sent]
    assert min(late) >= 0, "sent early"
    spans = gap_ms * per_lane // MARK_SPAN_MS
    assert len(marks) <= spans + 2, (
        f"{len(marks)} store calls for {total} jobs of 4 lanes (sizes {marks[:12]}...): "
        f"expected about one per {MARK_SPAN_MS} ms for all lanes"
    )
    for lane in lanes.values():
        await lane.close()
    await shared.stop()
