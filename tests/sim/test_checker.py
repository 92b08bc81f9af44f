"""The checker is not blind: hand-made histories that break one promise each are
caught, and the same histories kept within the promise are not."""

from __future__ import annotations

from tests.sim.checker import Checker
from tests.sim.endpoints import Callback
from tests.sim.history import Call, Fault, History, LostClaim
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


def test_an_accepted_job_of_a_biz_type_deleted_at_the_end_must_be_final() -> None:
    h = history()
    h.calls.append(Call("DELETE", "/v1/biz-types/orders", None, T0 + 10, T0 + 11, 204, None))
    found = Checker(h, {}).deleted_biz_types({("orders", "j1"): {"state": "dispatched"}})
    assert [v.promise for v in found] == ["deleted biz type"], found
    assert Checker(h, {}).deleted_biz_types({("orders", "j1"): {"state": "delivered"}}) == []
    put = {"callback_url": "http://orders.example/cb"}
    h.calls.append(Call("PUT", "/v1/biz-types/orders", put, T0 + 20, T0 + 21, 201, put))
    assert Checker(h, {}).deleted_biz_types({("orders", "j1"): {"state": "pending"}}) == []


def test_a_lost_claim_s_job_called_back_at_the_reconcile_timeout_is_caught() -> None:
    late = history(sent(9000))  # due at 1000, its claim's reply lost at 400
    late.lost_claims.append(LostClaim(T0 + 400, "c1", [(("orders", "j1"), T0 + 1000)]))
    found = Checker(late, {}).lost_claims_on_time(10_000)
    assert [v.promise for v in found] == ["lost claim on time"], found
    on_time = history(sent(1000))
    on_time.lost_claims.extend(late.lost_claims)
    assert Checker(on_time, {}).lost_claims_on_time(10_000) == []
    crashed = history(sent(9000), faults=(Fault(T0 + 300, "crash", "broker-1#1"),))
    crashed.lost_claims.extend(late.lost_claims)
    assert Checker(crashed, {}).lost_claims_on_time(10_000) == [], "another fault excuses it"


def test_a_broker_back_from_a_stall_sending_what_was_sent_meanwhile_is_caught() -> None:
    """Break 9 of issue 30: frozen past its lease, another broker sent the attempt; the
    stalled one sends it again once thawed. A freeze excuses a duplicate in
    `no_second_callback`, not here. A short freeze, or a copy from before it, is fine."""
    other = Callback("orders", "j1", 1, T0 + 9000, T0 + 9001, 200, "broker-2#1")
    stall = (Fault(T0 + 1000, "freeze", "broker-1#1"), Fault(T0 + 31_000, "thaw", "broker-1#1"))
    h = history(other, sent(31_005), faults=stall)
    found = Checker(h, {}).stale_owner()
    assert [v.promise for v in found] == ["stalled broker sends nothing it lost"], found
    assert Checker(h, {}).no_second_callback() == [], "a freeze excuses it there"
    brief = (Fault(T0 + 1000, "freeze", "broker-1#1"), Fault(T0 + 4000, "thaw", "broker-1#1"))
    assert Checker(history(other, sent(31_005), faults=brief), {}).stale_owner() == []
    before = history(sent(500), sent(31_005), faults=stall)
    assert Checker(before, {}).stale_owner() == [], "sent before the freeze: a crash window"


def test_a_calendar_count_off_its_jobs_is_caught() -> None:
    checker = Checker(history(), {})
    jobs = {(5, "orders"): 2, (5, "*"): 2}
    assert checker.counts_equal_jobs(dict(jobs), jobs) == []
    found = checker.counts_equal_jobs({(5, "orders"): 1, (5, "*"): 2, (9, "*"): 1}, jobs)
    assert [v.detail for v in found] == [
        "slot 5 orders: counted 1, 2 pending jobs",
        "slot 9 *: counted 1, 0 pending jobs",
    ], found
