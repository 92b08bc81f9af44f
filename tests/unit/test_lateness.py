"""Why a job is late (timer_service/lateness.py), case by case: every reason an open job
waits for, a final job's breakdown, and the jobs that are not late."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from timer_service.dispatch import BrokerBeat, HeldBiz, LeaseState
from timer_service.lateness import (
    Breakdown,
    Surroundings,
    Waiting,
    WaitingFor,
    judge,
    lease_of,
    needs_surroundings,
    to_public,
    without_surroundings,
)
from timer_service.model import Attempt, BizType, Job, JobState

NOW = 1_767_225_600_000
DUE = NOW - 5_000  # five seconds late
SECOND = DUE // 1000


def job(**changes: Any) -> Job:
    base = Job("orders", "o-1", DUE, "null", JobState.PENDING, 0, DUE, DUE - 60_000, DUE - 60_000)
    return base.evolve(**changes)


def biz(**changes: Any) -> BizType:
    return BizType("orders", "http://127.0.0.1:9/cb", **changes)


LIVE_LEASE = LeaseState("daemon-p0", "daemon-a", 7, NOW + 3_000)
CONSUMER = BrokerBeat("broker-a", NOW + 4_000, consuming=("orders",))


def holding(messages: int, oldest: int) -> BrokerBeat:
    return BrokerBeat("broker-a", NOW + 4_000, (HeldBiz("orders", messages, oldest),), ("orders",))


@dataclass
class Case:
    job: Job
    waiting_for: WaitingFor
    says: str
    biz: BizType = field(default_factory=biz)
    beats: tuple[BrokerBeat, ...] = (CONSUMER,)
    lease: LeaseState | None = LIVE_LEASE
    pointer_s: int | None = SECOND
    until: int | None = None


DISPATCHED = job(state=JobState.DISPATCHED, claimed_at=DUE - 1_000, claim="c1")

CASES = {
    "paused": Case(job(), WaitingFor.PAUSED, "is paused", biz=biz(paused=True)),
    "paused while dispatched": Case(
        DISPATCHED, WaitingFor.PAUSED, "is paused", biz=biz(paused=True)
    ),
    "no lease ever": Case(job(), WaitingFor.NO_DAEMON, "never taken", lease=None),
    "lease lapsed": Case(
        job(),
        WaitingFor.NO_DAEMON,
        f"lapsed at {NOW - 1}",
        lease=LeaseState("daemon-p0", "daemon-a", 7, NOW - 1),
    ),
    "daemon behind": Case(
        job(), WaitingFor.DAEMON_BEHIND, "30 s before the job's", pointer_s=SECOND - 30
    ),
    "daemon never saved a pointer": Case(
        job(), WaitingFor.DAEMON_BEHIND, "no saved pointer", pointer_s=None
    ),
    "claim next, within the on-time second": Case(
        job(next_attempt_at=NOW - 300, due_at=NOW - 300),
        WaitingFor.CLAIM,
        "has it next",
        pointer_s=SECOND - 30,
    ),
    "claim: scan passed it": Case(job(), WaitingFor.CLAIM, "sweep finds it"),
    "no broker consuming": Case(DISPATCHED, WaitingFor.NO_BROKER, "no live broker", beats=()),
    "the consumer's beat lapsed": Case(
        DISPATCHED,
        WaitingFor.NO_BROKER,
        "no live broker",
        beats=(BrokerBeat("broker-a", NOW - 1, consuming=("orders",)),),
    ),
    "rate limit": Case(
        DISPATCHED,
        WaitingFor.RATE_LIMIT,
        "at 10/s the job goes out within ~5000 ms",
        biz=biz(rate_limit_per_s=10.0, burst=5),
        beats=(holding(50, DUE - 2_000),),
        until=NOW + 5_000,
    ),
    "in-flight cap": Case(
        DISPATCHED,
        WaitingFor.CONCURRENCY,
        "3 rounds of callbacks",
        biz=biz(max_concurrency=4, timeout_ms=2_000),
        beats=(holding(12, DUE - 2_000),),
        until=NOW + 6_000,
    ),
    "held, no limit binding": Case(
        DISPATCHED, WaitingFor.BROKER, "going out now", beats=(holding(2, DUE - 2_000),)
    ),
    "held by nobody: reconcile after the claim": Case(
        DISPATCHED,
        WaitingFor.RECONCILE,
        f"again at {DUE - 1_000 + 60_000}",
        beats=(holding(3, DUE),),  # what is held was claimed after it
        until=DUE - 1_000 + 60_000,
    ),
    "callback started: the endpoint": Case(
        DISPATCHED.evolve(sending="broker-a/x1", updated_at=NOW - 500),
        WaitingFor.ENDPOINT,
        "times out after 10000 ms",
        until=NOW - 500 + 10_000,
    ),
    "callback started by a broker gone": Case(
        DISPATCHED.evolve(sending="broker-b/x1"),
        WaitingFor.RECONCILE,
        "broker-b started its callback and is gone",
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_an_open_late_job_says_what_it_waits_for(case: Case) -> None:
    assert needs_surroundings(case.job, NOW)
    around = Surroundings(case.biz, case.beats, 0, case.lease, case.pointer_s, 60_000)
    got = judge(case.job, around, NOW)
    assert (got.waiting_for, got.until) == (case.waiting_for, case.until), got
    assert case.says in got.detail, f"expected {case.says!r} in {got.detail!r}"
    assert got.late_ms == NOW - case.job.next_attempt_at  # type: ignore[operator]


NOT_LATE = {
    "pending, due ahead": job(due_at=NOW + 1, next_attempt_at=NOW + 1),
    "dispatched ahead of its moment": DISPATCHED.evolve(next_attempt_at=NOW + 1_500),
    "cancelled": job(state=JobState.CANCELLED, next_attempt_at=None),
    "delivered on time": job(
        state=JobState.DELIVERED,
        next_attempt_at=None,
        attempts=1,
        delivered_at=DUE + 40,
        history=(Attempt(1, DUE + 3, 200, None, 30),),
    ),
}


@pytest.mark.parametrize("subject", NOT_LATE.values(), ids=NOT_LATE.keys())
def test_a_job_on_time_needs_no_reads_and_is_not_late(subject: Job) -> None:
    assert not needs_surroundings(subject, NOW)
    assert without_surroundings(subject, NOW) is None
    assert to_public(None) is None


def test_a_job_created_past_due_is_judged_from_its_creation() -> None:
    created_late = job(due_at=NOW - 3_600_000, next_attempt_at=NOW - 3_600_000, created_at=NOW)
    assert needs_surroundings(created_late, NOW)
    around = Surroundings(biz(), (CONSUMER,), 0, LIVE_LEASE, SECOND, 60_000)
    assert judge(created_late, around, NOW).late_ms == 0


def test_a_retry_in_its_backoff_waits_for_its_moment() -> None:
    retry = job(attempts=1, next_attempt_at=NOW + 2_000, history=(Attempt(1, DUE, 503, "x", 5),))
    assert not needs_surroundings(retry, NOW)
    got = without_surroundings(retry, NOW)
    assert isinstance(got, Waiting)
    assert (got.waiting_for, got.until, got.late_ms) == (WaitingFor.RETRY, NOW + 2_000, 5_000)
    assert f"waiting for retry at {NOW + 2_000}" in got.detail


def test_a_delivered_job_breaks_its_lateness_down() -> None:
    delivered = job(
        state=JobState.DELIVERED,
        next_attempt_at=None,
        attempts=1,
        claimed_at=DUE + 1_500,  # published 1.5 s late
        delivered_at=DUE + 2_100 + 900,
        history=(Attempt(1, DUE + 2_100, 200, None, 880),),
    )
    got = without_surroundings(delivered, NOW)
    assert got == Breakdown(
        late_ms=3_000,
        detail="delivered 3000 ms after its moment, mostly in publish",
        send_ms=2_100,
        publish_ms=1_500,
        hold_ms=600,
        retries_ms=0,
        endpoint_ms=880,
    )
    public = to_public(got)
    assert public is not None and public["kind"] == "final" and public["waiting_for"] is None


def test_a_flexible_job_is_late_from_its_chosen_moment_not_its_due_time() -> None:
    """A job with a window fires at `fire_at`, the calendar's pick: 40 s after `due_at`
    on time is not late, and lateness counts from `fire_at`."""
    fire_at = DUE + 40_000
    on_time = job(
        state=JobState.DELIVERED,
        window_ms=60_000,
        fire_at=fire_at,
        next_attempt_at=None,
        attempts=1,
        claimed_at=fire_at - 1_000,
        delivered_at=fire_at + 30,
        history=(Attempt(1, fire_at + 5, 200, None, 25),),
    )
    assert without_surroundings(on_time, NOW) is None
    late = on_time.evolve(
        delivered_at=fire_at + 2_000, history=(Attempt(1, fire_at + 1_900, 200, None, 100),)
    )
    got = without_surroundings(late, NOW)
    assert isinstance(got, Breakdown) and got.late_ms == 2_000, got


def test_a_dead_job_after_retries_says_what_is_not_stored() -> None:
    dead = job(
        state=JobState.DEAD,
        next_attempt_at=None,
        attempts=3,
        claimed_at=DUE + 9_000,  # the last attempt's claim
        updated_at=DUE + 9_050,
        history=(
            Attempt(1, DUE + 10, 503, "HTTP 503", 20),
            Attempt(2, DUE + 3_000, 503, "HTTP 503", 20),
            Attempt(3, DUE + 9_010, 503, "HTTP 503", 30),
        ),
    )
    got = without_surroundings(dead, NOW)
    assert isinstance(got, Breakdown)
    assert (got.late_ms, got.send_ms, got.publish_ms, got.hold_ms) == (9_050, 10, None, None)
    assert (got.retries_ms, got.endpoint_ms) == (9_000, 30)
    assert "mostly in retries" in got.detail and "not stored" in got.detail


def test_the_lease_of_a_partition_is_its_exact_name() -> None:
    leases = [LeaseState("daemon-p10", "b", 1, NOW), LeaseState("daemon-p1", "a", 1, NOW)]
    found = lease_of(leases, "daemon-p1")
    assert found is not None and found.holder == "a"
    assert lease_of(leases[:1], "daemon-p1") is None


def test_the_public_shape_is_one_for_both_kinds() -> None:
    waiting = to_public(Waiting(5, WaitingFor.PAUSED, "biz type orders is paused"))
    final = to_public(Breakdown(2_000, "d", 1, 1, 0, 0, 5))
    assert waiting is not None and final is not None
    assert waiting.keys() == final.keys()
    assert waiting["waiting_for"] == "paused" and waiting["send_ms"] is None
