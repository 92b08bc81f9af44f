"""Token bucket: burst + rate x W over any window, starts full, follows config changes."""

from __future__ import annotations

import math
import random

import pytest

from broker.ratelimit import BucketClock, TokenBucket


def takes_at(bucket: TokenBucket, times_s: list[float]) -> list[float]:
    return [t for t in times_s if bucket.try_take(t)]


def max_in_window(times: list[float], window_s: float) -> int:
    best = 0
    j = 0
    for i, t in enumerate(times):
        while times[j] < t - window_s - 1e-12:
            j += 1
        best = max(best, i - j + 1)
    return best


def test_starts_full_then_refills_at_rate() -> None:
    bucket = TokenBucket(rate_per_s=10, burst=5, now_s=0.0)
    got = [bucket.try_take(0.0) for _ in range(7)]
    assert got == [True] * 5 + [False] * 2, f"expected 5 of 7 at t=0, got {got}"
    assert math.isclose(bucket.wait_s(0.0), 0.1), f"wait: expected 0.1, got {bucket.wait_s(0.0)}"
    assert not bucket.try_take(0.099)
    assert bucket.try_take(0.1)


def test_never_more_than_burst_plus_rate_times_window() -> None:
    rng = random.Random(7)
    rate, burst = 20.0, 5
    bucket = TokenBucket(rate, burst, now_s=0.0)
    attempts = sorted(rng.uniform(0, 10) for _ in range(5000))
    sent = takes_at(bucket, attempts)
    for window_s in (0.0, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0):
        allowed = burst + rate * window_s
        got = max_in_window(sent, window_s)
        assert got <= allowed + 1e-9, f"W={window_s}: expected <= {allowed}, got {got}"
    # And the bucket is not stingier than it must be: ~ burst + rate x 10 s.
    assert len(sent) >= burst + rate * 10 - 2, f"expected ~{burst + rate * 10}, got {len(sent)}"


def test_an_emptied_bucket_refills_at_rate_from_then() -> None:
    bucket = TokenBucket(rate_per_s=10, burst=5, now_s=0.0)
    bucket.empty(1.0)  # full since t=0.5; emptied at t=1
    got = [bucket.try_take(1.0), bucket.try_take(1.099), bucket.try_take(1.1)]
    assert got == [False, False, True], f"expected the first token at 1.1 s, got {got}"
    bucket.empty(2.0, debt=5)  # five tokens owed: the next one at 2.6 s
    got = [bucket.try_take(2.599), bucket.try_take(2.6)]
    assert got == [False, True], f"expected the first token at 2.6 s, got {got}"
    assert bucket.available(2.6, 1.0) == pytest.approx(10.0, abs=1e-6)
    unlimited = TokenBucket(None, 1, now_s=0.0)
    unlimited.empty(0.0, debt=3)
    assert unlimited.try_take(0.0), "emptying an unlimited bucket changes nothing"


def test_unlimited_always_takes() -> None:
    bucket = TokenBucket(None, 1, now_s=0.0)
    assert all(bucket.try_take(0.0) for _ in range(10_000))
    assert bucket.wait_s(0.0) == 0.0
    assert bucket.available(0.0) == math.inf


def test_available_counts_tokens_ahead() -> None:
    bucket = TokenBucket(10, 3, now_s=0.0)
    assert math.isclose(bucket.available(0.0), 3)
    for _ in range(3):
        bucket.try_take(0.0)
    assert math.isclose(bucket.available(0.0, ahead_s=0.25), 2.5)


def test_config_change_keeps_earned_tokens_up_to_new_burst() -> None:
    bucket = TokenBucket(10, 10, now_s=0.0)
    bucket.reconfigure(10, 2, now_s=0.0)
    got = [bucket.try_take(0.0) for _ in range(3)]
    assert got == [True, True, False], f"expected burst 2 to apply at once, got {got}"
    bucket.reconfigure(100, 2, now_s=0.0)
    assert math.isclose(bucket.wait_s(0.0), 0.01), f"expected new rate, got {bucket.wait_s(0.0)}"


def test_limited_after_unlimited_starts_full() -> None:
    bucket = TokenBucket(None, 1, now_s=0.0)
    bucket.reconfigure(1, 3, now_s=5.0)
    got = [bucket.try_take(5.0) for _ in range(4)]
    assert got == [True, True, True, False], f"expected a full bucket of 3, got {got}"
    bucket.reconfigure(None, 3, now_s=5.0)
    assert bucket.try_take(5.0)


def test_bucket_time_runs_no_faster_than_the_stamps_nor_real_time() -> None:
    """Seed 1000 of the simulation: the send clock (the skew guard's store bound) moved
    1 ms forward when a heartbeat tightened it, and a bucket on that clock let two sends
    out 249 ms apart in real time at 4/s: 25 callbacks in 5,499 ms, burst 3."""
    clock = BucketClock(stamp_ms=10_000, mono_s=0.0)
    assert clock.at(10_250, 0.25) == pytest.approx(0.25)
    assert clock.at(10_501, 0.25) == pytest.approx(0.25), "a skip forward refills nothing"
    assert clock.at(10_751, 0.5) == pytest.approx(0.5)
    assert clock.at(8_751, 1.0) == pytest.approx(0.5), "stepped back: no refill below the top"
    assert clock.at(10_851, 2.0) == pytest.approx(0.6), "then only what passes the top"
    assert clock.at(11_851, 2.5) == pytest.approx(1.1), "and no faster than real time"


def test_the_bound_holds_in_real_time_and_in_stamps_while_the_send_clock_jitters() -> None:
    rng = random.Random(5)
    rate, burst = 4.0, 3
    stamp_ms, mono_s = 1_000_000, 0.0
    clock = BucketClock(stamp_ms, mono_s)
    bucket = TokenBucket(rate, burst, clock.at(stamp_ms, mono_s))
    real: list[float] = []
    stamps: list[float] = []
    for _ in range(5000):
        mono_s += 0.001 * rng.randint(1, 20)
        stamp_ms = 1_000_000 + round(mono_s * 1000) + rng.choice((0, 0, 0, 1, -1, 30, -30))
        if bucket.try_take(clock.at(stamp_ms, mono_s)):
            real.append(mono_s)
            stamps.append(stamp_ms / 1000)
    stamps.sort()
    for window_s in (0.0, 0.249, 1.0, 5.499):
        allowed = burst + rate * window_s + 1e-9
        assert max_in_window(real, window_s) <= allowed, f"real time, window {window_s}"
        assert max_in_window(stamps, window_s) <= allowed, f"stamps, window {window_s}"
