"""The checker is not blind: hand-made histories that break one promise each are
caught, and the same histories kept within the promise are not."""

from __future__ import annotations

from tests.sim.checker import Checker
from tests.sim.endpoints import Callback
from tests.sim.history import Call, Fault, History
from timer_service.clock import FakeClock

T0 = 1_767_225_600_000


def history(*callbacks: Callback, faults: tuple[Fault, ...] = ()) -> History:
    h = History(FakeClock(T0))
    body = {"biz_type": "orders", "job_id": "j1", "due_at": T0 + 1000}
    created = {**body, "state": "pending"}
    h.calls.append(Call("POST", "/v1/jobs", body, T0, T0 + 5, 201, created))
    h.callbacks.extend(callbacks)
    h.faults.extend(faults)
    return h


def sent(at_ms: int, attempt: int = 1, status: int | None = 200, job_id: str = "j1") -> Callback:
    return Callback("orders", job_id, attempt, T0 + at_ms, T0 + at_ms + 1, status, "broker-1#1")


def test_a_second_callback_after_delivery_needs_a_death_between() -> None:
    twice = history(sent(1000), sent(2000))
    found = Checker(twice, {}).no_second_callback()
    assert [v.promise for v in found] == ["at most once without a death"], found
    crashed = history(sent(1000), sent(2000), faults=(Fault(T0 + 1500, "crash", "broker-1#1"),))
    assert Checker(crashed, {}).no_second_callback() == []


def test_more_than_burst_plus_rate_times_w_is_caught() -> None:
    # burst 2, 1/s: three callbacks within 500 ms are one too many; 1 s apart are fine.
    many = [sent(1000 + 250 * i, job_id=f"j{i}") for i in range(3)]
    found = Checker(history(*many), {"orders": (1.0, 2)}).rate_limits()
    assert [v.promise for v in found] == ["rate limit"], found
    spaced = [sent(1000 + 1000 * i, job_id=f"j{i}") for i in range(3)]
    assert Checker(history(*spaced), {"orders": (1.0, 2)}).rate_limits() == []


def test_a_callback_after_a_200_cancel_is_caught() -> None:
    h = history(sent(3000))
    cancelled = {"biz_type": "orders", "job_id": "j1", "due_at": T0 + 1000, "state": "cancelled"}
    h.calls.append(Call("DELETE", "/v1/jobs/orders/j1", None, T0 + 500, T0 + 510, 200, cancelled))
    found = Checker(h, {}).cancelled_stays_cancelled()
    assert [v.promise for v in found] == ["cancelled"], found


def test_a_retry_before_its_retry_after_is_caught() -> None:
    early = history(sent(1000, 1, 429), sent(2500, 2))  # Retry-After 2 s: not before 3001
    assert [v.promise for v in Checker(early, {}).retries_wait()] == ["never early"]
    waited = history(sent(1000, 1, 429), sent(3001, 2))
    assert Checker(waited, {}).retries_wait() == []


def test_an_accepted_job_left_pending_is_caught() -> None:
    found = Checker(history(), {}).at_least_once({("orders", "j1"): {"state": "pending"}})
    assert [v.promise for v in found] == ["at least once"], found


def test_a_calendar_count_off_its_jobs_is_caught() -> None:
    checker = Checker(history(), {})
    jobs = {(5, "orders"): 2, (5, "*"): 2}
    assert checker.counts_equal_jobs(dict(jobs), jobs) == []
    found = checker.counts_equal_jobs({(5, "orders"): 1, (5, "*"): 2, (9, "*"): 1}, jobs)
    assert [v.detail for v in found] == [
        "slot 5 orders: counted 1, 2 pending jobs",
        "slot 9 *: counted 1, 0 pending jobs",
    ], found
