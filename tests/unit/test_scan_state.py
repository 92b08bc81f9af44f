"""The scanner's coalescing window (daemon/scan_state.py, `ClaimPace`)."""

from __future__ import annotations

from daemon.scan_state import COALESCE_JOBS, ClaimPace


def test_the_window_is_whole_while_claims_are_few() -> None:
    pace = ClaimPace(500)
    assert pace.window_ms(0) == 500
    pace.claimed(0, 12)  # 12 jobs/s: 32 of them take longer than the window
    assert pace.window_ms(100) == 500


def test_the_window_holds_about_a_claims_worth_at_the_last_seconds_rate() -> None:
    pace = ClaimPace(500)
    for t in range(0, 1000, 100):
        pace.claimed(t, 50)  # 500 jobs/s
    assert pace.window_ms(999) == COALESCE_JOBS * 1000 // 500  # 64 ms


def test_a_burst_is_forgotten_after_a_second() -> None:
    pace = ClaimPace(500)
    pace.claimed(0, 100_000)  # a herd
    assert pace.window_ms(10) == 0
    assert pace.window_ms(1000) == 500
    pace.claimed(1000, 0)  # nothing claimed counts for nothing
    assert pace.window_ms(1001) == 500
