"""The per-minute series of a biz type's last hour (timer_service.series), and its
endpoint over the in-memory store."""

from __future__ import annotations

from tests.unit.api_harness import NOW, Api, expect
from timer_service.dispatch import Outcome, OutcomeKind, SendRef
from timer_service.model import Attempt, second_of
from timer_service.series import minute_series, nearest_rank, series_start
from timer_service.store.ports.console import RecentAttempt

MINUTE = 60_000


def attempt(
    at: int, due: int, n: int = 1, error: str | None = None, created: int = 0
) -> RecentAttempt:
    return RecentAttempt(
        "orders", due, Attempt(n, at, 200 if error is None else 500, error, 3), created
    )


def test_sixty_minutes_aligned_the_last_one_filling() -> None:
    now = NOW + 90 * MINUTE + 12_345
    got = minute_series([], now)
    assert len(got["points"]) == 60
    assert got["points"][-1]["at"] == NOW + 90 * MINUTE, "the minute now is in comes last"
    assert got["from"] == series_start(now) == NOW + 31 * MINUTE
    assert got["to"] == NOW + 91 * MINUTE and got["step_ms"] == MINUTE
    assert got["points"][0] == {
        "at": NOW + 31 * MINUTE,
        "delivered": 0,
        "failed": 0,
        "lateness_p50_ms": None,
        "lateness_p99_ms": None,
    }


def test_outcomes_and_lateness_fall_in_their_minute() -> None:
    now = NOW + 59 * MINUTE + 1
    start = series_start(now)
    late_ms = list(range(1, 101))  # first attempts 1..100 ms late in the first minute
    attempts = [attempt(start + 1_000 + ms, start + 1_000, created=start) for ms in late_ms]
    attempts += [
        attempt(start + MINUTE, start, n=2, error="HTTP 500"),  # a retry: no lateness
        attempt(start + MINUTE + 5, start + MINUTE, error="timeout"),  # failed, 5 ms late
        attempt(start + 2 * MINUTE + 9, start, created=start + 1),  # registered past due
        attempt(start - 1, start - 2),  # before the window: ignored
        attempt(now + MINUTE, now),  # after it: ignored
    ]
    points = minute_series(attempts, now)["points"]
    first, second, third = points[:3]
    assert (first["delivered"], first["failed"]) == (100, 0)
    assert (first["lateness_p50_ms"], first["lateness_p99_ms"]) == (50, 99)
    assert (second["delivered"], second["failed"]) == (0, 2)
    assert second["lateness_p50_ms"] == second["lateness_p99_ms"] == 5
    assert third["delivered"] == 1 and third["lateness_p99_ms"] is None
    assert sum(p["delivered"] + p["failed"] for p in points) == 103


def test_nearest_rank() -> None:
    assert nearest_rank([], 0.5) is None
    assert nearest_rank([7], 0.99) == 7
    assert nearest_rank([1, 2, 3, 4], 0.5) == 2


async def test_the_endpoint_charts_what_the_store_recorded(api: Api) -> None:
    due = NOW + 1_000
    job = {"biz_type": "orders", "job_id": "a", "due_at": due}
    expect(await api.request("POST", "/v1/jobs", json=job), 201)
    [claimed] = await api.store.scan.claim_due(second_of(due), due, "c", 1, due)
    ref = SendRef(claimed.biz_type, claimed.job_id, claimed.second, claimed.claim)
    done = Outcome(ref, OutcomeKind.DELIVERED, Attempt(1, due + 12, 200, None, 3))
    await api.store.outcomes.record_outcomes([done], due + 15)
    api.clock.advance(120_000)
    got = expect(await api.request("GET", "/v1/biz-types/orders/series"), 200)
    assert got["biz_type"] == "orders" and got["at"] == NOW + 120_000
    [point] = [p for p in got["points"] if p["delivered"]]
    assert point == {
        "at": NOW,
        "delivered": 1,
        "failed": 0,
        "lateness_p50_ms": 12,
        "lateness_p99_ms": 12,
    }
    expect(await api.request("GET", "/v1/biz-types/nobody/series"), 404)
    expect(await api.request("GET", "/v1/biz-types/Bad%20Name/series"), 422)
