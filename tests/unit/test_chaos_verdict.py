"""The chaos run's judge (tests/chaos/verdict.py) on small hand-made runs."""

from __future__ import annotations

from tests.chaos.receiver import Call, Reply
from tests.chaos.verdict import Backoff, Cancel, Fault, RateLimit, judge, rate_excess

BACKOFF = Backoff(initial_ms=1000, max_ms=8000, multiplier=2.0)
DUE = 1_790_000_000_000  # in 2026: a 2015 date is in the past


def call(job: str, attempt: int, fired: int, reply: Reply = Reply(), biz: str = "b") -> Call:
    answered = None if reply.hang_s else fired + 5
    hint = None if answered is None else reply.retry_after_at(answered)
    return Call(biz, job, attempt, DUE, fired, fired + 1, reply, answered, hint)


def test_a_clean_run_has_nothing_to_say() -> None:
    calls = [call("j1", 1, DUE), call("j2", 1, DUE + 3)]
    report = judge(
        {"j1": DUE, "j2": DUE}, calls, [], [], {"j1": "delivered", "j2": "delivered"}, BACKOFF
    )
    summary = report.summary()
    expected = {"lost": 0, "stuck": 0, "early": 0, "duplicates": 0, "after_200_cancel": 0}
    got = {k: summary[k] for k in expected}
    assert got == expected, f"expected {expected}, got {got}"
    assert report.lateness_ms["max"] == 4, report.lateness_ms


def test_lost_stuck_and_dead_are_told_apart() -> None:
    calls = [call("retried", 1, DUE, Reply(500))]
    states = {"retried": "pending", "gone": "dispatched", "died": "dead", "cancel": "cancelled"}
    report = judge(dict.fromkeys(states, DUE), calls, [], [], states, BACKOFF)
    assert sorted(report.lost) == ["died", "gone", "retried"], report.lost
    assert report.stuck == {"retried": "pending", "gone": "dispatched"}, report.stuck
    assert report.dead == ["died"], report.dead


def test_early_first_attempts_and_early_retries() -> None:
    calls = [
        call("first", 1, DUE - 2),
        call("backoff", 1, DUE, Reply(500)),
        call("backoff", 2, DUE + 5 + 998),  # received 1 ms short of the 1 s backoff
        call("hinted", 1, DUE, Reply(429, "3")),
        call("hinted", 2, DUE + 5 + 2999),  # received exactly when Retry-After allows
        call("huge", 1, DUE, Reply(429, "9" * 4301)),
        call("huge", 2, DUE + 5 + 7999),  # capped by max_backoff_ms
        call("garbage", 1, DUE, Reply(429, "²")),
        call("garbage", 2, DUE + 5 + 500),  # an unreadable hint: the backoff applies
        call("dated", 1, DUE, Reply(429, retry_after_date_in_s=3)),
        call("dated", 2, DUE + 5 + 1000),  # an HTTP date 3 s ahead: 2 s early at least
        call("past", 1, DUE, Reply(429, "Wed, 21 Oct 2015 07:28:00 GMT")),
        call("past", 2, DUE + 5),  # a date gone by: no wait
    ]
    jobs = {c.job_id: DUE for c in calls}
    report = judge(jobs, calls, [], [], dict.fromkeys(jobs, "delivered"), BACKOFF)
    flagged = sorted(line.split()[0] for line in report.early)
    assert flagged == ["backoff", "dated", "first", "garbage"], report.early


def test_duplicates_are_attributed_to_a_fault_between_the_two_sends() -> None:
    calls = [
        call("killed", 1, DUE),  # delivered, outcome lost in the kill
        call("killed", 1, DUE + 20_000),
        call("blip", 1, DUE + 30_000),
        call("blip", 2, DUE + 40_000),  # after a 2xx: a duplicate even with a new number
        call("quiet", 1, DUE + 5_000, Reply(500)),
        call("quiet", 1, DUE + 8_000),  # repeated with no fault between the two sends
    ]
    faults = [Fault("kill -9 broker-a", DUE + 2_000, DUE + 4_000)]
    states = {"killed": "delivered", "blip": "delivered", "quiet": "delivered"}
    report = judge(dict.fromkeys(states, DUE), calls, [], faults, states, BACKOFF)
    causes = {(d.job_id, d.cause) for d in report.duplicates}
    expected = {
        ("killed", "kill -9 broker-a (outcome pending)"),
        ("blip", "unexplained"),
        ("quiet", "unexplained"),
    }
    assert causes == expected, causes
    assert sorted(d.job_id for d in report.unexplained_duplicates) == ["blip", "quiet"]
    hung = judge(
        {"hung": DUE},
        [call("hung", 1, DUE + 1_000, Reply(hang_s=3)), call("hung", 1, DUE + 20_000)],
        [],
        faults,
        {"hung": "delivered"},
        BACKOFF,
    )
    assert [d.cause for d in hung.duplicates] == ["kill -9 broker-a (on the wire)"], hung


def test_a_callback_after_a_200_cancel_is_reported() -> None:
    calls = [call("c", 1, DUE)]
    cancels = [Cancel("c", DUE - 100, DUE - 50, 200), Cancel("d", DUE, DUE + 1, 409)]
    states = {"c": "cancelled", "d": "delivered"}
    report = judge({"c": DUE, "d": DUE}, calls, cancels, [], states, BACKOFF)
    assert len(report.after_cancel) == 1 and report.after_cancel[0].startswith("c "), report
    assert report.cancels == {"200": 1, "409": 1}
    assert report.lost == ["d"], "409: the job was not cancelled and must still arrive"


def test_rate_excess_over_every_window() -> None:
    limit = RateLimit("b", per_s=10, burst=2)
    # 10/s with a burst of 2: 3 sends within 100 ms is the most allowed.
    assert rate_excess(limit, [0, 50, 100, 200, 300]) == []
    excess = rate_excess(limit, [0, 10, 20, 500])
    assert [(e.sends, e.window_ms) for e in excess] == [(3, 20)], excess
