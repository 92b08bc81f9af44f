"""The outcome writer on a FakeClock: batched writes, acks after them, retries for as long as
the store is away."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from broker.outcomes import (
    FLUSH_AFTER_S,
    FLUSH_BATCH,
    GIVE_UP_AFTER_S,
    MIN_OVERLAPPING_BATCH,
    OutcomeWriter,
    Pending,
)
from tests.unit.test_broker_lane import FakeDelivery
from timer_service.clock import FakeClock
from timer_service.dispatch import Outcome, OutcomeKind, SendRef
from timer_service.jobs import NewJob
from timer_service.metrics import Metrics
from timer_service.model import Attempt, JobState, second_of
from timer_service.store.memory import MemoryStore


class Flaky:
    """Makes the store's record_outcomes fail while `down`."""

    def __init__(self, store: MemoryStore) -> None:
        self.down = False
        self._record = store.outcomes.record_outcomes
        store.outcomes.record_outcomes = self.record  # type: ignore[method-assign]

    async def record(self, *args: Any) -> None:
        if self.down:
            raise ConnectionError("store away")
        await self._record(*args)


class Slow:
    """Makes each record_outcomes take `answer_ms` of the fake clock; notes when each
    write started and how many outcomes it carried."""

    def __init__(self, store: MemoryStore, clock: FakeClock, answer_ms: int) -> None:
        self.writes: list[tuple[int, int]] = []  # (started at, outcomes)
        self._clock = clock
        self._answer_s = answer_ms / 1000
        self._record = store.outcomes.record_outcomes
        store.outcomes.record_outcomes = self.record  # type: ignore[method-assign]

    async def record(self, outcomes: Any, now_ms: int) -> None:
        self.writes.append((self._clock.now_ms(), len(outcomes)))
        await self._clock.sleep(self._answer_s)
        await self._record(outcomes, now_ms)


@pytest.fixture
async def writer(memory_store: Any, fake_clock: FakeClock) -> AsyncIterator[OutcomeWriter]:
    w = OutcomeWriter(memory_store.outcomes, Metrics(), fake_clock)
    w.start()
    yield w
    await w.stop()


async def sent(store: MemoryStore, clock: FakeClock, count: int) -> list[Pending]:
    """`count` jobs claimed and called back; their outcomes not yet written."""
    now = clock.now_ms()
    await store.jobs.create_jobs([NewJob("orders", f"j{i}", now, "{}") for i in range(count)], now)
    claimed = await store.scan.claim_due(second_of(now), now, "c1", 1, now)
    return [
        Pending(
            Outcome(
                SendRef(c.biz_type, c.job_id, c.second, c.claim, bucket=c.bucket),
                OutcomeKind.DELIVERED,
                Attempt(1, now, 200, None, 3),
            ),
            [FakeDelivery(c)],
            lambda: None,
        )
        for c in claimed
    ]


def fates(pending: list[Pending]) -> list[list[str]]:
    return [d.fates for p in pending for d in p.deliveries]  # type: ignore[attr-defined]


async def test_outcomes_are_written_in_one_batch_then_acked(
    writer: OutcomeWriter, memory_store: MemoryStore, fake_clock: FakeClock
) -> None:
    pending = await sent(memory_store, fake_clock, 3)
    for p in pending:
        writer.submit(p)
    await fake_clock.run_for(round(FLUSH_AFTER_S * 1000) - 1)
    assert memory_store.ops["record_outcomes"] == 0, "written before the batching window ended"
    assert await fake_clock.run_until(lambda: all(fates(pending)), 100)
    assert memory_store.ops["record_outcomes"] == 1, memory_store.ops
    assert fates(pending) == [["ack"]] * 3
    job = await memory_store.jobs.get_job("orders", "j0")
    assert job is not None and job.state is JobState.DELIVERED, job


async def test_a_store_hiccup_within_the_bound_costs_only_time(
    writer: OutcomeWriter, memory_store: MemoryStore, fake_clock: FakeClock
) -> None:
    flaky = Flaky(memory_store)
    flaky.down = True
    pending = await sent(memory_store, fake_clock, 2)
    for p in pending:
        writer.submit(p)
    await fake_clock.run_for(3000)
    assert fates(pending) == [[], []], "settled while the store was away"
    flaky.down = False
    assert await fake_clock.run_until(lambda: all(fates(pending)), 5000)
    assert fates(pending) == [["ack"], ["ack"]]


async def test_outcomes_are_retried_past_the_bound_and_never_handed_back(
    writer: OutcomeWriter, memory_store: MemoryStore, fake_clock: FakeClock
) -> None:
    """A sent message handed back would be sent again: a duplicate the contract allows
    only when a process or connection dies. So the writer keeps its messages and keeps
    trying, however long the store is away (here three bounds)."""
    flaky = Flaky(memory_store)
    flaky.down = True
    pending = await sent(memory_store, fake_clock, 2)
    for p in pending:
        writer.submit(p)
    await fake_clock.run_for(int(3 * GIVE_UP_AFTER_S * 1000))
    assert fates(pending) == [[], []], f"settled while the store was away: {fates(pending)}"
    job = await memory_store.jobs.get_job("orders", "j0")
    assert job is not None and job.state is JobState.DISPATCHED, "the job must stay dispatched"
    flaky.down = False
    assert await fake_clock.run_until(lambda: all(fates(pending)), 10_000)
    assert fates(pending) == [["ack"], ["ack"]], f"expected acked once, got {fates(pending)}"
    job = await memory_store.jobs.get_job("orders", "j0")
    assert job is not None and job.state is JobState.DELIVERED, job


async def test_a_trickle_waits_for_the_write_in_flight_and_goes_in_one_batch(
    writer: OutcomeWriter, memory_store: MemoryStore, fake_clock: FakeClock
) -> None:
    """A slow biz type's outcomes come one per token: written one by one, each would cost
    the store a write per callback. While a write is in flight they gather instead."""
    slow = Slow(memory_store, fake_clock, answer_ms=100)
    pending = await sent(memory_store, fake_clock, 6)
    for p in pending:
        writer.submit(p)
        await fake_clock.run_for(15)  # one every 15 ms, while the first write takes 100
    assert await fake_clock.run_until(lambda: all(fates(pending)), 1000)
    # Gathered for FLUSH_AFTER_S (4 of them), the rest wait for that write to end.
    assert [n for _, n in slow.writes] == [4, 2], slow.writes
    assert fates(pending) == [["ack"]] * 6


async def test_a_herd_still_overlaps_its_writes(
    writer: OutcomeWriter, memory_store: MemoryStore, fake_clock: FakeClock
) -> None:
    slow = Slow(memory_store, fake_clock, answer_ms=100)
    pending = await sent(memory_store, fake_clock, 1 + FLUSH_BATCH)
    writer.submit(pending[0])
    await fake_clock.run_for(round(FLUSH_AFTER_S * 1000) + 1)  # its write is in flight
    for p in pending[1:]:
        writer.submit(p)
    assert await fake_clock.run_until(lambda: all(fates(pending)), 1000)
    (first, _), (second, n) = slow.writes
    assert n == FLUSH_BATCH >= MIN_OVERLAPPING_BATCH and second - first < 100, slow.writes


class Logged:
    """Notes, in one log with the acks, when each write of outcomes has ended (the
    outcomes are stored) and which jobs it carried; writes take `answer_ms` each, so
    that several are in flight at once."""

    def __init__(self, store: MemoryStore, clock: FakeClock, log: list[tuple[str, str]]) -> None:
        self._clock = clock
        self._log = log
        self._record = store.outcomes.record_outcomes
        store.outcomes.record_outcomes = self.record  # type: ignore[method-assign]
        self.answer_s = 0.1

    async def record(self, outcomes: Any, now_ms: int) -> None:
        await self._clock.sleep(self.answer_s)
        self.answer_s = max(0.01, self.answer_s / 2)  # later writes end before earlier
        await self._record(outcomes, now_ms)
        self._log.extend(("stored", o.ref.job_id) for o in outcomes)


class LoggedDelivery(FakeDelivery):
    def __init__(self, delivery: Any, log: list[tuple[str, str]]) -> None:
        super().__init__(delivery.job)
        self._log = log

    async def ack(self) -> None:
        self._log.append(("ack", self.job.job_id))
        await super().ack()


async def test_no_message_is_acked_before_its_outcome_is_stored(
    writer: OutcomeWriter, memory_store: MemoryStore, fake_clock: FakeClock
) -> None:
    """With several writes in flight that end out of order, and a store hiccup, each ack
    still comes after the write that stored its job's outcome (acked first, a message
    whose outcome is then lost leaves its job dispatched with nothing to send it again
    until the reconciler's timeout)."""
    log: list[tuple[str, str]] = []
    logged = Logged(memory_store, fake_clock, log)
    flaky = Flaky(memory_store)
    pending = await sent(memory_store, fake_clock, 3 * FLUSH_BATCH + 5)
    for p in pending:
        p.deliveries = [LoggedDelivery(d, log) for d in p.deliveries]
    for i, p in enumerate(pending):
        writer.submit(p)
        if i == FLUSH_BATCH:
            flaky.down = True
            await fake_clock.run_for(200)
            flaky.down = False
    assert await fake_clock.run_until(lambda: all(fates(pending)), 30_000)
    stored_at = {job_id: i for i, (what, job_id) in enumerate(log) if what == "stored"}
    early = [
        job_id for i, (what, job_id) in enumerate(log) if what == "ack" and i < stored_at[job_id]
    ]
    assert not early, f"acked before their outcomes were stored: {early}"
    assert sorted(job_id for what, job_id in log if what == "ack") == sorted(stored_at)
    assert logged.answer_s < 0.1, "the writes did not overlap"
