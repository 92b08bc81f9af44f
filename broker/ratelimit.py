"""Token bucket: at most ``burst + rate_per_s * W`` takes over any window of W seconds.

Pure code; the caller passes monotonic seconds, so tests drive it without sleeping.
"""

from __future__ import annotations

import math

from timer_service.dispatch import BucketTaken

# Float sums of elapsed time lose ~1e-16 per step; never let that cost a whole token.
EPSILON = 1e-9


class TokenBucket:
    """A bucket of ``burst`` tokens that starts full and refills at ``rate_per_s``.

    ``rate_per_s=None`` means unlimited: every take succeeds.
    """

    __slots__ = ("_burst", "_rate_per_s", "_stamp_s", "_tokens")

    def __init__(self, rate_per_s: float | None, burst: int, now_s: float) -> None:
        self._rate_per_s = rate_per_s
        self._burst = max(1, burst)
        self._tokens = float(self._burst)
        self._stamp_s = now_s

    @property
    def unlimited(self) -> bool:
        return self._rate_per_s is None

    def reconfigure(self, rate_per_s: float | None, burst: int, now_s: float) -> None:
        """Apply a config change; tokens already earned carry over up to the new burst.

        Going from unlimited to limited starts the bucket full, as a new bucket would.
        """
        burst = max(1, burst)
        if rate_per_s == self._rate_per_s and burst == self._burst:
            return
        if self._rate_per_s is None:
            self._tokens = float(burst)
        else:
            self._refill(now_s)
            self._tokens = min(self._tokens, float(burst))
        self._rate_per_s = rate_per_s
        self._burst = burst
        self._stamp_s = now_s

    def empty(self, now_s: float, debt: float = 0.0) -> None:
        """No tokens now, or `debt` below none; refilling at the rate from `now_s` (a
        stream taken over from an owner whose spending this bucket cannot know, and who
        may not yet know it lost the stream: see broker.lane)."""
        if self._rate_per_s is None:
            return
        self._tokens = -float(debt)
        self._stamp_s = now_s

    def at_most(self, tokens: float, now_s: float) -> None:
        """No more than `tokens` now (a stream taken over: see `start_tokens`)."""
        if self._rate_per_s is None:
            return
        self._refill(now_s)
        self._tokens = min(self._tokens, tokens)

    def tokens(self, now_s: float) -> float | None:
        """Tokens now (below 0 while in debt); None if unlimited."""
        if self._rate_per_s is None:
            return None
        self._refill(now_s)
        return self._tokens

    def try_take(self, now_s: float) -> bool:
        if self._rate_per_s is None:
            return True
        self._refill(now_s)
        if self._tokens >= 1.0 - EPSILON:
            self._tokens = max(0.0, self._tokens - 1.0)
            return True
        return False

    def wait_s(self, now_s: float) -> float:
        """Seconds until a take can succeed (0 when it can now)."""
        if self._rate_per_s is None:
            return 0.0
        self._refill(now_s)
        if self._tokens >= 1.0 - EPSILON:
            return 0.0
        if self._rate_per_s <= 0:
            return math.inf
        return (1.0 - self._tokens) / self._rate_per_s

    def available(self, now_s: float, ahead_s: float = 0.0) -> float:
        """Takes that could succeed from now until ``now_s + ahead_s`` (inf if unlimited)."""
        if self._rate_per_s is None:
            return math.inf
        self._refill(now_s)
        return self._tokens + self._rate_per_s * ahead_s + EPSILON

    def _refill(self, now_s: float) -> None:
        elapsed = now_s - self._stamp_s
        if elapsed > 0:
            assert self._rate_per_s is not None
            self._tokens = min(float(self._burst), self._tokens + elapsed * self._rate_per_s)
            self._stamp_s = now_s


def start_tokens(taken: BucketTaken, rate_per_s: float | None, burst: int) -> float:
    """The most tokens a lane may start with, from its biz type's bucket as the last
    taker left it (`BrokersPort.take_bucket`), refilled at the rate until the take on
    the store's clock: full when nothing was ever sent for it (the contract's bucket
    starts full); empty when its taker never let go (it may have sent its whole burst
    just before it died, or be sending still: broker.lane's debt covers that)."""
    burst = max(1, burst)
    if not taken.was_taken or rate_per_s is None:
        return float(burst)
    if taken.left_at is None:
        return 0.0
    if taken.left_tokens is None:  # left while unlimited: as a new bucket
        return float(burst)
    refilled = rate_per_s * max(0, taken.at_ms - taken.left_at) / 1000
    return min(float(burst), taken.left_tokens + refilled)


class BucketClock:
    """The time a lane's bucket refills by: seconds that advance no faster than the
    clock sends are stamped by (`fired_at`, the contract's send time) nor than the
    monotonic clock (when the endpoint sees them). The stamps' clock steps back when
    the host's wall clock does, and forward when the skew guard learns a tighter bound
    (broker/skew.py); a bucket on it alone let sends out closer than the rate allows
    in real time, one on the monotonic clock alone closer in their stamps. Time the
    stamps' clock spends below its highest reading, or skips forward, refills nothing."""

    __slots__ = ("_high_ms", "_mono_s", "_now_s")

    def __init__(self, stamp_ms: int, mono_s: float) -> None:
        self._high_ms = stamp_ms
        self._mono_s = mono_s
        self._now_s = 0.0

    def at(self, stamp_ms: int, mono_s: float) -> float:
        """Bucket seconds at this stamp-clock and monotonic reading."""
        stamp_s = (stamp_ms - self._high_ms) / 1000
        mono_gap_s = mono_s - self._mono_s
        if stamp_s > 0 and mono_gap_s > 0:
            self._now_s += min(stamp_s, mono_gap_s)
        self._high_ms = max(self._high_ms, stamp_ms)
        self._mono_s = max(self._mono_s, mono_s)
        return self._now_s
