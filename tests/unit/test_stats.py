"""A biz type's stats (timer_service/stats.py): lateness is the service's delay, so a job
registered after its due time (which fires at once, late by however long ago it was due)
does not count in it; its attempts still count as delivered or failed."""

from __future__ import annotations

from timer_service.model import Attempt, BizType, JobState
from timer_service.stats import LATENESS_WINDOW_MS, biz_stats
from timer_service.store.ports.console import RecentAttempt

NOW = 1_767_225_600_000
HOUR_MS = 3_600_000


def first_attempt(
    due_at: int, created_at: int, sent_at: int, error: str | None = None
) -> RecentAttempt:
    status = 200 if error is None else 503
    attempt = Attempt(1, sent_at, status, error, 3)
    return RecentAttempt("orders", due_at, attempt, created_at=created_at)


def stats(*attempts: RecentAttempt) -> dict[str, object]:
    return biz_stats(
        BizType("orders", "http://127.0.0.1/cb"), {JobState.DELIVERED: 1}, attempts, NOW
    )


def test_a_job_registered_an_hour_past_due_is_not_an_hour_late() -> None:
    # 50 jobs 4 ms late and 2 registered an hour past due: 2 in 52 is beyond the 99th
    # percentile's 1 in 100, so counted they would be the p99.
    on_time = [first_attempt(NOW - 1000 - i, NOW - 60_000, NOW - 1000 - i + 4) for i in range(50)]
    past_due = [first_attempt(NOW - HOUR_MS, NOW - 2000, NOW - 1990 + i) for i in range(2)]

    got = stats(*on_time, *past_due)

    assert got["lateness_p99_ms"] == 4, f"expected 4 ms, got {got['lateness_p99_ms']}"
    assert got["delivered_last_minute"] == 52, "their attempts still count as delivered"


def test_only_past_due_registrations_leave_no_lateness() -> None:
    got = stats(first_attempt(NOW - HOUR_MS, NOW - 5000, NOW - 4990, error="HTTP 503"))
    assert (got["lateness_p99_ms"], got["failed_last_minute"]) == (None, 1), got


def test_a_job_registered_at_its_due_time_counts() -> None:
    # delay_ms=0: due the moment it was registered
    got = stats(first_attempt(NOW - 2000, NOW - 2000, NOW - 1988))
    assert got["lateness_p99_ms"] == 12, got


def test_lateness_counts_first_attempts_of_the_window_only() -> None:
    old = first_attempt(NOW - LATENESS_WINDOW_MS - 10, NOW - HOUR_MS, NOW - LATENESS_WINDOW_MS - 1)
    retry = RecentAttempt(
        "orders", NOW - 9000, Attempt(2, NOW - 100, 200, None, 3), created_at=NOW - HOUR_MS
    )
    assert stats(old, retry)["lateness_p99_ms"] is None
